"""The code task ``reach`` as it was before ``configs/reach.toml`` became a task file: the reference that
tests/sim/test_arm_files.py shows the file-based reach equal to, bit for bit (observations, images, rewards, flags
and state for the same seed and actions). Registered only by :func:`register_handwritten_reach`, as
``reach_handwritten``; the catalog does not hold it. Its kernels are frozen here; the arm's model and shared kernels
(``tasks/arm.py``, ``kernels/arm.py``) are the ones the file-based reach builds on. Its expert is left out (the
file-based reach keeps the same IK expert)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import newton
import warp as wp
from forge_gpu.kernels import arm as arm_kernels
from forge_gpu.kernels.arm import reach_ik, reset_arm  # noqa: F401
from forge_gpu.kernels.camera import jittered_camera

from forge_gpu._src.core.checks import bounded
from forge_gpu._src.sim.randomize import PHYSICS, Parameter
from forge_gpu._src.sim.task import TaskBinding, TaskSpec
from forge_gpu._src.sim.world import World
from forge_gpu._src.tasks.arm import TABLE_COLOR, ArmParams, add_arm, add_table
from helpers.reference_arm import CAMERA_VISUALS, ArmTask, check_arm, moves_camera, per_world

PROPRIO_EE = wp.constant(8)
"""Offset of the end effector position in ``proprio``."""
PROPRIO_TARGET = wp.constant(11)
"""Offset of the target position in ``proprio``."""


@wp.kernel
def reset_kernel(
    # Model:
    seed: int,
    home_q: wp.array[float],
    reset_noise: float,
    target_yaw_range: float,
    target_radius_range: wp.vec2,
    target_height_range: wp.vec2,
    target_shape: wp.array[wp.int32],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
    target_pos_out: wp.array[wp.vec3],
    shape_transform_out: wp.array[wp.transform],
):
    """Home pose plus uniform noise, zero velocity, and a target uniform in a cylindrical sector.

    Keyed by (seed, env, next episode). The target is the world's static marker shape: moving it is
    writing its shape transform (the renderer reads it; it takes no part in the physics).
    """
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = reset_arm(
        seed, worldid, draw_env_in[worldid], episode_id_in[worldid] + 1, home_q, reset_noise, joint_q_out, joint_qd_out
    )
    yaw = target_yaw_range * (2.0 * wp.randf(state) - 1.0)
    radius = target_radius_range[0] + (target_radius_range[1] - target_radius_range[0]) * wp.randf(state)
    height = target_height_range[0] + (target_height_range[1] - target_height_range[0]) * wp.randf(state)
    pos = wp.vec3(radius * wp.cos(yaw), radius * wp.sin(yaw), height)
    target_pos_out[worldid] = pos
    shape_transform_out[target_shape[worldid]] = wp.transform(pos, wp.quat_identity())


@wp.kernel
def observe_kernel(
    # Model:
    ee_body: wp.array[wp.int32],
    ee_offset: wp.vec3,
    tolerance: float,
    success_bonus: float,
    # Data in:
    joint_q_in: wp.array2d[float],
    joint_qd_in: wp.array2d[float],
    body_q_in: wp.array[wp.transform],
    target_pos_in: wp.array[wp.vec3],
    # Data out:
    proprio_out: wp.array2d[float],
    reward_out: wp.array[float],
    terminated_out: wp.array[wp.bool],
):
    """proprio; reward = -distance [m] (+ bonus on success); success (distance <= tolerance) terminates."""
    worldid = wp.tid()
    ee = wp.transform_point(body_q_in[ee_body[worldid]], ee_offset)
    target = target_pos_in[worldid]
    for j in range(4):
        proprio_out[worldid, j] = joint_q_in[worldid, j]
        proprio_out[worldid, 4 + j] = joint_qd_in[worldid, j]
    for k in range(3):
        proprio_out[worldid, PROPRIO_EE + k] = ee[k]
        proprio_out[worldid, PROPRIO_TARGET + k] = target[k]
    distance = wp.length(target - ee)
    success = distance <= tolerance
    terminated_out[worldid] = success
    reward = -distance
    if success:
        reward += success_bonus
    reward_out[worldid] = reward


@wp.kernel
def apply_params_kernel(
    # Model:
    target_shape: wp.array[wp.int32],
    table_shape: wp.array[wp.int32],
    camera_position: wp.vec3,
    camera_look_at: wp.vec3,
    move_camera: int,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    target_color_in: wp.array2d[float],
    table_color_in: wp.array2d[float],
    camera_position_offset_in: wp.array2d[float],
    camera_look_at_offset_in: wp.array2d[float],
    # Data out:
    shape_color_out: wp.array[wp.vec3],
    camera_transform_out: wp.array[wp.transform],
):
    """The world's drawn colours (linear RGB in [0, 1]) and, when its camera is randomized, its camera pose."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    target, table = target_color_in[worldid], table_color_in[worldid]
    shape_color_out[target_shape[worldid]] = wp.vec3(target[0], target[1], target[2])
    shape_color_out[table_shape[worldid]] = wp.vec3(table[0], table[1], table[2])
    if move_camera != 0:
        camera_transform_out[worldid] = jittered_camera(
            camera_position, camera_look_at, camera_position_offset_in[worldid], camera_look_at_offset_in[worldid]
        )


