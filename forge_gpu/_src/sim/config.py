"""Task configuration: TOML files parsed into frozen, keyword-only dataclasses at the edge.

Nothing below the loader sees a raw dict. Every value is checked against the field's type and the
range or choices in its metadata; errors name the file, the key, the value and what is allowed.
Python keyword overrides (``make(..., max_steps=100, **{"solver.name": "featherstone"})``) go
through the same checks.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_gpu._src.core.checks import bounded, check_range, plain_number
from forge_gpu._src.core.labels import LABEL_SOURCES


def config_dir() -> Path:
    """The folder of the shipped task configs (``configs/``, installed as ``forge_gpu.configs``)."""
    return Path(str(importlib.resources.files("forge_gpu.configs")))


SOLVERS = ("mujoco", "featherstone", "semi_implicit", "xpbd")


@dataclass(frozen=True, kw_only=True)
class SolverConfig:
    """Physics solver and its settings."""

    name: str = field(default="mujoco", metadata=bounded(choices=SOLVERS))
    """Solver: ``mujoco`` (MuJoCo-Warp), ``featherstone``, ``semi_implicit`` or ``xpbd``."""
    iterations: int = field(default=20, metadata=bounded(1, 1000))
    """Constraint-solver iterations (MuJoCo, XPBD)."""
    ls_iterations: int = field(default=10, metadata=bounded(1, 1000))
    """Line-search iterations (MuJoCo)."""
    integrator: str = field(default="implicitfast", metadata=bounded(choices=("euler", "implicitfast")))
    """MuJoCo integrator."""
    cone: str = field(default="pyramidal", metadata=bounded(choices=("pyramidal", "elliptic")))
    """MuJoCo's friction cone: ``pyramidal`` (MuJoCo's default) or ``elliptic`` (a held object slips less)."""
    impratio: float = field(default=1.0, metadata=bounded(1.0, 1000.0))
    """MuJoCo's ratio of the friction constraints' impedance to the normal one's (> 1 makes friction harder: less
    slip in a grasp; meant with the elliptic cone)."""
    nconmax: int | None = field(default=None, metadata=bounded(1, 1 << 16))
    """Contact points per world MuJoCo-Warp makes room for (its pool holds ``nconmax * num_envs``, shared by all
    worlds); ``None`` (not set): MuJoCo-Warp's estimate from the model. Contacts beyond the pool are dropped and
    the collection says so (``CollectionSummary.solver_overflow``)."""
    njmax: int | None = field(default=None, metadata=bounded(1, 1 << 16))
    """Constraint rows per world (contacts, joint limits) MuJoCo-Warp makes room for; ``None``: its estimate."""


@dataclass(frozen=True, kw_only=True)
class ActionConfig:
    """Action bounds; actions are clipped to ``[low, high]`` and multiplied by ``scale``."""

    low: tuple[float, ...] = field(default=(-1.0,))
    """Lower bound per action dimension, shape (A,)."""
    high: tuple[float, ...] = field(default=(1.0,))
    """Upper bound per action dimension, shape (A,)."""
    scale: tuple[float, ...] = field(default=(1.0,))
    """Multiplier from the clipped action to the joint effort [N or N m] or target, shape (A,)."""


DISTRIBUTIONS = ("uniform", "log_uniform", "integer")


@dataclass(frozen=True, kw_only=True)
class RandomRange:
    """One entry of a config's ``[randomize]`` table: the range each world's value is drawn from at every
    reset (per component for a vector value)."""

    name: str
    """The randomized parameter (the task's :meth:`Task.randomizable` names them)."""
    low: tuple[float, ...]
    """Lower bound per component."""
    high: tuple[float, ...]
    """Upper bound per component (>= low)."""
    dist: str = "uniform"
    """``uniform``, ``log_uniform`` (uniform in log space; needs low > 0), ``integer`` (a whole number, each of
    low, low + 1, ..., high equally likely; low and high whole numbers: a palette index), or ``choice`` (one of
    ``choices``, each equally likely; low and high are then their least and greatest)."""
    choices: tuple[float, ...] = ()
    """With ``dist = "choice"``: the values allowed (a palette's indices held in or out of a training set), each
    component drawn among them."""

    def to_table(self) -> dict:
        """The TOML/JSON form: ``{"low": ..., "high": ..., "dist": ...}`` (scalars for one component), or
        ``{"choices": [...]}``."""

        def plain(values):
            return values[0] if len(values) == 1 else list(values)

        if self.dist == "choice":
            return {"choices": list(self.choices)}
        return {"low": plain(self.low), "high": plain(self.high), "dist": self.dist}

    def allowed(self, count: int) -> list[int]:
        """The whole numbers in ``0 .. count - 1`` this range can draw (a palette entry's set of colours)."""
        if self.dist == "choice":
            return sorted({int(v) for v in self.choices if 0 <= v < count})
        return [i for i in range(count) if min(self.low) <= i <= max(self.high)]


def parse_randomize(table: Any, source: str) -> tuple[RandomRange, ...]:
    """The ``[randomize]`` table: ``name = [low, high]`` or ``name = {low = ..., high = ..., dist = ...}``, low and
    high numbers or equal-length lists of numbers (``dist = "integer"``: whole numbers). ValueError naming the key,
    the value and what is allowed."""
    if not isinstance(table, dict):
        raise ValueError(f"{source}: [randomize] must be a table of name = {{low, high, dist}}, got {table!r}")
    out = []
    for name, entry in table.items():
        where = f"{source}: randomize.{name}"
        if isinstance(entry, dict) and "choices" in entry:
            out.append(_choices(name, entry, where))
            continue
        if isinstance(entry, list) and len(entry) == 2:
            entry = {"low": entry[0], "high": entry[1]}
        if not isinstance(entry, dict) or not {"low", "high"} <= entry.keys() <= {"low", "high", "dist"}:
            raise ValueError(
                f"{where} = {entry!r}: expected [low, high] or a table with keys low, high and optionally dist"
            )
        low = _coerce(entry["low"], tuple[float, ...], f"{where}.low")
        high = _coerce(entry["high"], tuple[float, ...], f"{where}.high")
        dist = _coerce(entry.get("dist", "uniform"), str, f"{where}.dist")
        check_range(dist, bounded(choices=DISTRIBUTIONS), f"{where}.dist")
        if len(low) != len(high):
            raise ValueError(f"{where}: low {list(low)} and high {list(high)} must have the same length")
        if any(lo > hi for lo, hi in zip(low, high, strict=True)):
            raise ValueError(f"{where}: low {list(low)} must not exceed high {list(high)}")
        if dist == "log_uniform" and min(low) <= 0.0:
            raise ValueError(f"{where}: a log_uniform range needs low > 0, got {list(low)}")
        if dist == "integer" and any(v != int(v) for v in (*low, *high)):
            raise ValueError(f"{where}: an integer range needs whole numbers, got low {list(low)}, high {list(high)}")
        out.append(RandomRange(name=name, low=low, high=high, dist=dist))
    return tuple(out)


def _choices(name: str, entry: dict, where: str) -> RandomRange:
    """A ``{ choices = [...] }`` entry: a non-empty list of distinct numbers, nothing else beside it."""
    values = entry["choices"]
    if set(entry) != {"choices"}:
        others = ", ".join(sorted(set(entry) - {"choices"}))
        raise ValueError(f"{where} = {entry!r}: choices stands alone (drop {others}); each listed value is equally "
                         "likely")  # fmt: skip
    if not (isinstance(values, list) and values and all(plain_number(v) for v in values)):
        raise ValueError(f"{where}.choices = {values!r}: expected a non-empty list of numbers")
    if len(set(values)) != len(values):
        raise ValueError(f"{where}.choices = {values!r}: each value once (they are equally likely)")
    choices = tuple(float(v) for v in values)
    return RandomRange(name=name, low=(min(choices),), high=(max(choices),), dist="choice", choices=choices)


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """A task's whole configuration. ``params`` is the task's own frozen dataclass."""

    task: str
    """Task id, e.g. ``cartpole``."""
    instruction: str
    """The task's language instruction."""
    num_envs: int = field(default=64, metadata=bounded(1, 1 << 20))
    """Number of environments (worlds of one model)."""
    max_steps: int = field(default=500, metadata=bounded(1, 1 << 20))
    """Episode length at which an episode is truncated [control steps]."""
    seed: int = field(default=0, metadata=bounded(0, (1 << 31) - 1))
    """Seed of every random draw (reset noise, randomization, the random policy)."""
    device: str | None = None
    """Warp device; ``None`` means ``cuda:0`` when Warp sees a CUDA device, else ``cpu``."""
    control_dt: float = field(default=0.02, metadata=bounded(1e-5, 1.0))
    """Control period [s]."""
    substeps: int = field(default=4, metadata=bounded(1, 1000))
    """Physics substeps per control step."""
    capture_graph: bool = True
    """Capture the step once as a graph and replay it (CUDA graph on CUDA, Warp's CPU graph on the CPU)."""
    record_state: bool = True
    """Give every step's simulator state (``joint_q``, ``joint_qd``, the task's own) to the recorder, so a run
    can be replayed and re-rendered (``state/<name>`` columns of a packed run)."""
    randomize: tuple[RandomRange, ...] = ()
    """The ``[randomize]`` table: per-world, per-episode ranges of physical and visual parameters."""
    label: str | None = field(default=None, metadata=bounded(choices=(None, *LABEL_SOURCES)))
    """``"expert"``: every frame's observation gains ``expert_action``, the task's expert's action for its state,
    computed inside the step (``sim/relabel.py``); ``None``: no label."""
    expert_mix: float | None = field(default=None, metadata=bounded(0.0, 1.0))
    """With ``label = "expert"``: the share of episodes (each drawn at its reset) that execute the expert's actions
    instead of the policy's, recorded as the param ``expert_executed``; ``None``: every episode executes the
    policy's and no param is recorded."""
    solver: SolverConfig = field(default_factory=SolverConfig)
    action: ActionConfig = field(default_factory=ActionConfig)
    params: Any = None
    """The task's parameters (reset noise, limits, reward weights): a frozen dataclass per task."""

    def __post_init__(self):
        if self.expert_mix is not None and self.label != "expert":
            raise ValueError(f"expert_mix = {self.expert_mix!r} needs label = 'expert' (the mix executes its labels)")

    @property
    def sim_dt(self) -> float:
        """Physics time step [s]."""
        return self.control_dt / self.substeps

    def to_dict(self) -> dict:
        """The configuration as a plain, JSON-serializable dict (``randomize`` as its TOML table), which
        :func:`load_config` takes back as overrides."""
        plain = _to_plain(self)
        plain["randomize"] = {r.name: r.to_table() for r in self.randomize}
        return plain

    def to_overrides(self) -> dict:
        """The configuration as the dotted overrides ``make`` and ``task_config`` take (:func:`as_overrides`)."""
        return as_overrides(self.to_dict())


def as_overrides(table: dict, prefix: str = "") -> dict:
    """A configuration's plain dict (:meth:`TaskConfig.to_dict`, run.json's ``config``) as dotted overrides:
    ``{"params": {"a": 1}}`` -> ``{"params.a": 1}``; the ``randomize`` table stays one value."""
    out = {}
    for key, value in table.items():
        if isinstance(value, dict) and key != "randomize" and value:
            out.update(as_overrides(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_to_plain(v) for v in value]
    return value


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Return ``value`` checked against the annotation ``tp``; raise ``ValueError`` naming ``where``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], where)
    if origin is tuple:
        (item,) = typing.get_args(tp)[:1]
        if plain_number(value):
            value = [value]
        if not isinstance(value, list | tuple) or not value:
            raise ValueError(f"{where} = {value!r}: expected a non-empty list of {_type_name(item)}")
        return tuple(_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if tp is float:
        if not plain_number(value):
            raise ValueError(f"{where} = {value!r}: expected a number")
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{where} = {value!r}: expected a finite number")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where} = {value!r}: expected an integer")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where} = {value!r}: expected true or false")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{where} = {value!r}: expected a string")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {where}")


