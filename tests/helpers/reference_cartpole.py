"""The hand-written cartpole task as it was before ``configs/cartpole.toml`` became a task file: the reference that
tests/sim/test_taskfile.py shows the file-based cartpole equal to, bit for bit (same observations, rewards and flags for
the same seed and actions), and the hand-written task that the task API's tests (tests/sim/test_tasks.py) subclass.
Registered only by :func:`register_handwritten`, as ``cartpole_handwritten``; the catalog does not hold it. Its LQR
expert and model stayed in the package (``forge_gpu/_src/tasks/cartpole.py``).

One change from the package's kernel: the costs are ``angle_cost * (theta * theta)`` and ``action_cost * (u * u)``
where it had ``angle_cost * theta * theta`` (``(angle_cost * theta) * theta``), the order in which a weighted term
of the library computes them (weight times the term). The two orders round apart by one float32 ulp for some
costs (2.5 in the test); at the shipped costs (1.0 and 0.01) they gave the same rewards in every step tried."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import newton
import warp as wp
from forge_gpu.kernels.rng import STREAM_RESET, env_rng

from forge_gpu._src.core.checks import bounded
from forge_gpu._src.sim.randomize import PHYSICS
from forge_gpu._src.sim.task import Task, TaskSpec
from forge_gpu._src.sim.world import World


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
    """Cart force [N] = executed action * scale * the world's actuator gain; the pole hinge is passive."""
    worldid = wp.tid()
    joint_f_out[worldid, 0] = executed_action_in[worldid, 0] * action_scale[0] * actuator_gain_in[worldid]
    joint_f_out[worldid, 1] = 0.0


@wp.kernel
def reset_kernel(
    # Model:
    seed: int,
    cart_position_range: float,
    pole_angle_range: float,
    velocity_range: float,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    # Data out:
    joint_q_out: wp.array2d[float],
    joint_qd_out: wp.array2d[float],
):
    """Near-upright start, uniform in +-range, keyed by (seed, env, next episode)."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = env_rng(seed, worldid, episode_id_in[worldid] + 1, 0, STREAM_RESET)
    joint_q_out[worldid, 0] = cart_position_range * (2.0 * wp.randf(state) - 1.0)
    joint_q_out[worldid, 1] = pole_angle_range * (2.0 * wp.randf(state) - 1.0)
    joint_qd_out[worldid, 0] = velocity_range * (2.0 * wp.randf(state) - 1.0)
    joint_qd_out[worldid, 1] = velocity_range * (2.0 * wp.randf(state) - 1.0)


@wp.kernel
def observe_kernel(
    # Model:
    cart_limit: float,
    pole_angle_limit: float,
    angle_cost: float,
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
    """proprio = [x, x_dot, theta, theta_dot]; reward = alive bonus minus angle and effort costs."""
    worldid = wp.tid()
    x = joint_q_in[worldid, 0]
    theta = joint_q_in[worldid, 1]
    proprio_out[worldid, 0] = x
    proprio_out[worldid, 1] = joint_qd_in[worldid, 0]
    proprio_out[worldid, 2] = theta
    proprio_out[worldid, 3] = joint_qd_in[worldid, 1]
    u = executed_action_in[worldid, 0]
    fallen = wp.abs(theta) > pole_angle_limit or wp.abs(x) > cart_limit
    terminated_out[worldid] = fallen
    if fallen:
        reward_out[worldid] = 0.0
    else:
        reward_out[worldid] = 1.0 - angle_cost * (theta * theta) - action_cost * (u * u)


@dataclass(frozen=True, kw_only=True)
class CartpoleParams:
    """Cart-pole model, start distribution, limits and reward weights."""

    cart_mass: float = field(default=1.0, metadata=bounded(1e-3, 1e3))
    """Cart mass [kg]."""
    pole_mass: float = field(default=0.1, metadata=bounded(1e-3, 1e3))
    """Pole mass [kg], a uniform rod."""
    pole_length: float = field(default=1.0, metadata=bounded(1e-2, 10.0))
    """Pole length [m]."""
    reset_cart_position: float = field(default=0.2, metadata=bounded(0.0, 10.0))
    """Start cart position drawn uniformly in +-this [m]."""
    reset_pole_angle: float = field(default=0.05, metadata=bounded(0.0, 1.5))
    """Start pole angle drawn uniformly in +-this [rad]."""
    reset_velocity: float = field(default=0.05, metadata=bounded(0.0, 10.0))
    """Start velocities drawn uniformly in +-this [m/s, rad/s]."""
    cart_limit: float = field(default=2.4, metadata=bounded(0.1, 100.0))
    """The episode terminates when |cart position| exceeds this [m]."""
    pole_angle_limit: float = field(default=0.3, metadata=bounded(0.01, 1.5))
    """The episode terminates when |pole angle| exceeds this [rad]."""
    angle_cost: float = field(default=1.0, metadata=bounded(0.0, 1e3))
    """Reward weight of theta^2."""
    action_cost: float = field(default=0.01, metadata=bounded(0.0, 1e3))
    """Reward weight of the executed action squared."""


@dataclass(frozen=True, kw_only=True)
class CartpoleScene:
    """One cart on a rail along x with a pole hinged about y, no contacts."""

    kind: str = "cartpole"
    cart_mass: float = 1.0
    pole_mass: float = 0.1
    pole_length: float = 1.0


class CartpoleTask(Task):
    spec = TaskSpec(id="cartpole_handwritten", proprio_dim=4, action_dim=1)
    params_type = CartpoleParams

    def make_scene(self) -> CartpoleScene:
        p = self.params
        return CartpoleScene(cart_mass=p.cart_mass, pole_mass=p.pole_mass, pole_length=p.pole_length)

    def randomizable(self) -> dict:
        """Physics: mass_scale, actuator_gain_scale."""
        return {name: PHYSICS[name] for name in ("mass_scale", "actuator_gain_scale")}

    def build_world(self, builder) -> None:
        p = self.params
        half = 0.5 * p.pole_length
        rod = p.pole_mass * p.pole_length**2 / 12.0
        cfg = newton.ModelBuilder.ShapeConfig(density=0.0, collision_group=-1)
        cfg.collision_filter_parent = True
        cart = builder.add_link(mass=p.cart_mass, inertia=wp.diag(wp.vec3(0.01, 0.01, 0.01)), label="cart")
        builder.add_shape_box(cart, hx=0.15, hy=0.1, hz=0.08, cfg=cfg)
        pole = builder.add_link(
            mass=p.pole_mass,
            com=wp.vec3(0.0, 0.0, half),
            inertia=wp.diag(wp.vec3(rod, rod, 1e-5)),
            label="pole",
        )
        builder.add_shape_capsule(
            pole,
            xform=wp.transform((0.0, 0.0, half), wp.quat_identity()),
            radius=0.02,
            half_height=half,
            cfg=cfg,
        )
        slider = builder.add_joint_prismatic(-1, cart, axis=(1.0, 0.0, 0.0), label="slider")
        hinge = builder.add_joint_revolute(cart, pole, axis=(0.0, 1.0, 0.0), label="hinge")
        builder.add_articulation([slider, hinge])
        for shape in range(builder.shape_count):
            builder.shape_flags[shape] &= ~newton.ShapeFlags.COLLIDE_SHAPES

    def apply_action(self, world: World) -> None:
        wp.launch(
            apply_action_kernel,
            dim=world.num_envs,
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
                p.reset_cart_position,
                p.reset_pole_angle,
                p.reset_velocity,
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
                p.cart_limit,
                p.pole_angle_limit,
                p.angle_cost,
                p.action_cost,
                world.joint_q,
                world.joint_qd,
                world.executed_action,
            ],
            outputs=[world.proprio, world.task_reward, world.task_terminated],
            device=world.device,
        )


CONFIG = """\
# cartpole: keep a pole balanced on a cart. Units: metres, seconds, kilograms, newtons, radians.
task = "cartpole_handwritten"
instruction = "keep the pole upright"
num_envs = 64
max_steps = 500
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
# One action dimension: the cart force, clipped to [-1, 1] and scaled to newtons.
low = [-1.0]
high = [1.0]
scale = [20.0]

