"""reach: move the tip of a 4-joint arm onto a red target, observed by an RGB-D camera.

The arm stands on a table: a yaw joint about +z, then shoulder, elbow and wrist joints about the
link's +y, each tracking a joint position target with a PD drive. The target is a red sphere placed
at random in front of the arm at each reset; it is visual only. One fixed camera per world looks at
the workspace; all worlds are rendered in one call of Newton's ``SensorCamera`` after every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import newton
import numpy as np
import warp as wp

from forge_gpu._src.sim.config import bounded
from forge_gpu._src.sim.randomize import PHYSICS, Parameter
from forge_gpu._src.sim.tasks.base import Task, TaskBinding, TaskSpec
from forge_gpu._src.sim.tasks.camera import WorldCameras
from forge_gpu._src.sim.world import World
from forge_gpu.kernels import reach as kernels

IMAGE_SIZES = (32, 64, 128, 256)
"""Square image sizes [px] the task accepts. ``SensorCamera`` renders any size; the task keeps to these
tested ones so that recorded datasets come in a few known shapes."""

_BACKGROUND = 0xFF << 24 | 52 << 16 | 44 << 8 | 40
"""Packed RGBA clear color of pixels that see no surface (dark blue-gray)."""
TABLE_COLOR = (0.75, 0.75, 0.72)
TARGET_COLOR = (1.0, 0.0, 0.0)

VISUALS = {
    "target_color": Parameter((3,), TARGET_COLOR, "the target sphere's colour (linear RGB in [0, 1])"),
    "table_color": Parameter((3,), TABLE_COLOR, "the table top's colour (linear RGB in [0, 1])"),
    "camera_position_offset": Parameter((3,), (0.0, 0.0, 0.0), "added to params.camera_position [m]"),
    "camera_look_at_offset": Parameter((3,), (0.0, 0.0, 0.0), "added to params.camera_look_at [m]"),
}
"""reach's own randomizable parameters (applied by ``kernels.reach.apply_params_kernel``). Newton's
``SensorCamera`` shares its lights and its rays (hence the field of view) across worlds, so neither can vary
per world."""
CAMERA_PARAMS = ("camera_position_offset", "camera_look_at_offset")
"""Packed RGBA clear color of pixels that see no surface (dark blue-gray)."""


@dataclass(frozen=True, kw_only=True)
class ReachParams:
    """Arm model and drives, start and target distributions, success, reward, camera."""

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
    target_yaw_range: float = field(default=1.0, metadata=bounded(0.0, 3.0))
    """Target azimuth drawn uniformly in +-this about +x [rad]."""
    target_radius: tuple[float, ...] = field(default=(0.25, 0.45), metadata=bounded(0.0, 2.0))
    """Target horizontal distance from the arm's axis, [min, max] [m]."""
    target_height: tuple[float, ...] = field(default=(0.05, 0.3), metadata=bounded(0.0, 2.0))
    """Target height above the table top, [min, max] [m]."""
    target_radius_m: float = field(default=0.03, metadata=bounded(0.005, 0.2))
    """Radius of the red target sphere [m]."""
    tolerance: float = field(default=0.02, metadata=bounded(1e-3, 1.0))
    """Success (and termination) when the tip is within this distance of the target centre [m]."""
    success_bonus: float = field(default=1.0, metadata=bounded(0.0, 1e3))
    """Reward added on the successful step."""
    expert_max_step: float = field(default=0.08, metadata=bounded(1e-3, 3.0))
    """The expert moves each joint target at most this far from the measured angle per step [rad]."""
    render: bool = True
    """Render ``rgb`` and ``depth`` after every step; when false they stay zero (for benchmarks)."""
    image_size: int = field(default=64, metadata=bounded(choices=IMAGE_SIZES))
    """Image width and height [px]."""
    camera_position: tuple[float, ...] = field(default=(0.45, 0.8, 0.6), metadata=bounded(-10.0, 10.0))
    """Camera centre in the world frame [m], shape (3,)."""
    camera_look_at: tuple[float, ...] = field(default=(0.2, 0.0, 0.2), metadata=bounded(-10.0, 10.0))
    """The point the optical axis passes through [m], shape (3,); the image's up is toward +z."""
    camera_fov: float = field(default=45.0, metadata=bounded(5.0, 120.0))
    """Vertical field of view [deg]."""


