"""Kernels of every file-based task (``forge_gpu._src.tasks.taskfile.task``, with its ``targets``, ``cameras`` and
``gaits``): the action onto the named joints and the randomized reset. Their observation, reward and termination
kernel is generated from the task's terms (``tasks/taskfile/codegen.py``). World index first: ``worldid = wp.tid()``.
"""

import warp as wp

from .camera import look_at_up_transform
from .randomize import set_mass
from .rng import STREAM_RANDOMIZE, STREAM_RESET, env_rng

STREAM_NOISE_SEED = wp.constant(5)
"""The stream of each episode's observation noise seed (``kernels/rng.py`` keeps 1 to 3, ``terms.py`` 4)."""


@wp.func
def _keep_actions(
    worldid: int,
    actid: int,
    executed_action_in: wp.array2d[float],
    last_action: wp.array2d[float],
    previous_action: wp.array2d[float],
):
    """The task's recorded actions: the transition's executed action (``last_action``, what the terms read) and
    the one before (``previous_action``); state, so that a restored frame observes as it was recorded."""
    previous_action[worldid, actid] = last_action[worldid, actid]
    last_action[worldid, actid] = executed_action_in[worldid, actid]


@wp.kernel
def apply_effort_kernel(
    # Model:
    action_scale: wp.array[float],
    action_dof: wp.array[int],
    # Data in:
    actuator_gain_in: wp.array[float],
    executed_action_in: wp.array2d[float],
    # Data in/out:
    last_action: wp.array2d[float],
    previous_action: wp.array2d[float],
    # Data out:
    joint_f_out: wp.array2d[float],
):
    """Effort [N or N m] of action joint k = executed action * scale * the world's actuator gain."""
    worldid, actid = wp.tid()
    _keep_actions(worldid, actid, executed_action_in, last_action, previous_action)
    effort = executed_action_in[worldid, actid] * action_scale[actid] * actuator_gain_in[worldid]
    joint_f_out[worldid, action_dof[actid]] = effort


@wp.kernel
def apply_position_kernel(
    # Model:
    action_scale: wp.array[float],
    action_coord: wp.array[int],
    lower: wp.array[float],
    upper: wp.array[float],
    default_q: wp.array2d[float],
    # Data in:
    executed_action_in: wp.array2d[float],
    # Data in/out:
    last_action: wp.array2d[float],
    previous_action: wp.array2d[float],
    # Data out:
    joint_target_q_out: wp.array2d[float],
):
    """Position target of action joint k = default pose + executed action * scale, clipped to the joint's limits."""
    worldid, actid = wp.tid()
    _keep_actions(worldid, actid, executed_action_in, last_action, previous_action)
    c = action_coord[actid]
    target = default_q[worldid, c] + executed_action_in[worldid, actid] * action_scale[actid]
    joint_target_q_out[worldid, c] = wp.clamp(target, lower[c], upper[c])


@wp.kernel
def follow_targets_kernel(
    # Model:
    follow_coord: wp.array[int],
    leader_coord: wp.array[int],
    lower: wp.array[float],
    upper: wp.array[float],
    # Data out:
    joint_target_q_out: wp.array2d[float],
):
    """``[action] follow``: the following joint's position target = its action joint's, clipped to its limits."""
    worldid, k = wp.tid()
    c = follow_coord[k]
    target = joint_target_q_out[worldid, leader_coord[k]]
    joint_target_q_out[worldid, c] = wp.clamp(target, lower[c], upper[c])


