"""The physics solver: which one a config names (:func:`make_solver`, for a model with or without contacts) and
its overflow flags as counted facts, not kernel printf lines.

MuJoCo-Warp sets bits of a per-world ``overflow`` mask when a step ran out of room (contacts or constraint rows
beyond ``nconmax`` or ``njmax``: dropped) or stopped at an iteration limit (less converged), and prints a line
from the kernel each time. :class:`SolverOverflow` silences the prints and gathers each step's bits into the
step result (``info["solver_overflow"]``, int32 [N]): one small launch per substep, read on the host with the
batch the step already sends. :class:`OverflowTally` counts them per collection on the host (whole-array
numpy per batch) and :func:`overflow_lines` says what they mean, once.
"""

from __future__ import annotations

import warnings

import newton
import numpy as np
import warp as wp

from forge_gpu._src.sim.config import TaskConfig
from forge_gpu.kernels import solver as kernels


def check_solver(config: TaskConfig, has_contacts: bool) -> None:
    """ValueError (one line) where the task's contacts need a solver other than the config's."""
    s = config.solver
    if has_contacts and s.name != "mujoco":
        # The other solvers need Newton's collision pipeline each substep, which VectorEnv does not run yet.
        raise ValueError(
            f"solver.name = {s.name!r}: task {config.task!r} has contacts, which only solver 'mujoco' handles here"
        )


def make_solver(model, config: TaskConfig, has_contacts: bool):
    check_solver(config, has_contacts)
    s = config.solver
    if s.name == "mujoco":
        return newton.solvers.SolverMuJoCo(
            model,
            iterations=s.iterations,
            ls_iterations=s.ls_iterations,
            integrator=s.integrator,
            cone=s.cone,
            impratio=s.impratio,
            nconmax=s.nconmax,
            njmax=s.njmax,
            disable_contacts=not has_contacts,
        )
    if s.name == "featherstone":
        return newton.solvers.SolverFeatherstone(model)
    if s.name == "semi_implicit":
        return newton.solvers.SolverSemiImplicit(model)
    return newton.solvers.SolverXPBD(model, iterations=s.iterations)


# MuJoCo-Warp's OverflowType bits (checked against the installed mujoco_warp when a solver is wrapped).
FLAGS = {
    "NEFC": 1 << 0,
    "NJMAX_NNZ": 1 << 1,
    "BROADPHASE": 1 << 2,
    "NARROWPHASE": 1 << 3,
    "CCD": 1 << 4,
    "HFIELD": 1 << 5,
    "CONTACT_MATCH": 1 << 6,
    "NVMAX": 1 << 7,
    "EPA_HORIZON": 1 << 8,
    "ITERATIONS": 1 << 9,
    "LS_ITERATIONS": 1 << 10,
    "TACTILE": 1 << 11,
}
NOT_CONVERGED = FLAGS["ITERATIONS"] | FLAGS["LS_ITERATIONS"]
"""The step's solve stopped at its iteration limit: a less converged, still complete, step."""
DROPPED = sum(FLAGS.values()) & ~NOT_CONVERGED
"""A buffer was too small: contacts or constraint rows were dropped, so the step's physics is wrong."""
CLASSES = {"dropped": DROPPED, "not_converged": NOT_CONVERGED}
SETTING = {"BROADPHASE": "nconmax", "NARROWPHASE": "nconmax", "NEFC": "njmax", "ITERATIONS": "iterations",
           "LS_ITERATIONS": "ls_iterations"}  # fmt: skip
"""The ``[solver]`` setting that makes room for each flag (the others are MuJoCo-Warp's own sizes)."""
LABEL = {"NEFC": "constraint rows beyond njmax", "ITERATIONS": "iteration limit", "LS_ITERATIONS": "linesearch limit"}
MAX_LISTED = 1024
"""At most this many ``(env_id, episode_id)`` pairs of episodes with dropped contacts are listed."""