@dataclass(frozen=True, kw_only=True)
class ReachScene:
    """A 4-joint arm on a table, a red target sphere, one fixed pinhole RGB-D camera per world."""

    kind: str = "reach_arm"
    joint_count: int = 4
    link_lengths: tuple[float, ...] = (0.3, 0.25, 0.1)
    shoulder_height: float = 0.2
    image_size: int = 64


def _check_params(p: ReachParams) -> None:
    for name, n in (("home_q", 4), ("target_radius", 2), ("target_height", 2)):
        if len(getattr(p, name)) != n:
            raise ValueError(f"params.{name} = {getattr(p, name)!r}: expected {n} values")
    for name in ("camera_position", "camera_look_at"):
        if len(getattr(p, name)) != 3:
            raise ValueError(f"params.{name} = {getattr(p, name)!r}: expected 3 values [m]")
    for name in ("target_radius", "target_height"):
        lo, hi = getattr(p, name)
        if lo > hi:
            raise ValueError(f"params.{name} = {getattr(p, name)!r}: expected [min, max] with min <= max")
    if np.allclose(p.camera_position, p.camera_look_at):
        raise ValueError("params.camera_position must differ from params.camera_look_at")
    forward = np.subtract(p.camera_look_at, p.camera_position)
    if np.linalg.norm(np.cross(forward, (0.0, 0.0, 1.0))) < 1e-6 * np.linalg.norm(forward):
        raise ValueError("params.camera_position: the camera must not look straight up or down (+z is image up)")


def _joint_limits(config) -> tuple[np.ndarray, np.ndarray]:
    """Joint limits [rad]: the action bounds times the action scale (actions are joint targets)."""
    a = config.action
    low, high = np.asarray(a.low) * np.asarray(a.scale), np.asarray(a.high) * np.asarray(a.scale)
    return np.minimum(low, high), np.maximum(low, high)


