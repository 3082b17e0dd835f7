"""Push kernels: randomized reset of the arm, the cube and the goal; observation and reward; the pushing expert;
the drawn cube properties, colours and camera pose.

Per-world layout: joint coordinates ``[yaw, shoulder, elbow, wrist]`` [rad] then the cube's free joint
``[x, y, z, qx, qy, qz, qw]`` (``ARM_COORDS``...); joint velocities ``[arm (4), cube linear (3), cube angular
(3)]``. ``proprio`` is ``[q (4), qd (4), tip position (3)]``; ``cube_pose`` ``[x, y, z, qx, qy, qz, qw]``,
``cube_velocity`` ``[linear (3) m/s, angular (3) rad/s]``, ``goal_position`` ``[x, y, 0]``, all in the world
frame [m]. Launched by ``forge_gpu._src.sim.tasks.push``; the joint targets and the IK are ``kernels/arm.py``'s.
"""

import warp as wp

from .arm import reach_ik, reset_arm
from .camera import jittered_camera
from .randomize import set_mass

ARM_COORDS = wp.constant(4)
"""The arm's joint coordinates (and dofs) come first; the cube's free joint follows."""
PROPRIO_TIP = wp.constant(8)
"""Offset of the tip position in ``proprio``."""
GOAL_THICKNESS = wp.constant(0.001)
"""Height of the goal marker (a flat square on the table top, visual only) [m]."""


