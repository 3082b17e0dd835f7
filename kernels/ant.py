"""Ant kernels: action to joint torques, randomized reset, observation, reward, termination, scripted gait.

Per-world layout (Newton's ``nv_ant.xml``): joint coordinates ``[torso x, y, z (m), torso quaternion
qx, qy, qz, qw, then 8 hinge angles (rad)]`` (15), joint velocities ``[torso COM linear velocity (m/s),
angular velocity (rad/s), both in the world frame, then 8 hinge rates (rad/s)]`` (14). The hinges are
``hip_1, ankle_1, hip_2, ankle_2, hip_3, ankle_3, hip_4, ankle_4``: one hip (about the torso's z)
and one ankle per leg. Launched by ``forge_gpu._src.sim.tasks.ant``.
"""

import warp as wp

from .rng import STREAM_RESET, env_rng

FREE_COORDS = wp.constant(7)
"""Coordinates of the torso's free joint: position (3) and quaternion xyzw (4)."""
FREE_DOFS = wp.constant(6)
"""Velocity coordinates of the torso's free joint: linear (3) and angular (3)."""
HINGE_COUNT = wp.constant(8)
"""Actuated hinges, one action dimension each."""


@wp.kernel
def apply_action_kernel(
    # Model:
    action_scale: wp.array[float],
    # Data in:
    actuator_gain_in: wp.array[float],
    executed_action_in: wp.array2d[float],
    # Data out:
    joint_f_out: wp.array2d[float],
):
    """Hinge torque [N m] = executed action * scale * the world's actuator gain; the free joint gets no effort."""
    worldid, actid = wp.tid()
    torque = executed_action_in[worldid, actid] * action_scale[actid] * actuator_gain_in[worldid]
    joint_f_out[worldid, FREE_DOFS + actid] = torque


@wp.kernel
def reset_kernel(
    # Model:
    seed: int,
    joint_position_range: float,
    joint_velocity_range: float,
    default_q: wp.array2d[float],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
):
    """The default pose (torso at its start pose, at rest) plus uniform hinge noise in +-range."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = env_rng(seed, worldid, episode_id_in[worldid] + 1, 0, STREAM_RESET)
    for i in range(FREE_COORDS):
        joint_q_out[worldid, i] = default_q[worldid, i]
    for i in range(FREE_DOFS):
        joint_qd_out[worldid, i] = 0.0
    for j in range(HINGE_COUNT):
        noise = joint_position_range * (2.0 * wp.randf(state) - 1.0)
        joint_q_out[worldid, FREE_COORDS + j] = default_q[worldid, FREE_COORDS + j] + noise
        joint_qd_out[worldid, FREE_DOFS + j] = joint_velocity_range * (2.0 * wp.randf(state) - 1.0)


@wp.kernel
def observe_kernel(
    # Model:
    min_height: float,
    min_upright: float,
    forward_weight: float,
    action_cost: float,
    # Data in:
    joint_q_in: wp.array2d[float],
    joint_qd_in: wp.array2d[float],
    executed_action_in: wp.array2d[float],
    # Data out:
    proprio_out: wp.array2d[float],
    reward_out: wp.array[float],
    terminated_out: wp.array[wp.bool],
):
    """proprio = [z, quat xyzw, lin vel, ang vel, 8 hinge angles, 8 hinge rates] (27).

    reward = forward_weight * torso x velocity - action_cost * |action|^2; the episode terminates when
    the torso drops below ``min_height`` or its up axis tilts below ``min_upright`` (z component).
    """
    worldid = wp.tid()
    z = joint_q_in[worldid, 2]
    proprio_out[worldid, 0] = z
    for i in range(4):
        proprio_out[worldid, 1 + i] = joint_q_in[worldid, 3 + i]
    for i in range(FREE_DOFS):
        proprio_out[worldid, 5 + i] = joint_qd_in[worldid, i]
    cost = float(0.0)
    for j in range(HINGE_COUNT):
        proprio_out[worldid, 11 + j] = joint_q_in[worldid, FREE_COORDS + j]
        proprio_out[worldid, 19 + j] = joint_qd_in[worldid, FREE_DOFS + j]
        u = executed_action_in[worldid, j]
        cost += u * u
    qx = joint_q_in[worldid, 3]
    qy = joint_q_in[worldid, 4]
    up_z = 1.0 - 2.0 * (qx * qx + qy * qy)
    terminated_out[worldid] = z < min_height or up_z < min_upright
    reward_out[worldid] = forward_weight * joint_qd_in[worldid, 0] - action_cost * cost


@wp.kernel
def expert_kernel(
    # Model:
    control_dt: float,
    frequency: float,
    hip_amplitude: float,
    ankle_amplitude: float,
    stiffness: float,
    damping: float,
    default_q: wp.array2d[float],
    action_scale: wp.array[float],
    action_low: wp.array[float],
    action_high: wp.array[float],
    # Data in:
    step_id_in: wp.array[wp.int32],
    proprio_in: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """A trot: PD torques tracking phase-shifted sinusoids per leg, phase from ``step_id * control_dt``.

    Diagonal legs (1, 3) and (2, 4) move together, half a period apart. Each hip swings the foot
    backward (-x) while its ankle presses down and forward while the ankle lifts, so the stance legs
    push the torso along +x.
    """
    worldid, legid = wp.tid()
    phase = 2.0 * wp.pi * frequency * float(step_id_in[worldid]) * control_dt
    if legid == 1 or legid == 3:
        phase += wp.pi
    # A positive hip angle moves the feet of legs 1 and 2 backward, those of legs 3 and 4 forward;
    # a positive ankle angle presses the feet of legs 1 and 4 down, those of legs 2 and 3 up.
    hip_sign = 1.0
    if legid >= 2:
        hip_sign = -1.0
    down_sign = 1.0
    if legid == 1 or legid == 2:
        down_sign = -1.0
    hip = 2 * legid
    ankle = hip + 1
    hip_ref = default_q[worldid, FREE_COORDS + hip] - hip_sign * hip_amplitude * wp.cos(phase)
    ankle_ref = default_q[worldid, FREE_COORDS + ankle] + down_sign * ankle_amplitude * wp.sin(phase)
    for j in range(hip, ankle + 1):
        ref = hip_ref
        if j == ankle:
            ref = ankle_ref
        torque = stiffness * (ref - proprio_in[worldid, 11 + j]) - damping * proprio_in[worldid, 19 + j]
        action_out[worldid, j] = wp.clamp(torque / action_scale[j], action_low[j], action_high[j])