class SolverOverflowWarning(RuntimeWarning):
    """A collection's steps dropped contacts or constraint rows (``collect`` warns once per collection)."""


class SolverOverflow:
    """The overflow bits of each env's last step, on the device: ``bits`` int32 [N] (zeros for solvers other
    than MuJoCo-Warp's). ``limits``: the sizes and iteration limits in use (empty for the other solvers)."""

    def __init__(self, solver, num_envs: int, device):
        self.bits = wp.zeros(num_envs, dtype=wp.int32, device=device)
        self.limits: dict = {}
        data = getattr(solver, "mjw_data", None)
        self._source = None if data is None else data.overflow
        if self._source is None:
            return
        _check_flags()
        if tuple(self._source.shape) != (num_envs,):
            raise RuntimeError(
                f"MuJoCo-Warp keeps {self._source.shape} overflow masks; expected {num_envs}, one per env"
            )
        solver.mjw_model.opt.warn_overflow = 0  # counted here, not printed by the kernels
        opt = solver.mjw_model.opt
        self.limits = {"nconmax": int(data.naconmax) // int(data.nworld), "njmax": int(data.njmax),
                       "iterations": int(opt.iterations), "ls_iterations": int(opt.ls_iterations)}  # fmt: skip

    def gather(self, substep: int) -> None:
        """After physics substep ``substep`` of a step: OR its bits into ``bits`` (the first substep resets them)."""
        if self._source is not None:
            wp.launch(
                kernels.gather_overflow_kernel,
                dim=self.bits.shape[0],
                inputs=[int(substep == 0), self._source],
                outputs=[self.bits],
                device=self.bits.device,
            )

    def clear(self) -> None:
        """Before a reset's frames: no step, no flags."""
        self.bits.zero_()


def _check_flags() -> None:
    import mujoco_warp

    installed = {name: int(flag) for name, flag in mujoco_warp.OverflowType.__members__.items() if name in FLAGS}
    if installed != FLAGS:
        raise RuntimeError(f"mujoco_warp's OverflowType {installed} differs from forge_gpu's table {FLAGS}")


class OverflowTally:
    """A collection's overflow counts from its host batches: per flag and per class (:data:`CLASSES`), the steps
    and env-steps (transitions) that had it, the envs and the ended episodes that had it in any transition."""

    def __init__(self, num_envs: int, limits: dict):
        self.limits = dict(limits)
        self.steps = self.env_steps = self.episodes = 0
        self._open = np.zeros(num_envs, np.int32)  # each env's current episode's bits so far
        self._env = np.zeros(num_envs, np.int32)  # each env's bits over the collection
        self._bits = np.array(list(FLAGS.values()), np.int32)
        self._flag_steps = np.zeros(len(FLAGS), np.int64)
        self._flag_env_steps = np.zeros(len(FLAGS), np.int64)
        self._class = {name: {"steps": 0, "env_steps": 0, "episodes": 0} for name in CLASSES}
        self._listed: list = []

    def add(self, bits: np.ndarray, active: np.ndarray, ended: np.ndarray, env_id, episode_id) -> None:
        """One batch: the step's ``bits`` int32 [N], ``active`` (rows whose transition belongs to an episode) and
        ``ended`` (terminated or truncated) bool [N], the rows' ``env_id`` and ``episode_id``."""
        if not active.any():
            return
        self.steps += 1
        self.env_steps += int(np.count_nonzero(active))
        bits = np.where(active, bits, 0).astype(np.int32)
        if bits.any():
            step = int(np.bitwise_or.reduce(bits))
            hit = (bits[:, None] & self._bits) != 0
            self._flag_env_steps += hit.sum(axis=0)
            self._flag_steps += (step & self._bits) != 0
            for name, mask in CLASSES.items():
                rows = (bits & mask) != 0
                self._class[name]["env_steps"] += int(np.count_nonzero(rows))
                self._class[name]["steps"] += int(step & mask != 0)
            self._open |= bits
            self._env |= bits
        self.episodes += int(np.count_nonzero(ended & active))
        closing = ended & (self._open != 0)
        if closing.any():
            for name, mask in CLASSES.items():
                self._class[name]["episodes"] += int(np.count_nonzero(self._open[closing] & mask))
            rows = np.flatnonzero(closing & (self._open & DROPPED != 0))[: MAX_LISTED - len(self._listed)]
            self._listed += [[int(env_id[r]), int(episode_id[r])] for r in rows]  # bounded by MAX_LISTED
            self._open[ended] = 0

    def report(self) -> dict:
        """The counts as a plain dict (run.json's ``solver_overflow``; :func:`overflow_lines` reads it)."""
        flags = {
            name: {"steps": int(s), "env_steps": int(e)}
            for name, s, e in zip(FLAGS, self._flag_steps, self._flag_env_steps, strict=True)
            if e
        }
        classes = {
            name: {**counts, "envs": int(np.count_nonzero(self._env & CLASSES[name]))}
            for name, counts in self._class.items()
        }
        classes["dropped"]["episode_ids"] = list(self._listed)
        return {"steps": self.steps, "env_steps": self.env_steps, "envs": len(self._env), "episodes": self.episodes,
                "limits": dict(self.limits), "flags": flags, **classes}  # fmt: skip


