"""The hand-written ant task as it was before ``configs/ant.toml`` became a task file: the reference that
tests/sim/test_taskfile.py shows the file-based ant equal to, bit for bit (same observations, rewards and flags for the
same seed and actions). Registered only by :func:`helpers.reference_cartpole.register_handwritten`, as
``ant_handwritten``; the catalog does not hold it. Its expert is left out (the file-based ant keeps the same
trot)."""

from __future__ import annotations

from dataclasses import dataclass, field

import newton
import newton.examples
import warp as wp
from forge_gpu.kernels.rng import STREAM_RESET, env_rng

from forge_gpu._src.core.checks import bounded
from forge_gpu._src.sim.randomize import PHYSICS
from forge_gpu._src.sim.task import Task, TaskSpec
from forge_gpu._src.sim.world import World

FREE_COORDS = wp.constant(7)
FREE_DOFS = wp.constant(6)
HINGE_COUNT = wp.constant(8)

STANDING_ANKLES = (1.0, -1.0, -1.0, 1.0)
"""Ankle angles [rad] of the standing pose (``init_qpos`` in the asset), legs 1 to 4."""


@wp.kernel
def apply_action_kernel(
    # Model:
    action_scale: wp.array[float],
    # Data in:
    actuator_gain_in: wp.array[float],
    executed_action_in: wp.array2d[float],
    # Data out:
    joint_f_out: wp.array2d[float],
):
    """Hinge torque [N m] = executed action * scale * the world's actuator gain; the free joint gets no effort."""
    worldid, actid = wp.tid()
    torque = executed_action_in[worldid, actid] * action_scale[actid] * actuator_gain_in[worldid]
    joint_f_out[worldid, FREE_DOFS + actid] = torque


