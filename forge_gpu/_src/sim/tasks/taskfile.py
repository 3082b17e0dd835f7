"""A file-based task's TOML: read, merged with overrides, and checked against its model before anything runs.

The file holds the usual task keys (``task``, ``instruction``, ``num_envs``, ``[solver]``, ``[randomize]``, ...)
and the sections that describe the task instead of code (docs/ARCHITECTURE.md "A task from a file"): ``[model]``,
``[action]``, ``[reset]``, ``[command]``, ``[[observations]]``, ``[[rewards]]``, ``[[terminations]]``,
``[[success]]``, ``[instruction_template]`` and ``[expert]``. Those sections become the config's ``params``
(:class:`FileParams`, recorded in run.json's ``config.params`` with the file's path), and :func:`plan_task`
resolves them against the model's joints and bodies: a name the model lacks, an unknown term or key, a list of
the wrong length is a ``ValueError`` of one line naming the file, the key and what the model has.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import importlib.util
import math
import sys
import tomllib
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from forge_gpu._src.sim import tasks as _tasks_package  # noqa: F401 (the package the module lives in)
from forge_gpu._src.sim.config import TaskConfig, _merge, build_dataclass, parse_randomize
from forge_gpu._src.sim.randomize import PHYSICS, Parameter, check_ranges

SECTIONS = (
    "model", "action", "reset", "command", "observations", "rewards", "terminations", "success",
    "instruction_template", "expert", "module",
)  # fmt: skip
"""The file's task sections, which become ``params``."""
_MODEL_KEYS = ("asset", "file", "position", "rotation", "floating", "ground", "contacts", "ignore_names", "pose")
_ACTION_KEYS = ("kind", "joints", "scale", "low", "high", "stiffness", "damping", "clip_to_limits")
_TERM_KEYS = ("term", "weight", "noise", "args", "name")
FREE, BALL, FIXED = 4, 2, 3
"""Newton's joint types that :func:`plan_task` treats apart (``newton.JointType``)."""


@dataclass(frozen=True, kw_only=True)
class FileParams:
    """A file-based task's sections, as the file (with overrides) gives them; ``file`` is its path."""

    file: str
    model: dict = field(default_factory=dict)
    action: dict = field(default_factory=dict)
    reset: dict = field(default_factory=dict)
    command: dict = field(default_factory=dict)
    observations: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    terminations: list = field(default_factory=list)
    success: list = field(default_factory=list)
    instruction_template: dict = field(default_factory=dict)
    expert: dict = field(default_factory=dict)
    module: str = ""
    """The user's module of ``@wp.func`` terms: a dotted name or a ``.py`` path (relative to the file)."""


@dataclass
class Row:
    """One term of a stage, resolved: its function, its row of integer and float arguments."""

    stage: str
    name: str
    func: Any
    ints: list[int]
    floats: list[float]
    width: int = 0
    noise: bool = False
    user: bool = False


@dataclass
class Plan:
    """What the env needs of a file task: the model's layout and every term resolved to indices."""

    joint_names: list[str]
    body_names: list[str]
    root: bool
    coords: int
    action_kind: str
    action_joints: list[str]
    action_coords: list[int]
    action_dofs: list[int]
    reset_coords: list[int]
    reset_dofs: list[int]
    lower: list[float]
    upper: list[float]
    rows: list[Row]
    command_names: list[str]
    proprio_dim: int
    reward_names: list[str]


