"""Differential inverse kinematics of a chain of joints for a point on its last body: the geometric Jacobian from
the bodies' world transforms (after forward kinematics) and the joints' axes and anchors, and a damped least
squares step (``dq = J^T (J J^T + lambda^2 I)^-1 e``, a 6 x 6 Cholesky solve per world). Launched by the task
file's ``[action] kind = "ee_delta"`` (``forge_gpu._src.tasks.taskfile.task``) and by the pick expert
(``forge_gpu._src.tasks.pick``), one thread per world. World index first: ``worldid = wp.tid()``.
"""

import warp as wp

from .taskfile import _keep_actions

POSE = wp.constant(6)
"""The action columns of the pose change: dx, dy, dz [m], then a rotation vector droll, dpitch, dyaw [rad]."""


@wp.func
def point_transform(body_q: wp.array2d[wp.transform], worldid: int, body: int, offset: wp.transform) -> wp.transform:
    """The world transform of the point ``offset`` (a site's pose in its body's frame) of ``body``."""
    return wp.transform_multiply(body_q[worldid, body], offset)


@wp.func
def joint_column(
    body_q: wp.array2d[wp.transform],
    worldid: int,
    child: int,
    joint_xc: wp.transform,
    axis: wp.vec3,
    slide: int,
    point: wp.vec3,
) -> wp.spatial_vector:
    """One column of the geometric Jacobian of ``point`` (world frame): linear [3] then angular [3] velocity per
    unit joint velocity. The joint's frame on its child's side is ``body_q[child] * joint_xc``; a hinge moves the
    point by ``axis x (point - anchor)``, a slide by ``axis``."""
    frame = wp.transform_multiply(body_q[worldid, child], joint_xc)
    a = wp.quat_rotate(wp.transform_get_rotation(frame), axis)
    if slide != 0:
        return wp.spatial_vector(a, wp.vec3(0.0))
    return wp.spatial_vector(wp.cross(a, point - wp.transform_get_translation(frame)), a)


@wp.func
def cholesky_solve(m: wp.spatial_matrix, b: wp.spatial_vector) -> wp.spatial_vector:
    """``m^-1 b`` for a symmetric positive definite 6 x 6 ``m`` (Cholesky, in registers)."""
    lo = wp.spatial_matrix()
    for i in range(6):
        for j in range(i + 1):
            s = m[i, j]
            for k in range(j):
                s = s - lo[i, k] * lo[j, k]
            if i == j:
                lo[i, i] = wp.sqrt(wp.max(s, 1e-12))
            else:
                lo[i, j] = s / lo[j, j]
    y = wp.spatial_vector()
    for i in range(6):
        s = b[i]
        for k in range(i):
            s = s - lo[i, k] * y[k]
        y[i] = s / lo[i, i]
    x = wp.spatial_vector()
    for ii in range(6):
        i = 5 - ii
        s = y[i]
        for k in range(i + 1, 6):
            s = s - lo[k, i] * x[k]
        x[i] = s / lo[i, i]
    return x


@wp.func
def dls_solve(
    body_q: wp.array2d[wp.transform],
    worldid: int,
    joint_child: wp.array[int],
    joint_xc: wp.array[wp.transform],
    joint_axis: wp.array[wp.vec3],
    joint_slide: wp.array[int],
    point: wp.vec3,
    error: wp.spatial_vector,
    damping: float,
) -> wp.spatial_vector:
    """``(J J^T + damping^2 I)^-1 error`` for the pose change ``error`` (linear [m], then a rotation vector [rad],
    world frame) of ``point``: joint ``k``'s damped least squares step is its Jacobian column dotted with it."""
    m = wp.spatial_matrix()
    for j in range(joint_child.shape[0]):
        c = joint_column(body_q, worldid, joint_child[j], joint_xc[j], joint_axis[j], joint_slide[j], point)
        m = m + wp.outer(c, c)
    for i in range(6):
        m[i, i] = m[i, i] + damping * damping
    return cholesky_solve(m, error)


