"""Arm kernels shared by the arm tasks (``reach``, ``push``): joint position targets, the arm's inverse kinematics,
a marker's place; and reach's expert (``forge_gpu/_src/tasks/arm.py``'s ``reach_expert``): the arm's IK of the target,
approached a bounded step at a time. reach's ``proprio`` is ``[q (4), qd (4), end effector position (3), target
position (3)]``: joint coordinates ``[yaw, shoulder, elbow, wrist]`` [rad], their velocities [rad/s], positions in
the world frame [m].

Per-world layout: the arm's joint coordinates come first, ``[yaw, shoulder, elbow, wrist]`` [rad] (yaw about
+z, the three pitch joints about the link's +y, each link extending along its local +z). Launched by the arm
tasks' modules.
"""

import warp as wp

from .rng import STREAM_RESET, env_rng


@wp.kernel
def apply_action_kernel(
    # Model:
    action_scale: wp.array[float],
    # Data in:
    executed_action_in: wp.array2d[float],
    # Data out:
    joint_target_q_out: wp.array2d[float],
):
    """Joint position target [rad] = executed action * scale, tracked by each joint's PD drive."""
    worldid, jntid = wp.tid()
    joint_target_q_out[worldid, jntid] = executed_action_in[worldid, jntid] * action_scale[jntid]


@wp.func
def reset_arm(
    seed: int,
    worldid: int,
    draw_env: int,
    episode: int,
    home_q: wp.array[float],
    reset_noise: float,
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
) -> wp.uint32:
    """The arm's start: home pose plus uniform noise (+- reset_noise), at rest, drawn from the reset stream of
    (seed, the world's draw keys: env and episode); returns that stream's state after the arm's draws, for the
    task's own."""
    state = env_rng(seed, draw_env, episode, 0, STREAM_RESET)
    for j in range(4):
        joint_q_out[worldid, j] = home_q[j] + reset_noise * (2.0 * wp.randf(state) - 1.0)
        joint_qd_out[worldid, j] = 0.0
    return state


@wp.func
def reach_ik(
    target: wp.vec3,
    shoulder_height: float,
    upper_arm: float,
    forearm: float,
    hand: float,
) -> wp.vec4:
    """Joint angles that put the hand tip on ``target`` with the hand pointing straight down, elbow up.

    Each pitch joint turns its link from +z toward the radial direction; link k points at the
    cumulative angle phi_k = q1 + ... + qk from vertical. The wrist point sits ``hand`` above the
    target; the shoulder and elbow solve the two-link problem for it (clamped when out of reach).
    """
    yaw = wp.atan2(target[1], target[0])
    radial = wp.sqrt(target[0] * target[0] + target[1] * target[1])
    up = target[2] + hand - shoulder_height
    cos_elbow = (radial * radial + up * up - upper_arm * upper_arm - forearm * forearm) / (2.0 * upper_arm * forearm)
    elbow = wp.acos(wp.clamp(cos_elbow, -1.0, 1.0))
    shoulder = wp.atan2(radial, up) - wp.atan2(forearm * wp.sin(elbow), upper_arm + forearm * wp.cos(elbow))
    wrist = wp.pi - shoulder - elbow
    return wp.vec4(yaw, shoulder, elbow, wrist)


@wp.kernel
def place_marker_kernel(
    # Model:
    marker_shape: wp.array[wp.int32],
    offset: wp.vec3,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    position_in: wp.array[wp.vec3],
    # Data out:
    shape_transform_out: wp.array[wp.transform],
):
    """A static marker's shape transform (reach's target, push's goal square) at its (restored) position + offset."""
    worldid = wp.tid()
    if reset_mask_in[worldid]:
        shape_transform_out[marker_shape[worldid]] = wp.transform(position_in[worldid] + offset, wp.quat_identity())

PROPRIO_EE = wp.constant(8)
"""Offset of the end effector position in ``proprio``."""
PROPRIO_TARGET = wp.constant(11)
"""Offset of the target position in ``proprio``."""


@wp.kernel
def reach_expert_kernel(
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
