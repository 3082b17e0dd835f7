"""push: the arm pushes a cube across the table into a goal square marked on the table top, seen by an RGB-D camera.

The arm, its table and camera are ``tasks/arm.py``'s (as in ``reach``); the hand points down and its capsule and
tip sphere are the pusher. The cube rides a free joint, so its pose and velocity are part of ``joint_q`` and
``joint_qd`` (coordinates 4..10 and dofs 4..9 of each world), recorded and restored with them; the goal marker
(a flat square, visual only) is the task's own state (``goal_pos``). Contacts: the cube touches the table and
the pusher (MuJoCo's solver; the table and the pusher do not touch each other, so a sagging tip does not drag on
the table). MuJoCo takes the larger of two touching shapes' friction coefficients, so the table and the pusher
keep a low one (``params.table_friction``, ``params.pusher_friction``) and the cube's own is what acts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import newton
import numpy as np
import warp as wp

from forge_gpu._src.sim.config import bounded
from forge_gpu._src.sim.randomize import PHYSICS, Parameter
from forge_gpu._src.sim.tasks.arm import (
    CAMERA_VISUALS,
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
from forge_gpu.kernels import push as kernels

PALETTE = {
    "red": (0.85, 0.1, 0.08),
    "green": (0.1, 0.65, 0.2),
    "blue": (0.12, 0.25, 0.9),
    "yellow": (0.95, 0.8, 0.1),
}
"""The named colours (linear RGB) of the cube and the goal; ``cube_color`` and ``goal_color`` are indices into it."""
COLOR_NAMES = tuple(PALETTE)
SIDES = (-0.07, 0.07), ("on the right", "in the middle", "on the left")
"""The instruction's side of the goal: its y [m] binned at these edges, named as seen from the arm (along +x)."""
CUBE_PHYSICS = ("cube_size", "cube_mass", "cube_friction")

# Collision groups (Newton: a positive group touches itself and the negative ones; a negative one touches all).
_TABLE_GROUP, _PUSHER_GROUP, _CUBE_GROUP = 1, 2, -1


@dataclass(frozen=True, kw_only=True)
class PushParams(ArmParams):
    """Arm model and drives (:class:`ArmParams`), the cube and the goal, success, reward, the expert, camera."""

    camera_position: tuple[float, ...] = field(default=(0.33, 0.5, 0.5), metadata=bounded(-10.0, 10.0))
    """Camera centre in the world frame [m], shape (3,)."""
    camera_look_at: tuple[float, ...] = field(default=(0.33, 0.0, 0.0), metadata=bounded(-10.0, 10.0))
    """The point the optical axis passes through [m], shape (3,); the image's up is toward +z."""
    cube_size: float = field(default=0.05, metadata=bounded(0.01, 0.2))
    """The cube's edge [m] (``randomize.cube_size`` draws it per episode)."""
    cube_mass: float = field(default=0.2, metadata=bounded(1e-3, 100.0))
    """The cube's mass [kg]; its inertia is a solid cube's."""
    cube_friction: float = field(default=0.5, metadata=bounded(0.0, 5.0))
    """The cube's friction coefficient (against the table and the pusher)."""
    table_friction: float = field(default=0.2, metadata=bounded(0.0, 5.0))
    """The table's friction coefficient; MuJoCo uses the larger of the two, so keep it at most the cube's."""
    pusher_friction: float = field(default=0.2, metadata=bounded(0.0, 5.0))
    """The hand's and tip's friction coefficient (likewise)."""
    cube_position: tuple[float, ...] = field(default=(0.3, 0.0), metadata=bounded(-1.0, 1.0))
    """The cube's start centre x, y on the table [m] (``randomize.cube_position``)."""
    cube_yaw: float = field(default=0.0, metadata=bounded(-3.15, 3.15))
    """The cube's start yaw about +z [rad] (``randomize.cube_yaw``)."""
    goal_position: tuple[float, ...] = field(default=(0.43, 0.0), metadata=bounded(-1.0, 1.0))
    """The goal's centre x, y on the table top [m] (``randomize.goal_position``)."""
    cube_color: str = field(default="red", metadata=bounded(choices=COLOR_NAMES))
    """The cube's colour, a name of :data:`PALETTE` (``randomize.cube_color`` draws an index)."""
    goal_color: str = field(default="green", metadata=bounded(choices=COLOR_NAMES))
    """The goal square's colour (likewise); it must differ from the cube's."""
    tolerance: float = field(default=0.03, metadata=bounded(1e-3, 1.0))
    """Success (and termination) when the cube's centre is within this distance of the goal on the table plane
    [m]; the goal square's half side is this too."""
    tip_weight: float = field(default=0.5, metadata=bounded(0.0, 1e3))
    """Reward weight of the tip's distance to the cube's centre [1/m]."""
    goal_weight: float = field(default=1.0, metadata=bounded(0.0, 1e3))
    """Reward weight of the cube's distance to the goal on the table plane [1/m]."""
    success_bonus: float = field(default=1.0, metadata=bounded(0.0, 1e3))
    """Reward added on the successful step."""
    expert_lookahead: float = field(default=0.04, metadata=bounded(1e-4, 0.5))
    """The expert's tip target is at most this far from the measured tip [m] (the drives lag behind it)."""
    expert_push_lookahead: float = field(default=0.03, metadata=bounded(1e-4, 0.5))
    """... and this far ahead along the line while pushing [m]."""
    expert_clearance: float = field(default=0.03, metadata=bounded(0.0, 0.5))
    """The expert flies this high above the cube's top [m]."""
    expert_margin: float = field(default=0.02, metadata=bounded(0.0, 0.5))
    """The expert's approach point is this far behind the cube's corners [m]."""
    expert_max_step: float = field(default=0.15, metadata=bounded(1e-3, 3.0))
    """The expert moves each joint target at most this far from the measured angle per step [rad]."""