@wp.kernel
def apply_actuators_kernel(
    # Model:
    action_scale: wp.array[float],
    mode: wp.array[int],
    index: wp.array[int],
    gear: wp.array[float],
    low: wp.array[float],
    high: wp.array[float],
    gain: wp.array[int],
    default_q: wp.array2d[float],
    # Data in:
    actuator_gain_in: wp.array[float],
    executed_action_in: wp.array2d[float],
    # Data in/out:
    last_action: wp.array2d[float],
    previous_action: wp.array2d[float],
    # Data out:
    ctrl_out: wp.array2d[float],
    joint_target_q_out: wp.array2d[float],
    joint_target_qd_out: wp.array2d[float],
    joint_f_out: wp.array2d[float],
):
    """The model's own actuators (``taskfile/actuators.py``): column k's value = executed action * scale, into
    MuJoCo's ctrl (mode 0), a position target around the default pose clipped to the servo's ctrlrange (1), a
    velocity target (2), or an effort of value * gear clipped to +-the effort limit (3); force actuators (gain 1)
    times the world's actuator gain."""
    worldid, actid = wp.tid()
    _keep_actions(worldid, actid, executed_action_in, last_action, previous_action)
    value = executed_action_in[worldid, actid] * action_scale[actid]
    if gain[actid] == 1:
        value = value * actuator_gain_in[worldid]
    i = index[actid]
    m = mode[actid]
    if m == 0:
        ctrl_out[worldid, i] = value
    elif m == 1:
        joint_target_q_out[worldid, i] = wp.clamp(default_q[worldid, i] + value, low[actid], high[actid])
    elif m == 2:
        joint_target_qd_out[worldid, i] = value
    else:
        joint_f_out[worldid, i] = wp.clamp(value * gear[actid], low[actid], high[actid])


@wp.kernel
def reset_kernel(
    # Model:
    seed: int,
    root_coords: int,
    root_dofs: int,
    coords: wp.array[int],
    dofs: wp.array[int],
    draw_kind: wp.array[int],
    draw_index: wp.array[int],
    draw_range: wp.array[float],
    draw_low: wp.array[float],
    draw_high: wp.array[float],
    default_q: wp.array2d[float],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
    last_action_out: wp.array2d[float],
    previous_action_out: wp.array2d[float],
    noise_key_out: wp.array2d[float],
):
    """The default pose (a free root at its start pose, at rest), then the draws in order, each uniform in
    +-range from (seed, env, next episode): a coordinate's position (default + noise, clipped to the joint's range
    ``draw_low``..``draw_high``, widened to the default where that lies outside) or a dof's velocity."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = env_rng(seed, draw_env_in[worldid], episode_id_in[worldid] + 1, 0, STREAM_RESET)
    for i in range(root_coords):
        joint_q_out[worldid, i] = default_q[worldid, i]
    for i in range(root_dofs):
        joint_qd_out[worldid, i] = 0.0
    for k in range(coords.shape[0]):
        joint_q_out[worldid, coords[k]] = default_q[worldid, coords[k]]
        joint_qd_out[worldid, dofs[k]] = 0.0
    for k in range(draw_kind.shape[0]):
        noise = draw_range[k] * (2.0 * wp.randf(state) - 1.0)
        i = draw_index[k]
        if draw_kind[k] == 0:
            q0 = default_q[worldid, i]
            joint_q_out[worldid, i] = wp.clamp(q0 + noise, wp.min(draw_low[k], q0), wp.max(draw_high[k], q0))
        else:
            joint_qd_out[worldid, i] = noise
    for k in range(last_action_out.shape[1]):
        last_action_out[worldid, k] = 0.0
        previous_action_out[worldid, k] = 0.0
    noise_rng = env_rng(seed, draw_env_in[worldid], episode_id_in[worldid] + 1, 0, STREAM_NOISE_SEED)
    noise_key_out[worldid, 0] = float(wp.randi(noise_rng, 0, 16777216))
    noise_key_out[worldid, 1] = 0.0


@wp.kernel
def draw_targets_kernel(
    # Model:
    seed: int,
    joint_draws: int,
    yaw_range: wp.array[float],
    radius_range: wp.array[wp.vec2],
    height_range: wp.array[wp.vec2],
    marker_shape: wp.array2d[wp.int32],
    marker_offset: wp.array[wp.vec3],
    placed: wp.array[int],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    # Data out:
    target_out: wp.array2d[wp.vec3],
    shape_transform_out: wp.array[wp.transform],
):
    """Each ``[targets]`` point of the worlds that reset, drawn from the reset's stream after the ``joint_draws``
    of :func:`reset_kernel` (the same key): azimuth in +-yaw about +x, horizontal distance and height uniform in
    their ranges; its marker shape (static, visual; -1: none) moved there, plus its offset. A ``placed`` target
    (1: its place is a parameter, :func:`place_target_kernel`) draws nothing."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = env_rng(seed, draw_env_in[worldid], episode_id_in[worldid] + 1, 0, STREAM_RESET)
    for _k in range(joint_draws):
        wp.randf(state)
    for k in range(yaw_range.shape[0]):
        if placed[k] != 0:
            continue
        yaw = yaw_range[k] * (2.0 * wp.randf(state) - 1.0)
        r = radius_range[k]
        h = height_range[k]
        radius = r[0] + (r[1] - r[0]) * wp.randf(state)
        height = h[0] + (h[1] - h[0]) * wp.randf(state)
        pos = wp.vec3(radius * wp.cos(yaw), radius * wp.sin(yaw), height)
        target_out[worldid, k] = pos
        shape = marker_shape[worldid, k]
        if shape >= 0:
            shape_transform_out[shape] = wp.transform(pos + marker_offset[k], wp.quat_identity())


