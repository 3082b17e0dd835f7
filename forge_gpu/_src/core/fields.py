"""The names every episode shares, in one place: the required observation fields, the integer id fields,
the transition fields, and the check of an observation layout (field -> per-env shape, dtype) against them.
numpy and the standard library."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

#: Observation fields every episode holds, in `obs/` and `next/`.
REQUIRED_FIELDS = ("env_id", "episode_id", "step_id", "time", "proprio")


#: Integer bookkeeping fields among them: shape [T], non-negative.
ID_FIELDS = ("env_id", "episode_id", "step_id")
#: The bookkeeping fields: the ids and ``time``. Statistics and exports leave them out; the episode checks
#: read them whatever a projection asks for.
BOOKKEEPING_FIELDS = (*ID_FIELDS, "time")
#: Per-transition fields of an episode, beside its observation frames.
TRANSITIONS = ("action", "reward", "terminated", "truncated")


def per_env_nbytes(shape: Iterable[int], dtype: Any) -> int:
    """Bytes of one env's row of a field of per-env ``shape`` and ``dtype``."""
    return math.prod(int(s) for s in shape) * np.dtype(dtype).itemsize


def observation_layout(spec: Mapping) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """field -> (per-env shape, dtype) from ``spec['observation']``, checked."""
    described = spec.get("observation") if isinstance(spec, Mapping) else None
    if not isinstance(described, Mapping):
        raise ValueError("env.spec must hold 'observation': {field: {'shape': [...], 'dtype': '...'}}")
    layout = {}
    for field, entry in described.items():
        try:
            shape = tuple(int(s) for s in entry["shape"])
            dtype = np.dtype(entry["dtype"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"env.spec['observation'][{field!r}] needs 'shape' and 'dtype': {exc}") from exc
        if dtype.kind not in "biuf":
            raise ValueError(f"observation field {field!r} has non-numeric dtype {dtype}")
        layout[field] = (shape, dtype)
    missing = [f for f in REQUIRED_FIELDS if f not in layout]
    if missing:
        raise ValueError(f"env.spec['observation'] lacks the required field(s) {missing}")
    for field in ID_FIELDS:
        if layout[field][0] != () or layout[field][1].kind not in "iu":
            raise ValueError(f"observation field {field!r} must be a per-env integer scalar")
    if layout["time"][0] != () or len(layout["proprio"][0]) != 1:
        raise ValueError("observation fields 'time' and 'proprio' must have per-env shapes [] and [P]")
    return layout
