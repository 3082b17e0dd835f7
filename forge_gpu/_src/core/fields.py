"""The names every episode shares, in one place: the required observation fields, the integer id fields,
the transition fields; the layout they keep (field -> per-row shape, dtype); and the one check of a layout
found in a batch, an episode file or a segment against the layout expected of it (:func:`check_layout`).
numpy and the standard library."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from forge_gpu._src.core.checks import is_int

#: Observation fields every episode holds, in `obs/` and `next/`.
REQUIRED_FIELDS = ("env_id", "episode_id", "step_id", "time", "proprio")


#: Integer bookkeeping fields among them: shape [T], non-negative.
ID_FIELDS = ("env_id", "episode_id", "step_id")
#: The bookkeeping fields: the ids and ``time``. Statistics and exports leave them out; the episode checks
#: read them whatever a projection asks for.
BOOKKEEPING_FIELDS = (*ID_FIELDS, "time")
#: Per-transition fields of an episode, beside its observation frames.
TRANSITIONS = ("action", "reward", "terminated", "truncated")


@dataclasses.dataclass(frozen=True)
class Kinds:
    """An expected dtype that may be of any of the numpy kinds ``codes`` (``"iu"``: any integer), called
    ``words`` in messages."""

    codes: str
    words: str


INTEGERS = Kinds("iu", "integers")
FLOATS = Kinds("f", "floating point")
BOOLS = Kinds("b", "bool")
NUMBERS = Kinds("iuf", "numbers")
NUMERIC = Kinds("biuf", "numeric")

#: A layout maps an entry (a field, member or column name) to its (shape, dtype). An expected layout (what
#: :func:`check_layout` checks against) may leave parts open: a size given as a name (``"P"``) may be any size,
#: a shape of None any shape; a dtype of :class:`Kinds` any dtype of those kinds, None any numeric dtype.
Layout = Mapping[str, tuple[Any, Any]]

#: The per-row layout of the required fields: one frame's (or one env's) values.
REQUIRED_LAYOUT = {
    "env_id": ((), INTEGERS),
    "episode_id": ((), INTEGERS),
    "step_id": ((), INTEGERS),
    "time": ((), NUMERIC),
    "proprio": (("P",), NUMERIC),
}
#: The per-row layout of the transition fields: one transition's values.
TRANSITION_LAYOUT = {
    "action": (("A",), FLOATS),
    "reward": ((), NUMBERS),
    "terminated": ((), BOOLS),
    "truncated": ((), BOOLS),
}


def leading(layout: Layout, *dims: Any) -> dict[str, tuple[Any, Any]]:
    """``layout`` with ``dims`` before every shape (a batch's ``N``, an episode file's ``"T"``)."""
    return {k: (None if shape is None else (*dims, *shape), dtype) for k, (shape, dtype) in layout.items()}


def describe(shape: Any, dtype: Any) -> str:
    """An (expected or found) shape and dtype as messages name them: ``float32[4, 3]``, ``integers of shape [T]``."""
    dims = "any shape" if shape is None else f"[{', '.join(str(s) for s in shape)}]"
    if isinstance(dtype, Kinds) or dtype is None:
        return f"{NUMERIC.words if dtype is None else dtype.words} of {'' if shape is None else 'shape '}{dims}"
    return f"{np.dtype(dtype)}{dims}" if shape is not None else f"{np.dtype(dtype)} of any shape"


def _fits(shape: tuple, dtype: np.dtype, want_shape: Any, want_dtype: Any) -> bool:
    if want_shape is not None and (
        len(shape) != len(want_shape)
        or any(w != s for s, w in zip(shape, want_shape, strict=True) if not isinstance(w, str))
    ):
        return False
    if isinstance(want_dtype, Kinds):
        return dtype.kind in want_dtype.codes
    return want_dtype is None or dtype == np.dtype(want_dtype)


def check_layout(
    found: Layout, expected: Layout, *, name: str, what: str, source: str, extra: bool | tuple[str, ...] = False
) -> None:
    """Check a found layout (entry -> (shape, dtype)) against an ``expected`` one (see :data:`Layout`): no entry
    it does not describe (but, with ``extra``, any entry, or those whose names start with one of the prefixes
    ``extra``), none it describes missing, every dtype numeric, and each expected entry's shape and dtype as
    described. ValueError naming ``name``, the ``what`` (field, member, column), the entry, what was found and
    the ``source`` of the expectation (``run.json``, ``schema 1``)."""
    unknown = [k for k in found if k not in expected and not (extra is True or (extra and k.startswith(extra)))]
    if unknown:
        raise ValueError(f"{name}: {what}(s) {unknown} are not described by {source}")
    missing = [k for k in expected if k not in found]
    if missing:
        raise ValueError(f"{name}: missing {what}(s) {missing} ({source})")
    for key, (_, dtype) in found.items():
        if np.dtype(dtype).kind not in NUMERIC.codes:
            raise ValueError(f"{name}: {what} {key} has non-numeric dtype {dtype}")
    for key, (want_shape, want_dtype) in expected.items():
        shape, dtype = tuple(found[key][0]), np.dtype(found[key][1])
        if not _fits(shape, dtype, want_shape, want_dtype):
            due, got = describe(want_shape, want_dtype), describe(shape, dtype)
            raise ValueError(f"{name}: {what} {key} must be {due} ({source}), got {got}")


def spec_layout(spec: Mapping, *, name: str, action_dtype: Any = None) -> tuple[dict[str, tuple[Any, Any]], bool]:
    """The per-row layout a run.json ``env_spec`` describes, for :func:`check_layout`: ``obs/<F>`` for each field
    of its ``observation`` (the shape and dtype it gives; open where it gives none) and ``action`` ``[A]`` (of
    ``action_dtype``: None for any float); and whether it describes the observation at all. ValueError naming
    ``name`` for an entry that is not a shape and a dtype."""
    layout: dict[str, tuple[Any, Any]] = {}
    described = spec.get("observation")
    for field, entry in (described if isinstance(described, Mapping) else {}).items():
        where = f"{name}: run.json's env_spec.observation[{field!r}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where} must be an object with 'shape' and 'dtype', got {entry!r}")
        shape, dtype = entry.get("shape"), entry.get("dtype")
        if shape is not None and (not isinstance(shape, list) or not all(is_int(s) and s >= 0 for s in shape)):
            raise ValueError(f"{where}: shape must be a list of sizes, got {shape!r}")
        try:
            dtype = None if dtype is None else np.dtype(dtype)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: dtype {dtype!r} is not a numpy dtype") from exc
        layout[f"obs/{field}"] = (None if shape is None else tuple(shape), dtype)
    action_shape = spec.get("action_shape")
    width = action_shape[0] if isinstance(action_shape, list) and len(action_shape) == 1 else None
    if not is_int(width) or width < 1:
        raise ValueError(f"{name}: run.json's env_spec.action_shape must be [A] with A >= 1, got {action_shape!r}")
    layout["action"] = ((width,), FLOATS if action_dtype is None else np.dtype(action_dtype))
    return layout, isinstance(described, Mapping)


def check_spec_layout(
    found: Layout, spec: Mapping, *, name: str, what: str, lead: tuple = (), action_dtype: Any = None
) -> None:
    """Check the ``obs/`` entries and ``action`` of a found layout against run.json's ``env_spec``
    (:func:`spec_layout`; ``lead``: the dims before each described shape, as :func:`leading`): the same fields,
    each of the shape and dtype it describes, and an action as wide as ``action_shape``."""
    expected, described = spec_layout(spec, name=name, action_dtype=action_dtype)
    found = {k: v for k, v in found.items() if k == "action" or k.startswith("obs/")}
    check_layout(found, leading(expected, *lead), name=name, what=what, source="run.json", extra=not described)


def per_env_nbytes(shape: Iterable[int], dtype: Any) -> int:
    """Bytes of one env's row of a field of per-env ``shape`` and ``dtype``."""
    return math.prod(int(s) for s in shape) * np.dtype(dtype).itemsize


