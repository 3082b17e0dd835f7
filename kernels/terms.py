"""The term library of file-based tasks: Warp functions over one world's :class:`Frame` (what each takes, and its
TOML name: ``forge_gpu/_src/tasks/taskfile/terms.py``).

A term is a ``@wp.func`` of a fixed signature, so that a task's generated kernels (``tasks/taskfile/codegen.py``) call
its terms one after the other in one kernel per stage, whatever their number:

- an observation writes its values into ``out[worldid, col:]`` and returns the next column:
  ``(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int``;
- a reward returns its unweighted value (the kernel multiplies by ``f.tf[t, TF_WEIGHT]``):
  ``(f: Frame, worldid: int, t: int) -> float``;
- a termination or success condition returns whether it holds: ``(f: Frame, worldid: int, t: int) -> bool``.

``t`` is the term's row in the frame's argument tables: ``f.ti[t, ...]`` (integers: a count, bodies, an axis,
then a list of joint coordinates and the matching dofs, or of action or command columns) and ``f.tf[t, ...]``
(floats: the weight, the noise, then the term's numbers). A user's own term (a ``@wp.func`` of the same signature
in their module, checked when the task file is read) reads them alike; its TOML entry's ``args = [...]`` land in
``f.tf[t, TF_ARGS:]`` (docs/tasks.md "Writing a term").

Root terms read the model's free root joint (coordinates: position, quaternion xyzw; velocities: linear, then
angular, world frame); on a root of slide and hinge joints (a planar robot's slide-x, slide-z, hinge-y, which Newton
merges into one D6 joint) their ``*_rb`` variants read the root body's ``body_q`` and ``body_qd`` instead (``plan.py``
picks them). Body terms read ``body_q`` and ``body_qd`` (world frame, or relative to ``relative_to``) at a point
of the body: its origin, a site or an offset (``f.tp[t, ...]``). Contact terms read ``f.contact``, the per-body
timers that :func:`contact_timers_kernel` keeps from the solver's contacts.
"""

from __future__ import annotations

import warp as wp

from .rng import env_rng

TI_COUNT = wp.constant(0)
"""``ti[t, 0]``: the length of the term's list (joints, action or command columns)."""
TI_BODY = wp.constant(1)
"""``ti[t, 1]``: the term's body (per-world index)."""
TI_BODY2 = wp.constant(2)
"""``ti[t, 2]``: the second body (``relative_to``, ``other``); -1 for none (world frame)."""
TI_AXIS = wp.constant(3)
"""``ti[t, 3]``: an axis (0 x, 1 y, 2 z)."""
TI_PAIR = wp.constant(3)
"""``ti[t, 3]`` of a contact-pair term (``bodies_touch``, which has no axis): its pair, a column of ``f.touch``."""
TI_LIST = wp.constant(4)
"""``ti[t, 4:4+n]``: the list's coordinates (or columns); ``ti[t, 4+n:4+2n]`` the dofs of those joints."""
TF_WEIGHT = wp.constant(0)
"""``tf[t, 0]``: the reward weight."""
TF_NOISE = wp.constant(1)
"""``tf[t, 1]``: an observation's noise half-width (uniform)."""
TF_ARGS = wp.constant(2)
"""``tf[t, 2:]``: the term's numbers (a threshold, a sigma, a user term's ``args``)."""
TP_POINT = wp.constant(0)
"""``tp[t, 0:3]``: the point of the term's body, in the body's frame [m] (its origin, a site's, an offset)."""
TP_ROT = wp.constant(3)
"""``tp[t, 3:7]``: the point's frame in the body's frame, quaternion xyzw (a site's; identity otherwise)."""
TP_POINT2 = wp.constant(7)
"""``tp[t, 7:10]``: the point of the second body (``other``), in its frame [m]."""
TP_WIDTH = 10
"""The columns of the ``tp`` table."""
CONTACT_AIR = wp.constant(0)
"""``contact[w, b, 0]``: the body's time in the air since it last touched the ground [s] (0 while touching)."""
CONTACT_TOUCH = wp.constant(1)
"""``contact[w, b, 1]``: its time on the ground since it touched down [s] (0 while in the air)."""
CONTACT_LAST_AIR = wp.constant(2)
"""``contact[w, b, 2]``: the length of its last flight, set at each touchdown [s]."""
STREAM_OBSERVATION_NOISE = wp.constant(4)
"""The counter-based stream of observation noise (``kernels/rng.py`` keeps 1 to 3)."""