@wp.kernel
def place_target_kernel(
    # Model:
    k: int,
    marker_shape: wp.array2d[wp.int32],
    marker_offset: wp.array[wp.vec3],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    position_in: wp.array2d[float],
    # Data out:
    target_out: wp.array2d[wp.vec3],
    shape_transform_out: wp.array[wp.transform],
):
    """A target placed by its parameter (``[targets.NAME] position``: ``NAME_position``) in the worlds that reset:
    at (x, y, 0), its marker shape there plus its offset."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    pos = wp.vec3(position_in[worldid, 0], position_in[worldid, 1], 0.0)
    target_out[worldid, k] = pos
    shape = marker_shape[worldid, k]
    if shape >= 0:
        shape_transform_out[shape] = wp.transform(pos + marker_offset[k], wp.quat_identity())


@wp.kernel
def place_object_kernel(
    # Model:
    coord: int,
    dof: int,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    position_in: wp.array2d[float],
    yaw_in: wp.array[float],
    height_in: wp.array[float],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
):
    """An ``[objects]`` box or cylinder of the worlds that reset: its free joint at the drawn centre x, y and yaw,
    upright and resting on the table top (z = half its height: a cube's edge, a cylinder's height), at rest."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    half_yaw = 0.5 * yaw_in[worldid]
    joint_q_out[worldid, coord + 0] = position_in[worldid, 0]
    joint_q_out[worldid, coord + 1] = position_in[worldid, 1]
    joint_q_out[worldid, coord + 2] = 0.5 * height_in[worldid]
    joint_q_out[worldid, coord + 3] = 0.0
    joint_q_out[worldid, coord + 4] = 0.0
    joint_q_out[worldid, coord + 5] = wp.sin(half_yaw)
    joint_q_out[worldid, coord + 6] = wp.cos(half_yaw)
    for i in range(6):
        joint_qd_out[worldid, dof + i] = 0.0


@wp.kernel
def object_physics_kernel(
    # Model:
    shape: wp.array[wp.int32],
    body: wp.array[wp.int32],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    size_in: wp.array[float],
    mass_in: wp.array[float],
    friction_in: wp.array[float],
    # Data out:
    shape_scale_out: wp.array[wp.vec3],
    shape_material_mu_out: wp.array[float],
    body_mass_out: wp.array[float],
    body_inv_mass_out: wp.array[float],
    body_inertia_out: wp.array[wp.mat33],
    body_inv_inertia_out: wp.array[wp.mat33],
):
    """An ``[objects]`` box's drawn edge (its shape's half extents), friction, mass and a solid cube's inertia
    m e^2 / 6, in the worlds that reset."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    edge, mass = size_in[worldid], mass_in[worldid]
    half = 0.5 * edge
    shape_scale_out[shape[worldid]] = wp.vec3(half, half, half)
    shape_material_mu_out[shape[worldid]] = friction_in[worldid]
    moment = mass * edge * edge / 6.0
    inertia = wp.diag(wp.vec3(moment, moment, moment))
    set_mass(body[worldid], mass, inertia, body_mass_out, body_inv_mass_out, body_inertia_out, body_inv_inertia_out)


@wp.kernel
def object_cylinder_kernel(
    # Model:
    shape: wp.array[wp.int32],
    body: wp.array[wp.int32],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    radius_in: wp.array[float],
    height_in: wp.array[float],
    mass_in: wp.array[float],
    friction_in: wp.array[float],
    # Data out:
    shape_scale_out: wp.array[wp.vec3],
    shape_material_mu_out: wp.array[float],
    body_mass_out: wp.array[float],
    body_inv_mass_out: wp.array[float],
    body_inertia_out: wp.array[wp.mat33],
    body_inv_inertia_out: wp.array[wp.mat33],
):
    """An ``[objects]`` cylinder's drawn radius and height (its shape's radius and half height), friction, mass and
    a solid cylinder's inertia about its centre, m (3 r^2 + h^2) / 12 across its axis and m r^2 / 2 about it, in
    the worlds that reset."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    r, h, mass = radius_in[worldid], height_in[worldid], mass_in[worldid]
    s = shape[worldid]
    shape_scale_out[s] = wp.vec3(r, 0.5 * h, shape_scale_out[s][2])
    shape_material_mu_out[s] = friction_in[worldid]
    side = mass * (3.0 * r * r + h * h) / 12.0
    inertia = wp.diag(wp.vec3(side, side, 0.5 * mass * r * r))
    set_mass(body[worldid], mass, inertia, body_mass_out, body_inv_mass_out, body_inertia_out, body_inv_inertia_out)


