"""Demonstration generation's kernel (launched by ``forge_gpu._src.generate.follower``): each world follows source
segments of end-effector poses moved into the frame of the objects where they are now, one launch per step for
every world. World index first: ``worldid = wp.tid()``.

Per world and subtask a segment of a source demonstration is chosen (uniformly, or the one whose object pose at its
start is nearest the object's pose now), its tcp poses are transformed by ``T_obj_now * inv(T_obj_src_start)``, the
tcp is moved from where it is to the transformed first pose in ``interpolation_steps`` steps, then along the
transformed poses, with the source's gripper column; the arm's joint targets come from the damped least squares
step of ``kernels/ik.py``: a share ``gain`` of the error to the next transformed pose added to the targets each
step, or, with ``lead_mode`` (``follow = "command"``, joint-target actions), the measured joints moved by the error
to the transformed frame's pose plus the source's lead at that frame (the pose change its own joint targets asked
of its measured joints, turned by the transform's rotation), nothing integrated from step to step. A subtask that
carries a body (``held``) moves its poses further by the body's offset in the hand: ``o_src - o_now`` in the tcp's
frame, where ``o`` is the body's position in the tcp's frame at the segment's start (the source's, and the world's
now), so the body, held where it is held now, follows the source's body.
"""

import warp as wp

from .ik import clamp_length, point_transform, rotation_error, tcp_action
from .rng import env_rng

STREAM_CHOICE = wp.constant(5)
"""The segment choices of an attempt (``kernels/rng.py``'s key: the attempt's index, step = the subtask)."""
STREAM_NOISE = wp.constant(7)
"""The per-step action noise of an attempt (step = the step)."""
SELECT_RANDOM, SELECT_NEAREST = 0, 1
OBJECT_NONE, OBJECT_BODY, OBJECT_TARGET = 0, 1, 2

# Rows of the ``numbers`` table.
N_GAIN = wp.constant(0)  # follow "pose": the share of the pose error commanded per step
N_MAX_SPEED = wp.constant(1)  # the largest position change per step [m]
N_MAX_TURN = wp.constant(2)  # the largest rotation per step [rad]
N_ACTION_NOISE = wp.constant(3)  # per-step noise on the position change, uniform in +- this [m]
N_IK_DAMPING = wp.constant(4)
N_MAX_JOINT_STEP = wp.constant(5)
N_MAX_LAG = wp.constant(6)
N_ANGLE_WEIGHT = wp.constant(7)  # nearest: metres that one radian of the object's rotation counts as
NUMBERS = 8


@wp.func
def object_pose(
    kind: int, index: int, worldid: int, body_q: wp.array2d[wp.transform], target: wp.array2d[wp.vec3]
) -> wp.transform:
    """The pose of a subtask's object now: a body's, a ``[targets]`` point (no rotation) or the identity."""
    if kind == OBJECT_BODY:
        return body_q[worldid, index]
    if kind == OBJECT_TARGET:
        return wp.transform(target[worldid, index], wp.quat_identity())
    return wp.transform_identity()


@wp.func
def pose_distance(a: wp.transform, b: wp.transform, angle_weight: float) -> float:
    """Position distance [m] plus ``angle_weight`` times the rotation angle between ``a`` and ``b`` [rad]."""
    d = wp.length(wp.transform_get_translation(a) - wp.transform_get_translation(b))
    turn = rotation_error(wp.transform_get_rotation(a), wp.transform_get_rotation(b))
    return d + angle_weight * wp.length(turn)


@wp.func
def begin_subtask(
    worldid: int,
    s: int,
    j: int,
    seed: int,
    select: int,
    numbers: wp.array[float],
    seg_first: wp.array2d[int],
    seg_object: wp.array2d[wp.transform],
    seg_held: wp.array2d[wp.vec3],
    object_kind: wp.array[int],
    object_index: wp.array[int],
    held_index: wp.array[int],
    body_q: wp.array2d[wp.transform],
    target: wp.array2d[wp.vec3],
    tcp: wp.transform,
    choice: wp.array2d[int],
    xform: wp.array2d[wp.transform],
    hold_fix: wp.array2d[wp.vec3],
    start_pose: wp.array[wp.transform],
):
    """Choose subtask ``s``'s source segment for attempt ``j``, its transform from the object's pose now and the held
    body's offset correction, and start the interpolation from the tcp's pose ``tcp``."""
    sources = seg_first.shape[0]
    now = object_pose(object_kind[s], object_index[s], worldid, body_q, target)
    e = int(0)
    if select == SELECT_NEAREST:
        best = float(3.0e38)
        for k in range(sources):
            d = pose_distance(seg_object[k, s], now, numbers[N_ANGLE_WEIGHT])
            if d < best:
                best = d
                e = k
    else:
        rng = env_rng(seed, j, 0, s, STREAM_CHOICE)
        e = wp.randi(rng, 0, sources)
    choice[worldid, s] = e
    xform[worldid, s] = wp.transform_multiply(now, wp.transform_inverse(seg_object[e, s]))
    fix = wp.vec3(0.0)
    if held_index[s] >= 0:
        held = wp.transform_get_translation(body_q[worldid, held_index[s]])
        in_hand = wp.transform_point(wp.transform_inverse(tcp), held)
        fix = seg_held[e, s] - in_hand
    hold_fix[worldid, s] = fix
    start_pose[worldid] = tcp