def merge_reports(reports: list[dict]) -> dict:
    """Several collections' reports (:meth:`OverflowTally.report`, e.g. one per worker) as one: every count
    summed, the limits of the first; the episode lists stay in each run's run.json (their env ids are the run's)."""
    if not reports:
        return {}
    merged = {key: sum(r[key] for r in reports) for key in ("steps", "env_steps", "envs", "episodes")}
    merged["limits"] = dict(reports[0]["limits"])
    merged["flags"] = {}
    for report in reports:
        for name, counts in report["flags"].items():
            into = merged["flags"].setdefault(name, {"steps": 0, "env_steps": 0})
            into["steps"], into["env_steps"] = into["steps"] + counts["steps"], into["env_steps"] + counts["env_steps"]
    for name in CLASSES:
        merged[name] = {key: sum(r[name][key] for r in reports) for key in ("steps", "env_steps", "episodes", "envs")}
    return merged


def overflow_lines(report: dict) -> list[str]:
    """What a report (:meth:`OverflowTally.report`) means, one line per class that occurred; none when clean."""
    lines = []
    for name, what, then in (
        ("dropped", "contacts or constraint rows dropped", "the physics of those steps is wrong"),
        ("not_converged", "solver stopped at an iteration limit", "those steps are less converged"),
    ):
        counts = report.get(name)
        if not counts or not counts["env_steps"]:
            continue
        seen = report["flags"]
        flags = [f for f, v in FLAGS.items() if v & CLASSES[name] and f in seen]
        named = ", ".join(f"{LABEL.get(f, f'{f.lower()} overflow')} in {seen[f]['env_steps']}" for f in flags)
        settings = sorted({SETTING[f] for f in flags if f in SETTING})
        raise_ = ", ".join(f"[solver] {s} (now {report['limits'][s]})" for s in settings)
        lines.append(
            f"{what} in {counts['steps']} of {report['steps']} steps ({named} env-steps; {counts['envs']} of "
            f"{report['envs']} envs, {counts['episodes']} of {report['episodes']} ended episodes): {then}"
            + (f"; raise {raise_}" if raise_ else "")
        )
    return lines


def warn_dropped(report: dict) -> None:
    """Warn once (:class:`SolverOverflowWarning`) when a collection dropped contacts or constraint rows."""
    if report and report["dropped"]["env_steps"]:
        warnings.warn(f"forge_gpu: {overflow_lines(report)[0]}", SolverOverflowWarning, stacklevel=3)