@wp.func
def next_allowed(index: wp.int32, allowed: wp.array[wp.int32]) -> wp.int32:
    """The first palette index after ``index`` (wrapping) that ``allowed`` marks 1; ``index`` where none is."""
    count = allowed.shape[0]
    for step in range(1, count):
        c = (index + step) % count
        if allowed[c] != 0:
            return c
    return index


@wp.kernel
def palette_color_kernel(
    # Model:
    shape: wp.array[wp.int32],
    other_shape: wp.array[wp.int32],
    palette: wp.array[wp.vec3],
    resolve: int,
    allowed: wp.array[wp.int32],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    # Data in and out:
    color_io: wp.array[float],
    other_color_io: wp.array[float],
    # Data out:
    shape_color_out: wp.array[wp.vec3],
):
    """Palette colours (indices) of a shape and of the shape it must differ from (``differs_from``; the same shape
    and value for an entry alone) in the worlds that reset. Where they are equal, ``resolve`` moves one to the next
    colour its draw allows (``allowed[c]`` 1, in palette order, wrapping): 1 this one, 2 the other (the drawn one),
    written back into the drawn value, which the episode records (applied again, nothing changes: a restored
    episode keeps its colours)."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    other = wp.int32(other_color_io[worldid])
    index = wp.int32(color_io[worldid])
    if other == index and resolve == 1:
        index = next_allowed(index, allowed)
        color_io[worldid] = float(index)
    if other == index and resolve == 2:
        other = next_allowed(other, allowed)
        other_color_io[worldid] = float(other)
    shape_color_out[other_shape[worldid]] = palette[other]
    shape_color_out[shape[worldid]] = palette[index]


@wp.kernel
def place_markers_kernel(
    # Model:
    marker_shape: wp.array2d[wp.int32],
    marker_offset: wp.array[wp.vec3],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    target_in: wp.array2d[wp.vec3],
    # Data out:
    shape_transform_out: wp.array[wp.transform],
):
    """After ``restore``: each target's marker shape at its restored position plus its offset."""
    worldid, k = wp.tid()
    shape = marker_shape[worldid, k]
    if reset_mask_in[worldid] and shape >= 0:
        shape_transform_out[shape] = wp.transform(target_in[worldid, k] + marker_offset[k], wp.quat_identity())


@wp.kernel
def shape_color_kernel(
    # Model:
    shape: wp.array[wp.int32],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    color_in: wp.array2d[float],
    # Data out:
    shape_color_out: wp.array[wp.vec3],
):
    """A ``[shape_colors]`` shape's drawn colour (linear RGB in [0, 1]) in the worlds that reset."""
    worldid = wp.tid()
    if reset_mask_in[worldid]:
        c = color_in[worldid]
        shape_color_out[shape[worldid]] = wp.vec3(c[0], c[1], c[2])