[params]
cart_mass = 1.0
pole_mass = 0.1
pole_length = 1.0
reset_cart_position = 0.2
reset_pole_angle = 0.05
reset_velocity = 0.05
cart_limit = 2.4
pole_angle_limit = 0.3
angle_cost = 1.0
action_cost = 0.01

[randomize]
# Per-world, per-episode domain randomization: name = [low, high] (uniform) or
# name = { low = ..., high = ..., dist = "log_uniform" } (or dist = "integer": whole numbers low..high, for a
# palette index). Drawn at every reset from (seed, env, episode),
# recorded once per episode. cartpole offers mass_scale (every body's mass and inertia) and
# actuator_gain_scale (newtons per action unit). Empty: no randomization, no cost. For example:
# mass_scale = [0.8, 1.25]
"""
"""Its config: configs/cartpole.toml as it was, under the id ``cartpole_handwritten``."""


def register_handwritten(folder) -> dict[str, type[Task]]:
    """Register the hand-written ant and cartpole (once per process) as ``ant_handwritten`` and
    ``cartpole_handwritten``, their configs written into ``folder``; return the classes by task id."""
    from forge_gpu._src.tasks import catalog
    from helpers.reference_ant import CONFIG as ANT_CONFIG
    from helpers.reference_ant import AntTask

    classes = {}
    for task, config in ((AntTask, ANT_CONFIG), (CartpoleTask, CONFIG)):
        if task.spec.id not in catalog.TASKS:
            path = Path(folder) / f"{task.spec.id}.toml"
            path.write_text(config)
            catalog.register_task(task, config=path)
        classes[task.spec.id] = task
    return classes
