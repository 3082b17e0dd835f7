"""The 4-joint arm on its table, for the arm task files (``configs/reach.toml``, ``configs/push.toml``): its
parameters (:class:`ArmParams`), the table, pedestal and arm (:func:`add_table`, :func:`add_arm`), the reach
scene's model builder (:func:`arm_scene`) and the scripted IK experts' launcher (:func:`arm_expert`,
:func:`reach_expert`).

The arm stands on a table: a yaw joint about +z, then shoulder, elbow and wrist joints about the link's +y,
each tracking a joint position target with a PD drive (actions are the targets).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import SimpleNamespace

import newton
import numpy as np
import warp as wp

from forge_gpu._src.core.checks import bounded, check_range, plain_number

IMAGE_SIZES = (32, 64, 128, 256)
"""Square image sizes [px] the arm tasks accept. ``SensorCamera`` renders any size; the tasks keep to these
tested ones so that recorded datasets come in a few known shapes."""

TABLE_COLOR = (0.75, 0.75, 0.72)


@dataclass(frozen=True, kw_only=True)
class ArmParams:
    """Arm model and drives, start distribution, camera."""

    shoulder_height: float = field(default=0.2, metadata=bounded(0.05, 1.0))
    """Height of the shoulder joint above the table top [m]."""
    upper_arm_length: float = field(default=0.3, metadata=bounded(0.05, 1.0))
    """Shoulder-to-elbow length [m]."""
    forearm_length: float = field(default=0.25, metadata=bounded(0.05, 1.0))
    """Elbow-to-wrist length [m]."""
    hand_length: float = field(default=0.1, metadata=bounded(0.02, 0.5))
    """Wrist-to-tip length [m]; the end effector is the hand's tip."""
    link_radius: float = field(default=0.025, metadata=bounded(0.005, 0.1))
    """Capsule radius of the links [m]."""
    link_density: float = field(default=500.0, metadata=bounded(1.0, 1e4))
    """Density of the links [kg/m^3]."""
    joint_stiffness: float = field(default=400.0, metadata=bounded(0.0, 1e5))
    """Position gain of the joint drives [N m/rad]."""
    joint_damping: float = field(default=40.0, metadata=bounded(0.0, 1e4))
    """Velocity gain of the joint drives [N m s/rad]."""
    joint_armature: float = field(default=0.1, metadata=bounded(0.0, 10.0))
    """Rotor inertia added about each joint axis [kg m^2]."""
    home_q: tuple[float, ...] = field(default=(0.0, 0.3, 1.2, 1.0), metadata=bounded(-3.0, 3.0))
    """Start pose [rad], shape (4,)."""
    reset_noise: float = field(default=0.1, metadata=bounded(0.0, 1.0))
    """Start joint angles drawn uniformly in home_q +- this [rad]."""
    render: bool = True
    """Render ``rgb`` and ``depth`` after every step; when false the task has no camera and the env no image
    fields (a state-only run stores no frames; ``replay --from state`` with ``params.render=true`` adds them)."""
    image_size: int = field(default=64, metadata=bounded(choices=IMAGE_SIZES))
    """Image width and height [px]."""
    camera_position: tuple[float, ...] = field(default=(0.45, 0.8, 0.6), metadata=bounded(-10.0, 10.0))
    """Camera centre in the world frame [m], shape (3,)."""
    camera_look_at: tuple[float, ...] = field(default=(0.2, 0.0, 0.2), metadata=bounded(-10.0, 10.0))
    """The point the optical axis passes through [m], shape (3,); the image's up is toward +z."""
    camera_fov: float = field(default=45.0, metadata=bounded(5.0, 120.0))
    """Vertical field of view [deg]."""


def joint_limits(config) -> tuple[np.ndarray, np.ndarray]:
    """Joint limits [rad]: the action bounds times the action scale (actions are joint targets)."""
    a = config.action
    low, high = np.asarray(a.low) * np.asarray(a.scale), np.asarray(a.high) * np.asarray(a.scale)
    return np.minimum(low, high), np.maximum(low, high)


