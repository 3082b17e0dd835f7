"""Reach's expert kernel: the arm's IK of the target, approached a bounded step at a time.

reach is a task file (``configs/reach.toml``): its reset, observation, reward and success are library terms. Its
``proprio`` is ``[q (4), qd (4), end effector position (3), target position (3)]``: joint coordinates ``[yaw,
shoulder, elbow, wrist]`` [rad], their velocities [rad/s], positions in the world frame [m]. Launched by
``forge_gpu._src.tasks.arm.reach_expert``; the inverse kinematics is ``kernels/arm.py``'s.
"""

import warp as wp

from .arm import reach_ik

PROPRIO_EE = wp.constant(8)
"""Offset of the end effector position in ``proprio``."""
PROPRIO_TARGET = wp.constant(11)
"""Offset of the target position in ``proprio``."""


@wp.kernel
def expert_kernel(
    # Model:
    shoulder_height: float,
    upper_arm: float,
    forearm: float,
    hand: float,
    max_step: float,
    action_low: wp.array[float],
    action_high: wp.array[float],
    action_scale: wp.array[float],
    # Data in:
    proprio_in: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """Analytic IK of the target, approached at most ``max_step`` [rad] per step from the measured pose."""
    worldid = wp.tid()
    target = wp.vec3(
        proprio_in[worldid, PROPRIO_TARGET],
        proprio_in[worldid, PROPRIO_TARGET + 1],
        proprio_in[worldid, PROPRIO_TARGET + 2],
    )
    goal = reach_ik(target, shoulder_height, upper_arm, forearm, hand)
    for j in range(4):
        q = proprio_in[worldid, j]
        command = q + wp.clamp(goal[j] - q, -max_step, max_step)
        action_out[worldid, j] = wp.clamp(command / action_scale[j], action_low[j], action_high[j])