@wp.struct
class Frame:
    """What every term reads: one task's world arrays, all indexed by world first."""

    joint_q: wp.array2d[float]
    joint_qd: wp.array2d[float]
    body_q: wp.array2d[wp.transform]
    body_qd: wp.array2d[wp.spatial_vector]
    default_q: wp.array2d[float]
    action: wp.array2d[float]
    """The executed (clipped) action of the transition, [N, A] (zero on a reset frame; the task's recorded
    ``last_action`` state, so that a restored frame observes as recorded)."""
    previous_action: wp.array2d[float]
    """The executed action of the transition before it, [N, A] (zero after a reset)."""
    action_scale: wp.array[float]
    action_dof: wp.array[int]
    command: wp.array2d[float]
    """The episode's command, [N, C] (the ``command`` parameter, drawn per episode by ``[randomize]``)."""
    lower: wp.array[float]
    """Joint lower limits per coordinate of one world."""
    upper: wp.array[float]
    ti: wp.array2d[int]
    tf: wp.array2d[float]
    seed: int
    noise_key: wp.array2d[float]
    """Per world: the episode's noise seed (drawn at reset, a whole number below 2^24) and the observe calls since
    the reset; the task's recorded state ``observation_noise_key``, so a restored frame draws the same noise."""
    body_com: wp.array2d[wp.vec3]
    """Each body's centre of mass in its own frame [m], [N, B]."""
    tp: wp.array2d[float]
    """The terms' points on their bodies (``TP_POINT``, ``TP_ROT``, ``TP_POINT2``), one row per term."""
    root_body: int
    """The body the root joint moves (per-world index; 0 for a free root), read by the ``*_rb`` root terms."""
    contact: wp.array3d[float]
    """Per world and body: ``CONTACT_AIR``, ``CONTACT_TOUCH``, ``CONTACT_LAST_AIR`` [s], [N, B, 3]; the task's
    recorded state ``contact_timers`` where a contact term reads them ([N, 0, 3] otherwise)."""
    touch: wp.array2d[float]
    """Per world and contact pair (the task's pairs of bodies that ``bodies_touch`` terms name): 1 while the two
    bodies touch, else 0, [N, P]; the task's recorded state ``contact_pairs`` ([N, 1] of 0 without such a term)."""
    dt: float
    """The control step [s]."""
    hold: wp.array2d[float]
    """Per world and term: a condition's ``hold`` timer, how long it has been true without a break [s] (the
    task's state ``condition_timers``; [N, terms])."""
    hold_keep: int
    """1 on the observe after a restore: the restored timers are kept, not advanced."""
    target: wp.array2d[wp.vec3]
    """Per world, the task's targets (``[targets]``, drawn at every reset; world frame [m]), [N, K]."""


@wp.func
def _up_z(f: Frame, worldid: int) -> float:
    qx = f.joint_q[worldid, 3]
    qy = f.joint_q[worldid, 4]
    return 1.0 - 2.0 * (qx * qx + qy * qy)


@wp.func
def _point(f: Frame, t: int, first: int) -> wp.vec3:
    return wp.vec3(f.tp[t, first], f.tp[t, first + 1], f.tp[t, first + 2])


@wp.func
def _body_point(f: Frame, worldid: int, t: int) -> wp.vec3:
    """The world position of the term's point (its body's origin, site or offset)."""
    return wp.transform_point(f.body_q[worldid, f.ti[t, TI_BODY]], _point(f, t, TP_POINT))


@wp.func
def _other_point(f: Frame, worldid: int, t: int) -> wp.vec3:
    return wp.transform_point(f.body_q[worldid, f.ti[t, TI_BODY2]], _point(f, t, TP_POINT2))


@wp.func
def _point_velocity(f: Frame, worldid: int, body: int, local: wp.vec3) -> wp.vec3:
    """The world velocity of the body-frame point ``local`` (``body_qd`` holds the velocity of the centre of mass
    and the angular velocity, both world frame)."""
    pose = f.body_q[worldid, body]
    twist = f.body_qd[worldid, body]
    com = wp.transform_point(pose, f.body_com[worldid, body])
    return wp.spatial_top(twist) + wp.cross(wp.spatial_bottom(twist), wp.transform_point(pose, local) - com)


