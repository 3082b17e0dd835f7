"""The scripted pick-and-place expert's kernel (launched by ``forge_gpu.sim:pick_expert``,
``forge_gpu/_src/tasks/pick.py``): a state machine per world, its phase, timer and targets in device arrays,
one launch per step for every world. World index first: ``worldid = wp.tid()``.
"""

import warp as wp

from .ik import clamp_length, point_transform, rotation_error, tcp_action
from .rng import env_rng

STREAM_EXPERT = wp.constant(6)
"""The pick expert's draws (per-episode offsets, per-step action noise): ``kernels/rng.py``'s key, stream 6."""

APPROACH, DESCEND, CLOSE, LIFT, MOVE, LOWER, OPEN, RETREAT, DONE = 0, 1, 2, 3, 4, 5, 6, 7, 8
PHASES = ("approach", "descend", "close", "lift", "move", "lower", "open", "retreat", "done")
"""The phases in order (``phase`` holds the index)."""
PLACE_NONE, PLACE_BODY, PLACE_POINT, PLACE_TARGET = 0, 1, 2, 3
"""Where the object goes after the lift: nowhere (hold it up), on a body (its top), at a point (on the table), at
a ``[targets]`` point of each world (``place_body`` its index)."""

# Rows of the ``numbers`` table (settings in the order pick.py writes them).
N_APPROACH = wp.constant(0)  # approach height above the object's centre [m]
N_GRASP = wp.constant(1)  # the tcp's height above the object's centre when it closes [m]
N_LIFT = wp.constant(2)  # the lift above the grasp [m]
N_CARRY = wp.constant(3)  # the carry height above the place's top [m]
N_RELEASE = wp.constant(4)  # the object's bottom above the place's top when it opens [m]
N_RETREAT = wp.constant(5)  # how far up it retreats after opening [m]
N_REACH_TOL = wp.constant(6)  # a waypoint in the air is reached within this [m]
N_GRASP_TOL = wp.constant(7)  # the grasp and place points within this [m]
N_ANGLE_TOL = wp.constant(8)  # the orientation within this [rad]
N_CLOSE_STEPS = wp.constant(9)  # steps the gripper takes to close
N_OPEN_STEPS = wp.constant(10)  # ... to open
N_DESCEND_STEPS = wp.constant(11)  # a descent gives up waiting for the grasp point after this many steps
N_GAIN = wp.constant(12)  # the share of the pose error commanded per step
N_MAX_SPEED = wp.constant(13)  # the largest position change per step [m]
N_MAX_TURN = wp.constant(14)  # the largest rotation per step [rad]
N_POSITION_NOISE = wp.constant(15)  # per-episode grasp offset, uniform in +- this on x and y [m]
N_YAW_NOISE = wp.constant(16)  # per-episode grasp yaw offset, uniform in +- this [rad]
N_ACTION_NOISE = wp.constant(17)  # per-step noise on the position change, uniform in +- this [m]
N_OPEN = wp.constant(18)  # the gripper column's open value (action units)
N_CLOSED = wp.constant(19)  # ... closed value
N_IK_DAMPING = wp.constant(20)
N_MAX_JOINT_STEP = wp.constant(21)
N_MAX_LAG = wp.constant(22)
NUMBERS = 23


@wp.func
def _yaw(q: wp.quat) -> float:
    """The heading [rad] of a rotation's x axis on the table plane."""
    x = wp.quat_rotate(q, wp.vec3(1.0, 0.0, 0.0))
    return wp.atan2(x[1], x[0])


@wp.func
def _wrap_quarter(a: float) -> float:
    """``a`` [rad] modulo a quarter turn, in [-pi/4, pi/4] (a cube looks the same every quarter turn)."""
    q = 0.5 * wp.pi
    return a - q * wp.floor(a / q + 0.5)