@wp.kernel
def follow_kernel(
    # Model:
    src_pose: wp.array[wp.transform],
    src_grip: wp.array[float],
    src_lead: wp.array[wp.spatial_vector],
    seg_first: wp.array2d[int],
    seg_last: wp.array2d[int],
    seg_object: wp.array2d[wp.transform],
    seg_held: wp.array2d[wp.vec3],
    object_kind: wp.array[int],
    object_index: wp.array[int],
    held_index: wp.array[int],
    joint_coord: wp.array[int],
    joint_child: wp.array[int],
    joint_xc: wp.array[wp.transform],
    joint_axis: wp.array[wp.vec3],
    joint_slide: wp.array[int],
    joint_column: wp.array[int],
    point_body: int,
    point_offset: wp.transform,
    gripper_column: int,
    ee_mode: int,
    numbers: wp.array[float],
    lower: wp.array[float],
    upper: wp.array[float],
    action_origin: wp.array2d[float],
    action_scale: wp.array[float],
    action_low: wp.array[float],
    action_high: wp.array[float],
    seed: int,
    select: int,
    interpolation_steps: int,
    lead_mode: int,
    first_attempt: int,
    attempts: int,
    # Data in:
    draw_env_in: wp.array[int],
    step_id_in: wp.array[wp.int32],
    joint_q_in: wp.array2d[float],
    body_q_in: wp.array2d[wp.transform],
    target_in: wp.array2d[wp.vec3],
    subtask_flags_in: wp.array2d[wp.bool],
    # Data in/out:
    subtask: wp.array[int],
    count: wp.array[int],
    reached: wp.array[int],
    choice: wp.array2d[int],
    xform: wp.array2d[wp.transform],
    hold_fix: wp.array2d[wp.vec3],
    start_pose: wp.array[wp.transform],
    joint_target: wp.array2d[float],
    # Data out:
    row_reached: wp.array[int],
    row_choice: wp.array2d[int],
    row_transform: wp.array2d[wp.transform],
    row_hold: wp.array2d[wp.vec3],
    action_out: wp.array2d[float],
):
    """One step of attempt ``j = draw_env[world]``: at its first frame (``step_id`` 0) subtask 0 begins; a subtask
    whose segment has been followed to its end hands over to the next (its segment chosen and transformed from the
    object's pose at that frame); the last one's final pose is held until the episode ends. ``reached`` counts the
    subtasks whose conditions held in order (``subtask_flags``). Row ``j - first_attempt`` (where in
    ``0 .. attempts - 1``) gets the attempt's choices, transforms and reached count."""
    worldid = wp.tid()
    j = draw_env_in[worldid]
    row = j - first_attempt
    step = step_id_in[worldid]
    subtasks = seg_first.shape[1]
    tcp = point_transform(body_q_in, worldid, point_body, point_offset)
    if step == 0:
        subtask[worldid] = 0
        count[worldid] = 0
        reached[worldid] = 0
        for k in range(joint_coord.shape[0]):
            joint_target[worldid, k] = joint_q_in[worldid, joint_coord[k]]
        begin_subtask(worldid, 0, j, seed, select, numbers, seg_first, seg_object, seg_held, object_kind,
                      object_index, held_index, body_q_in, target_in, tcp, choice, xform, hold_fix,
                      start_pose)  # fmt: skip
    else:
        r = reached[worldid]
        if r < subtasks:
            if subtask_flags_in[worldid, r]:
                reached[worldid] = r + 1
    s = subtask[worldid]
    k = count[worldid]
    e = choice[worldid, s]
    if k >= interpolation_steps + seg_last[e, s] - seg_first[e, s] and s < subtasks - 1:
        s = s + 1
        k = 0
        subtask[worldid] = s
        begin_subtask(worldid, s, j, seed, select, numbers, seg_first, seg_object, seg_held, object_kind,
                      object_index, held_index, body_q_in, target_in, tcp, choice, xform, hold_fix,
                      start_pose)  # fmt: skip
        e = choice[worldid, s]
    x = xform[worldid, s]
    fix = wp.transform(hold_fix[worldid, s], wp.quat_identity())
    first = seg_first[e, s]
    last = seg_last[e, s]
    goal = wp.transform_identity()
    grip = float(0.0)
    lead = wp.spatial_vector()
    if k < interpolation_steps:
        a = float(k + 1) / float(interpolation_steps)
        aim = wp.transform_multiply(wp.transform_multiply(x, src_pose[first]), fix)
        begin = start_pose[worldid]
        p0 = wp.transform_get_translation(begin)
        p1 = wp.transform_get_translation(aim)
        q = wp.quat_slerp(wp.transform_get_rotation(begin), wp.transform_get_rotation(aim), a)
        goal = wp.transform(p0 + (p1 - p0) * a, q)
        grip = src_grip[first]
    else:
        i = wp.min(first + k - interpolation_steps, last)
        if lead_mode != 0:  # the source's own frame and its commanded lead, turned with the transform
            goal = wp.transform_multiply(wp.transform_multiply(x, src_pose[i]), fix)
            turned = wp.transform_get_rotation(x)
            source_lead = src_lead[i]
            lead = wp.spatial_vector(
                wp.quat_rotate(turned, wp.vec3(source_lead[0], source_lead[1], source_lead[2])),
                wp.quat_rotate(turned, wp.vec3(source_lead[3], source_lead[4], source_lead[5])),
            )
        else:
            goal = wp.transform_multiply(wp.transform_multiply(x, src_pose[wp.min(i + 1, last)]), fix)
        grip = src_grip[i]
    count[worldid] = k + 1
    if row >= 0 and row < attempts:
        row_reached[row] = reached[worldid]
        row_choice[row, s] = e
        row_transform[row, s] = x
        row_hold[row, s] = hold_fix[worldid, s]
    p = wp.transform_get_translation(tcp)
    gain = numbers[N_GAIN]
    step_most = numbers[N_MAX_JOINT_STEP]
    if lead_mode != 0:  # targets from the measured joints: the error and the lead, no integration
        gain = 1.0
        step_most = numbers[N_MAX_LAG]
        for c in range(joint_coord.shape[0]):
            joint_target[worldid, c] = joint_q_in[worldid, joint_coord[c]]
    move = clamp_length((wp.transform_get_translation(goal) - p) * gain, numbers[N_MAX_SPEED])
    move = move + wp.vec3(lead[0], lead[1], lead[2])
    if numbers[N_ACTION_NOISE] > 0.0:
        rng = env_rng(seed, j, 0, step + 1, STREAM_NOISE)
        for c in range(3):
            move[c] = move[c] + wp.randf(rng, -1.0, 1.0) * numbers[N_ACTION_NOISE]
    turn = rotation_error(wp.transform_get_rotation(tcp), wp.transform_get_rotation(goal)) * gain
    turn = clamp_length(turn, numbers[N_MAX_TURN]) + wp.vec3(lead[3], lead[4], lead[5])
    tcp_action(worldid, move, turn, p, ee_mode, body_q_in, joint_q_in, joint_coord, joint_child, joint_xc,
               joint_axis, joint_slide, joint_column, numbers[N_IK_DAMPING], step_most,
               numbers[N_MAX_LAG], lower, upper, action_origin, action_scale, action_low, action_high, joint_target,
               action_out)  # fmt: skip
    if gripper_column >= 0:
        action_out[worldid, gripper_column] = wp.clamp(grip, action_low[gripper_column], action_high[gripper_column])


@wp.kernel
def attempt_keys_kernel(
    # Model:
    first_attempt: int,
    # Data in:
    draw_env_in: wp.array[wp.int32],
    # Data out:
    keys_out: wp.array[wp.int32],
):
    """Each world's attempt index: its evaluation row's (``draw_env``, 0 .. count - 1) plus the block's first
    attempt, the key its reset, draws and choices are made from."""
    worldid = wp.tid()
    keys_out[worldid] = draw_env_in[worldid] + first_attempt
