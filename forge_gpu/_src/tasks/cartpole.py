"""cartpole's model and expert (``configs/cartpole.toml`` names them): the two pieces of ``cartpole`` that are code.

The task itself is a task file: library terms over this model. The model is made in code because its sizes are
parameters (``params.cart_mass``, ``pole_mass``, ``pole_length`` set the masses, the pole's centre of mass, its
inertia and its capsule); a model file holds fixed numbers, and Newton's ``cartpole.urdf`` is another robot (a
double pendulum on a rail along y). The LQR expert is a policy computed from the same parameters, not a term.
"""

from __future__ import annotations

import newton
import numpy as np
import warp as wp

from forge_gpu._src.core.checks import plain_number
from forge_gpu.kernels import cartpole as kernels

_SIZES = {"cart_mass": (1e-3, 1e3), "pole_mass": (1e-3, 1e3), "pole_length": (1e-2, 10.0)}
"""The builder's and the expert's arguments and their allowed ranges [kg, kg, m]."""


def _sizes(given: dict, where: str) -> tuple[float, float, float]:
    if set(given) != set(_SIZES):
        raise ValueError(f"{where}: expected the numbers {', '.join(_SIZES)} (got {', '.join(given) or 'none'})")
    for name, (low, high) in _SIZES.items():
        value = given[name]
        if not plain_number(value) or not low <= value <= high:
            raise ValueError(f"{where}.{name} = {value!r}: allowed range is [{low:g}, {high:g}]")
    return float(given["cart_mass"]), float(given["pole_mass"]), float(given["pole_length"])


def cartpole_model(builder, *, source: str = "", **sizes) -> None:
    """``[model] builder``: one cart on a rail along x (joint ``slider``), a uniform rod hinged about y on it
    (joint ``hinge``); no contacts. ``sizes``: ``cart_mass`` [kg], ``pole_mass`` [kg], ``pole_length`` [m]."""
    cart_mass, pole_mass, pole_length = _sizes(sizes, f"{source}: model.args")
    half = 0.5 * pole_length
    rod = pole_mass * pole_length**2 / 12.0
    cfg = newton.ModelBuilder.ShapeConfig(density=0.0, collision_group=-1)
    cfg.collision_filter_parent = True
    cart = builder.add_link(mass=cart_mass, inertia=wp.diag(wp.vec3(0.01, 0.01, 0.01)), label="cart")
    builder.add_shape_box(cart, hx=0.15, hy=0.1, hz=0.08, cfg=cfg)
    pole = builder.add_link(
        mass=pole_mass, com=wp.vec3(0.0, 0.0, half), inertia=wp.diag(wp.vec3(rod, rod, 1e-5)), label="pole"
    )
    builder.add_shape_capsule(
        pole, xform=wp.transform((0.0, 0.0, half), wp.quat_identity()), radius=0.02, half_height=half, cfg=cfg
    )
    slider = builder.add_joint_prismatic(-1, cart, axis=(1.0, 0.0, 0.0), label="slider")
    hinge = builder.add_joint_revolute(cart, pole, axis=(0.0, 1.0, 0.0), label="hinge")
    builder.add_articulation([slider, hinge])
    for shape in range(builder.shape_count):
        builder.shape_flags[shape] &= ~newton.ShapeFlags.COLLIDE_SHAPES


def lqr_gain(cart_mass: float, pole_mass: float, pole_length: float, force_scale: float, dt: float) -> np.ndarray:
    """Discrete LQR gain K (u = -K x, u in action units) of the cart-pole linearized upright."""
    m_c, m_p, length = cart_mass, pole_mass, pole_length
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


def cartpole_lqr(task, world, settings: dict):
    """The ``[expert]`` factory: linear state feedback u = -K proprio with the discrete LQR gain of the model
    linearized upright (``settings``: the model's ``cart_mass``, ``pole_mass``, ``pole_length``)."""
    sizes = _sizes(settings, f"{task.config.params.file}: expert")
    if task.spec.proprio_dim != 4 or task.spec.action_dim != 1:
        raise ValueError("cartpole.lqr needs cartpole's layout (proprio [x, x_dot, theta, theta_dot], one force)")
    gain = lqr_gain(*sizes, world.config.action.scale[0], world.config.control_dt)
    gain = wp.array(gain.astype(np.float32), dtype=float, device=world.device)
    action = wp.zeros((world.num_envs, 1), dtype=float, device=world.device)

    def act(observation: dict) -> wp.array:
        wp.launch(
            kernels.expert_kernel,
            dim=world.num_envs,
            inputs=[gain, world.action_low, world.action_high, observation["proprio"]],
            outputs=[action],
            device=world.device,
        )
        return action

    return act