@wp.kernel
def pick_expert_kernel(
    # Model:
    joint_coord: wp.array[int],
    joint_child: wp.array[int],
    joint_xc: wp.array[wp.transform],
    joint_axis: wp.array[wp.vec3],
    joint_slide: wp.array[int],
    joint_column: wp.array[int],
    point_body: int,
    point_offset: wp.transform,
    object_body: int,
    place_mode: int,
    place_body: int,
    place_point: wp.vec3,
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
    # Data in:
    draw_env_in: wp.array[int],
    draw_episode_in: wp.array[int],
    step_id_in: wp.array[wp.int32],
    joint_q_in: wp.array2d[float],
    body_q_in: wp.array2d[wp.transform],
    target_in: wp.array2d[wp.vec3],
    # Data in/out:
    phase: wp.array[int],
    timer: wp.array[int],
    joint_target: wp.array2d[float],
    episode_draw: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """One step of the pick-and-place state machine of one world: approach above the object, descend to the grasp
    height, close (a timer), lift, then (with a place) move above it, lower, open (a timer) and retreat, else hold
    the object up. Waypoints are reached by distance (``reach`` in the air, ``grasp`` at the object and the
    place) and orientation (the hand pointing down, its fingers across the object's faces); the tcp moves a share
    ``gain`` of its pose error per step, at most ``max_speed`` and ``max_turn``. An episode's first frame
    (``step_id`` 0) restarts the machine and draws the episode's grasp offset and yaw offset. The action is the
    pose change (``ee_mode``) or the joint targets of a damped least squares step from the expert's own targets
    (``joint_column``: the action column of each chain joint), and the gripper column."""
    worldid = wp.tid()
    step = step_id_in[worldid]
    if step == 0:
        phase[worldid] = APPROACH
        timer[worldid] = 0
        for k in range(joint_coord.shape[0]):
            joint_target[worldid, k] = joint_q_in[worldid, joint_coord[k]]
        rng = env_rng(seed, draw_env_in[worldid], draw_episode_in[worldid], 0, STREAM_EXPERT)
        episode_draw[worldid, 0] = wp.randf(rng, -1.0, 1.0) * numbers[N_POSITION_NOISE]
        episode_draw[worldid, 1] = wp.randf(rng, -1.0, 1.0) * numbers[N_POSITION_NOISE]
        episode_draw[worldid, 2] = wp.randf(rng, -1.0, 1.0) * numbers[N_YAW_NOISE]
        episode_draw[worldid, 3] = body_q_in[worldid, object_body][2]  # the object's resting centre height
        episode_draw[worldid, 4] = 0.0  # the held object's offset from the tcp on the table plane [m]
        episode_draw[worldid, 5] = 0.0
    tcp = point_transform(body_q_in, worldid, point_body, point_offset)
    p = wp.transform_get_translation(tcp)
    r = wp.transform_get_rotation(tcp)
    obj = body_q_in[worldid, object_body]
    o = wp.transform_get_translation(obj)
    half = episode_draw[worldid, 3]
    # The grasp point: above the object's centre on the table plane, at its resting centre height (not its
    # measured one: a cube nudged up by the closing fingers does not draw the hand up after it).
    grasp = wp.vec3(o[0] + episode_draw[worldid, 0], o[1] + episode_draw[worldid, 1], half)
    # The place: its top (a body resting on the table: twice its centre height) and its centre on the table plane.
    top = place_point[2]
    place = place_point
    if place_mode == PLACE_BODY:
        b = wp.transform_get_translation(body_q_in[worldid, place_body])
        place = b
        top = 2.0 * b[2]
    elif place_mode == PLACE_TARGET:
        place = target_in[worldid, place_body]
        top = place[2]
    held = top + half + numbers[N_RELEASE] + numbers[N_GRASP]  # the tcp's height with the object at its release
    ph = phase[worldid]
    # The object, not the tcp, goes over the place: while carried (move, lower) the object's offset from the tcp on
    # the table plane is measured each step (a grasp off the object's centre, a slide between the pads), and the
    # tcp aims that much short of the place; from the opening on it stays as last measured.
    if ph == MOVE or ph == LOWER:
        episode_draw[worldid, 4] = o[0] - p[0]
        episode_draw[worldid, 5] = o[1] - p[1]
    place = wp.vec3(place[0] - episode_draw[worldid, 4], place[1] - episode_draw[worldid, 5], place[2])
    t = timer[worldid] + 1
    hand_yaw = _yaw(r)
    yaw = hand_yaw
    if ph < LIFT:  # across the object's faces, the quarter turn nearest the hand's heading
        yaw = hand_yaw + _wrap_quarter(_yaw(wp.transform_get_rotation(obj)) + episode_draw[worldid, 2] - hand_yaw)
    goal_q = wp.mul(wp.quat_from_axis_angle(wp.vec3(0.0, 0.0, 1.0), yaw), wp.quat(1.0, 0.0, 0.0, 0.0))
    angle = wp.length(rotation_error(r, goal_q))
    closed = 0
    goal = p
    if ph == APPROACH:
        goal = wp.vec3(grasp[0], grasp[1], grasp[2] + numbers[N_APPROACH])
        if wp.length(goal - p) < numbers[N_REACH_TOL] and angle < numbers[N_ANGLE_TOL]:
            ph = DESCEND
            t = 0
    elif ph == DESCEND:
        goal = wp.vec3(grasp[0], grasp[1], grasp[2] + numbers[N_GRASP])
        if wp.length(goal - p) < numbers[N_GRASP_TOL] or float(t) > numbers[N_DESCEND_STEPS]:
            ph = CLOSE
            t = 0
    elif ph == CLOSE:
        goal = wp.vec3(grasp[0], grasp[1], grasp[2] + numbers[N_GRASP])
        closed = 1
        if float(t) >= numbers[N_CLOSE_STEPS]:
            ph = LIFT
            t = 0
    elif ph == LIFT:
        closed = 1
        goal = wp.vec3(p[0], p[1], half + numbers[N_GRASP] + numbers[N_LIFT])
        if place_mode != PLACE_NONE:
            goal = wp.vec3(p[0], p[1], wp.max(half + numbers[N_GRASP] + numbers[N_LIFT], held + numbers[N_CARRY]))
            if wp.abs(goal[2] - p[2]) < numbers[N_REACH_TOL]:
                ph = MOVE
                t = 0
    elif ph == MOVE:
        closed = 1
        goal = wp.vec3(place[0], place[1], held + numbers[N_CARRY])
        if wp.length(goal - p) < numbers[N_REACH_TOL]:
            ph = LOWER
            t = 0
    elif ph == LOWER:
        closed = 1
        goal = wp.vec3(place[0], place[1], held)
        if wp.length(goal - p) < numbers[N_GRASP_TOL] or float(t) > numbers[N_DESCEND_STEPS]:
            ph = OPEN
            t = 0
    elif ph == OPEN:
        goal = wp.vec3(place[0], place[1], held)
        if float(t) >= numbers[N_OPEN_STEPS]:
            ph = RETREAT
            t = 0
    elif ph == RETREAT:
        goal = wp.vec3(place[0], place[1], held + numbers[N_RETREAT])
        if wp.length(goal - p) < numbers[N_REACH_TOL]:
            ph = DONE
            t = 0
    else:
        goal = wp.vec3(place[0], place[1], held + numbers[N_RETREAT])
    phase[worldid] = ph
    timer[worldid] = t
    move = clamp_length((goal - p) * numbers[N_GAIN], numbers[N_MAX_SPEED])
    if numbers[N_ACTION_NOISE] > 0.0:
        rng = env_rng(seed, draw_env_in[worldid], draw_episode_in[worldid], step + 1, STREAM_EXPERT)
        for i in range(3):
            move[i] = move[i] + wp.randf(rng, -1.0, 1.0) * numbers[N_ACTION_NOISE]
    turn = clamp_length(rotation_error(r, goal_q) * numbers[N_GAIN], numbers[N_MAX_TURN])
    tcp_action(worldid, move, turn, p, ee_mode, body_q_in, joint_q_in, joint_coord, joint_child, joint_xc,
               joint_axis, joint_slide, joint_column, numbers[N_IK_DAMPING], numbers[N_MAX_JOINT_STEP],
               numbers[N_MAX_LAG], lower, upper, action_origin, action_scale, action_low, action_high, joint_target,
               action_out)  # fmt: skip
    if gripper_column >= 0:
        g = numbers[N_OPEN]
        if closed != 0:
            g = numbers[N_CLOSED]
        action_out[worldid, gripper_column] = wp.clamp(g, action_low[gripper_column], action_high[gripper_column])