def param_bounds(name: str, entry: dict, source: str) -> dict:
    """The bounds (:func:`bounded`) of a task file's bounded ``[params]`` entry ``NAME = { value = V, low = L,
    high = H }`` (either bound may be left out): the file's value and every override must lie within them."""
    lo, hi, choices = entry.get("low"), entry.get("high"), entry.get("choices")
    numbers = all(b is None or plain_number(b) for b in (lo, hi))
    listed = choices is None or (isinstance(choices, list) and choices and entry.get("value") in choices)
    if "value" not in entry or set(entry) - {"value", "low", "high", "choices"} or not numbers or not listed:
        raise ValueError(f"{source}: params.{name} = {entry!r}: a parameter is a number or "
                         "{ value = V, low = L, high = H } (numbers; either bound may be left out) or "
                         "{ value = V, choices = [...] }")  # fmt: skip
    return bounded(lo, hi, choices=tuple(choices) if choices is not None else None)


def build_dataclass(cls: type, table: dict, source: str, prefix: str = "") -> Any:
    """Build the frozen dataclass ``cls`` from a TOML table, checking every key.

    Args:
        cls: The dataclass type.
        table: Parsed TOML table.
        source: The file name (or ``overrides``) for error messages.
        prefix: The dotted path of ``table`` inside the file.
    """
    if not isinstance(table, dict):
        raise ValueError(f"{source}: [{prefix.rstrip('.')}] must be a table, got {table!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ValueError(f"{source}: unknown key {prefix}{unknown[0]!s}; allowed keys are {', '.join(sorted(fields))}")
    kwargs = {}
    for name, value in table.items():
        where = f"{source}: {prefix}{name}"
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build_dataclass(tp, value, source, f"{prefix}{name}.")
            continue
        value = _coerce(value, tp, where)
        check_range(value, fields[name].metadata, where)
        kwargs[name] = value
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{source}: missing key {prefix}{missing[0]}")
    return cls(**kwargs)


def _merge(base: dict, dotted: dict, source: str) -> dict:
    """Return ``base`` with ``{"a.b": v}`` overrides written into its nested tables. A table given for a key whose
    value is not a table (``randomize.x = {low, high}`` over the file's ``x = [low, high]``) replaces it, and so
    does a table given for a ``[randomize]`` entry (``randomize.x = { choices = [0, 1] }`` over the file's
    ``x = { low = 0, high = 3, dist = "integer" }``: one entry is one draw); ``randomize.x.high = v`` edits one
    key."""
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, value in dotted.items():
        *parents, leaf = key.split(".")
        table = merged
        for p in parents:
            sub = table.get(p, {})
            if not isinstance(sub, dict):
                raise ValueError(f"{source}: {key}: {p} is not a table")
            table[p] = table = dict(sub)
        if isinstance(value, dict) and isinstance(table.get(leaf, {}), dict) and parents != ["randomize"]:
            for sub, v in value.items():
                merged = _merge(merged, {f"{key}.{sub}": v}, source)
            continue
        table[leaf] = value
    return merged


def load_config(task: str, params_type: type, overrides: dict | None = None, path: Path | None = None):
    """Load ``configs/<task>.toml`` into a :class:`TaskConfig`, applying ``overrides``.

    Args:
        task: Task id; the file is ``configs/<task>.toml`` unless ``path`` is given.
        params_type: The task's parameter dataclass, built from the file's ``[params]`` table.
        overrides: Dotted keys (``"solver.name"``) or top-level keys, checked like file values.
        path: An explicit config file.
    """
    path = Path(path) if path is not None else config_dir() / f"{task}.toml"
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from e
    source = str(path)
    if overrides:
        table = _merge(table, overrides, f"{source} (overrides)")
        source = f"{source} (with overrides)"
    params = table.pop("params", {})
    randomize = parse_randomize(table.pop("randomize", {}), source)
    config = dataclasses.replace(build_dataclass(TaskConfig, table, source), randomize=randomize)
    if config.task != task:
        raise ValueError(f"{source}: task = {config.task!r} does not match the file's task {task!r}")
    dims = {len(config.action.low), len(config.action.high), len(config.action.scale)}
    if len(dims) != 1:
        raise ValueError(f"{source}: action.low, action.high and action.scale must have the same length")
    if any(lo >= hi for lo, hi in zip(config.action.low, config.action.high, strict=True)):
        raise ValueError(f"{source}: action.low {config.action.low} must be below action.high")
    return dataclasses.replace(config, params=build_dataclass(params_type, params, source, "params."))