@wp.func
def step_targets(
    body_q: wp.array2d[wp.transform],
    joint_q: wp.array2d[float],
    worldid: int,
    joint_coord: wp.array[int],
    joint_child: wp.array[int],
    joint_xc: wp.array[wp.transform],
    joint_axis: wp.array[wp.vec3],
    joint_slide: wp.array[int],
    point: wp.vec3,
    error: wp.spatial_vector,
    damping: float,
    max_joint_step: float,
    max_lag: float,
    lower: wp.array[float],
    upper: wp.array[float],
    joint_target: wp.array2d[float],
):
    """The chain's joint targets ``joint_target[worldid, :K]`` moved by the damped least squares step toward the
    pose change ``error`` of ``point`` (one solve for all joints): each by at most ``max_joint_step`` [rad or m],
    at most ``max_lag`` from its measured position (the drives' lag does not wind the targets up), clipped to its
    limits."""
    y = dls_solve(body_q, worldid, joint_child, joint_xc, joint_axis, joint_slide, point, error, damping)
    for k in range(joint_coord.shape[0]):
        column = joint_column(body_q, worldid, joint_child[k], joint_xc[k], joint_axis[k], joint_slide[k], point)
        c = joint_coord[k]
        target = joint_target[worldid, k] + wp.clamp(wp.dot(column, y), -max_joint_step, max_joint_step)
        q = joint_q[worldid, c]
        joint_target[worldid, k] = wp.clamp(wp.clamp(target, q - max_lag, q + max_lag), lower[c], upper[c])


@wp.func
def clamp_length(v: wp.vec3, most: float) -> wp.vec3:
    """``v`` scaled down to length ``most`` where it is longer."""
    n = wp.length(v)
    if n > most:
        return v * (most / n)
    return v


@wp.func
def tcp_action(
    worldid: int,
    move: wp.vec3,
    turn: wp.vec3,
    point: wp.vec3,
    ee_mode: int,
    body_q: wp.array2d[wp.transform],
    joint_q: wp.array2d[float],
    joint_coord: wp.array[int],
    joint_child: wp.array[int],
    joint_xc: wp.array[wp.transform],
    joint_axis: wp.array[wp.vec3],
    joint_slide: wp.array[int],
    columns: wp.array[int],
    damping: float,
    max_joint_step: float,
    max_lag: float,
    lower: wp.array[float],
    upper: wp.array[float],
    action_origin: wp.array2d[float],
    action_scale: wp.array[float],
    action_low: wp.array[float],
    action_high: wp.array[float],
    joint_target: wp.array2d[float],
    action_out: wp.array2d[float],
):
    """The action that moves the tcp at ``point`` by ``move`` [m] and turns it by ``turn`` [rad] (world frame) this
    step, in the task's action space: with ``ee_mode``, the pose change itself (columns 0..5, divided by their
    scales); otherwise the chain's joint targets (:func:`step_targets`), each written to its action column
    ``columns[k]`` as ``(target - origin) / scale``. Clipped to the action's bounds. The expert of the pick tasks
    and the generation's follower act through it."""
    if ee_mode != 0:
        for i in range(3):
            action_out[worldid, i] = wp.clamp(move[i] / action_scale[i], action_low[i], action_high[i])
            action_out[worldid, 3 + i] = wp.clamp(turn[i] / action_scale[3 + i], action_low[3 + i], action_high[3 + i])
    else:
        step_targets(body_q, joint_q, worldid, joint_coord, joint_child, joint_xc, joint_axis, joint_slide, point,
                     wp.spatial_vector(move, turn), damping, max_joint_step, max_lag, lower, upper,
                     joint_target)  # fmt: skip
        for k in range(joint_coord.shape[0]):
            col = columns[k]
            value = (joint_target[worldid, k] - action_origin[worldid, joint_coord[k]]) / action_scale[col]
            action_out[worldid, col] = wp.clamp(value, action_low[col], action_high[col])


@wp.func
def rotation_error(current: wp.quat, goal: wp.quat) -> wp.vec3:
    """The rotation vector [rad] (world frame) that turns ``current`` into ``goal``: ``log(goal * current^-1)``,
    the short way round."""
    d = wp.mul(goal, wp.quat_inverse(current))
    if d[3] < 0.0:
        d = wp.quat(-d[0], -d[1], -d[2], -d[3])
    v = wp.vec3(d[0], d[1], d[2])
    s = wp.length(v)
    if s < 1e-9:
        return 2.0 * v
    return v * (2.0 * wp.atan2(s, d[3]) / s)


