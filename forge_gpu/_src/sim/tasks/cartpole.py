"""cartpole: keep a pole balanced on a cart that slides on a rail, from a near-upright start."""

from __future__ import annotations

from dataclasses import dataclass, field

import newton
import numpy as np
import warp as wp

from forge_gpu._src.sim.config import bounded
from forge_gpu._src.sim.randomize import PHYSICS
from forge_gpu._src.sim.tasks.base import Task, TaskSpec
from forge_gpu._src.sim.world import World
from forge_gpu.kernels import cartpole as kernels


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


def lqr_gain(params: CartpoleParams, force_scale: float, dt: float) -> np.ndarray:
    """Discrete LQR gain K (u = -K x, u in action units) of the cart-pole linearized upright."""
    m_c, m_p, length = params.cart_mass, params.pole_mass, params.pole_length
    half = 0.5 * length
    inertia = m_p * length * length / 12.0 + m_p * half * half  # rod about the hinge
    g = 9.81
    # (m_c + m_p) x'' + m_p h theta'' = F ;  m_p h x'' + I theta'' = m_p g h theta
    mass = np.array([[m_c + m_p, m_p * half], [m_p * half, inertia]])
    minv = np.linalg.inv(mass)
    a = np.zeros((4, 4))
    a[0, 1] = a[2, 3] = 1.0
    acc_theta = minv @ np.array([0.0, m_p * g * half])
    acc_force = minv @ np.array([force_scale, 0.0])
    a[1, 2], a[3, 2] = acc_theta
    b = np.array([[0.0], [acc_force[0]], [0.0], [acc_force[1]]])
    ad, bd = np.eye(4) + dt * a, dt * b
    q, r = np.diag([1.0, 0.1, 10.0, 0.1]), np.array([[0.1]])
    p = q.copy()
    for _ in range(5000):
        k = np.linalg.solve(r + bd.T @ p @ bd, bd.T @ p @ ad)
        p = q + ad.T @ p @ (ad - bd @ k)
    return k[0]


class CartpoleTask(Task):
    spec = TaskSpec(id="cartpole", proprio_dim=4, action_dim=1)
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

    def bind(self, world: World) -> None:
        cfg = self.config
        gain = lqr_gain(self.params, cfg.action.scale[0], cfg.control_dt)
        self.expert_gain = wp.array(gain.astype(np.float32), dtype=float, device=world.device)

    def apply_action(self, world: World) -> None:
        wp.launch(
            kernels.apply_action_kernel,
            dim=world.num_envs,
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
            kernels.observe_kernel,
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

    def expert(self, world: World):
        action = wp.zeros((world.num_envs, self.spec.action_dim), dtype=float, device=world.device)

        def act(observation: dict) -> wp.array:
            wp.launch(
                kernels.expert_kernel,
                dim=world.num_envs,
                inputs=[self.expert_gain, world.action_low, world.action_high, observation["proprio"]],
                outputs=[action],
                device=world.device,
            )
            return action

        return act
