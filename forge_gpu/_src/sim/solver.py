"""The physics solver a config names, for a model with or without contacts."""

from __future__ import annotations

import newton

from forge_gpu._src.sim.config import TaskConfig


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