def read_task_file(path: str | Path, overrides: dict | None = None) -> TaskConfig:
    """The checked :class:`TaskConfig` of the task file ``path`` with dotted ``overrides`` (``params.`` prefixed
    keys, as run.json records them, address the task sections too); its ``params`` a :class:`FileParams`."""
    path = Path(path).resolve()
    source = str(path)
    try:
        table = tomllib.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{source}: cannot read the task file ({e.strerror})") from e
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{source}: not valid TOML: {e}") from e
    if overrides:
        plain = {(k[len("params.") :] if k.startswith("params.") else k): v for k, v in overrides.items()}
        plain.pop("file", None)
        table = _merge(table, plain, f"{source} (overrides)")
        source = f"{source} (with overrides)"
    sections = {name: table.pop(name) for name in SECTIONS if name in table}
    table.pop("params", None)
    action = dict(sections.get("action", {}))
    for key in ("low", "high", "scale"):
        action.pop(key, None)
    params = FileParams(file=str(path), **{**sections, "action": action})
    plan = plan_task(params, source)
    a = len(plan.action_coords)
    given = sections.get("action", {})
    table["action"] = {key: _per_joint(given.get(key, default), a, f"{source}: action.{key}")
                       for key, default in (("low", -1.0), ("high", 1.0), ("scale", 1.0))}  # fmt: skip
    randomize = parse_randomize(table.pop("randomize", {}), source)
    check_ranges(randomize, catalog(params), f"{table.get('task')}")
    config = dataclasses.replace(build_dataclass(TaskConfig, table, source), randomize=randomize, params=params)
    if any(lo >= hi for lo, hi in zip(config.action.low, config.action.high, strict=True)):
        raise ValueError(f"{source}: action.low {list(config.action.low)} must be below action.high")
    if params.instruction_template:  # over the params the episodes record: the randomized ones
        from forge_gpu._src.core.instructions import check_template

        shapes = {r.name: ((len(plan.command_names),) if r.name == "command" else (), np.dtype("float32"))
                  for r in randomize}  # fmt: skip
        check_template(params.instruction_template, shapes, name=f"{source}: instruction_template")
    return config


def catalog(params: FileParams) -> dict[str, Parameter]:
    """What a task file's ``[randomize]`` may name: every physics parameter, and ``command`` (shape (C,)) where
    ``[command]`` names one."""
    offered = dict(PHYSICS)
    names = params.command.get("names")
    if names:
        nominal = tuple(float(v) for v in params.command.get("default", [0.0] * len(names)))
        offered["command"] = Parameter((len(nominal),), nominal, "the episode's command: " + ", ".join(names))
    return offered


def _per_joint(value, count: int, where: str) -> list[float]:
    values = [value] * count if isinstance(value, int | float) and not isinstance(value, bool) else value
    if not isinstance(values, list) or len(values) != count or not all(isinstance(v, int | float) for v in values):
        raise ValueError(f"{where} = {value!r}: expected a number or a list of {count} numbers (one per action joint)")
    return [float(v) for v in values]


# -- the model ---------------------------------------------------------------------------------------------


def model_file(model: dict, source: str) -> tuple[str, str]:
    """``(path, kind)`` of ``[model]``'s ``asset`` (a Newton example asset) or ``file`` (relative to the TOML);
    kind ``mjcf`` or ``urdf``."""
    given = [k for k in ("asset", "file") if k in model]
    if len(given) != 1:
        raise ValueError(f"{source}: [model] needs exactly one of asset (a Newton example asset) or file (a path)")
    if "asset" in model:
        import newton.examples

        name = model["asset"]
        folder = Path(newton.examples.get_asset("nv_ant.xml")).parent
        if not isinstance(name, str) or not (folder / name).is_file():
            shipped = ", ".join(sorted(p.name for p in folder.iterdir() if p.suffix in (".xml", ".urdf")))
            raise ValueError(f"{source}: model.asset = {name!r}: not a Newton example asset; shipped: {shipped}")
        path = str(folder / name)
    else:
        path = str(Path(source.split(" (")[0]).parent / model["file"])
        if not Path(path).is_file():
            raise ValueError(f"{source}: model.file = {model['file']!r}: no such file ({path})")
    kinds = {".xml": "mjcf", ".mjcf": "mjcf", ".urdf": "urdf"}
    kind = kinds.get(Path(path).suffix.lower())
    if kind is None:
        raise ValueError(f"{source}: model: {Path(path).name}: expected an MJCF (.xml) or URDF (.urdf) file")
    return path, kind


