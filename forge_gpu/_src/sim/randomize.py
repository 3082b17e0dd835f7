"""Domain randomization: per world and per episode, drawn and applied inside the captured step.

A config's ``[randomize]`` table (:class:`~forge_gpu._src.sim.config.RandomRange`) names parameters from the
task's catalog (:meth:`Task.randomizable`): the physics ones below, which the env writes into Newton's model,
and the task's own (colours, camera pose), which the task's kernels read. At every reset each selected world
draws its values from the counter-based stream keyed by ``(seed, env, episode)`` (``kernels/randomize.py``),
so env ``i``'s values do not depend on how many envs run; they stay until the world's next reset and are
recorded once per episode (``StepResult.params``, env.spec's ``params``).

What the physics parameters touch in Newton's model (world ``w``'s entries only), and the solver notification
the env then makes once per step, inside the captured graph (no host sync, no re-capture):

============================  =========================================================  ==========================
parameter                     model arrays                                               notify flag
============================  =========================================================  ==========================
``mass_scale``                ``body_mass``, ``body_inertia`` (nominal * s) and inverses  BODY_INERTIAL_PROPERTIES
``friction``                  ``shape_material_mu`` of every shape (= value)             SHAPE_PROPERTIES
``joint_stiffness_scale``     ``joint_target_ke`` (drive position gains, nominal * s)    JOINT_DOF_FORCE_PROPERTIES
``joint_damping_scale``       ``joint_target_kd`` (drive velocity gains, nominal * s)    JOINT_DOF_FORCE_PROPERTIES
``joint_armature_scale``      ``joint_armature`` (nominal * s)                           JOINT_DOF_INERTIAL_PROPERTIES
``actuator_gain_scale``       none: the task's action kernel multiplies the effort        none
============================  =========================================================  ==========================

A task's own parameters are applied by its kernels (``Task.apply_params``); one that writes the model names its
flags in ``Parameter.notify`` and the env notifies them alike (``push``: ``cube_size`` writes the cube's
``shape_scale`` and inertia, SHAPE_PROPERTIES and BODY_INERTIAL_PROPERTIES; ``cube_mass`` its mass and inertia;
``cube_friction`` its ``shape_material_mu``). A discrete choice (``Parameter.names``: a palette) is drawn with
``dist = "integer"`` and recorded as the chosen index.

SolverMuJoCo's notification copies the changed arrays into MuJoCo-Warp's per-world model and, for the inertial
flags, recomputes MuJoCo's derived constants (``set_const``) for all worlds: that is the cost a physics
randomization adds to every step (bench/replay.py and the README give it). Without a physics parameter the
env makes no notification.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import newton
import numpy as np
import warp as wp

from forge_gpu.kernels import randomize as kernels


@dataclass(frozen=True)
class Parameter:
    """A randomizable parameter: its per-episode shape, its nominal value, and what it changes."""

    shape: tuple[int, ...]
    nominal: tuple[float, ...]
    """The value of a world whose task reads the parameter but whose config does not randomize it."""
    doc: str
    notify: tuple[str, ...] = ()
    """The ``newton.ModelFlags`` of the model arrays that applying the parameter writes: the solver is notified of
    them (once per step, in the graph) when the config randomizes it."""
    names: tuple[str, ...] = ()
    """A discrete choice: the value is an index into ``names`` (a palette's colours), drawn with ``dist =
    "integer"`` between low and high, both in 0 .. len(names) - 1, or among ``choices`` of such indices, and
    recorded as that index (float32)."""
    rows: bool = False
    """One row per item (shape (D, ...): D distractors): a ``[randomize]`` range may give one row's values, which
    every row draws from (each row its own draw)."""

    def row_size(self) -> int:
        """The numbers of one row (of a ``rows`` parameter), or of the whole value."""
        return int(np.prod(self.shape[1:])) if self.rows else int(np.prod(self.shape))


PHYSICS = {
    "mass_scale": Parameter(
        (), (1.0,), "multiplies every body's mass and inertia", notify=("BODY_INERTIAL_PROPERTIES",)
    ),
    "friction": Parameter(
        (), (1.0,), "the friction coefficient of every shape (Newton's shape_material_mu)", notify=("SHAPE_PROPERTIES",)
    ),
    "joint_stiffness_scale": Parameter(
        (), (1.0,), "multiplies the joint drives' position gains (target_ke)", notify=("JOINT_DOF_FORCE_PROPERTIES",)
    ),
    "joint_damping_scale": Parameter(
        (), (1.0,), "multiplies the joint drives' velocity gains (target_kd)", notify=("JOINT_DOF_FORCE_PROPERTIES",)
    ),
    "joint_armature_scale": Parameter(
        (), (1.0,), "multiplies every joint's armature", notify=("JOINT_DOF_INERTIAL_PROPERTIES",)
    ),
    "actuator_gain_scale": Parameter((), (1.0,), "multiplies the effort each action unit commands"),
}
"""The physics parameters the env applies (tasks choose which of them they offer). A task's own parameter that
writes the model (``push``'s cube mass, size and friction) names its flags in ``Parameter.notify`` alike."""

DIST_CODES = {"uniform": 0, "log_uniform": 1, "integer": 2, "choice": 3}
"""``RandomRange.dist`` -> the draw kernel's code (``kernels/randomize.py``)."""


def stream_key(name: str) -> int:
    """The draw key of a parameter: its name's CRC-32, with room for 16 components, so that adding or removing
    another parameter never changes this one's values."""
    return (zlib.crc32(name.encode()) & 0x7FFFFFF) << 4


def check_ranges(ranges, catalog: dict[str, Parameter], task: str) -> None:
    """ValueError naming a ``[randomize]`` entry that ``task`` does not offer, whose size is wrong, or (a discrete
    choice) that is not an ``integer`` range of its indices."""
    for r in ranges:
        if r.name not in catalog:
            allowed = ", ".join(sorted(catalog)) or "none"
            raise ValueError(f"randomize.{r.name}: task {task!r} cannot randomize it; allowed: {allowed}")
        p = catalog[r.name]
        size, row = int(np.prod(p.shape)), p.row_size()
        if r.dist == "choice" and row != 1:
            raise ValueError(f"randomize.{r.name} = {r.to_table()}: choices draws single numbers; {r.name} has "
                             f"{row} per value: give {{ low = [...], high = [...] }}")  # fmt: skip
        if len(r.low) not in (size, row) and r.dist != "choice":
            each = f" (or {row}, one row's, for every row)" if p.rows and row != size else ""
            raise ValueError(f"randomize.{r.name}: expected {size} value(s){each} for low and high, got {len(r.low)}")
        names = p.names
        whole = r.dist == "choice" and all(v == int(v) for v in r.choices)
        if names and (r.dist not in ("integer", "choice") or (r.dist == "choice" and not whole)
                      or min(r.low) < 0 or max(r.high) > len(names) - 1):  # fmt: skip
            choices = ", ".join(f"{i} {name}" for i, name in enumerate(names))
            raise ValueError(
                f"randomize.{r.name} = {r.to_table()}: an index into ({choices}); expected "
                f'{{ low = ..., high = ..., dist = "integer" }} with 0 <= low <= high <= {len(names) - 1}, or '
                f"{{ choices = [...] }} of such indices"
            )


class Randomizer:
    """The per-world values of one env's randomized parameters, their draws and their writes into the model.

    ``values[name]`` is a float32 ``[N, *shape]`` device array for every parameter of the task's catalog
    (the nominal value where the config does not randomize it); ``recorded`` the configured ones, the
    run's ``params``.
    """

    def __init__(self, world, catalog: dict[str, Parameter], ranges):
        n, device = world.num_envs, world.device
        self.world, self.catalog = world, catalog
        self.ranges = {r.name: r for r in ranges}
        self.values: dict[str, wp.array] = {}
        for name, p in catalog.items():
            nominal = np.broadcast_to(np.asarray(p.nominal, np.float32).reshape(p.shape), (n, *p.shape))
            self.values[name] = wp.array(np.ascontiguousarray(nominal), dtype=float, device=device)
        self.recorded = {name: self.values[name] for name in self.ranges}
        self._bounds = {
            name: (wp.array(np.float32(r.low), device=device), wp.array(np.float32(r.high), device=device),
                   wp.array(np.float32(r.choices or (0.0,)), device=device))
            for name, r in self.ranges.items()
        }  # fmt: skip
        model = world.model
        self._per_world = {
            "body": model.body_count // n,
            "shape": model.shape_count // n,
            "dof": model.joint_dof_count // n,
        }
        _check_contiguous(model, n)
        self.notify_flags = 0
        for name in self.ranges:
            for flag in catalog[name].notify:
                self.notify_flags |= int(getattr(newton.ModelFlags, flag))
        self._nominal = {}
        if "mass_scale" in self.ranges:
            self._nominal["mass"] = wp.clone(model.body_mass)
            self._nominal["inertia"] = wp.clone(model.body_inertia)
        for name, array in (
            ("joint_stiffness_scale", "joint_target_ke"),
            ("joint_damping_scale", "joint_target_kd"),
            ("joint_armature_scale", "joint_armature"),
        ):
            if name in self.ranges:
                self._nominal[name] = wp.clone(getattr(model, array))

    def spec(self) -> dict:
        """env.spec's ``params``: name -> {shape, dtype} of every recorded parameter."""
        return {name: {"shape": list(self.catalog[name].shape), "dtype": "float32"} for name in self.recorded}

    def draw(self, reset_mask: wp.array) -> None:
        """Draw the recorded parameters of the worlds in ``reset_mask`` (one launch per parameter), keyed by the
        world's draw keys (``World.draw_env``, ``World.draw_episode``)."""
        w = self.world
        for name, r in self.ranges.items():
            low, high, choices = self._bounds[name]
            values = _rows(self.values[name])
            wp.launch(
                kernels.draw_kernel,
                dim=values.shape,
                inputs=[
                    w.seed,
                    stream_key(name),
                    low,
                    high,
                    DIST_CODES[r.dist],
                    choices,
                    reset_mask,
                    w.draw_episode,
                    w.draw_env,
                ],  # fmt: skip
                outputs=[values],
                device=w.device,
            )

    def restore(self, reset_mask: wp.array, values: dict) -> None:
        """Set the recorded parameters of the worlds in ``reset_mask`` to ``values`` (name -> [N, ...] numpy)."""
        w = self.world
        for name in self.ranges:
            target = _rows(self.values[name])
            given = wp.array(np.ascontiguousarray(values[name], np.float32).reshape(target.shape), device=w.device)
            wp.launch(
                kernels.copy_rows_kernel,
                dim=target.shape,
                inputs=[reset_mask, given],
                outputs=[target],
                device=w.device,
            )

    def apply(self, reset_mask: wp.array) -> None:
        """Write the physics parameters of the worlds in ``reset_mask`` into the model (the task applies its own).
        The solver's notification (:attr:`notify_flags`) is the env's, once per step."""
        w, model, per, nominal = self.world, self.world.model, self._per_world, self._nominal
        if "mass_scale" in self.ranges:
            wp.launch(
                kernels.scale_mass_kernel,
                dim=(w.num_envs, per["body"]),
                inputs=[per["body"], nominal["mass"], nominal["inertia"], reset_mask, self.values["mass_scale"]],
                outputs=[model.body_mass, model.body_inv_mass, model.body_inertia, model.body_inv_inertia],
                device=w.device,
            )
        if "friction" in self.ranges:
            wp.launch(
                kernels.set_entries_kernel,
                dim=(w.num_envs, per["shape"]),
                inputs=[per["shape"], reset_mask, self.values["friction"]],
                outputs=[model.shape_material_mu],
                device=w.device,
            )
        for name, array in (
            ("joint_stiffness_scale", "joint_target_ke"),
            ("joint_damping_scale", "joint_target_kd"),
            ("joint_armature_scale", "joint_armature"),
        ):
            if name in self.ranges:
                wp.launch(
                    kernels.scale_entries_kernel,
                    dim=(w.num_envs, per["dof"]),
                    inputs=[per["dof"], self._nominal[name], reset_mask, self.values[name]],
                    outputs=[getattr(model, array)],
                    device=w.device,
                )


def _rows(array: wp.array) -> wp.array:
    """A ``[N, ...]`` array as ``[N, components]`` (a view)."""
    return array.reshape((array.shape[0], -1))


def _check_contiguous(model, n: int) -> None:
    """The kernels index world ``w``'s entries as ``w * per_world + k``: check that ``replicate`` laid them out so."""
    for name, count in (("body_world", model.body_count), ("shape_world", model.shape_count)):
        if count % n:
            raise ValueError(f"model.{name}: {count} entries do not split evenly over {n} worlds")
        worlds = getattr(model, name).numpy()
        if count and not (worlds == np.repeat(np.arange(n), count // n)).all():
            raise ValueError(f"model.{name}: the worlds' entries are not contiguous; randomization needs them so")
    if model.joint_dof_count % n:
        raise ValueError(f"model: {model.joint_dof_count} joint dofs do not split evenly over {n} worlds")