@wp.kernel
def jitter_camera_kernel(
    # Model:
    camera_position: wp.vec3,
    camera_look_at: wp.vec3,
    camera_up: wp.vec3,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    camera_position_offset_in: wp.array2d[float],
    camera_look_at_offset_in: wp.array2d[float],
    # Data out:
    camera_transform_out: wp.array[wp.transform],
):
    """The camera of the worlds that reset at its position and look-at plus the drawn offsets [m], image up toward
    ``camera_up``."""
    worldid = wp.tid()
    if reset_mask_in[worldid]:
        p, a = camera_position_offset_in[worldid], camera_look_at_offset_in[worldid]
        eye = camera_position + wp.vec3(p[0], p[1], p[2])
        look = camera_look_at + wp.vec3(a[0], a[1], a[2])
        camera_transform_out[worldid] = look_at_up_transform(eye, look, camera_up)


@wp.kernel
def restored_noise_key_kernel(
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    # Data in/out:
    noise_key: wp.array2d[float],
):
    """After ``restore`` wrote a recorded noise key (the count its frame's observe had reached): one back, so that
    the observe that follows counts to it again and draws the recorded noise."""
    worldid = wp.tid()
    if reset_mask_in[worldid]:
        noise_key[worldid, 1] = noise_key[worldid, 1] - 1.0