def add_model(builder, model: dict, source: str) -> None:
    """Add one world's robot (and ground) as ``[model]`` says; set the default pose ``[model.pose]``."""
    import warp as wp

    path, kind = model_file(model, source)
    xform = wp.transform(tuple(model.get("position", (0.0, 0.0, 0.0))), tuple(model.get("rotation", (0, 0, 0, 1))))
    if kind == "mjcf":
        ignore = list(model.get("ignore_names", ["floor", "ground"]))
        builder.add_mjcf(path, xform=xform, override_root_xform=True, ignore_names=ignore)
    else:
        builder.add_urdf(path, xform=xform, floating=bool(model.get("floating", True)))
    names = short_names(builder.joint_label)
    for pattern, value in model.get("pose", {}).items():
        hits = [j for j, name in enumerate(names) if fnmatch.fnmatchcase(name, pattern)]
        if not hits or not isinstance(value, int | float):
            what = "matches no joint" if not hits else "expected a number"
            raise ValueError(f"{source}: model.pose.{pattern} = {value!r}: {what}; the model has {', '.join(names)}")
        for j in hits:
            start, end = builder.joint_q_start[j], _end(builder.joint_q_start, j, len(builder.joint_q))
            for c in range(start, end):
                builder.joint_q[c] = float(value)
    if model.get("ground", True):
        builder.add_ground_plane()


def _end(starts, j: int, total: int) -> int:
    return starts[j + 1] if j + 1 < len(starts) else total


def short_names(labels) -> list[str]:
    """A label's last path component (``ant/worldbody/torso/hip_1`` -> ``hip_1``)."""
    return [str(label).rsplit("/", 1)[-1] for label in labels]


_PROBES: dict[str, Any] = {}


def probe(model: dict, source: str):
    """One world's :class:`newton.ModelBuilder` of ``[model]`` (kept per process: a file is imported once)."""
    import json

    from forge_gpu._src.sim.output import init_warp

    init_warp()  # quietly, before Newton's import starts Warp
    import newton

    for key in model:
        if key not in _MODEL_KEYS:
            raise ValueError(f"{source}: unknown key model.{key}; allowed keys are {', '.join(_MODEL_KEYS)}")
    key = json.dumps(model, sort_keys=True) + source.split(" (")[0]
    if key not in _PROBES:
        builder = newton.ModelBuilder()
        add_model(builder, model, source)
        _PROBES[key] = builder
    return _PROBES[key]


# -- resolving names -----------------------------------------------------------------------------------------


