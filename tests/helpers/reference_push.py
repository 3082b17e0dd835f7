"""The code task ``push`` as it was before ``configs/push.toml`` became a task file: the reference that
tests/sim/test_arm_files.py shows the file-based push equal to, bit for bit (observations, images, rewards, flags,
state, drawn params and instructions for the same seed and actions). Registered only by
:func:`register_handwritten_push`, as ``push_handwritten``; the catalog does not hold it. Its kernels are frozen
here; the arm's model and shared kernels (``tasks/arm.py``, ``kernels/arm.py``) are the ones the file-based push
builds on. Its expert is left out (the file-based push keeps the same IK expert, ``forge_gpu.sim:push_expert``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import newton
import numpy as np
import warp as wp
from forge_gpu.kernels import arm as arm_kernels
from forge_gpu.kernels.arm import reset_arm
from forge_gpu.kernels.camera import jittered_camera
from forge_gpu.kernels.randomize import set_mass

from forge_gpu._src.core.checks import bounded
from forge_gpu._src.sim.randomize import PHYSICS, Parameter
from forge_gpu._src.sim.task import TaskBinding, TaskSpec
from forge_gpu._src.sim.world import World
from forge_gpu._src.tasks.arm import ArmParams, add_arm, add_table
from helpers.reference_arm import CAMERA_VISUALS, ArmTask, check_arm, moves_camera, per_world

ARM_COORDS = wp.constant(4)
"""The arm's joint coordinates (and dofs) come first; the cube's free joint follows."""
PROPRIO_TIP = wp.constant(8)
"""Offset of the tip position in ``proprio``."""
GOAL_THICKNESS = wp.constant(0.001)
"""Height of the goal marker (a flat square on the table top, visual only) [m]."""


@wp.kernel
def reset_kernel(
    # Model:
    seed: int,
    home_q: wp.array[float],
    reset_noise: float,
    goal_shape: wp.array[wp.int32],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    cube_position_in: wp.array2d[float],
    cube_yaw_in: wp.array[float],
    cube_size_in: wp.array[float],
    goal_position_in: wp.array2d[float],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
    goal_pos_out: wp.array[wp.vec3],
    shape_transform_out: wp.array[wp.transform],
):
    """Arm: home pose plus uniform noise keyed by (seed, env, next episode), at rest. Cube: at its drawn start
    place and yaw, resting on the table, at rest. Goal: its drawn place (the marker's shape transform)."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    reset_arm(
        seed, worldid, draw_env_in[worldid], episode_id_in[worldid] + 1, home_q, reset_noise, joint_q_out, joint_qd_out
    )
    half_yaw = 0.5 * cube_yaw_in[worldid]
    joint_q_out[worldid, ARM_COORDS + 0] = cube_position_in[worldid, 0]
    joint_q_out[worldid, ARM_COORDS + 1] = cube_position_in[worldid, 1]
    joint_q_out[worldid, ARM_COORDS + 2] = 0.5 * cube_size_in[worldid]
    joint_q_out[worldid, ARM_COORDS + 3] = 0.0
    joint_q_out[worldid, ARM_COORDS + 4] = 0.0
    joint_q_out[worldid, ARM_COORDS + 5] = wp.sin(half_yaw)
    joint_q_out[worldid, ARM_COORDS + 6] = wp.cos(half_yaw)
    for k in range(6):
        joint_qd_out[worldid, ARM_COORDS + k] = 0.0
    goal = wp.vec3(goal_position_in[worldid, 0], goal_position_in[worldid, 1], 0.0)
    goal_pos_out[worldid] = goal
    marker = goal + wp.vec3(0.0, 0.0, 0.5 * GOAL_THICKNESS)
    shape_transform_out[goal_shape[worldid]] = wp.transform(marker, wp.quat_identity())