@wp.kernel
def hold_pose_kernel(
    # Model:
    stiffness: float,
    damping: float,
    position_mode: int,
    action_scale: wp.array[float],
    action_coord: wp.array[int],
    action_dof: wp.array[int],
    action_low: wp.array[float],
    action_high: wp.array[float],
    default_q: wp.array2d[float],
    # Data in:
    joint_q_in: wp.array2d[float],
    joint_qd_in: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """The ``hold_pose`` expert: PD torques toward the default pose (effort actions, in action units), or the
    default pose itself (position actions: action 0), clipped to the bounds."""
    worldid, actid = wp.tid()
    value = float(0.0)
    if position_mode == 0:
        c = action_coord[actid]
        error = default_q[worldid, c] - joint_q_in[worldid, c]
        torque = stiffness * error - damping * joint_qd_in[worldid, action_dof[actid]]
        value = torque / action_scale[actid]
    action_out[worldid, actid] = wp.clamp(value, action_low[actid], action_high[actid])


@wp.kernel
def follow_camera_kernel(
    # Model:
    body: int,
    position: wp.vec3,
    look_at: wp.vec3,
    up: wp.vec3,
    # Data in:
    body_q_in: wp.array2d[wp.transform],
    # Data out:
    camera_out: wp.array[wp.transformf],
):
    """A task file's camera that follows a body: at ``position`` looking at ``look_at``, both offsets from the
    body's position [m] (its orientation ignored), image up toward ``up``, in Newton's camera convention."""
    worldid = wp.tid()
    p = wp.transform_get_translation(body_q_in[worldid, body])
    camera_out[worldid] = look_at_up_transform(p + position, p + look_at, up)


@wp.kernel
def mount_camera_kernel(
    # Model:
    body: int,
    camera_to_body: wp.transform,
    # Data in:
    body_q_in: wp.array2d[wp.transform],
    # Data out:
    camera_out: wp.array[wp.transformf],
):
    """A task file's camera mounted on a body: its pose in the body's frame (Newton's camera convention) carried
    by the body's position and orientation."""
    worldid = wp.tid()
    camera_out[worldid] = wp.transform_multiply(body_q_in[worldid, body], camera_to_body)


@wp.kernel
def sinusoid_gait_kernel(
    # Model:
    control_dt: float,
    frequency: float,
    amplitude: wp.array[float],
    phase: wp.array[float],
    command_column: int,
    command_scale: float,
    action_scale: wp.array[float],
    action_low: wp.array[float],
    action_high: wp.array[float],
    # Data in:
    command_in: wp.array2d[float],
    step_id_in: wp.array[wp.int32],
    # Data out:
    action_out: wp.array2d[float],
):
    """The ``sinusoid_gait`` expert: joint k's position target = default pose + amplitude_k sin(2 pi (f t +
    phase_k)), t = step * control_dt; the amplitudes times command[column] * command_scale when a column is given."""
    worldid, actid = wp.tid()
    gain = float(1.0)
    if command_column >= 0:
        gain = command_in[worldid, command_column] * command_scale
    t = float(step_id_in[worldid]) * control_dt
    angle = gain * amplitude[actid] * wp.sin(2.0 * wp.pi * (frequency * t + phase[actid]))
    action_out[worldid, actid] = wp.clamp(angle / action_scale[actid], action_low[actid], action_high[actid])


@wp.kernel
def gather_columns_kernel(
    # Model:
    column: int,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    source_in: wp.array2d[float],
    # Data out:
    target_out: wp.array2d[float],
):
    """``target[w, column + j] = source[w, j]`` in the worlds that reset (the points and colours a task's
    distractors keep away from, gathered into one table)."""
    worldid, j = wp.tid()
    if reset_mask_in[worldid]:
        target_out[worldid, column + j] = source_in[worldid, j]


@wp.func
def distractor_room(
    point: wp.vec2,
    d: int,
    worldid: int,
    away_count: int,
    clearance: float,
    half: float,
    away_in: wp.array3d[float],
    position_io: wp.array2d[float],
) -> bool:
    """Whether distractor ``d`` at ``point`` keeps ``clearance`` from every kept-clear point and does not overlap
    an earlier distractor (their centres at least three half edges apart)."""
    for k in range(away_count):
        if wp.length(point - wp.vec2(away_in[worldid, k, 0], away_in[worldid, k, 1])) < clearance:
            return False
    for e in range(d):
        other = wp.vec2(position_io[worldid, 2 * e], position_io[worldid, 2 * e + 1])
        if wp.length(point - other) < 3.0 * half:
            return False
    return True


@wp.kernel
def place_distractors_kernel(
    # Model:
    seed: int,
    key: int,
    low: wp.vec2,
    high: wp.vec2,
    away_count: int,
    clearance: float,
    half: float,
    tries: int,
    shape: wp.array2d[wp.int32],
    palette: wp.array[wp.vec3],
    allowed: wp.array[wp.int32],
    avoid_count: int,
    # Data in:
    away_in: wp.array3d[float],
    avoid_in: wp.array2d[float],
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    # Data in and out:
    position_io: wp.array2d[float],
    color_io: wp.array2d[float],
    # Data out:
    shape_transform_out: wp.array[wp.transform],
    shape_color_out: wp.array[wp.vec3],
):
    """Each distractor of a world that resets, in order: its drawn place kept if it has room (``distractor_room``),
    else drawn again uniformly in [low, high] up to ``tries`` times from its own stream (one that finds no room is
    shown under the table); its colour moved to the next allowed one while it equals a colour of ``avoid_in``. The
    settled place and colour are written back (applied again, nothing changes: a restored episode keeps them)."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    for d in range(shape.shape[1]):
        point = wp.vec2(position_io[worldid, 2 * d], position_io[worldid, 2 * d + 1])
        room = distractor_room(point, d, worldid, away_count, clearance, half, away_in, position_io)
        state = env_rng(seed, draw_env_in[worldid], episode_id_in[worldid] + 1, key + d, STREAM_RANDOMIZE)
        attempt = int(0)
        while not room and attempt < tries:
            u = wp.randf(state)
            v = wp.randf(state)
            point = wp.vec2(low[0] + u * (high[0] - low[0]), low[1] + v * (high[1] - low[1]))
            room = distractor_room(point, d, worldid, away_count, clearance, half, away_in, position_io)
            attempt += 1
        position_io[worldid, 2 * d] = point[0]
        position_io[worldid, 2 * d + 1] = point[1]
        z = wp.where(room, half, -1.0)
        color = wp.int32(color_io[worldid, d])
        for _step in range(palette.shape[0]):
            clash = int(0)
            for c in range(avoid_count):
                if wp.int32(avoid_in[worldid, c]) == color:
                    clash = 1
            if clash == 0:
                break
            color = next_allowed(color, allowed)
        color_io[worldid, d] = float(color)
        s = shape[worldid, d]
        shape_transform_out[s] = wp.transform(wp.vec3(point[0], point[1], z), wp.quat_identity())
        shape_color_out[s] = palette[color]