def plan_task(params: FileParams, source: str) -> Plan:
    """Resolve every section against the model: ValueError (one line, the key and what the model has)."""
    from forge_gpu.kernels import terms

    builder = probe(params.model, source)
    names, bodies = short_names(builder.joint_label), short_names(builder.body_label)
    types = [int(t) for t in builder.joint_type]
    qs, ds = list(builder.joint_q_start), list(builder.joint_qd_start)
    coords, dofs = len(builder.joint_q), builder.joint_dof_count
    root = bool(types) and types[0] == FREE
    movable = [j for j, t in enumerate(types) if t not in (FREE, FIXED)]

    def joints(patterns, where: str) -> tuple[list[int], list[int], list[str]]:
        if isinstance(patterns, str):
            patterns = [patterns]
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise ValueError(f"{source}: {where} = {patterns!r}: expected a list of joint name patterns")
        allowed = ", ".join(names[j] for j in movable)
        for p in patterns:
            if not any(fnmatch.fnmatchcase(names[j], p) for j in movable):
                raise ValueError(f"{source}: {where}: {p!r} matches no joint; the model's joints are {allowed}")
        chosen = [j for j in movable if any(fnmatch.fnmatchcase(names[j], p) for p in patterns)]
        for j in chosen:
            if types[j] == BALL:
                raise ValueError(f"{source}: {where}: joint {names[j]!r} is a ball joint; name hinge or slide joints")
        cs = [c for j in chosen for c in range(qs[j], _end(qs, j, coords))]
        dd = [d for j in chosen for d in range(ds[j], _end(ds, j, dofs))]
        return cs, dd, [names[j] for j in chosen]

    def body(name, where: str) -> int:
        if name not in bodies:
            raise ValueError(f"{source}: {where} = {name!r}: no such body; the model's bodies are {', '.join(bodies)}")
        return bodies.index(name)

    action = params.action
    for key in action:
        if key not in _ACTION_KEYS:
            raise ValueError(f"{source}: unknown key action.{key}; allowed keys are {', '.join(_ACTION_KEYS)}")
    kind = action.get("kind", "effort")
    if kind not in ("effort", "position"):
        raise ValueError(f"{source}: action.kind = {kind!r}: allowed values are 'effort', 'position'")
    a_coords, a_dofs, a_names = joints(action.get("joints", ["*"]), "action.joints")
    r_coords, r_dofs, _ = joints(["*"], "reset") if movable else ([], [], [])
    command = params.command
    command_names = list(command.get("names", []))
    if set(command) - {"names", "default"} or len(command.get("default", command_names)) != len(command_names):
        raise ValueError(f"{source}: [command] takes names = [...] and default = [...] of the same length")
    lower, upper = [-1e10] * coords, [1e10] * coords
    for c, d in zip(r_coords, r_dofs, strict=True):
        lower[c], upper[c] = builder.joint_limit_lower[d], builder.joint_limit_upper[d]
    module = _user_module(params.module, source) if params.module else None
    rows: list[Row] = []
    libraries = {"observations": terms.OBSERVATIONS, "rewards": terms.REWARDS,
                 "terminations": terms.CONDITIONS, "success": terms.CONDITIONS}  # fmt: skip
    for stage, library in libraries.items():
        entries = getattr(params, stage)
        if not isinstance(entries, list):
            raise ValueError(f"{source}: {stage} must be a list of tables ([[{stage}]])")
        for i, entry in enumerate(entries):
            rows.append(_row(stage, i, entry, library, module, source, joints, body, root, a_coords, command_names))
    proprio = sum(r.width for r in rows if r.stage == "observations")
    if proprio == 0:
        raise ValueError(f"{source}: observations: the task observes nothing; add [[observations]] terms")
    return Plan(
        joint_names=names, body_names=bodies, root=root, coords=coords, action_kind=kind, action_joints=a_names,
        action_coords=a_coords, action_dofs=a_dofs, reset_coords=r_coords, reset_dofs=r_dofs, lower=lower,
        upper=upper, rows=rows, command_names=command_names, proprio_dim=proprio,
        reward_names=[r.name for r in rows if r.stage == "rewards"],
    )  # fmt: skip


