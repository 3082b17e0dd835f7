"""Reach kernels: randomized reset and target, observation, the IK expert, colours and camera pose.

Per-world layout: joint coordinates ``[yaw, shoulder, elbow, wrist]`` [rad] (yaw about +z, the three
pitch joints about the link's +y, each link extending along its local +z), joint velocities in the
same order [rad/s]. ``proprio`` is ``[q (4), qd (4), end effector position (3), target position (3)]``
with positions in the world frame [m]. Launched by ``forge_gpu._src.sim.tasks.reach``; the arm's joint targets
and inverse kinematics are ``kernels/arm.py``'s.
"""

import warp as wp

from .arm import reach_ik, reset_arm
from .camera import jittered_camera

PROPRIO_EE = wp.constant(8)
"""Offset of the end effector position in ``proprio``."""
PROPRIO_TARGET = wp.constant(11)
"""Offset of the target position in ``proprio``."""


@wp.kernel
def reset_kernel(
    # Model:
    seed: int,
    home_q: wp.array[float],
    reset_noise: float,
    target_yaw_range: float,
    target_radius_range: wp.vec2,
    target_height_range: wp.vec2,
    target_shape: wp.array[wp.int32],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
    target_pos_out: wp.array[wp.vec3],
    shape_transform_out: wp.array[wp.transform],
):
    """Home pose plus uniform noise, zero velocity, and a target uniform in a cylindrical sector.

    Keyed by (seed, env, next episode). The target is the world's static marker shape: moving it is
    writing its shape transform (the renderer reads it; it takes no part in the physics).
    """
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = reset_arm(
        seed, worldid, draw_env_in[worldid], episode_id_in[worldid] + 1, home_q, reset_noise, joint_q_out, joint_qd_out
    )
    yaw = target_yaw_range * (2.0 * wp.randf(state) - 1.0)
    radius = target_radius_range[0] + (target_radius_range[1] - target_radius_range[0]) * wp.randf(state)
    height = target_height_range[0] + (target_height_range[1] - target_height_range[0]) * wp.randf(state)
    pos = wp.vec3(radius * wp.cos(yaw), radius * wp.sin(yaw), height)
    target_pos_out[worldid] = pos
    shape_transform_out[target_shape[worldid]] = wp.transform(pos, wp.quat_identity())


@wp.kernel
def observe_kernel(
    # Model:
    ee_body: wp.array[wp.int32],
    ee_offset: wp.vec3,
    tolerance: float,
    success_bonus: float,
    # Data in:
    joint_q_in: wp.array2d[float],
    joint_qd_in: wp.array2d[float],
    body_q_in: wp.array[wp.transform],
    target_pos_in: wp.array[wp.vec3],
    # Data out:
    proprio_out: wp.array2d[float],
    reward_out: wp.array[float],
    terminated_out: wp.array[wp.bool],
):
    """proprio; reward = -distance [m] (+ bonus on success); success (distance <= tolerance) terminates."""
    worldid = wp.tid()
    ee = wp.transform_point(body_q_in[ee_body[worldid]], ee_offset)
    target = target_pos_in[worldid]
    for j in range(4):
        proprio_out[worldid, j] = joint_q_in[worldid, j]
        proprio_out[worldid, 4 + j] = joint_qd_in[worldid, j]
    for k in range(3):
        proprio_out[worldid, PROPRIO_EE + k] = ee[k]
        proprio_out[worldid, PROPRIO_TARGET + k] = target[k]
    distance = wp.length(target - ee)
    success = distance <= tolerance
    terminated_out[worldid] = success
    reward = -distance
    if success:
        reward += success_bonus
    reward_out[worldid] = reward


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


@wp.kernel
def apply_params_kernel(
    # Model:
    target_shape: wp.array[wp.int32],
    table_shape: wp.array[wp.int32],
    camera_position: wp.vec3,
    camera_look_at: wp.vec3,
    move_camera: int,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    target_color_in: wp.array2d[float],
    table_color_in: wp.array2d[float],
    camera_position_offset_in: wp.array2d[float],
    camera_look_at_offset_in: wp.array2d[float],
    # Data out:
    shape_color_out: wp.array[wp.vec3],
    camera_transform_out: wp.array[wp.transform],
):
    """The world's drawn colours (linear RGB in [0, 1]) and, when its camera is randomized, its camera pose."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    target, table = target_color_in[worldid], table_color_in[worldid]
    shape_color_out[target_shape[worldid]] = wp.vec3(target[0], target[1], target[2])
    shape_color_out[table_shape[worldid]] = wp.vec3(table[0], table[1], table[2])
    if move_camera != 0:
        camera_transform_out[worldid] = jittered_camera(
            camera_position, camera_look_at, camera_position_offset_in[worldid], camera_look_at_offset_in[worldid]
        )