@wp.func
def _body_pos(f: Frame, worldid: int, t: int) -> wp.vec3:
    p = _body_point(f, worldid, t)
    other = f.ti[t, TI_BODY2]
    if other >= 0:
        frame = f.body_q[worldid, other]
        p = wp.quat_rotate_inv(wp.transform_get_rotation(frame), p - wp.transform_get_translation(frame))
    return p


@wp.func
def _vec_out(v: wp.vec3, worldid: int, out: wp.array2d[float], col: int) -> int:
    for i in range(3):
        out[worldid, col + i] = v[i]
    return col + 3


@wp.func
def _target(f: Frame, worldid: int, t: int) -> wp.vec3:
    """The term's target (``ti[t, TI_LIST]``: its index among the task's ``[targets]``)."""
    return f.target[worldid, f.ti[t, TI_LIST]]


@wp.func
def _to_target(f: Frame, worldid: int, t: int) -> wp.vec3:
    return _body_point(f, worldid, t) - _target(f, worldid, t)


# -- observations -------------------------------------------------------------------------------------------


@wp.func
def obs_root_height(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    out[worldid, col] = f.joint_q[worldid, 2]
    return col + 1


@wp.func
def obs_root_quat(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    for i in range(4):
        out[worldid, col + i] = f.joint_q[worldid, 3 + i]
    return col + 4


@wp.func
def obs_root_lin_vel(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    for i in range(3):
        out[worldid, col + i] = f.joint_qd[worldid, i]
    return col + 3


@wp.func
def obs_root_ang_vel(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    for i in range(3):
        out[worldid, col + i] = f.joint_qd[worldid, 3 + i]
    return col + 3


@wp.func
def _root_quat(f: Frame, worldid: int) -> wp.quat:
    return wp.quat(f.joint_q[worldid, 3], f.joint_q[worldid, 4], f.joint_q[worldid, 5], f.joint_q[worldid, 6])


@wp.func
def _root_vec(f: Frame, worldid: int, first: int) -> wp.vec3:
    return wp.vec3(f.joint_qd[worldid, first], f.joint_qd[worldid, first + 1], f.joint_qd[worldid, first + 2])


@wp.func
def _heading_xy(f: Frame, worldid: int) -> wp.vec2:
    """The root's planar velocity in its heading frame (the world frame turned by the root's yaw about z)."""
    q = _root_quat(f, worldid)
    yaw = wp.atan2(2.0 * (q[3] * q[2] + q[0] * q[1]), 1.0 - 2.0 * (q[1] * q[1] + q[2] * q[2]))
    c = wp.cos(yaw)
    s = wp.sin(yaw)
    vx = f.joint_qd[worldid, 0]
    vy = f.joint_qd[worldid, 1]
    return wp.vec2(c * vx + s * vy, -s * vx + c * vy)


@wp.func
def obs_root_lin_vel_base(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(wp.quat_rotate_inv(_root_quat(f, worldid), _root_vec(f, worldid, 0)), worldid, out, col)


@wp.func
def obs_root_ang_vel_base(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(wp.quat_rotate_inv(_root_quat(f, worldid), _root_vec(f, worldid, 3)), worldid, out, col)


@wp.func
def obs_root_lin_vel_heading(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    v = _heading_xy(f, worldid)
    out[worldid, col] = v[0]
    out[worldid, col + 1] = v[1]
    return col + 2


@wp.func
def obs_projected_gravity(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(wp.quat_rotate_inv(_root_quat(f, worldid), wp.vec3(0.0, 0.0, -1.0)), worldid, out, col)


@wp.func
def obs_joint_pos(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    n = f.ti[t, TI_COUNT]
    for k in range(n):
        out[worldid, col + k] = f.joint_q[worldid, f.ti[t, TI_LIST + k]]
    return col + n


@wp.func
def obs_joint_pos_rel(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    n = f.ti[t, TI_COUNT]
    for k in range(n):
        c = f.ti[t, TI_LIST + k]
        out[worldid, col + k] = f.joint_q[worldid, c] - f.default_q[worldid, c]
    return col + n


@wp.func
def obs_joint_vel(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    n = f.ti[t, TI_COUNT]
    for k in range(n):
        out[worldid, col + k] = f.joint_qd[worldid, f.ti[t, TI_LIST + n + k]]
    return col + n


@wp.func
def obs_body_pos(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(_body_pos(f, worldid, t), worldid, out, col)


@wp.func
def obs_body_quat(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    local = wp.quat(f.tp[t, TP_ROT], f.tp[t, TP_ROT + 1], f.tp[t, TP_ROT + 2], f.tp[t, TP_ROT + 3])
    q = wp.transform_get_rotation(f.body_q[worldid, f.ti[t, TI_BODY]]) * local
    other = f.ti[t, TI_BODY2]
    if other >= 0:
        q = wp.quat_inverse(wp.transform_get_rotation(f.body_q[worldid, other])) * q
    for i in range(4):
        out[worldid, col + i] = q[i]
    return col + 4


@wp.func
def _body_velocity(f: Frame, worldid: int, t: int, angular: int) -> wp.vec3:
    v = _point_velocity(f, worldid, f.ti[t, TI_BODY], _point(f, t, TP_POINT))
    if angular == 1:
        v = wp.spatial_bottom(f.body_qd[worldid, f.ti[t, TI_BODY]])
    other = f.ti[t, TI_BODY2]
    if other >= 0:
        v = wp.quat_rotate_inv(wp.transform_get_rotation(f.body_q[worldid, other]), v)
    return v


@wp.func
def obs_body_lin_vel(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(_body_velocity(f, worldid, t, 0), worldid, out, col)


@wp.func
def obs_body_ang_vel(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(_body_velocity(f, worldid, t, 1), worldid, out, col)


@wp.func
def obs_body_pose(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    """An object's state: its point's position then its frame's orientation xyzw (world frame)."""
    col = obs_body_pos(f, worldid, t, out, col)
    return obs_body_quat(f, worldid, t, out, col)


@wp.func
def obs_body_velocity(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    """An object's velocity: its point's linear velocity then its angular velocity (world frame)."""
    col = obs_body_lin_vel(f, worldid, t, out, col)
    return obs_body_ang_vel(f, worldid, t, out, col)


@wp.func
def obs_target_pos(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(_target(f, worldid, t), worldid, out, col)


@wp.func
def obs_last_action(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    n = f.action.shape[1]
    for k in range(n):
        out[worldid, col + k] = f.action[worldid, k]
    return col + n


@wp.func
def obs_command(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    n = f.command.shape[1]
    for k in range(n):
        out[worldid, col + k] = f.command[worldid, k]
    return col + n


@wp.func
def add_noise(f: Frame, worldid: int, t: int, out: wp.array2d[float], start: int, end: int):
    """Uniform noise in +-``tf[t, TF_NOISE]`` on ``out[worldid, start:end]``, keyed by the world's noise key
    (the episode's noise seed, the observe count) and the term."""
    scale = f.tf[t, TF_NOISE]
    if scale > 0.0:
        key = f.noise_key[worldid]
        state = env_rng(f.seed, int(key[0]), t, int(key[1]), STREAM_OBSERVATION_NOISE)
        for c in range(start, end):
            out[worldid, c] = out[worldid, c] + scale * (2.0 * wp.randf(state) - 1.0)


# -- rewards ------------------------------------------------------------------------------------------------


@wp.func
def rew_alive(f: Frame, worldid: int, t: int) -> float:
    return 1.0


@wp.func
def rew_root_lin_vel(f: Frame, worldid: int, t: int) -> float:
    return f.joint_qd[worldid, f.ti[t, TI_AXIS]]


@wp.func
def rew_track_lin_vel(f: Frame, worldid: int, t: int) -> float:
    ex = f.joint_qd[worldid, 0] - f.command[worldid, f.ti[t, TI_LIST]]
    ey = f.joint_qd[worldid, 1] - f.command[worldid, f.ti[t, TI_LIST + 1]]
    return wp.exp(-(ex * ex + ey * ey) / f.tf[t, TF_ARGS])


@wp.func
def rew_track_lin_vel_heading(f: Frame, worldid: int, t: int) -> float:
    v = _heading_xy(f, worldid)
    ex = v[0] - f.command[worldid, f.ti[t, TI_LIST]]
    ey = v[1] - f.command[worldid, f.ti[t, TI_LIST + 1]]
    return wp.exp(-(ex * ex + ey * ey) / f.tf[t, TF_ARGS])


@wp.func
def rew_root_lin_vel_z_l2(f: Frame, worldid: int, t: int) -> float:
    vz = f.joint_qd[worldid, 2]
    return vz * vz


@wp.func
def rew_root_ang_vel_xy_l2(f: Frame, worldid: int, t: int) -> float:
    wx = f.joint_qd[worldid, 3]
    wy = f.joint_qd[worldid, 4]
    return wx * wx + wy * wy


@wp.func
def rew_track_yaw_rate(f: Frame, worldid: int, t: int) -> float:
    e = f.joint_qd[worldid, 5] - f.command[worldid, f.ti[t, TI_LIST]]
    return wp.exp(-(e * e) / f.tf[t, TF_ARGS])


@wp.func
def rew_track_height(f: Frame, worldid: int, t: int) -> float:
    e = f.joint_q[worldid, 2] - f.tf[t, TF_ARGS + 1]
    return wp.exp(-(e * e) / f.tf[t, TF_ARGS])


@wp.func
def rew_upright(f: Frame, worldid: int, t: int) -> float:
    return _up_z(f, worldid)


@wp.func
def rew_joint_pos_l2(f: Frame, worldid: int, t: int) -> float:
    total = float(0.0)
    for k in range(f.ti[t, TI_COUNT]):
        c = f.ti[t, TI_LIST + k]
        e = f.joint_q[worldid, c] - f.default_q[worldid, c]
        total += e * e
    return total


@wp.func
def rew_joint_vel_l2(f: Frame, worldid: int, t: int) -> float:
    n = f.ti[t, TI_COUNT]
    total = float(0.0)
    for k in range(n):
        v = f.joint_qd[worldid, f.ti[t, TI_LIST + n + k]]
        total += v * v
    return total


@wp.func
def rew_joint_limit(f: Frame, worldid: int, t: int) -> float:
    total = float(0.0)
    for k in range(f.ti[t, TI_COUNT]):
        c = f.ti[t, TI_LIST + k]
        q = f.joint_q[worldid, c]
        total += wp.max(f.lower[c] - q, 0.0) + wp.max(q - f.upper[c], 0.0)
    return total


@wp.func
def rew_action_l2(f: Frame, worldid: int, t: int) -> float:
    total = float(0.0)
    for k in range(f.action.shape[1]):
        u = f.action[worldid, k]
        total += u * u
    return total


@wp.func
def rew_action_rate_l2(f: Frame, worldid: int, t: int) -> float:
    total = float(0.0)
    for k in range(f.action.shape[1]):
        d = f.action[worldid, k] - f.previous_action[worldid, k]
        total += d * d
    return total


@wp.func
def rew_energy(f: Frame, worldid: int, t: int) -> float:
    total = float(0.0)
    for k in range(f.action.shape[1]):
        torque = f.action[worldid, k] * f.action_scale[k]
        total += wp.abs(torque * f.joint_qd[worldid, f.action_dof[k]])
    return total


@wp.func
def rew_body_distance(f: Frame, worldid: int, t: int) -> float:
    return wp.length(_body_point(f, worldid, t) - _other_point(f, worldid, t))


@wp.func
def rew_body_to_command(f: Frame, worldid: int, t: int) -> float:
    a = _body_point(f, worldid, t)
    c = f.ti[t, TI_LIST]
    goal = wp.vec3(f.command[worldid, c], f.command[worldid, c + 1], f.command[worldid, c + 2])
    return wp.length(a - goal)


@wp.func
def rew_body_to_target(f: Frame, worldid: int, t: int) -> float:
    return wp.length(_to_target(f, worldid, t))


@wp.func
def rew_body_to_target_xy(f: Frame, worldid: int, t: int) -> float:
    d = _to_target(f, worldid, t)
    return wp.length(wp.vec2(d[0], d[1]))


@wp.func
def done_body_at_target(f: Frame, worldid: int, t: int) -> bool:
    return rew_body_to_target(f, worldid, t) <= f.tf[t, TF_ARGS]


@wp.func
def done_body_at_target_xy(f: Frame, worldid: int, t: int) -> bool:
    return rew_body_to_target_xy(f, worldid, t) <= f.tf[t, TF_ARGS]


@wp.func
def rew_body_at_target(f: Frame, worldid: int, t: int) -> float:
    return wp.where(done_body_at_target(f, worldid, t), 1.0, 0.0)


@wp.func
def rew_body_at_target_xy(f: Frame, worldid: int, t: int) -> float:
    return wp.where(done_body_at_target_xy(f, worldid, t), 1.0, 0.0)


@wp.func
def rew_body_height(f: Frame, worldid: int, t: int) -> float:
    return _body_point(f, worldid, t)[2]


@wp.func
def rew_body_lin_vel(f: Frame, worldid: int, t: int) -> float:
    return _body_velocity(f, worldid, t, 0)[f.ti[t, TI_AXIS]]


@wp.func
def rew_body_ang_vel(f: Frame, worldid: int, t: int) -> float:
    return _body_velocity(f, worldid, t, 1)[f.ti[t, TI_AXIS]]


# -- the root body: roots of slide and hinge joints ---------------------------------------------------------


@wp.func
def _rb_pose(f: Frame, worldid: int) -> wp.transform:
    return f.body_q[worldid, f.root_body]


@wp.func
def _rb_quat(f: Frame, worldid: int) -> wp.quat:
    return wp.transform_get_rotation(f.body_q[worldid, f.root_body])


@wp.func
def _rb_lin_vel(f: Frame, worldid: int) -> wp.vec3:
    """The world velocity of the root body's origin."""
    return _point_velocity(f, worldid, f.root_body, wp.vec3(0.0, 0.0, 0.0))


@wp.func
def _rb_ang_vel(f: Frame, worldid: int) -> wp.vec3:
    return wp.spatial_bottom(f.body_qd[worldid, f.root_body])


@wp.func
def _pitch(q: wp.quat) -> float:
    """The rotation about the world y axis [rad] of the frame ``q``: the angle of its x axis in the x-z plane
    (positive turns x toward -z, as a hinge about +y does); a planar root's hinge-y angle."""
    x = wp.quat_rotate(q, wp.vec3(1.0, 0.0, 0.0))
    return wp.atan2(-x[2], x[0])


@wp.func
def obs_root_height_rb(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    out[worldid, col] = wp.transform_get_translation(_rb_pose(f, worldid))[2]
    return col + 1


@wp.func
def obs_root_quat_rb(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    q = _rb_quat(f, worldid)
    for i in range(4):
        out[worldid, col + i] = q[i]
    return col + 4


@wp.func
def obs_root_lin_vel_rb(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(_rb_lin_vel(f, worldid), worldid, out, col)


@wp.func
def obs_root_ang_vel_rb(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(_rb_ang_vel(f, worldid), worldid, out, col)


@wp.func
def obs_root_lin_vel_base_rb(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(wp.quat_rotate_inv(_rb_quat(f, worldid), _rb_lin_vel(f, worldid)), worldid, out, col)


@wp.func
def obs_root_ang_vel_base_rb(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(wp.quat_rotate_inv(_rb_quat(f, worldid), _rb_ang_vel(f, worldid)), worldid, out, col)


@wp.func
def obs_projected_gravity_rb(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    return _vec_out(wp.quat_rotate_inv(_rb_quat(f, worldid), wp.vec3(0.0, 0.0, -1.0)), worldid, out, col)


@wp.func
def obs_root_pos(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    """The root body's origin, world frame [m] (any root: a free root's coordinates are its pose)."""
    return _vec_out(wp.transform_get_translation(_rb_pose(f, worldid)), worldid, out, col)


@wp.func
def obs_root_pitch(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    out[worldid, col] = _pitch(_rb_quat(f, worldid))
    return col + 1


@wp.func
def rew_root_lin_vel_rb(f: Frame, worldid: int, t: int) -> float:
    return _rb_lin_vel(f, worldid)[f.ti[t, TI_AXIS]]


@wp.func
def rew_track_lin_vel_rb(f: Frame, worldid: int, t: int) -> float:
    v = _rb_lin_vel(f, worldid)
    ex = v[0] - f.command[worldid, f.ti[t, TI_LIST]]
    ey = v[1] - f.command[worldid, f.ti[t, TI_LIST + 1]]
    return wp.exp(-(ex * ex + ey * ey) / f.tf[t, TF_ARGS])


@wp.func
def rew_root_lin_vel_z_l2_rb(f: Frame, worldid: int, t: int) -> float:
    vz = _rb_lin_vel(f, worldid)[2]
    return vz * vz


@wp.func
def rew_root_ang_vel_xy_l2_rb(f: Frame, worldid: int, t: int) -> float:
    w = _rb_ang_vel(f, worldid)
    return w[0] * w[0] + w[1] * w[1]


@wp.func
def rew_track_height_rb(f: Frame, worldid: int, t: int) -> float:
    e = wp.transform_get_translation(_rb_pose(f, worldid))[2] - f.tf[t, TF_ARGS + 1]
    return wp.exp(-(e * e) / f.tf[t, TF_ARGS])


@wp.func
def rew_upright_rb(f: Frame, worldid: int, t: int) -> float:
    return wp.quat_rotate(_rb_quat(f, worldid), wp.vec3(0.0, 0.0, 1.0))[2]


@wp.func
def rew_root_pitch_l2(f: Frame, worldid: int, t: int) -> float:
    p = _pitch(_rb_quat(f, worldid))
    return p * p


@wp.func
def done_root_below_rb(f: Frame, worldid: int, t: int) -> bool:
    return wp.transform_get_translation(_rb_pose(f, worldid))[2] < f.tf[t, TF_ARGS]


@wp.func
def done_tilt_rb(f: Frame, worldid: int, t: int) -> bool:
    return rew_upright_rb(f, worldid, t) < f.tf[t, TF_ARGS]


@wp.func
def done_root_pitch_beyond(f: Frame, worldid: int, t: int) -> bool:
    return wp.abs(_pitch(_rb_quat(f, worldid))) > f.tf[t, TF_ARGS]


# -- contacts: the timers of each body's touching the ground -------------------------------------------------


@wp.kernel
def contact_flags_kernel(
    nacon: wp.array[int],
    contact_dist: wp.array[float],
    contact_margin: wp.array[float],
    contact_geom: wp.array[wp.vec2i],
    contact_world: wp.array[int],
    geom_to_shape: wp.array2d[wp.int32],
    shape_body: wp.array[int],
    bodies: int,
    touching: wp.array2d[int],
):
    """Mark each body that one of the solver's contacts (``mjw_data.contact``, the first ``nacon``, within the
    contact's margin) has against the ground or another body fixed to the world: ``touching[w, b] = 1``."""
    i = wp.tid()
    if i >= nacon[0] or contact_dist[i] > contact_margin[i]:
        return
    w = contact_world[i]
    g = contact_geom[i]
    if g[0] < 0 or g[1] < 0:
        return
    sa = geom_to_shape[w, g[0]]
    sb = geom_to_shape[w, g[1]]
    if sa < 0 or sb < 0:
        return
    a = shape_body[sa]
    b = shape_body[sb]
    if a < 0 and b >= 0:
        touching[w, b - w * bodies] = 1
    elif b < 0 and a >= 0:
        touching[w, a - w * bodies] = 1


@wp.kernel
def contact_timers_kernel(
    dt: float,
    restored: int,
    reset_mask: wp.array[wp.bool],
    touching: wp.array2d[int],
    contact: wp.array3d[float],
):
    """Advance each body's air and contact timers by ``dt`` from this step's ``touching`` flags (and clear them);
    a reset frame starts them at 0, a restored one keeps the recorded values."""
    w, b = wp.tid()
    touch = touching[w, b]
    touching[w, b] = 0
    if reset_mask[w]:
        if restored == 0:
            for k in range(3):
                contact[w, b, k] = 0.0
        return
    if touch == 1:
        air = contact[w, b, CONTACT_AIR]
        if air > 0.0:
            contact[w, b, CONTACT_LAST_AIR] = air
        contact[w, b, CONTACT_AIR] = 0.0
        contact[w, b, CONTACT_TOUCH] = contact[w, b, CONTACT_TOUCH] + dt
    else:
        contact[w, b, CONTACT_AIR] = contact[w, b, CONTACT_AIR] + dt
        contact[w, b, CONTACT_TOUCH] = 0.0


@wp.kernel
def contact_pairs_kernel(
    nacon: wp.array[int],
    contact_dist: wp.array[float],
    contact_margin: wp.array[float],
    contact_geom: wp.array[wp.vec2i],
    contact_world: wp.array[int],
    geom_to_shape: wp.array2d[wp.int32],
    shape_body: wp.array[int],
    bodies: int,
    pairs: wp.array[wp.vec2i],
    reset_mask: wp.array[wp.bool],
    touch: wp.array2d[float],
):
    """Mark each pair of bodies (per-world indices, either order) that one of the solver's contacts joins:
    ``touch[w, p] = 1`` (cleared before; a reset world's stay 0: its contacts are the last episode's)."""
    i = wp.tid()
    if i >= nacon[0] or contact_dist[i] > contact_margin[i]:
        return
    w = contact_world[i]
    g = contact_geom[i]
    if g[0] < 0 or g[1] < 0 or reset_mask[w]:
        return
    sa = geom_to_shape[w, g[0]]
    sb = geom_to_shape[w, g[1]]
    if sa < 0 or sb < 0:
        return
    a = shape_body[sa]
    b = shape_body[sb]
    if a < 0 or b < 0:
        return
    a = a - w * bodies
    b = b - w * bodies
    for p in range(pairs.shape[0]):
        q = pairs[p]
        if (q[0] == a and q[1] == b) or (q[0] == b and q[1] == a):
            touch[w, p] = 1.0


@wp.func
def obs_bodies_touch(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    out[worldid, col] = f.touch[worldid, f.ti[t, TI_PAIR]]
    return col + 1


@wp.func
def rew_bodies_touch(f: Frame, worldid: int, t: int) -> float:
    return f.touch[worldid, f.ti[t, TI_PAIR]]


@wp.func
def done_bodies_touch(f: Frame, worldid: int, t: int) -> bool:
    return f.touch[worldid, f.ti[t, TI_PAIR]] > 0.5


@wp.func
def _touching(f: Frame, worldid: int, body: int) -> bool:
    return f.contact[worldid, body, CONTACT_TOUCH] > 0.0


@wp.func
def obs_body_contact(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    n = f.ti[t, TI_COUNT]
    for k in range(n):
        out[worldid, col + k] = wp.where(_touching(f, worldid, f.ti[t, TI_LIST + k]), 1.0, 0.0)
    return col + n


@wp.func
def obs_air_time(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int:
    n = f.ti[t, TI_COUNT]
    for k in range(n):
        out[worldid, col + k] = f.contact[worldid, f.ti[t, TI_LIST + k], CONTACT_AIR]
    return col + n


@wp.func
def rew_feet_air_time(f: Frame, worldid: int, t: int) -> float:
    """Per body touching down this step (its contact time is one step), its last flight's length less
    ``threshold``, summed."""
    total = float(0.0)
    for k in range(f.ti[t, TI_COUNT]):
        b = f.ti[t, TI_LIST + k]
        touch = f.contact[worldid, b, CONTACT_TOUCH]
        if touch > 0.0 and touch < 1.5 * f.dt:
            total += f.contact[worldid, b, CONTACT_LAST_AIR] - f.tf[t, TF_ARGS]
    return total


@wp.func
def rew_body_contact(f: Frame, worldid: int, t: int) -> float:
    total = float(0.0)
    for k in range(f.ti[t, TI_COUNT]):
        if _touching(f, worldid, f.ti[t, TI_LIST + k]):
            total += 1.0
    return total


@wp.func
def done_body_contact(f: Frame, worldid: int, t: int) -> bool:
    return rew_body_contact(f, worldid, t) > 0.0


# -- terminations and success -------------------------------------------------------------------------------


@wp.func
def done_root_below(f: Frame, worldid: int, t: int) -> bool:
    return f.joint_q[worldid, 2] < f.tf[t, TF_ARGS]


@wp.func
def done_tilt(f: Frame, worldid: int, t: int) -> bool:
    return _up_z(f, worldid) < f.tf[t, TF_ARGS]


@wp.func
def done_body_below(f: Frame, worldid: int, t: int) -> bool:
    return rew_body_height(f, worldid, t) < f.tf[t, TF_ARGS]


@wp.func
def done_body_above(f: Frame, worldid: int, t: int) -> bool:
    return rew_body_height(f, worldid, t) > f.tf[t, TF_ARGS]


@wp.func
def done_body_distance_below(f: Frame, worldid: int, t: int) -> bool:
    return rew_body_distance(f, worldid, t) < f.tf[t, TF_ARGS]


@wp.func
def done_body_to_command_below(f: Frame, worldid: int, t: int) -> bool:
    return rew_body_to_command(f, worldid, t) < f.tf[t, TF_ARGS]


@wp.func
def done_joint_pos_beyond(f: Frame, worldid: int, t: int) -> bool:
    out = bool(False)
    for k in range(f.ti[t, TI_COUNT]):
        if wp.abs(f.joint_q[worldid, f.ti[t, TI_LIST + k]]) > f.tf[t, TF_ARGS]:
            out = True
    return out