def _row(stage, i, entry, library, module, source, joints, body, root, a_coords, command_names) -> Row:
    from forge_gpu.kernels import terms

    where = f"{stage}[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("term"), str):
        raise ValueError(f'{source}: {where} = {entry!r}: expected a table with term = "<name>"')
    name = entry["term"]
    info = library.get(name)
    user = info is None and module is not None and hasattr(module, name)
    if info is None and not user:
        own = f" or a @wp.func of {params_module_name(module)}" if module is not None else ""
        raise ValueError(f"{source}: {where}.term = {name!r}: unknown; the library has {', '.join(library)}{own}")
    if user:
        info = terms.TermInfo(getattr(module, name), width=entry.get("width", 1) if stage == "observations" else 0)
        allowed = (*_TERM_KEYS, "width")
    else:
        allowed = (*_TERM_KEYS, *info.keys, *(("max_angle",) if name == "tilt" else ()))
    for key in entry:
        if key not in allowed:
            raise ValueError(f"{source}: unknown key {where}.{key}; {name} takes {', '.join(allowed)}")
    if info.root and not root:
        raise ValueError(f"{source}: {where}.term = {name!r} reads a free root joint; the model has a fixed base")
    ints, floats = [0, 0, -1, 0], [float(entry.get("weight", 1.0)), float(entry.get("noise", 0.0))]
    listed: list[int] = []
    width = info.width
    for key in info.keys:
        if key == "joints":
            cs, dd, _ = joints(entry.get("joints", ["*"]), f"{where}.joints")
            listed, ints[0] = cs + dd, len(cs)
            width = len(cs) if width == "joints" else width
        elif key in ("body", "other", "relative_to"):
            if key in entry:
                ints[1 if key == "body" else 2] = body(entry[key], f"{where}.{key}")
            elif key != "relative_to":
                raise ValueError(f'{source}: {where}: {name} needs {key} = "<body name>"')
        elif key == "axis":
            axis = entry.get("axis", "x")
            if axis not in ("x", "y", "z"):
                raise ValueError(f"{source}: {where}.axis = {axis!r}: allowed values are 'x', 'y', 'z'")
            ints[3] = "xyz".index(axis)
        elif key == "command":
            wanted = entry.get("command", command_names[: {"track_lin_vel": 2, "track_yaw_rate": 1}.get(name, 3)])
            missing = [c for c in wanted if c not in command_names]
            if missing or not wanted:
                raise ValueError(f"{source}: {where}.command = {wanted!r}: not in [command] names {command_names}")
            listed = [command_names.index(c) for c in wanted]
        else:
            value = entry.get(key)
            if key == "min_up" and value is None and "max_angle" in entry:
                value = 0.0 if entry["max_angle"] == 90 else math.cos(math.radians(entry["max_angle"]))
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"{source}: {where}.{key} = {value!r}: {name} needs a number {key}")
            floats.append(float(value))
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(v, int | float) for v in args):
        raise ValueError(f"{source}: {where}.args = {args!r}: expected a list of numbers")
    floats.extend(float(v) for v in args)
    width = {"action": len(a_coords), "command": len(command_names)}.get(width, width)
    if stage == "observations" and (not isinstance(width, int) or width < 1):
        raise ValueError(f"{source}: {where}: observation {name!r} has width {width!r}; expected at least 1")
    return Row(stage, entry.get("name", name), info.func, ints + listed, floats, width, "noise" in entry, user)


def params_module_name(module) -> str:
    return getattr(module, "__forge_gpu_given__", module.__name__)


def _user_module(given: str, source: str):
    """The user's module of terms: a ``.py`` path (relative to the task file) or an importable dotted name."""
    if given.endswith(".py"):
        path = (Path(source.split(" (")[0]).parent / given).resolve()
        if not path.is_file():
            raise ValueError(f"{source}: module = {given!r}: no such file ({path})")
        name = f"forge_gpu_terms_{zlib.crc32(str(path).encode()):08x}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as e:
                del sys.modules[name]
                raise ValueError(f"{source}: module = {given!r}: importing it failed ({type(e).__name__}: {e})") from e
        module = sys.modules[name]
    else:
        try:
            module = importlib.import_module(given)
        except ImportError as e:
            raise ValueError(f"{source}: module = {given!r}: cannot import it ({e})") from e
    module.__forge_gpu_given__ = given
    return module


def term_tables(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """The ``ti`` and ``tf`` tables of the plan's rows (one row per term), zero-padded."""
    ni = max(len(r.ints) for r in plan.rows)
    nf = max(len(r.floats) for r in plan.rows)
    ti = np.zeros((len(plan.rows), ni), np.int32)
    tf = np.zeros((len(plan.rows), nf), np.float32)
    for t, r in enumerate(plan.rows):
        ti[t, : len(r.ints)] = r.ints
        tf[t, : len(r.floats)] = r.floats
    return ti, tf
