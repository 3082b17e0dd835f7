"""push's model builder and its pushing expert, named by ``configs/push.toml`` (``forge_gpu.sim:push_scene``,
``forge_gpu.sim:push_expert``); the task itself is that file.

The arm, its table and pedestal are ``tasks/arm.py``'s (as in ``reach``); the hand points down and its capsule and
tip sphere are the pusher. The cube rides a free joint, so its pose and velocity are part of ``joint_q`` and
``joint_qd`` (coordinates 4..10 and dofs 4..9 of each world), recorded and restored with them; the goal marker is a
flat square on the table top, visual only. Contacts: the cube touches the table and the pusher (MuJoCo's solver;
the table and the pusher do not touch each other, so a sagging tip does not drag on the table). MuJoCo takes the
larger of two touching shapes' friction coefficients, so the table and the pusher keep a low one
(``table_friction``, ``pusher_friction``) and the cube's own is what acts.
"""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import newton
import numpy as np
import warp as wp

from forge_gpu._src.core.checks import check_range, plain_number
from forge_gpu._src.tasks.arm import _SCENE_ARGS, ArmParams, add_arm, add_table, arm_expert

GOAL_THICKNESS = 0.001
"""Height of the goal marker (a flat square on the table top, visual only) [m]."""
# Collision groups (Newton: a positive group touches itself and the negative ones; a negative one touches all).
_TABLE_GROUP, _PUSHER_GROUP, _CUBE_GROUP = 1, 2, -1
_NUMBERS = ("cube_size", "cube_mass", "cube_friction", "table_friction", "pusher_friction", "goal_half_size")
_PAIRS = ("cube_position", "goal_position")


def push_scene(builder, *, source: str = "", joint_lower, joint_upper, home_q, **sizes) -> None:
    """A task file's ``[model] builder`` (``forge_gpu.sim:push_scene``): the table (its top at z = 0, friction
    ``table_friction``), the pedestal, the goal square (shape ``goal``: half side ``goal_half_size`` [m], at
    ``goal_position`` [x, y], visual only), the 4-joint arm of :func:`~forge_gpu._src.tasks.arm.arm_scene`
    (friction ``pusher_friction``) at the pose ``home_q`` [rad] and the cube (body ``cube`` on a free joint, box
    shape ``cube_box``: edge ``cube_size`` [m], mass ``cube_mass`` [kg] with a solid cube's inertia, friction
    ``cube_friction``) resting at ``cube_position`` [x, y]. The cube touches the table and the pusher; nothing else
    collides. ``sizes``: the arm's model fields (``arm_scene``'s) and the numbers above."""
    where = f"{source}: model.args"
    allowed = (*_SCENE_ARGS, *_NUMBERS, *_PAIRS)
    if set(sizes) != set(allowed):
        wrong = sorted(set(sizes) ^ set(allowed))[0]
        raise ValueError(f"{where}: {'unknown' if wrong in sizes else 'missing'} {wrong!r}; push_scene takes "
                         f"{', '.join(allowed)}, joint_lower, joint_upper, home_q")  # fmt: skip
    for name in (*_SCENE_ARGS, *_NUMBERS):
        value = sizes[name]
        if not plain_number(value) or value < 0:
            raise ValueError(f"{where}.{name} = {value!r}: expected a number >= 0")
        if name in _SCENE_ARGS:
            check_range(value, next(f.metadata for f in fields(ArmParams) if f.name == name), f"{where}.{name}")
    for name, value, count in (("joint_lower", joint_lower, 4), ("joint_upper", joint_upper, 4),
                               ("home_q", home_q, 4), *((n, sizes[n], 2) for n in _PAIRS)):  # fmt: skip
        if not (isinstance(value, list) and len(value) == count and all(isinstance(v, int | float) for v in value)):
            raise ValueError(f"{where}.{name} = {value!r}: expected {count} numbers")
    lo, hi = np.asarray(joint_lower, np.float64), np.asarray(joint_upper, np.float64)
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    if not ((lo <= np.asarray(home_q)) & (np.asarray(home_q) <= hi)).all():
        raise ValueError(f"{where}.home_q = {home_q}: must lie within the joint limits {lo.tolist()} .. {hi.tolist()}")
    p = ArmParams(**{name: float(sizes[name]) for name in _SCENE_ARGS}, home_q=tuple(home_q))
    table_cfg = newton.ModelBuilder.ShapeConfig(density=0.0, mu=sizes["table_friction"], collision_group=_TABLE_GROUP)
    colliding = set(add_table(builder, p, cfg=table_cfg))
    half_goal, half = float(sizes["goal_half_size"]), 0.5 * sizes["cube_size"]
    builder.add_shape_box(
        -1,
        xform=wp.transform((*sizes["goal_position"], 0.5 * GOAL_THICKNESS), wp.quat_identity()),
        hx=half_goal,
        hy=half_goal,
        hz=0.5 * GOAL_THICKNESS,
        cfg=newton.ModelBuilder.ShapeConfig(density=0.0, collision_group=0),
        color=(0.1, 0.65, 0.2),
        label="goal",
    )
    pusher = add_arm(builder, p, None, limits=(lo, hi))
    for shape in pusher:
        builder.shape_material_mu[shape] = sizes["pusher_friction"]
        builder.shape_collision_group[shape] = _PUSHER_GROUP
    colliding |= set(pusher)
    for c, value in enumerate(home_q):
        builder.joint_q[c] = float(value)
    mass = sizes["cube_mass"]
    cube = builder.add_body(
        xform=wp.transform((*sizes["cube_position"], half), wp.quat_identity()),
        mass=mass,
        inertia=wp.mat33(np.eye(3) * (mass * sizes["cube_size"] ** 2 / 6.0)),
        lock_inertia=True,
        label="cube",
    )
    cube_cfg = newton.ModelBuilder.ShapeConfig(density=0.0, mu=sizes["cube_friction"], collision_group=_CUBE_GROUP)
    colliding.add(
        builder.add_shape_box(cube, hx=half, hy=half, hz=half, cfg=cube_cfg, color=(0.85, 0.1, 0.08), label="cube_box")
    )
    for shape in range(builder.shape_count):
        if shape not in colliding:
            builder.shape_flags[shape] &= ~newton.ShapeFlags.COLLIDE_SHAPES


