"""The initial-penetration check of a task file's world: after the first reset, is a body inside the ground or
another body (two geoms overlap deeper than :data:`TOLERANCE`)? Said once per env, as one ``ModelWarning`` line
naming the geoms, their bodies and the depth.

It runs MuJoCo's own collision detection (the ``mujoco`` package, on the host) on world 0's reset state, in a
one-world copy of the model built once per process and model: MuJoCo-Warp detects the same contacts, so what
it reports is what the first step's solver pushes apart.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np

TOLERANCE = 0.005
"""Depth [m] beyond which a contact at the first reset is reported (resting contacts sit within MuJoCo's margins)."""
SHOWN = 4
"""At most this many pairs are named; the line counts the rest."""

_WORLDS: dict[str, Any] = {}


def penetrations(model: dict, source: str, joint_q: np.ndarray) -> list[tuple[str, str, float]]:
    """``(geom, other geom, depth [m])`` of every contact deeper than :data:`TOLERANCE` in the state whose joint
    coordinates are ``joint_q`` (one world's), deepest first."""
    import mujoco
    import newton

    from forge_gpu._src.tasks.taskfile.model import add_model

    key = json.dumps(model, sort_keys=True) + source.split(" (")[0]
    if key not in _WORLDS:
        builder = newton.ModelBuilder()
        newton.solvers.SolverMuJoCo.register_custom_attributes(builder)
        with warnings.catch_warnings():  # the task's build said what this second build of its model would say
            warnings.simplefilter("ignore")
            add_model(builder, model, source)
            one = builder.finalize(device="cpu")
            _WORLDS[key] = (one, newton.solvers.SolverMuJoCo(one, use_mujoco_cpu=True))
    one, solver = _WORLDS[key]
    state = one.state()
    state.joint_q.assign(np.asarray(joint_q, np.float32))
    solver._update_mjc_data(solver.mj_data, one, state)
    mujoco.mj_forward(solver.mj_model, solver.mj_data)
    data, shapes = solver.mj_data, solver.mjc_geom_to_newton_shape.numpy()[0]
    labels, bodies = list(one.shape_label), one.shape_body.numpy()
    body_labels = list(one.body_label)

    def name(geom: int) -> str:
        s = int(shapes[geom]) if geom < len(shapes) else -1
        if s < 0:
            return f"geom {geom}"
        b = int(bodies[s])
        shape = str(labels[s]).rsplit("/", 1)[-1]
        return shape if b < 0 else f"{shape} (body {str(body_labels[b]).rsplit('/', 1)[-1]})"

    n, contact = data.ncon, data.contact
    dist, geom1, geom2 = contact.dist[:n], contact.geom1[:n], contact.geom2[:n]
    found = [(name(int(a)), name(int(b)), -float(d)) for a, b, d in zip(geom1, geom2, dist, strict=True)
             if -float(d) > TOLERANCE]  # fmt: skip
    return sorted(found, key=lambda f: -f[2])


def report_line(found: list[tuple[str, str, float]], where: str) -> str:
    """The one line that names what :func:`penetrations` found."""
    pairs = [f"{a} and {b} overlap by {depth:.3f} m" for a, b, depth in found[:SHOWN]]
    more = f"; {len(found) - SHOWN} more contacts" if len(found) > SHOWN else ""
    return (f"{where}: at the first reset (world 0) {'; '.join(pairs)}{more}: the first step pushes them apart; "
            "check model.position, model.pose and the model's own placement")  # fmt: skip