@wp.kernel
def observe_kernel(
    # Model:
    ee_body: wp.array[wp.int32],
    ee_offset: wp.vec3,
    cube_body: wp.array[wp.int32],
    tolerance: float,
    tip_weight: float,
    goal_weight: float,
    success_bonus: float,
    # Data in:
    joint_q_in: wp.array2d[float],
    joint_qd_in: wp.array2d[float],
    body_q_in: wp.array[wp.transform],
    body_qd_in: wp.array[wp.spatial_vector],
    goal_pos_in: wp.array[wp.vec3],
    # Data out:
    proprio_out: wp.array2d[float],
    cube_pose_out: wp.array2d[float],
    cube_velocity_out: wp.array2d[float],
    goal_position_out: wp.array2d[float],
    reward_out: wp.array[float],
    terminated_out: wp.array[wp.bool],
):
    """Observations; reward = -(tip_weight * |tip - cube centre| + goal_weight * |cube - goal| on the table plane)
    [m] (+ the bonus on success); success (the cube's centre within ``tolerance`` of the goal on the table plane)
    terminates."""
    worldid = wp.tid()
    tip = wp.transform_point(body_q_in[ee_body[worldid]], ee_offset)
    cube = body_q_in[cube_body[worldid]]
    velocity = body_qd_in[cube_body[worldid]]
    goal = goal_pos_in[worldid]
    for j in range(ARM_COORDS):
        proprio_out[worldid, j] = joint_q_in[worldid, j]
        proprio_out[worldid, ARM_COORDS + j] = joint_qd_in[worldid, j]
    position, rotation = wp.transform_get_translation(cube), wp.transform_get_rotation(cube)
    for k in range(3):
        proprio_out[worldid, PROPRIO_TIP + k] = tip[k]
        cube_pose_out[worldid, k] = position[k]
        goal_position_out[worldid, k] = goal[k]
    for k in range(4):
        cube_pose_out[worldid, 3 + k] = rotation[k]
    for k in range(6):
        cube_velocity_out[worldid, k] = velocity[k]
    to_goal = wp.vec2(goal[0] - position[0], goal[1] - position[1])
    distance = wp.length(to_goal)
    success = distance <= tolerance
    terminated_out[worldid] = success
    reward = -(tip_weight * wp.length(position - tip) + goal_weight * distance)
    if success:
        reward += success_bonus
    reward_out[worldid] = reward


