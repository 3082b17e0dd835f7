"""The term library of file-based tasks: Warp functions over one world's :class:`Frame` (what each takes, and its
TOML name: ``forge_gpu/_src/sim/taskfile/terms.py``).

A term is a ``@wp.func`` of a fixed signature, so that a task's generated kernels (``sim/taskfile/codegen.py``) call its
terms one after the other in one kernel per stage, whatever their number:

- an observation writes its values into ``out[worldid, col:]`` and returns the next column:
  ``(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int``;
- a reward returns its unweighted value (the kernel multiplies by ``f.tf[t, TF_WEIGHT]``):
  ``(f: Frame, worldid: int, t: int) -> float``;
- a termination or success condition returns whether it holds: ``(f: Frame, worldid: int, t: int) -> bool``.

``t`` is the term's row in the frame's argument tables: ``f.ti[t, ...]`` (integers: a count, bodies, an axis,
then a list of joint coordinates and the matching dofs, or of action or command columns) and ``f.tf[t, ...]``
(floats: the weight, the noise, then the term's numbers). A user's own term (a ``@wp.func`` of the same signature
in their module) reads them alike; its TOML entry's ``args = [...]`` land in ``f.tf[t, TF_ARGS:]``.

Root terms read the model's free root joint (coordinates: position, quaternion xyzw; velocities: linear, then
angular, world frame); body terms read ``body_q`` and ``body_qd`` (world frame, or relative to ``relative_to``).
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
TI_LIST = wp.constant(4)
"""``ti[t, 4:4+n]``: the list's coordinates (or columns); ``ti[t, 4+n:4+2n]`` the dofs of those joints."""
TF_WEIGHT = wp.constant(0)
"""``tf[t, 0]``: the reward weight."""
TF_NOISE = wp.constant(1)
"""``tf[t, 1]``: an observation's noise half-width (uniform)."""
TF_ARGS = wp.constant(2)
"""``tf[t, 2:]``: the term's numbers (a threshold, a sigma, a user term's ``args``)."""
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


@wp.func
def _up_z(f: Frame, worldid: int) -> float:
    qx = f.joint_q[worldid, 3]
    qy = f.joint_q[worldid, 4]
    return 1.0 - 2.0 * (qx * qx + qy * qy)


@wp.func
def _body_pos(f: Frame, worldid: int, t: int) -> wp.vec3:
    pose = f.body_q[worldid, f.ti[t, TI_BODY]]
    p = wp.transform_get_translation(pose)
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
    q = wp.transform_get_rotation(f.body_q[worldid, f.ti[t, TI_BODY]])
    other = f.ti[t, TI_BODY2]
    if other >= 0:
        q = wp.quat_inverse(wp.transform_get_rotation(f.body_q[worldid, other])) * q
    for i in range(4):
        out[worldid, col + i] = q[i]
    return col + 4


@wp.func
def _body_velocity(f: Frame, worldid: int, t: int, angular: int) -> wp.vec3:
    v = wp.spatial_top(f.body_qd[worldid, f.ti[t, TI_BODY]])
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
    a = wp.transform_get_translation(f.body_q[worldid, f.ti[t, TI_BODY]])
    b = wp.transform_get_translation(f.body_q[worldid, f.ti[t, TI_BODY2]])
    return wp.length(a - b)


@wp.func
def rew_body_to_command(f: Frame, worldid: int, t: int) -> float:
    a = wp.transform_get_translation(f.body_q[worldid, f.ti[t, TI_BODY]])
    c = f.ti[t, TI_LIST]
    goal = wp.vec3(f.command[worldid, c], f.command[worldid, c + 1], f.command[worldid, c + 2])
    return wp.length(a - goal)


@wp.func
def rew_body_height(f: Frame, worldid: int, t: int) -> float:
    return wp.transform_get_translation(f.body_q[worldid, f.ti[t, TI_BODY]])[2]


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
