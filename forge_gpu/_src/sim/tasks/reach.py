"""reach: move the tip of a 4-joint arm onto a red target, observed by an RGB-D camera.

The arm on its table is ``tasks/arm.py``'s: a yaw joint about +z, then shoulder, elbow and wrist joints
about the link's +y, each tracking a joint position target with a PD drive. The target is a red sphere
placed at random in front of the arm at each reset; it is visual only. One fixed camera per world looks at
the workspace; all worlds are rendered in one call of Newton's ``SensorCamera`` after every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import newton
import warp as wp

from forge_gpu._src.sim.config import bounded
from forge_gpu._src.sim.randomize import PHYSICS, Parameter
from forge_gpu._src.sim.tasks.arm import (
    CAMERA_VISUALS,
    TABLE_COLOR,
    ArmParams,
    ArmTask,
    add_arm,
    add_table,
    arm_expert,
    check_arm,
    moves_camera,
    per_world,
)
from forge_gpu._src.sim.tasks.base import TaskBinding, TaskSpec
from forge_gpu._src.sim.world import World
from forge_gpu.kernels import arm as arm_kernels
from forge_gpu.kernels import reach as kernels

TARGET_COLOR = (1.0, 0.0, 0.0)

VISUALS = {
    "target_color": Parameter((3,), TARGET_COLOR, "the target sphere's colour (linear RGB in [0, 1])"),
    "table_color": Parameter((3,), TABLE_COLOR, "the table top's colour (linear RGB in [0, 1])"),
    **CAMERA_VISUALS,
}
"""reach's own randomizable parameters (applied by ``kernels.reach.apply_params_kernel``). Newton's
``SensorCamera`` shares its lights and its rays (hence the field of view) across worlds, so neither can vary
per world."""


@dataclass(frozen=True, kw_only=True)
class ReachParams(ArmParams):
    """Arm model and drives (:class:`ArmParams`), start and target distributions, success, reward, camera."""

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


def _check_params(p: ReachParams) -> None:
    for name in ("target_radius", "target_height"):
        if len(getattr(p, name)) != 2:
            raise ValueError(f"params.{name} = {getattr(p, name)!r}: expected 2 values")
    for name in ("target_radius", "target_height"):
        lo, hi = getattr(p, name)
        if lo > hi:
            raise ValueError(f"params.{name} = {getattr(p, name)!r}: expected [min, max] with min <= max")


class ReachTask(ArmTask):
    scene_kind = "reach_arm"
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
        _check_params(self.params)
        check_arm(config, "reach", self.spec.action_dim)

    def randomizable(self) -> dict[str, Parameter]:
        """Physics: mass_scale and the joint drives' gains and armature; visuals: :data:`VISUALS`."""
        physics = ("mass_scale", "joint_stiffness_scale", "joint_damping_scale", "joint_armature_scale")
        return {**{name: PHYSICS[name] for name in physics}, **VISUALS}

    def build_world(self, builder) -> None:
        p = self.params
        add_table(builder, p)
        # The target's place is drawn at every reset (``reset_kernel`` writes its shape transform).
        builder.add_shape_sphere(
            -1,
            xform=wp.transform((0.3, 0.0, 0.15), wp.quat_identity()),
            radius=p.target_radius_m,
            cfg=newton.ModelBuilder.ShapeConfig(density=0.0),
            color=TARGET_COLOR,
            label="target",
        )
        add_arm(builder, p, self.config)
        for shape in range(builder.shape_count):
            builder.shape_flags[shape] &= ~newton.ShapeFlags.COLLIDE_SHAPES

    def bind(self, world: World) -> TaskBinding:
        """The arm's buffers and the camera; contributes ``rgb``, ``depth`` and the camera's calibration (neither
        when ``params.render`` is false)."""
        model, n = world.model, world.num_envs
        self.target_shape = per_world(model.shape_label, "target", n, world.device)
        self.table_shape = per_world(model.shape_label, "table", n, world.device)
        self.target_pos = wp.zeros(n, dtype=wp.vec3, device=world.device)
        """Target centre per world [m], shape (N,)."""
        target_state = wp.array(ptr=self.target_pos.ptr, dtype=float, shape=(n, 3), device=world.device)
        self._target_state = target_state  # a float32 [N, 3] view of target_pos: the task's recorded state
        calibration = self.bind_arm(world)
        return TaskBinding(
            fields=dict(self.images),
            calibration=calibration,
            state={"target_pos": self._target_state},
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
                world.draw_episode,
                world.draw_env,
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
                moves_camera(self.config),
                world.reset_mask,
                *(values[name].reshape((world.num_envs, -1)) for name in VISUALS),
            ],
            outputs=[world.model.shape_color, self.camera_transforms],
            device=world.device,
        )

    def restore_state(self, world: World) -> None:
        wp.launch(
            arm_kernels.place_marker_kernel,
            dim=world.num_envs,
            inputs=[self.target_shape, wp.vec3(0.0, 0.0, 0.0), world.reset_mask, self.target_pos],
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
        extra = [p.expert_max_step]
        return arm_expert(world, p, kernels.expert_kernel, extra, ("proprio",))
