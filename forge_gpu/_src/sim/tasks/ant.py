"""ant: a four-legged robot (Newton's ``nv_ant.xml``) runs along +x on a ground plane."""

from __future__ import annotations

from dataclasses import dataclass, field

import newton
import newton.examples
import warp as wp

from forge_gpu._src.sim.config import bounded
from forge_gpu._src.sim.randomize import PHYSICS
from forge_gpu._src.sim.tasks.base import Task, TaskSpec
from forge_gpu._src.sim.world import World
from forge_gpu.kernels import ant as kernels

STANDING_ANKLES = (1.0, -1.0, -1.0, 1.0)
"""Ankle angles [rad] of the standing pose (``init_qpos`` in the asset), legs 1 to 4."""


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
    spec = TaskSpec(id="ant", proprio_dim=27, action_dim=8, has_contacts=True)
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
            builder.joint_q[start + kernels.FREE_COORDS + 2 * leg + 1] = angle
        builder.add_ground_plane()

    def bind(self, world: World) -> None:
        n = world.num_envs
        coords = world.joint_q.shape[1]
        if coords != kernels.FREE_COORDS + kernels.HINGE_COUNT:
            raise ValueError(f"ant world has {coords} joint coordinates; expected 15 (free joint + 8 hinges)")
        self.default_q = wp.array(world.model.joint_q.numpy().reshape(n, coords), dtype=float, device=world.device)
        """Start pose per world: torso position and orientation, standing hinge angles, float32 [N, 15]."""

    def apply_action(self, world: World) -> None:
        wp.launch(
            kernels.apply_action_kernel,
            dim=world.executed_action.shape,
            inputs=[world.action_scale, world.params["actuator_gain_scale"], world.executed_action],
            outputs=[world.joint_f],
            device=world.device,
        )

    def reset_worlds(self, world: World) -> None:
        p = self.params
        wp.launch(
            kernels.reset_kernel,
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
            kernels.observe_kernel,
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

    def expert(self, world: World):
        p = self.params
        action = wp.zeros((world.num_envs, self.spec.action_dim), dtype=float, device=world.device)

        def act(observation: dict) -> wp.array:
            wp.launch(
                kernels.expert_kernel,
                dim=(world.num_envs, 4),
                inputs=[
                    world.config.control_dt,
                    p.gait_frequency,
                    p.gait_hip_amplitude,
                    p.gait_ankle_amplitude,
                    p.gait_stiffness,
                    p.gait_damping,
                    self.default_q,
                    world.action_scale,
                    world.action_low,
                    world.action_high,
                    observation["step_id"],
                    observation["proprio"],
                ],
                outputs=[action],
                device=world.device,
            )
            return action

        return act