@wp.kernel
def reset_kernel(
    # Model:
    seed: int,
    joint_position_range: float,
    joint_velocity_range: float,
    default_q: wp.array2d[float],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
):
    """The default pose (torso at its start pose, at rest) plus uniform hinge noise in +-range."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = env_rng(seed, worldid, episode_id_in[worldid] + 1, 0, STREAM_RESET)
    for i in range(FREE_COORDS):
        joint_q_out[worldid, i] = default_q[worldid, i]
    for i in range(FREE_DOFS):
        joint_qd_out[worldid, i] = 0.0
    for j in range(HINGE_COUNT):
        noise = joint_position_range * (2.0 * wp.randf(state) - 1.0)
        joint_q_out[worldid, FREE_COORDS + j] = default_q[worldid, FREE_COORDS + j] + noise
        joint_qd_out[worldid, FREE_DOFS + j] = joint_velocity_range * (2.0 * wp.randf(state) - 1.0)


@wp.kernel
def observe_kernel(
    # Model:
    min_height: float,
    min_upright: float,
    forward_weight: float,
    action_cost: float,
    # Data in:
    joint_q_in: wp.array2d[float],
    joint_qd_in: wp.array2d[float],
    executed_action_in: wp.array2d[float],
    # Data out:
    proprio_out: wp.array2d[float],
    reward_out: wp.array[float],
    terminated_out: wp.array[wp.bool],
):
    """proprio = [z, quat xyzw, lin vel, ang vel, 8 hinge angles, 8 hinge rates] (27).

    reward = forward_weight * torso x velocity - action_cost * |action|^2; the episode terminates when
    the torso drops below ``min_height`` or its up axis tilts below ``min_upright`` (z component).
    """
    worldid = wp.tid()
    z = joint_q_in[worldid, 2]
    proprio_out[worldid, 0] = z
    for i in range(4):
        proprio_out[worldid, 1 + i] = joint_q_in[worldid, 3 + i]
    for i in range(FREE_DOFS):
        proprio_out[worldid, 5 + i] = joint_qd_in[worldid, i]
    cost = 0.0
    for j in range(HINGE_COUNT):
        proprio_out[worldid, 11 + j] = joint_q_in[worldid, FREE_COORDS + j]
        proprio_out[worldid, 19 + j] = joint_qd_in[worldid, FREE_DOFS + j]
        u = executed_action_in[worldid, j]
        cost += u * u
    qx = joint_q_in[worldid, 3]
    qy = joint_q_in[worldid, 4]
    up_z = 1.0 - 2.0 * (qx * qx + qy * qy)
    terminated_out[worldid] = z < min_height or up_z < min_upright
    reward_out[worldid] = forward_weight * joint_qd_in[worldid, 0] - action_cost * cost


@dataclass(frozen=True, kw_only=True)
class AntParams:
    """Ant start distribution, termination limits, reward weights and the scripted gait."""

    start_height: float = field(default=0.6, metadata=bounded(0.1, 5.0))
    """Torso height at the start of an episode [m]."""
    reset_joint_position: float = field(default=0.1, metadata=bounded(0.0, 1.0))
    """Start hinge angles drawn uniformly in +-this around the standing pose [rad]."""
    reset_joint_velocity: float = field(default=0.1, metadata=bounded(0.0, 10.0))
    """Start hinge rates drawn uniformly in +-this [rad/s]; the torso starts at rest."""
    min_height: float = field(default=0.3, metadata=bounded(0.0, 5.0))
    """The episode terminates when the torso height drops below this [m]."""
    min_upright: float = field(default=0.0, metadata=bounded(-1.0, 1.0))
    """The episode terminates when the z component of the torso's up axis drops below this (0: on its side)."""
    forward_weight: float = field(default=1.0, metadata=bounded(0.0, 1e3))
    """Reward per m/s of torso velocity along +x."""
    action_cost: float = field(default=0.05, metadata=bounded(0.0, 1e3))
    """Reward weight of the executed action squared (summed over the 8 hinges)."""
    gait_frequency: float = field(default=0.75, metadata=bounded(0.0, 20.0))
    """Expert gait: steps per second of each leg [Hz]."""
    gait_hip_amplitude: float = field(default=0.5, metadata=bounded(0.0, 1.0))
    """Expert gait: hip swing amplitude [rad]."""
    gait_ankle_amplitude: float = field(default=0.3, metadata=bounded(0.0, 1.0))
    """Expert gait: ankle lift amplitude [rad]."""
    gait_stiffness: float = field(default=30.0, metadata=bounded(0.0, 1e4))
    """Expert gait: PD stiffness of the tracking torques [N m / rad]."""
    gait_damping: float = field(default=1.0, metadata=bounded(0.0, 1e3))
    """Expert gait: PD damping of the tracking torques [N m s / rad]."""


@dataclass(frozen=True, kw_only=True)
class AntScene:
    """One ant (torso on a free joint, 4 legs of 2 hinges) above a ground plane, with contacts."""

    kind: str = "ant"
    asset: str = "nv_ant.xml"
    start_height: float = 0.6


