"""Cart-pole kernels: action to cart force, randomized reset, observation, reward, termination.

Per-world layout: joint coordinates ``[cart position (m), pole angle (rad)]``, joint velocities
``[cart velocity (m/s), pole angular velocity (rad/s)]``. Launched by
``forge_gpu._src.sim.tasks.cartpole``.
"""

import warp as wp

from .rng import STREAM_RESET, env_rng


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
    """Cart force [N] = executed action * scale * the world's actuator gain; the pole hinge is passive."""
    worldid = wp.tid()
    joint_f_out[worldid, 0] = executed_action_in[worldid, 0] * action_scale[0] * actuator_gain_in[worldid]
    joint_f_out[worldid, 1] = 0.0


@wp.kernel
def reset_kernel(
    # Model:
    seed: int,
    cart_position_range: float,
    pole_angle_range: float,
    velocity_range: float,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
):
    """Near-upright start, uniform in +-range, keyed by (seed, env, next episode)."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = env_rng(seed, worldid, episode_id_in[worldid] + 1, 0, STREAM_RESET)
    joint_q_out[worldid, 0] = cart_position_range * (2.0 * wp.randf(state) - 1.0)
    joint_q_out[worldid, 1] = pole_angle_range * (2.0 * wp.randf(state) - 1.0)
    joint_qd_out[worldid, 0] = velocity_range * (2.0 * wp.randf(state) - 1.0)
    joint_qd_out[worldid, 1] = velocity_range * (2.0 * wp.randf(state) - 1.0)


@wp.kernel
def observe_kernel(
    # Model:
    cart_limit: float,
    pole_angle_limit: float,
    angle_cost: float,
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
    """proprio = [x, x_dot, theta, theta_dot]; reward = alive bonus minus angle and effort costs."""
    worldid = wp.tid()
    x = joint_q_in[worldid, 0]
    theta = joint_q_in[worldid, 1]
    proprio_out[worldid, 0] = x
    proprio_out[worldid, 1] = joint_qd_in[worldid, 0]
    proprio_out[worldid, 2] = theta
    proprio_out[worldid, 3] = joint_qd_in[worldid, 1]
    u = executed_action_in[worldid, 0]
    fallen = wp.abs(theta) > pole_angle_limit or wp.abs(x) > cart_limit
    terminated_out[worldid] = fallen
    if fallen:
        reward_out[worldid] = 0.0
    else:
        reward_out[worldid] = 1.0 - angle_cost * theta * theta - action_cost * u * u


@wp.kernel
def expert_kernel(
    # Model:
    gain: wp.array[float],
    action_low: wp.array[float],
    action_high: wp.array[float],
    # Data in:
    proprio_in: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """Linear state feedback u = -K x (LQR gains in action units), clipped to the bounds."""
    worldid = wp.tid()
    u = float(0.0)
    for i in range(4):
        u -= gain[i] * proprio_in[worldid, i]
    action_out[worldid, 0] = wp.clamp(u, action_low[0], action_high[0])