@wp.kernel
def apply_params_kernel(
    # Model:
    cube_shape: wp.array[wp.int32],
    cube_body: wp.array[wp.int32],
    goal_shape: wp.array[wp.int32],
    palette: wp.array[wp.vec3],
    write_physics: int,
    resolve_colors: int,
    camera_position: wp.vec3,
    camera_look_at: wp.vec3,
    move_camera: int,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    cube_size_in: wp.array[float],
    cube_mass_in: wp.array[float],
    cube_friction_in: wp.array[float],
    camera_position_offset_in: wp.array2d[float],
    camera_look_at_offset_in: wp.array2d[float],
    # Data in and out:
    cube_color_io: wp.array[float],
    goal_color_io: wp.array[float],
    # Data out:
    shape_scale_out: wp.array[wp.vec3],
    shape_material_mu_out: wp.array[float],
    body_mass_out: wp.array[float],
    body_inv_mass_out: wp.array[float],
    body_inertia_out: wp.array[wp.mat33],
    body_inv_inertia_out: wp.array[wp.mat33],
    shape_color_out: wp.array[wp.vec3],
    camera_transform_out: wp.array[wp.transform],
):
    """The world's drawn cube (edge, mass and a solid cube's inertia m e^2 / 6, friction: written when
    ``write_physics``), its colours and, when randomized, its camera pose.

    Colours are palette indices. Where the cube's and the goal's are equal, ``resolve_colors`` moves one to the next
    palette colour: 1 the goal's, 2 the cube's (the randomized one), writing it back into the drawn value, which is
    what the episode records (applying it again changes nothing: a restored episode keeps its colours).
    """
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    count = palette.shape[0]
    cube_index = wp.int32(cube_color_io[worldid])
    goal_index = wp.int32(goal_color_io[worldid])
    if cube_index == goal_index and resolve_colors == 1:
        goal_index = (goal_index + 1) % count
        goal_color_io[worldid] = float(goal_index)
    if cube_index == goal_index and resolve_colors == 2:
        cube_index = (cube_index + 1) % count
        cube_color_io[worldid] = float(cube_index)
    shape_color_out[cube_shape[worldid]] = palette[cube_index]
    shape_color_out[goal_shape[worldid]] = palette[goal_index]
    if write_physics != 0:
        edge, mass = cube_size_in[worldid], cube_mass_in[worldid]
        half = 0.5 * edge
        shape_scale_out[cube_shape[worldid]] = wp.vec3(half, half, half)
        shape_material_mu_out[cube_shape[worldid]] = cube_friction_in[worldid]
        moment = mass * edge * edge / 6.0
        inertia = wp.diag(wp.vec3(moment, moment, moment))
        set_mass(cube_body[worldid], mass, inertia, body_mass_out, body_inv_mass_out, body_inertia_out,
                 body_inv_inertia_out)  # fmt: skip
    if move_camera != 0:
        camera_transform_out[worldid] = jittered_camera(
            camera_position, camera_look_at, camera_position_offset_in[worldid], camera_look_at_offset_in[worldid]
        )


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
        id="push_handwritten",
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
        check_arm(config, "push_handwritten", self.spec.action_dim)
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
            xform=wp.transform((*p.goal_position, 0.5 * float(GOAL_THICKNESS)), wp.quat_identity()),
            hx=p.tolerance,
            hy=p.tolerance,
            hz=0.5 * float(GOAL_THICKNESS),
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
            reset_kernel,
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
            apply_params_kernel,
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
            inputs=[self.goal_shape, wp.vec3(0.0, 0.0, 0.5 * GOAL_THICKNESS), world.reset_mask, self.goal_pos],
            outputs=[world.model.shape_transform],
            device=world.device,
        )

    def observe(self, world: World) -> None:
        p, f = self.params, self.fields
        wp.launch(
            observe_kernel,
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


def register_handwritten_push(tmp_path) -> None:
    """Register :class:`PushTask` (once per process) as ``push_handwritten``, its config (:data:`CONFIG`) written
    into ``tmp_path``."""
    import forge_gpu

    if "push_handwritten" in forge_gpu.sim.TASKS:
        return
    path = Path(tmp_path) / "push_handwritten.toml"
    path.write_text(CONFIG)
    forge_gpu.sim.register_task(PushTask, config=path)


CONFIG = """# push: the 4-joint arm pushes a cube across the table into a goal square, seen by an RGB-D camera.
# Units: metres, seconds, kilograms, radians; image sizes in pixels.
task = "push_handwritten"
# The run's instruction, for the fixed colours. With cube_color, goal_color or goal_position randomized (below),
# each episode's instruction comes from its drawn values instead (env.spec's instruction_template), e.g.
# "push the blue cube to the yellow square on the left".
instruction = "push the red cube to the green square"
num_envs = 64
max_steps = 200
control_dt = 0.02
substeps = 4
# Record every frame's simulator state (state/ columns), so the run can be replayed and re-rendered.
record_state = true

[solver]
# MuJoCo-Warp runs the contacts (cube-table, cube-pusher). With reach's 10 iterations and 5 line-search
# iterations the pushes hit the limits (MuJoCo-Warp prints a warning each time); 20 and 30 converged in every
# step of 64 expert and 64 random episodes here.
name = "mujoco"
iterations = 20
ls_iterations = 30
integrator = "implicitfast"

[action]
# Joint position targets [rad] of [yaw, shoulder, elbow, wrist]; the bounds are the joint limits.
low = [-2.0, -1.0, -0.5, -0.5]
high = [2.0, 2.0, 2.6, 2.6]
scale = [1.0, 1.0, 1.0, 1.0]

[params]
shoulder_height = 0.2
upper_arm_length = 0.3
forearm_length = 0.25
hand_length = 0.1
link_radius = 0.025
link_density = 500.0
joint_stiffness = 400.0
joint_damping = 40.0
joint_armature = 0.1
home_q = [0.0, 0.3, 1.2, 1.0]
reset_noise = 0.1
# The cube and the goal where [randomize] does not draw them: edge [m], mass [kg], friction coefficient,
# start centre x, y [m] and yaw [rad]; the goal square's centre x, y [m]; colours from the palette
# red, green, blue, yellow.
cube_size = 0.05
cube_mass = 0.2
cube_friction = 0.5
cube_position = [0.3, 0.0]
cube_yaw = 0.0
goal_position = [0.43, 0.0]
cube_color = "red"
goal_color = "green"
# MuJoCo uses the larger friction coefficient of two touching shapes: the table and the pusher keep low ones
# so that the cube's own acts.
table_friction = 0.2
pusher_friction = 0.2
# Success: the cube's centre within tolerance of the goal's on the table plane [m] (the square's half side).
tolerance = 0.03
tip_weight = 0.5
goal_weight = 1.0
success_bonus = 1.0
expert_lookahead = 0.04
expert_push_lookahead = 0.03
expert_clearance = 0.03
expert_margin = 0.02
expert_max_step = 0.15
# Rendering: image_size is one of 32, 64, 128, 256 (square images).
render = true
image_size = 64
camera_position = [0.33, 0.5, 0.5]
camera_look_at = [0.33, 0.0, 0.0]
camera_fov = 45.0

[randomize]
# Per-world, per-episode domain randomization (see configs/cartpole.toml for the syntax), recorded per episode.
# push offers physics: cube_size, cube_mass, cube_friction, joint_stiffness_scale, joint_damping_scale,
# joint_armature_scale; the start: cube_position [x, y], cube_yaw, goal_position [x, y]; visuals: cube_color and
# goal_color (palette indices 0 red, 1 green, 2 blue, 3 yellow, drawn with dist = "integer"; where the two draws
# are equal the goal takes the next colour), camera_position_offset and camera_look_at_offset [m].
cube_size = [0.04, 0.06]
cube_mass = [0.1, 0.4]
cube_friction = [0.3, 0.8]
cube_position = { low = [0.27, -0.1], high = [0.33, 0.1] }
cube_yaw = [-0.785, 0.785]
goal_position = { low = [0.4, -0.15], high = [0.46, 0.15] }
cube_color = { low = 0, high = 3, dist = "integer" }
goal_color = { low = 0, high = 3, dist = "integer" }
camera_position_offset = { low = [-0.03, -0.03, -0.03], high = [0.03, 0.03, 0.03] }
camera_look_at_offset = { low = [-0.02, -0.02, -0.02], high = [0.02, 0.02, 0.02] }
"""