TARGET_COLOR = (1.0, 0.0, 0.0)

VISUALS = {
    "target_color": Parameter((3,), TARGET_COLOR, "the target sphere's colour (linear RGB in [0, 1])"),
    "table_color": Parameter((3,), TABLE_COLOR, "the table top's colour (linear RGB in [0, 1])"),
    **CAMERA_VISUALS,
}
"""reach's own randomizable parameters (applied by ``apply_params_kernel`` above). Newton's
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
        id="reach_handwritten",
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
            reset_kernel,
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
            apply_params_kernel,
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
            observe_kernel,
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


def register_handwritten_reach(tmp_path) -> None:
    """Register :class:`ReachTask` (once per process) as ``reach_handwritten``, its config (:data:`CONFIG`) written
    into ``tmp_path``."""
    import forge_gpu

    if "reach_handwritten" in forge_gpu.sim.TASKS:
        return
    path = Path(tmp_path) / "reach_handwritten.toml"
    path.write_text(CONFIG)
    forge_gpu.sim.register_task(ReachTask, config=path)


CONFIG = """# reach: move the tip of a 4-joint arm onto a red target seen by an RGB-D camera.
# Units: metres, seconds, kilograms, radians; image sizes in pixels.
task = "reach_handwritten"
instruction = "move the gripper to the red target"
num_envs = 64
max_steps = 100
control_dt = 0.02
substeps = 4
# Record every frame's simulator state (state/ columns), so the run can be replayed and re-rendered.
record_state = true

[solver]
name = "mujoco"
iterations = 10
ls_iterations = 5
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
target_yaw_range = 1.0
target_radius = [0.25, 0.45]
target_height = [0.05, 0.3]
target_radius_m = 0.03
tolerance = 0.02
success_bonus = 1.0
expert_max_step = 0.08
# Rendering: image_size is one of 32, 64, 128, 256 (square images).
render = true
image_size = 64
camera_position = [0.45, 0.8, 0.6]
camera_look_at = [0.2, 0.0, 0.2]
camera_fov = 45.0

[randomize]
# Per-world, per-episode domain randomization (see configs/cartpole.toml for the syntax). reach offers
# physics: mass_scale, joint_stiffness_scale, joint_damping_scale, joint_armature_scale (the joint drives);
# visuals: target_color and table_color (linear RGB in [0, 1]), camera_position_offset and
# camera_look_at_offset (metres, added to params.camera_position and params.camera_look_at).
# Newton's camera shares its lights and field of view across worlds, so those cannot vary per world.
# For example:
# target_color = { low = [0.6, 0.0, 0.0], high = [1.0, 0.3, 0.3] }
# camera_position_offset = { low = [-0.05, -0.05, -0.05], high = [0.05, 0.05, 0.05] }
"""
"""reach's config as it was (``configs/reach.toml``), its task id ``reach_handwritten``."""