class ReachTask(Task):
    spec = TaskSpec(
        id="reach",
        proprio_dim=14,
        action_dim=4,
        has_success=True,
    )
    """The image fields' shapes follow ``params.image_size``: see :meth:`observation_fields`."""
    params_type = ReachParams

    def __init__(self, config):
        super().__init__(config)
        p = self.params
        _check_params(p)
        if len(config.action.low) != self.spec.action_dim:
            raise ValueError(
                f"action.low = {list(config.action.low)}: reach has {self.spec.action_dim} joints; "
                "give one bound (and scale) per joint"
            )
        lo, hi = _joint_limits(config)
        home = np.asarray(p.home_q)
        if not ((lo <= home - p.reset_noise) & (home + p.reset_noise <= hi)).all():
            raise ValueError(
                f"params.home_q {p.home_q} +- reset_noise {p.reset_noise} must lie within the joint limits "
                f"(action bounds times scale) {lo.tolist()} .. {hi.tolist()}"
            )

    def randomizable(self) -> dict[str, Parameter]:
        """Physics: mass_scale and the joint drives' gains and armature; visuals: :data:`VISUALS`."""
        physics = ("mass_scale", "joint_stiffness_scale", "joint_damping_scale", "joint_armature_scale")
        return {**{name: PHYSICS[name] for name in physics}, **VISUALS}

    def observation_fields(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """``rgb`` uint8 [S, S, 3] and ``depth`` float32 [S, S] [m], S = ``params.image_size``."""
        s = self.params.image_size
        return {"rgb": ((s, s, 3), "uint8"), "depth": ((s, s), "float32")}

    def make_scene(self) -> ReachScene:
        p = self.params
        return ReachScene(
            link_lengths=(p.upper_arm_length, p.forearm_length, p.hand_length),
            shoulder_height=p.shoulder_height,
            image_size=p.image_size,
        )

    def build_world(self, builder) -> None:
        p = self.params
        r = p.link_radius
        static = newton.ModelBuilder.ShapeConfig(density=0.0)
        link = newton.ModelBuilder.ShapeConfig(density=p.link_density)
        link.collision_filter_parent = True

        def capsule(body, length, radius, color):
            # A link from its joint (local origin) to ``length`` along local +z.
            builder.add_shape_capsule(
                body,
                xform=wp.transform((0.0, 0.0, 0.5 * length), wp.quat_identity()),
                radius=radius,
                half_height=max(0.5 * length - radius, 1e-3),
                cfg=link,
                color=color,
            )

        builder.add_shape_box(
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
        builder.add_shape_box(
            -1,
            xform=wp.transform((0.0, 0.0, 0.5 * pedestal), wp.quat_identity()),
            hx=0.06,
            hy=0.06,
            hz=0.5 * pedestal,
            cfg=static,
            color=(0.3, 0.3, 0.33),
            label="pedestal",
        )
        # The target's place is drawn at every reset (``reset_kernel`` writes its shape transform).
        builder.add_shape_sphere(
            -1,
            xform=wp.transform((0.3, 0.0, 0.15), wp.quat_identity()),
            radius=p.target_radius_m,
            cfg=static,
            color=TARGET_COLOR,
            label="target",
        )

        drive = {
            "target_ke": p.joint_stiffness,
            "target_kd": p.joint_damping,
            "armature": p.joint_armature,
            "actuator_mode": newton.JointTargetMode.POSITION,
        }
        low, high = _joint_limits(self.config)
        column = builder.add_link(label="column")
        capsule(column, p.shoulder_height - pedestal, 1.4 * r, (0.25, 0.35, 0.6))
        upper = builder.add_link(label="upper_arm")
        capsule(upper, p.upper_arm_length, r, (0.35, 0.5, 0.8))
        fore = builder.add_link(label="forearm")
        capsule(fore, p.forearm_length, 0.9 * r, (0.35, 0.5, 0.8))
        hand = builder.add_link(label="hand")
        capsule(hand, p.hand_length, 0.6 * r, (0.85, 0.85, 0.85))
        builder.add_shape_sphere(
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
        for shape in range(builder.shape_count):
            builder.shape_flags[shape] &= ~newton.ShapeFlags.COLLIDE_SHAPES

    def bind(self, world: World) -> TaskBinding:
        """The arm's buffers and the camera; contributes ``rgb``, ``depth`` and the camera's calibration."""
        p, model, n = self.params, world.model, world.num_envs
        size = p.image_size
        labels = np.array([label.rsplit("/", 1)[-1] for label in model.shape_label])
        target_shapes = np.flatnonzero(labels == "target")
        table_shapes = np.flatnonzero(labels == "table")
        body_labels = np.array([label.rsplit("/", 1)[-1] for label in model.body_label])
        hands = np.flatnonzero(body_labels == "hand")
        # replicate() adds the worlds in order, so the i-th match belongs to world i.
        assert len(target_shapes) == n and len(hands) == n and len(table_shapes) == n
        self.target_shape = wp.array(target_shapes.astype(np.int32), device=world.device)
        self.table_shape = wp.array(table_shapes.astype(np.int32), device=world.device)
        self.ee_body = wp.array(hands.astype(np.int32), device=world.device)
        self.target_pos = wp.zeros(n, dtype=wp.vec3, device=world.device)
        """Target centre per world [m], shape (N,)."""
        target_state = wp.array(ptr=self.target_pos.ptr, dtype=float, shape=(n, 3), device=world.device)
        self._target_state = target_state  # a float32 [N, 3] view of target_pos: the task's recorded state
        self.home_q = wp.array(np.asarray(p.home_q, np.float32), device=world.device)
        self.joint_target_q = world.control.joint_target_q.reshape((n, -1))

        randomized = any(r.name in CAMERA_PARAMS for r in self.config.randomize)
        self.camera = WorldCameras(
            model, n, size, p.camera_fov, p.camera_position, p.camera_look_at, background=_BACKGROUND
        )
        calibration = {"cameras": {"front": self.camera.calibration(randomized=randomized)}}
        if randomized:
            calibration["cameras"]["front"]["randomized"] = (
                "camera_to_world of an episode: the camera at params.camera_position + its camera_position_offset "
                "looking at params.camera_look_at + its camera_look_at_offset"
            )
        self.rgb, self.depth = self.camera.rgb, self.camera.depth
        return TaskBinding(
            fields={"rgb": self.rgb, "depth": self.depth},
            calibration=calibration,
            state={"target_pos": self._target_state},
        )

    def apply_action(self, world: World) -> None:
        wp.launch(
            kernels.apply_action_kernel,
            dim=world.executed_action.shape,
            inputs=[world.action_scale, world.executed_action],
            outputs=[self.joint_target_q],
            device=world.device,
        )

    def reset_worlds(self, world: World) -> None:
        p = self.params
        wp.launch(
            kernels.reset_kernel,
            dim=world.num_envs,
            inputs=[
                world.seed,
                self.home_q,
                p.reset_noise,
                p.target_yaw_range,
                wp.vec2(*p.target_radius),
                wp.vec2(*p.target_height),
                self.target_shape,
                world.reset_mask,
                world.episode_id,
            ],
            outputs=[world.joint_q, world.joint_qd, self.target_pos, world.model.shape_transform],
            device=world.device,
        )

    def apply_params(self, world: World) -> None:
        p, values = self.params, world.params
        wp.launch(
            kernels.apply_params_kernel,
            dim=world.num_envs,
            inputs=[
                self.target_shape,
                self.table_shape,
                wp.vec3(*p.camera_position),
                wp.vec3(*p.camera_look_at),
                int(any(r.name in CAMERA_PARAMS for r in self.config.randomize)),
                world.reset_mask,
                *(values[name].reshape((world.num_envs, -1)) for name in VISUALS),
            ],
            outputs=[world.model.shape_color, self.camera.transforms],
            device=world.device,
        )

    def restore_state(self, world: World) -> None:
        wp.launch(
            kernels.place_target_kernel,
            dim=world.num_envs,
            inputs=[self.target_shape, world.reset_mask, self.target_pos],
            outputs=[world.model.shape_transform],
            device=world.device,
        )

    def observe(self, world: World) -> None:
        p = self.params
        wp.launch(
            kernels.observe_kernel,
            dim=world.num_envs,
            inputs=[
                self.ee_body,
                wp.vec3(0.0, 0.0, p.hand_length),
                p.tolerance,
                p.success_bonus,
                world.joint_q,
                world.joint_qd,
                world.state_0.body_q,
                self.target_pos,
            ],
            outputs=[world.proprio, world.task_reward, world.task_terminated],
            device=world.device,
        )
        if p.render:
            self.render(world)

    def render(self, world: World) -> None:
        """Render every world's camera into ``rgb`` and ``depth`` with one ``SensorCamera`` call."""
        self.camera.render(world)

    def expert(self, world: World):
        p = self.params
        action = wp.zeros((world.num_envs, self.spec.action_dim), dtype=float, device=world.device)

        def act(observation: dict) -> wp.array:
            wp.launch(
                kernels.expert_kernel,
                dim=world.num_envs,
                inputs=[
                    p.shoulder_height,
                    p.upper_arm_length,
                    p.forearm_length,
                    p.hand_length,
                    p.expert_max_step,
                    world.action_low,
                    world.action_high,
                    world.action_scale,
                    observation["proprio"],
                ],
                outputs=[action],
                device=world.device,
            )
            return action

        return act