class AntTask(Task):
    spec = TaskSpec(id="ant_handwritten", proprio_dim=27, action_dim=8, has_contacts=True)
    params_type = AntParams

    def make_scene(self) -> AntScene:
        return AntScene(start_height=self.params.start_height)

    def randomizable(self) -> dict:
        """Physics: mass_scale, friction, joint_armature_scale, actuator_gain_scale."""
        names = ("mass_scale", "friction", "joint_armature_scale", "actuator_gain_scale")
        return {name: PHYSICS[name] for name in names}

    def build_world(self, builder) -> None:
        start = len(builder.joint_q)
        builder.add_mjcf(
            newton.examples.get_asset(self.scene.asset),
            xform=wp.transform((0.0, 0.0, self.scene.start_height), wp.quat_identity()),
            override_root_xform=True,
            ignore_names=["floor", "ground"],
        )
        # The asset's hinges default to 0, outside the ankle limits; stand on bent ankles instead.
        for leg, angle in enumerate(STANDING_ANKLES):
            builder.joint_q[start + FREE_COORDS + 2 * leg + 1] = angle
        builder.add_ground_plane()

    def bind(self, world: World) -> None:
        n = world.num_envs
        coords = world.joint_q.shape[1]
        if coords != FREE_COORDS + HINGE_COUNT:
            raise ValueError(f"ant world has {coords} joint coordinates; expected 15 (free joint + 8 hinges)")
        self.default_q = wp.array(world.model.joint_q.numpy().reshape(n, coords), dtype=float, device=world.device)
        """Start pose per world: torso position and orientation, standing hinge angles, float32 [N, 15]."""

    def apply_action(self, world: World) -> None:
        wp.launch(
            apply_action_kernel,
            dim=world.executed_action.shape,
            inputs=[world.action_scale, world.params["actuator_gain_scale"], world.executed_action],
            outputs=[world.joint_f],
            device=world.device,
        )

    def reset_worlds(self, world: World) -> None:
        p = self.params
        wp.launch(
            reset_kernel,
            dim=world.num_envs,
            inputs=[
                world.seed,
                p.reset_joint_position,
                p.reset_joint_velocity,
                self.default_q,
                world.reset_mask,
                world.episode_id,
            ],
            outputs=[world.joint_q, world.joint_qd],
            device=world.device,
        )

    def observe(self, world: World) -> None:
        p = self.params
        wp.launch(
            observe_kernel,
            dim=world.num_envs,
            inputs=[
                p.min_height,
                p.min_upright,
                p.forward_weight,
                p.action_cost,
                world.joint_q,
                world.joint_qd,
                world.executed_action,
            ],
            outputs=[world.proprio, world.task_reward, world.task_terminated],
            device=world.device,
        )


CONFIG = """\
# ant: a four-legged robot runs along +x. Units: metres, seconds, kilograms, newton metres, radians.
task = "ant_handwritten"
instruction = "run forward along the x axis"
num_envs = 64
max_steps = 1000
control_dt = 0.02
substeps = 4
# Record every frame's simulator state (state/ columns), so the run can be replayed and re-rendered.
record_state = true

[solver]
# MuJoCo-Warp runs its own contact detection against the ground plane. Other solvers would need
# Newton's collision pipeline, which the env does not run, so the ant would fall through the floor.
# More iterations converge more steps (random torques sometimes hit the line-search limit, which
# MuJoCo-Warp reports once) at about 1.5x the step time for ls_iterations = 10.
name = "mujoco"
iterations = 10
ls_iterations = 5
integrator = "implicitfast"

[action]
# Eight hinge torques (hip_1, ankle_1, ..., hip_4, ankle_4), clipped to [-1, 1] and scaled to N m
# (the asset's motor gear). Torques, not position targets: the standard ant action space; the
# expert turns its gait targets into torques with its own PD law.
low = [-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0]
high = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
scale = [15.0, 15.0, 15.0, 15.0, 15.0, 15.0, 15.0, 15.0]

[params]
# Episode start, termination and reward; then the expert's trot (gait_*), tuned on the CPU.
start_height = 0.6
reset_joint_position = 0.1
reset_joint_velocity = 0.1
min_height = 0.3
min_upright = 0.0
forward_weight = 1.0
action_cost = 0.05
gait_frequency = 0.75
gait_hip_amplitude = 0.5
gait_ankle_amplitude = 0.3
gait_stiffness = 30.0
gait_damping = 1.0

[randomize]
# Per-world, per-episode domain randomization (see configs/cartpole.toml for the syntax). ant offers
# mass_scale, friction (every shape's friction coefficient), joint_armature_scale and actuator_gain_scale.
# For example:
# friction = { low = 0.5, high = 1.5, dist = "log_uniform" }
"""
"""Its config: configs/ant.toml as it was, under the id ``ant_handwritten``."""