@wp.kernel
def reset_kernel(
    # Model:
    seed: int,
    home_q: wp.array[float],
    reset_noise: float,
    goal_shape: wp.array[wp.int32],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    cube_position_in: wp.array2d[float],
    cube_yaw_in: wp.array[float],
    cube_size_in: wp.array[float],
    goal_position_in: wp.array2d[float],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
    goal_pos_out: wp.array[wp.vec3],
    shape_transform_out: wp.array[wp.transform],
):
    """Arm: home pose plus uniform noise keyed by (seed, env, next episode), at rest. Cube: at its drawn start
    place and yaw, resting on the table, at rest. Goal: its drawn place (the marker's shape transform)."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    reset_arm(
        seed, worldid, draw_env_in[worldid], episode_id_in[worldid] + 1, home_q, reset_noise, joint_q_out, joint_qd_out
    )
    half_yaw = 0.5 * cube_yaw_in[worldid]
    joint_q_out[worldid, ARM_COORDS + 0] = cube_position_in[worldid, 0]
    joint_q_out[worldid, ARM_COORDS + 1] = cube_position_in[worldid, 1]
    joint_q_out[worldid, ARM_COORDS + 2] = 0.5 * cube_size_in[worldid]
    joint_q_out[worldid, ARM_COORDS + 3] = 0.0
    joint_q_out[worldid, ARM_COORDS + 4] = 0.0
    joint_q_out[worldid, ARM_COORDS + 5] = wp.sin(half_yaw)
    joint_q_out[worldid, ARM_COORDS + 6] = wp.cos(half_yaw)
    for k in range(6):
        joint_qd_out[worldid, ARM_COORDS + k] = 0.0
    goal = wp.vec3(goal_position_in[worldid, 0], goal_position_in[worldid, 1], 0.0)
    goal_pos_out[worldid] = goal
    marker = goal + wp.vec3(0.0, 0.0, 0.5 * GOAL_THICKNESS)
    shape_transform_out[goal_shape[worldid]] = wp.transform(marker, wp.quat_identity())


@wp.kernel
def observe_kernel(
    # Model:
    ee_body: wp.array[wp.int32],
    ee_offset: wp.vec3,
    cube_body: wp.array[wp.int32],
    tolerance: float,
    tip_weight: float,
    goal_weight: float,
    success_bonus: float,
    # Data in:
    joint_q_in: wp.array2d[float],
    joint_qd_in: wp.array2d[float],
    body_q_in: wp.array[wp.transform],
    body_qd_in: wp.array[wp.spatial_vector],
    goal_pos_in: wp.array[wp.vec3],
    # Data out:
    proprio_out: wp.array2d[float],
    cube_pose_out: wp.array2d[float],
    cube_velocity_out: wp.array2d[float],
    goal_position_out: wp.array2d[float],
    reward_out: wp.array[float],
    terminated_out: wp.array[wp.bool],
):
    """Observations; reward = -(tip_weight * |tip - cube centre| + goal_weight * |cube - goal| on the table plane)
    [m] (+ the bonus on success); success (the cube's centre within ``tolerance`` of the goal on the table plane)
    terminates."""
    worldid = wp.tid()
    tip = wp.transform_point(body_q_in[ee_body[worldid]], ee_offset)
    cube = body_q_in[cube_body[worldid]]
    velocity = body_qd_in[cube_body[worldid]]
    goal = goal_pos_in[worldid]
    for j in range(ARM_COORDS):
        proprio_out[worldid, j] = joint_q_in[worldid, j]
        proprio_out[worldid, ARM_COORDS + j] = joint_qd_in[worldid, j]
    position, rotation = wp.transform_get_translation(cube), wp.transform_get_rotation(cube)
    for k in range(3):
        proprio_out[worldid, PROPRIO_TIP + k] = tip[k]
        cube_pose_out[worldid, k] = position[k]
        goal_position_out[worldid, k] = goal[k]
    for k in range(4):
        cube_pose_out[worldid, 3 + k] = rotation[k]
    for k in range(6):
        cube_velocity_out[worldid, k] = velocity[k]
    to_goal = wp.vec2(goal[0] - position[0], goal[1] - position[1])
    distance = wp.length(to_goal)
    success = distance <= tolerance
    terminated_out[worldid] = success
    reward = -(tip_weight * wp.length(position - tip) + goal_weight * distance)
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
    tip_radius: float,
    lookahead: float,
    push_lookahead: float,
    clearance: float,
    margin: float,
    max_step: float,
    action_low: wp.array[float],
    action_high: wp.array[float],
    action_scale: wp.array[float],
    # Data in:
    proprio_in: wp.array2d[float],
    cube_pose_in: wp.array2d[float],
    goal_position_in: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """Push the cube along the line from the goal through it, re-planned every step from the observation.

    With ``d`` the unit vector from the cube's centre to the goal on the table plane and the cube's half size
    ``h`` read from its height: when the tip is at the pushing height (the cube's centre), behind the cube
    (along -d) and on the line (within h / 2), it moves along the line toward the goal (its target push_lookahead
    ahead, less near the goal); below the travel height
    and behind the cube but off the line, it moves to the approach point ``behind`` (the cube's centre - d *
    (sqrt(2) h + tip + margin), clear of its corners) and down to the pushing height (the path stays behind the
    cube); below the travel height anywhere else (beside or in front of the cube: the cube drifted), it rises
    straight up; at the travel height (``clearance`` above the cube's top) it flies to above ``behind`` and
    descends there. The tip's target, at most ``lookahead`` from the measured tip (the drives lag: the tip covers
    about a sixth of the way per step), goes through the arm's IK (hand pointing down), each joint at most
    ``max_step`` [rad] from its measured angle.
    """
    worldid = wp.tid()
    tip = wp.vec3(
        proprio_in[worldid, PROPRIO_TIP], proprio_in[worldid, PROPRIO_TIP + 1], proprio_in[worldid, PROPRIO_TIP + 2]
    )
    cube = wp.vec2(cube_pose_in[worldid, 0], cube_pose_in[worldid, 1])
    h = cube_pose_in[worldid, 2]
    to_goal = wp.vec2(goal_position_in[worldid, 0], goal_position_in[worldid, 1]) - cube
    distance = wp.length(to_goal)
    d = wp.vec2(1.0, 0.0)
    if distance > 1e-6:
        d = to_goal / distance
    rel = wp.vec2(tip[0], tip[1]) - cube
    along = wp.dot(rel, d)
    lateral = rel[0] * d[1] - rel[1] * d[0]
    low_z = wp.max(h, tip_radius + 0.005)
    high_z = 2.0 * h + tip_radius + clearance
    clear = 1.42 * h + tip_radius
    behind = cube - d * (clear + margin)
    at_push_height = tip[2] < low_z + 0.02
    below_travel = tip[2] < high_z - 0.01
    target = wp.vec3(behind[0], behind[1], high_z)  # at the travel height: fly to above the approach point
    if at_push_height and along < -h and wp.abs(lateral) < 0.5 * h:
        advance = wp.min(push_lookahead, 0.5 * distance + 0.002)
        on_line = cube + d * (along + advance)
        target = wp.vec3(on_line[0], on_line[1], low_z)
    elif below_travel and along < -(clear + 0.3 * margin):
        target = wp.vec3(behind[0], behind[1], low_z)
    elif below_travel:
        target = wp.vec3(tip[0], tip[1], high_z)
    elif wp.length(wp.vec2(tip[0], tip[1]) - behind) < 0.01:
        target = wp.vec3(behind[0], behind[1], low_z)
    move = target - tip
    if wp.length(move) > lookahead:
        move = move * (lookahead / wp.length(move))
    goal = reach_ik(tip + move, shoulder_height, upper_arm, forearm, hand)
    for j in range(4):
        q = proprio_in[worldid, j]
        command = q + wp.clamp(goal[j] - q, -max_step, max_step)
        action_out[worldid, j] = wp.clamp(command / action_scale[j], action_low[j], action_high[j])


@wp.kernel
def apply_params_kernel(
    # Model:
    cube_shape: wp.array[wp.int32],
    cube_body: wp.array[wp.int32],
    goal_shape: wp.array[wp.int32],
    palette: wp.array[wp.vec3],
    write_physics: int,
    resolve_colors: int,
    camera_position: wp.vec3,
    camera_look_at: wp.vec3,
    move_camera: int,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    cube_size_in: wp.array[float],
    cube_mass_in: wp.array[float],
    cube_friction_in: wp.array[float],
    camera_position_offset_in: wp.array2d[float],
    camera_look_at_offset_in: wp.array2d[float],
    # Data in and out:
    cube_color_io: wp.array[float],
    goal_color_io: wp.array[float],
    # Data out:
    shape_scale_out: wp.array[wp.vec3],
    shape_material_mu_out: wp.array[float],
    body_mass_out: wp.array[float],
    body_inv_mass_out: wp.array[float],
    body_inertia_out: wp.array[wp.mat33],
    body_inv_inertia_out: wp.array[wp.mat33],
    shape_color_out: wp.array[wp.vec3],
    camera_transform_out: wp.array[wp.transform],
):
    """The world's drawn cube (edge, mass and a solid cube's inertia m e^2 / 6, friction: written when
    ``write_physics``), its colours and, when randomized, its camera pose.

    Colours are palette indices. Where the cube's and the goal's are equal, ``resolve_colors`` moves one to the next
    palette colour: 1 the goal's, 2 the cube's (the randomized one), writing it back into the drawn value, which is
    what the episode records (applying it again changes nothing: a restored episode keeps its colours).
    """
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    count = palette.shape[0]
    cube_index = wp.int32(cube_color_io[worldid])
    goal_index = wp.int32(goal_color_io[worldid])
    if cube_index == goal_index and resolve_colors == 1:
        goal_index = (goal_index + 1) % count
        goal_color_io[worldid] = float(goal_index)
    if cube_index == goal_index and resolve_colors == 2:
        cube_index = (cube_index + 1) % count
        cube_color_io[worldid] = float(cube_index)
    shape_color_out[cube_shape[worldid]] = palette[cube_index]
    shape_color_out[goal_shape[worldid]] = palette[goal_index]
    if write_physics != 0:
        edge, mass = cube_size_in[worldid], cube_mass_in[worldid]
        half = 0.5 * edge
        shape_scale_out[cube_shape[worldid]] = wp.vec3(half, half, half)
        shape_material_mu_out[cube_shape[worldid]] = cube_friction_in[worldid]
        moment = mass * edge * edge / 6.0
        inertia = wp.diag(wp.vec3(moment, moment, moment))
        set_mass(cube_body[worldid], mass, inertia, body_mass_out, body_inv_mass_out, body_inertia_out,
                 body_inv_inertia_out)  # fmt: skip
    if move_camera != 0:
        camera_transform_out[worldid] = jittered_camera(
            camera_position, camera_look_at, camera_position_offset_in[worldid], camera_look_at_offset_in[worldid]
        )