#: The env_spec groups beside the observation, each ``{name: {"shape": [...], "dtype": "..."}}`` and each empty where
#: missing: ``state``, the simulator state of every frame (what restores the world), and ``params``, the values an
#: episode was randomized with (drawn at its reset, constant through it).
SPEC_GROUPS = ("state", "params")


def without_groups(spec: Mapping, keep: tuple[str, ...] = ()) -> dict:
    """``spec`` without those of its :data:`SPEC_GROUPS` not in ``keep``: the env_spec of a run that stores neither
    (schema 1), or only some."""
    return {key: value for key, value in spec.items() if key not in SPEC_GROUPS or key in keep}


def group_layout(spec: Mapping, group: str, *, name: str = "env.spec") -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """entry -> (per-env shape, dtype) of ``spec[group]`` (``observation`` or one of :data:`SPEC_GROUPS`), {} where
    the spec has none; ValueError naming ``name``, the group and the entry for one that is not a shape (a list of
    sizes) and a numeric dtype."""
    described = spec.get(group) if isinstance(spec, Mapping) else None
    if described is None:
        return {}
    if not isinstance(described, Mapping):
        raise ValueError(f"{name}[{group!r}] must be {{name: {{'shape': [...], 'dtype': '...'}}}}, got {described!r}")
    layout = {}
    for key, entry in described.items():
        try:
            shape, dtype = entry["shape"], np.dtype(entry["dtype"])
            if not isinstance(shape, list | tuple) or not all(is_int(s) and s >= 0 for s in shape):
                raise ValueError(f"shape must be a list of sizes, got {shape!r}")
            if dtype.kind not in NUMERIC.codes:
                raise ValueError(f"dtype {dtype} is not numeric")
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{name}[{group!r}][{key!r}] needs 'shape' and a numeric 'dtype': {exc}") from exc
        layout[key] = (tuple(int(s) for s in shape), dtype)
    return layout


def observation_layout(spec: Mapping) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """field -> (per-env shape, dtype) from ``spec['observation']``, checked."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("observation"), Mapping):
        raise ValueError("env.spec must hold 'observation': {field: {'shape': [...], 'dtype': '...'}}")
    layout = group_layout(spec, "observation")
    check_layout(
        layout, REQUIRED_LAYOUT, name="env.spec['observation']", what="field", source="the required fields", extra=True
    )
    return layout