def add_table(builder, p: ArmParams, *, cfg=None) -> tuple[int, int]:
    """The table (its top at z = 0) and the arm's pedestal, static; returns their shape indices."""
    static = cfg if cfg is not None else newton.ModelBuilder.ShapeConfig(density=0.0)
    table = builder.add_shape_box(
        -1,
        xform=wp.transform((0.2, 0.0, -0.02), wp.quat_identity()),
        hx=0.5,
        hy=0.6,
        hz=0.02,
        cfg=static,
        color=TABLE_COLOR,
        label="table",
    )
    pedestal = 0.5 * p.shoulder_height
    base = builder.add_shape_box(
        -1,
        xform=wp.transform((0.0, 0.0, 0.5 * pedestal), wp.quat_identity()),
        hx=0.06,
        hy=0.06,
        hz=0.5 * pedestal,
        cfg=static,
        color=(0.3, 0.3, 0.33),
        label="pedestal",
    )
    return table, base


def add_arm(builder, p: ArmParams, config, limits=None) -> tuple[int, int]:
    """The arm on the pedestal (:func:`add_table`): four links, their joints and drives, one articulation; the
    joint limits are ``limits`` (lower, upper) [rad] or the config's action bounds times scale. Returns the shape
    indices of the hand's capsule and of the tip's sphere."""
    r = p.link_radius
    link = newton.ModelBuilder.ShapeConfig(density=p.link_density)
    link.collision_filter_parent = True
    pedestal = 0.5 * p.shoulder_height

    def capsule(body, length, radius, color):
        # A link from its joint (local origin) to ``length`` along local +z.
        return builder.add_shape_capsule(
            body,
            xform=wp.transform((0.0, 0.0, 0.5 * length), wp.quat_identity()),
            radius=radius,
            half_height=max(0.5 * length - radius, 1e-3),
            cfg=link,
            color=color,
        )

    drive = {
        "target_ke": p.joint_stiffness,
        "target_kd": p.joint_damping,
        "armature": p.joint_armature,
        "actuator_mode": newton.JointTargetMode.POSITION,
    }
    low, high = joint_limits(config) if limits is None else limits
    column = builder.add_link(label="column")
    capsule(column, p.shoulder_height - pedestal, 1.4 * r, (0.25, 0.35, 0.6))
    upper = builder.add_link(label="upper_arm")
    capsule(upper, p.upper_arm_length, r, (0.35, 0.5, 0.8))
    fore = builder.add_link(label="forearm")
    capsule(fore, p.forearm_length, 0.9 * r, (0.35, 0.5, 0.8))
    hand = builder.add_link(label="hand")
    hand_shape = capsule(hand, p.hand_length, 0.6 * r, (0.85, 0.85, 0.85))
    tip_shape = builder.add_shape_sphere(
        hand,
        xform=wp.transform((0.0, 0.0, p.hand_length), wp.quat_identity()),
        radius=0.8 * r,
        cfg=link,
        color=(1.0, 0.85, 0.1),
        label="tip",
    )
    joints = [
        builder.add_joint_revolute(
            -1,
            column,
            parent_xform=wp.transform((0.0, 0.0, pedestal), wp.quat_identity()),
            axis=newton.Axis.Z,
            limit_lower=float(low[0]),
            limit_upper=float(high[0]),
            label="yaw",
            **drive,
        ),
    ]
    chain = [
        (column, upper, p.shoulder_height - pedestal, "shoulder"),
        (upper, fore, p.upper_arm_length, "elbow"),
        (fore, hand, p.forearm_length, "wrist"),
    ]
    for j, (parent, child, offset, name) in enumerate(chain, start=1):
        joints.append(
            builder.add_joint_revolute(
                parent,
                child,
                parent_xform=wp.transform((0.0, 0.0, offset), wp.quat_identity()),
                axis=newton.Axis.Y,
                limit_lower=float(low[j]),
                limit_upper=float(high[j]),
                label=name,
                **drive,
            )
        )
    builder.add_articulation(joints)
    return hand_shape, tip_shape


def arm_expert(world, p: ArmParams, kernel, extra: list, observed: tuple[str, ...]):
    """A scripted policy that launches ``kernel`` over the worlds with the arm's geometry (shoulder height, the
    three link lengths), the ``extra`` values, the action bounds and scale, then the ``observed`` fields."""
    action = wp.zeros((world.num_envs, 4), dtype=float, device=world.device)
    geometry = [p.shoulder_height, p.upper_arm_length, p.forearm_length, p.hand_length]

    def act(observation: dict) -> wp.array:
        wp.launch(
            kernel,
            dim=world.num_envs,
            inputs=[*geometry, *extra, world.action_low, world.action_high, world.action_scale]
            + [observation[name] for name in observed],
            outputs=[action],
            device=world.device,
        )
        return action

    return act