@wp.kernel
def ee_delta_kernel(
    # Model:
    action_scale: wp.array[float],
    joint_coord: wp.array[int],
    joint_child: wp.array[int],
    joint_xc: wp.array[wp.transform],
    joint_axis: wp.array[wp.vec3],
    joint_slide: wp.array[int],
    gripper_coord: wp.array[int],
    point_body: int,
    point_offset: wp.transform,
    base_body: int,
    lower: wp.array[float],
    upper: wp.array[float],
    action_origin: wp.array2d[float],
    damping: float,
    max_joint_step: float,
    max_lag: float,
    # Data in:
    joint_q_in: wp.array2d[float],
    body_q_in: wp.array2d[wp.transform],
    executed_action_in: wp.array2d[float],
    # Data in/out:
    last_action: wp.array2d[float],
    previous_action: wp.array2d[float],
    joint_target: wp.array2d[float],
    # Data out:
    joint_target_q_out: wp.array2d[float],
):
    """The end-effector action of one world: columns 0..5 are the point's pose change ``action * scale`` (metres,
    then a rotation vector in radians) in the world frame (``base_body`` -1) or the base body's axes; the arm's
    joint targets ``joint_target[:, :K]`` (the targets applied, recorded as state) move by the damped least squares
    step at the measured pose, each joint at most ``max_joint_step`` [rad or m] per step and at most ``max_lag``
    from its measured position (the drives' lag does not wind the targets up), clipped to its limits. Each
    further column (6 on) is a position target of one of the other action joints (the gripper's): ``origin +
    action * scale`` (``origin`` the default pose, or 0 with ``relative = false``), clipped to its limits."""
    worldid = wp.tid()
    for a in range(executed_action_in.shape[1]):
        _keep_actions(worldid, a, executed_action_in, last_action, previous_action)
    point = wp.transform_get_translation(point_transform(body_q_in, worldid, point_body, point_offset))
    dp = wp.vec3(0.0)
    dr = wp.vec3(0.0)
    for i in range(3):
        dp[i] = executed_action_in[worldid, i] * action_scale[i]
        dr[i] = executed_action_in[worldid, 3 + i] * action_scale[3 + i]
    if base_body >= 0:
        r = wp.transform_get_rotation(body_q_in[worldid, base_body])
        dp = wp.quat_rotate(r, dp)
        dr = wp.quat_rotate(r, dr)
    step_targets(body_q_in, joint_q_in, worldid, joint_coord, joint_child, joint_xc, joint_axis, joint_slide, point,
                 wp.spatial_vector(dp, dr), damping, max_joint_step, max_lag, lower, upper, joint_target)  # fmt: skip
    arm = joint_coord.shape[0]
    for k in range(arm):
        joint_target_q_out[worldid, joint_coord[k]] = joint_target[worldid, k]
    for g in range(gripper_coord.shape[0]):
        c = gripper_coord[g]
        col = POSE + g
        target = action_origin[worldid, c] + executed_action_in[worldid, col] * action_scale[col]
        target = wp.clamp(target, lower[c], upper[c])
        joint_target[worldid, arm + g] = target
        joint_target_q_out[worldid, c] = target


@wp.kernel
def reset_targets_kernel(
    # Model:
    joint_coord: wp.array[int],
    gripper_coord: wp.array[int],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    joint_q_in: wp.array2d[float],
    # Data out:
    joint_target_out: wp.array2d[float],
    joint_target_q_out: wp.array2d[float],
):
    """A world that resets starts its targets at its reset pose (the arm's joints, then the gripper's)."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    arm = joint_coord.shape[0]
    for k in range(arm + gripper_coord.shape[0]):
        c = 0
        if k < arm:
            c = joint_coord[k]
        else:
            c = gripper_coord[k - arm]
        joint_target_out[worldid, k] = joint_q_in[worldid, c]
        joint_target_q_out[worldid, c] = joint_q_in[worldid, c]