class PushTask(ArmTask):
    scene_kind = "push_arm"
    spec = TaskSpec(
        id="push",
        proprio_dim=11,
        action_dim=4,
        extra_fields={
            "cube_pose": ((7,), "float32"),
            "cube_velocity": ((6,), "float32"),
            "goal_position": ((3,), "float32"),
        },
        has_contacts=True,
        has_success=True,
        environment_state=("cube_pose", "cube_velocity", "goal_position"),
    )
    """``rgb`` and ``depth`` follow ``params.image_size``: see :meth:`observation_fields`."""
    params_type = PushParams

    def __init__(self, config):
        super().__init__(config)
        p = self.params
        check_arm(config, "push", self.spec.action_dim)
        for name in ("cube_position", "goal_position"):
            if len(getattr(p, name)) != 2:
                raise ValueError(f"params.{name} = {getattr(p, name)!r}: expected 2 values (x, y) [m]")
        randomized = {r.name for r in config.randomize}
        if p.cube_color == p.goal_color and not randomized & {"cube_color", "goal_color"}:
            raise ValueError(
                f"params.cube_color and params.goal_color are both {p.cube_color!r}: the cube and the goal must differ"
            )

    def randomizable(self) -> dict[str, Parameter]:
        """Physics: the joint drives' gains and armature, the cube's edge, mass and friction; the start pose of the
        cube and the goal's place; visuals: the cube's and the goal's colours (palette indices) and the camera."""
        p, inertial, shape = self.params, "BODY_INERTIAL_PROPERTIES", "SHAPE_PROPERTIES"
        physics = ("joint_stiffness_scale", "joint_damping_scale", "joint_armature_scale")
        own = {
            "cube_size": Parameter((), (p.cube_size,), "the cube's edge [m]", notify=(shape, inertial)),
            "cube_mass": Parameter((), (p.cube_mass,), "the cube's mass [kg]", notify=(inertial,)),
            "cube_friction": Parameter((), (p.cube_friction,), "the cube's friction coefficient", notify=(shape,)),
            "cube_position": Parameter((2,), p.cube_position, "the cube's start centre x, y [m]"),
            "cube_yaw": Parameter((), (p.cube_yaw,), "the cube's start yaw about +z [rad]"),
            "goal_position": Parameter((2,), p.goal_position, "the goal's centre x, y on the table top [m]"),
            "cube_color": Parameter(
                (), (COLOR_NAMES.index(p.cube_color),), "the cube's colour (palette index)", names=COLOR_NAMES
            ),
            "goal_color": Parameter(
                (), (COLOR_NAMES.index(p.goal_color),), "the goal square's colour (palette index)", names=COLOR_NAMES
            ),
        }
        return {**{name: PHYSICS[name] for name in physics}, **own, **CAMERA_VISUALS}

    def instruction_template(self) -> dict | None:
        """Each episode's instruction from its drawn colours and goal side (the randomized ones; the fixed ones are
        written out), e.g. "push the red cube to the green square on the left"; None when none is randomized."""
        p, randomized = self.params, {r.name for r in self.config.randomize}
        slots, names = {}, list(COLOR_NAMES)
        cube, goal = p.cube_color, p.goal_color
        if "cube_color" in randomized:
            cube, slots["cube"] = "{cube}", {"param": "cube_color", "names": names}
        if "goal_color" in randomized:
            goal, slots["goal"] = "{goal}", {"param": "goal_color", "names": names}
        text = f"push the {cube} cube to the {goal} square"
        if "goal_position" in randomized:
            edges, sides = SIDES
            text += " {side}"
            slots["side"] = {"param": "goal_position", "component": 1, "edges": list(edges), "names": list(sides)}
        return {"text": text, "slots": slots} if slots else None

    def build_world(self, builder) -> None:
        p = self.params
        table_cfg = newton.ModelBuilder.ShapeConfig(density=0.0, mu=p.table_friction, collision_group=_TABLE_GROUP)
        colliding = set(add_table(builder, p, cfg=table_cfg))
        half = 0.5 * p.cube_size
        builder.add_shape_box(
            -1,
            xform=wp.transform((*p.goal_position, 0.5 * float(kernels.GOAL_THICKNESS)), wp.quat_identity()),
            hx=p.tolerance,
            hy=p.tolerance,
            hz=0.5 * float(kernels.GOAL_THICKNESS),
            cfg=newton.ModelBuilder.ShapeConfig(density=0.0, collision_group=0),
            color=PALETTE[p.goal_color],
            label="goal",
        )
        pusher = add_arm(builder, p, self.config)
        for shape in pusher:
            builder.shape_material_mu[shape] = p.pusher_friction
            builder.shape_collision_group[shape] = _PUSHER_GROUP
        colliding |= set(pusher)
        moment = p.cube_mass * p.cube_size**2 / 6.0
        cube = builder.add_body(
            xform=wp.transform((*p.cube_position, half), wp.quat_identity()),
            mass=p.cube_mass,
            inertia=wp.mat33(np.eye(3) * moment),
            lock_inertia=True,
            label="cube",
        )
        cube_cfg = newton.ModelBuilder.ShapeConfig(density=0.0, mu=p.cube_friction, collision_group=_CUBE_GROUP)
        colliding.add(
            builder.add_shape_box(
                cube, hx=half, hy=half, hz=half, cfg=cube_cfg, color=PALETTE[p.cube_color], label="cube_box"
            )
        )
        for shape in range(builder.shape_count):
            if shape not in colliding:
                builder.shape_flags[shape] &= ~newton.ShapeFlags.COLLIDE_SHAPES

    def bind(self, world: World) -> TaskBinding:
        """The arm's, the cube's and the goal's buffers and the camera; contributes the cube and goal fields,
        ``rgb``, ``depth``, the camera's calibration and the goal's state."""
        model, n, device = world.model, world.num_envs, world.device
        self.goal_shape = per_world(model.shape_label, "goal", n, device)
        self.cube_body = per_world(model.body_label, "cube", n, device)
        self.cube_shape = per_world(model.shape_label, "cube_box", n, device)
        self.palette = wp.array(np.asarray(list(PALETTE.values()), np.float32), dtype=wp.vec3, device=device)
        self.goal_pos = wp.zeros(n, dtype=wp.vec3, device=device)
        """Goal centre per world on the table top [m], shape (N,)."""
        self._goal_state = wp.array(ptr=self.goal_pos.ptr, dtype=float, shape=(n, 3), device=device)
        shapes = {name: shape for name, (shape, _) in self.spec.extra_fields.items()}
        self.fields = {name: wp.zeros((n, *shape), dtype=float, device=device) for name, shape in shapes.items()}
        calibration = self.bind_arm(world)
        return TaskBinding(
            fields={**self.fields, **self.images},
            calibration=calibration,
            state={"goal_pos": self._goal_state},
        )

    def reset_worlds(self, world: World) -> None:
        p, values = self.params, world.params
        wp.launch(
            kernels.reset_kernel,
            dim=world.num_envs,
            inputs=[
                world.seed,
                self.home_q,
                p.reset_noise,
                self.goal_shape,
                world.reset_mask,
                world.draw_episode,
                world.draw_env,
                values["cube_position"],
                values["cube_yaw"],
                values["cube_size"],
                values["goal_position"],
            ],
            outputs=[world.joint_q, world.joint_qd, self.goal_pos, world.model.shape_transform],
            device=world.device,
        )

    def apply_params(self, world: World) -> None:
        p, values, model = self.params, world.params, world.model
        randomized = {r.name for r in self.config.randomize}
        resolve = 1 if "goal_color" in randomized else 2 if "cube_color" in randomized else 0
        wp.launch(
            kernels.apply_params_kernel,
            dim=world.num_envs,
            inputs=[
                self.cube_shape,
                self.cube_body,
                self.goal_shape,
                self.palette,
                int(bool(randomized & set(CUBE_PHYSICS))),
                resolve,
                wp.vec3(*p.camera_position),
                wp.vec3(*p.camera_look_at),
                moves_camera(self.config),
                world.reset_mask,
                *(values[name] for name in CUBE_PHYSICS),
                values["camera_position_offset"],
                values["camera_look_at_offset"],
                values["cube_color"],
                values["goal_color"],
            ],
            outputs=[
                model.shape_scale,
                model.shape_material_mu,
                model.body_mass,
                model.body_inv_mass,
                model.body_inertia,
                model.body_inv_inertia,
                model.shape_color,
                self.camera_transforms,
            ],
            device=world.device,
        )

    def restore_state(self, world: World) -> None:
        wp.launch(
            arm_kernels.place_marker_kernel,
            dim=world.num_envs,
            inputs=[self.goal_shape, wp.vec3(0.0, 0.0, 0.5 * kernels.GOAL_THICKNESS), world.reset_mask, self.goal_pos],
            outputs=[world.model.shape_transform],
            device=world.device,
        )

    def observe(self, world: World) -> None:
        p, f = self.params, self.fields
        wp.launch(
            kernels.observe_kernel,
            dim=world.num_envs,
            inputs=[
                self.ee_body,
                wp.vec3(0.0, 0.0, p.hand_length),
                self.cube_body,
                p.tolerance,
                p.tip_weight,
                p.goal_weight,
                p.success_bonus,
                world.joint_q,
                world.joint_qd,
                world.state_0.body_q,
                world.state_0.body_qd,
                self.goal_pos,
            ],
            outputs=[
                world.proprio,
                f["cube_pose"],
                f["cube_velocity"],
                f["goal_position"],
                world.task_reward,
                world.task_terminated,
            ],
            device=world.device,
        )
        if p.render:
            self.camera.render(world)

    def expert(self, world: World):
        p = self.params
        extra = [
            0.8 * p.link_radius,
            p.expert_lookahead,
            p.expert_push_lookahead,
            p.expert_clearance,
            p.expert_margin,
            p.expert_max_step,
        ]
        return arm_expert(world, p, kernels.expert_kernel, extra, ("proprio", "cube_pose", "goal_position"))