_SCENE_ARGS = (
    "shoulder_height", "upper_arm_length", "forearm_length", "hand_length", "link_radius", "link_density",
    "joint_stiffness", "joint_damping", "joint_armature",
)  # fmt: skip


def arm_scene(builder, *, source: str = "", joint_lower, joint_upper, target_radius: float = 0.0, **sizes) -> None:
    """A task file's ``[model] builder`` (``forge_gpu.sim:arm_scene``): the table, the pedestal, a red target
    sphere of ``target_radius`` [m] (visual, static, shape ``target``; none for 0) and the 4-joint arm (joints
    ``yaw``, ``shoulder``, ``elbow``, ``wrist``; bodies ``column``, ``upper_arm``, ``forearm``, ``hand``) with its
    position drives; no shape collides. ``sizes``: the :class:`ArmParams` model fields (``shoulder_height``,
    ``upper_arm_length``, ``forearm_length``, ``hand_length`` [m], ``link_radius`` [m], ``link_density``
    [kg/m^3], ``joint_stiffness``, ``joint_damping``, ``joint_armature``); ``joint_lower``, ``joint_upper``: 4
    limits each [rad]."""
    where = f"{source}: model.args"
    if set(sizes) - set(_SCENE_ARGS):
        raise ValueError(f"{where}: unknown {sorted(set(sizes) - set(_SCENE_ARGS))[0]!r}; the arm takes "
                         f"{', '.join(_SCENE_ARGS)}, joint_lower, joint_upper, target_radius")  # fmt: skip
    for name, value in sizes.items():
        meta = next(f.metadata for f in fields(ArmParams) if f.name == name)
        if not plain_number(value):
            raise ValueError(f"{where}.{name} = {value!r}: expected a number")
        check_range(value, meta, f"{where}.{name}")
    for name, value in (("joint_lower", joint_lower), ("joint_upper", joint_upper)):
        if not (isinstance(value, list) and len(value) == 4 and all(isinstance(v, int | float) for v in value)):
            raise ValueError(f"{where}.{name} = {value!r}: expected 4 joint limits [rad]")
    if not isinstance(target_radius, int | float) or not 0.0 <= target_radius <= 0.2:
        raise ValueError(f"{where}.target_radius = {target_radius!r}: allowed range is [0, 0.2] m")
    p = ArmParams(**{name: float(v) for name, v in sizes.items()})
    add_table(builder, p)
    if target_radius > 0:  # its place is the task's target ([targets]: moved at every reset)
        builder.add_shape_sphere(
            -1,
            xform=wp.transform((0.3, 0.0, 0.15), wp.quat_identity()),
            radius=float(target_radius),
            cfg=newton.ModelBuilder.ShapeConfig(density=0.0),
            color=(1.0, 0.0, 0.0),
            label="target",
        )
    limits = (np.asarray(joint_lower, np.float64), np.asarray(joint_upper, np.float64))
    add_arm(builder, p, None, limits=(np.minimum(*limits), np.maximum(*limits)))
    for shape in range(builder.shape_count):
        builder.shape_flags[shape] &= ~newton.ShapeFlags.COLLIDE_SHAPES


def reach_expert(task, world, settings: dict):
    """A task file's ``[expert] factory`` (``forge_gpu.sim:reach_expert``): the arm's analytic IK of the target
    (the hand pointing down onto it), approached at most ``max_step`` [rad] per step from the measured pose.
    ``settings``: ``max_step`` and the arm's ``shoulder_height``, ``upper_arm_length``, ``forearm_length``,
    ``hand_length`` [m]. It reads ``proprio`` as ``[q (4), qd (4), tip (3), target (3)]``."""
    from forge_gpu.kernels import arm as arm_kernels

    keys = ("shoulder_height", "upper_arm_length", "forearm_length", "hand_length", "max_step")
    file = task.config.params.file
    if set(settings) != set(keys) or not all(isinstance(settings[k], int | float) for k in keys):
        raise ValueError(f"{file}: [expert] reach_expert takes the numbers {', '.join(keys)}")
    if task.spec.proprio_dim != 14 or task.spec.action_dim != 4:
        raise ValueError(f"{file}: [expert] reach_expert needs 4 joint targets and proprio [q, qd, tip, target] (14)")
    geometry = SimpleNamespace(**{k: float(settings[k]) for k in keys[:4]})
    return arm_expert(world, geometry, arm_kernels.reach_expert_kernel, [float(settings["max_step"])], ("proprio",))