_EXPERT_KEYS = (
    "shoulder_height", "upper_arm_length", "forearm_length", "hand_length", "link_radius", "lookahead",
    "push_lookahead", "clearance", "margin", "band", "max_step",
)  # fmt: skip


def push_expert(task, world, settings: dict):
    """A task file's ``[expert] factory`` (``forge_gpu.sim:push_expert``): push the cube along the line from the
    goal through it, re-planned every step (``kernels/push.py``'s ``expert_kernel``: the arm's IK, the hand pointing
    down). ``settings``: the arm's ``shoulder_height``, ``upper_arm_length``, ``forearm_length``, ``hand_length``,
    ``link_radius`` [m] (the tip's radius is 0.8 of it), and ``lookahead``, ``push_lookahead``, ``clearance``,
    ``margin`` [m], ``band`` (the cube half sizes off the line within which it pushes, >= 0.5), ``max_step``
    [rad]. It reads ``proprio`` as ``[q (4), qd (4), tip (3)]``, ``cube_pose`` and
    ``goal_position``."""
    from forge_gpu.kernels import push as kernels

    file = task.config.params.file
    if set(settings) != set(_EXPERT_KEYS) or not all(isinstance(settings[k], int | float) for k in _EXPERT_KEYS):
        raise ValueError(f"{file}: [expert] push_expert takes the numbers {', '.join(_EXPERT_KEYS)}")
    fields_ = task.observation_fields()
    if task.spec.proprio_dim != 11 or task.spec.action_dim != 4 or not {"cube_pose", "goal_position"} <= set(fields_):
        raise ValueError(f"{file}: [expert] push_expert needs 4 joint targets, proprio [q, qd, tip] (11) and the "
                         "fields cube_pose and goal_position")  # fmt: skip
    s = {k: float(settings[k]) for k in _EXPERT_KEYS}
    if not s["band"] >= 0.5:
        raise ValueError(f"{file}: [expert] band = {s['band']!r}: expected a number >= 0.5 (cube half sizes)")
    geometry = SimpleNamespace(**{k: s[k] for k in _EXPERT_KEYS[:4]})
    extra = [0.8 * s["link_radius"], *(s[k] for k in _EXPERT_KEYS[5:])]  # the tip's radius, then lookahead .. max_step
    return arm_expert(world, geometry, kernels.expert_kernel, extra, ("proprio", "cube_pose", "goal_position"))
