"""A task file's TOML: read, merged with overrides, and checked against its model before anything runs.

The file holds the usual task keys (``task``, ``instruction``, ``num_envs``, ``[solver]``, ``[randomize]``, ...)
and the sections that describe the task instead of code (docs/ARCHITECTURE.md "A task from a file"): ``[model]``
(``model.py``), ``[action]``, ``[reset]``, ``[command]``, ``[[observations]]``, ``[[rewards]]``,
``[reward]``, ``[[terminations]]``, ``[[success]]``, ``[instruction_template]`` and ``[expert]``, and ``[params]``:
named numbers that any number of those sections may name as ``"params.NAME"`` (or ``"-params.NAME"``), so that
``--set params.NAME=...`` changes every place at once. They become the config's ``params`` (:class:`FileParams`,
recorded in run.json's ``config.params`` with the file's path), and ``model.plan_task`` resolves them against the
model's joints and bodies: a name the model lacks, an unknown term or key, a list of the wrong length is a
``ValueError`` of one line naming the file, the key and what the model has.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from forge_gpu._src.sim.config import TaskConfig, _merge, build_dataclass, check_range, param_bounds, parse_randomize
from forge_gpu._src.sim.randomize import PHYSICS, Parameter, check_ranges
from forge_gpu._src.sim.taskfile.compose import compose, merge
from forge_gpu._src.sim.taskfile.plan import Plan, plan_task

SECTIONS = (
    "model", "action", "reset", "command", "observations", "rewards", "reward", "terminations", "success",
    "instruction_template", "expert", "module", "environment_state", "targets", "shape_colors",
)  # fmt: skip
"""The file's task sections, which become ``params`` (with ``[params]`` itself, as ``values``)."""
_REFERENCE = re.compile(r"-?params\.([A-Za-z_]\w*)")


@dataclass(frozen=True, kw_only=True)
class FileParams:
    """A file-based task's sections, as the file (with overrides) gives them; ``file`` is its path. A name of
    ``[params]`` reads as an attribute too (``config.params.cart_limit``)."""

    file: str
    robot: str = ""
    """The robot file the task names (``robot = ...``), relative to the task file's folder; empty: the task file
    holds its robot. An override ``params.robot`` (an id or a path) puts another robot under the same task."""
    variant: str = ""
    """The variant chosen (``[variants.NAME]``, ``make(..., variant=NAME)``, ``--variant NAME``); empty: none."""
    values: dict = field(default_factory=dict)
    """The file's ``[params]``: name -> number, named elsewhere as ``"params.NAME"``."""
    model: dict = field(default_factory=dict)
    action: dict = field(default_factory=dict)
    reset: dict = field(default_factory=dict)
    command: dict = field(default_factory=dict)
    observations: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    reward: dict = field(default_factory=dict)
    """``terms`` (default true: record each reward term's value, field ``reward_terms``) and
    ``zero_on_termination`` (default false: a step that a ``[[terminations]]`` condition ends pays 0)."""
    terminations: list = field(default_factory=list)
    success: list = field(default_factory=list)
    instruction_template: dict = field(default_factory=dict)
    expert: dict = field(default_factory=dict)
    module: str = ""
    """The user's module of ``@wp.func`` terms: a dotted name or a ``.py`` path (relative to the file)."""
    environment_state: list | None = None
    """The observation fields of LeRobot's ``observation.environment_state``, in order (``[]``: none; absent: every
    vector field but ``proprio``); the env spec's ``environment_state``."""
    targets: dict = field(default_factory=dict)
    """``[targets.NAME]``: points drawn at every reset (``plan.target_entries``), read by the target terms and
    recorded as state ``NAME_pos``."""
    shape_colors: dict = field(default_factory=dict)
    """``[shape_colors]``: randomizable parameter name -> a shape's name; ``[randomize]`` may then draw that shape's
    colour per episode (linear RGB in [0, 1])."""

    def __getattr__(self, name: str):
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"{type(self).__name__} has no attribute or parameter {name!r}")


def read_task_file(path: str | Path, overrides: dict | None = None) -> TaskConfig:
    """The checked :class:`TaskConfig` of the task file ``path`` with dotted ``overrides`` (``params.`` prefixed
    keys, as run.json records them, address the task sections too; ``params.NAME`` a name of ``[params]``); its
    ``params`` a :class:`FileParams`."""
    path = Path(path).resolve()
    source = str(path)
    overrides = dict(overrides or {})
    chosen_variant, robot = _composition_overrides(overrides, source)
    composed = compose(path, chosen_variant, robot)
    table = _carried_camera(composed.table, source)
    declared = dict(table.get("params", {}))
    bounds = {name: param_bounds(name, value, source) for name, value in declared.items() if isinstance(value, dict)}
    if overrides:
        table = _merge(table, _plain_overrides(overrides), f"{source} (overrides)")
        source = f"{source} (with overrides)"
    values = {n: v["value"] if n in bounds and isinstance(v, dict) else v for n, v in table.pop("params", {}).items()}
    for name, value in values.items():
        if name not in declared:
            held = ", ".join(declared) or "none"
            raise ValueError(f"{source}: params.{name}: no such parameter; the file's [params] are {held}")
        if isinstance(declared[name], list):  # a list of numbers, of the declared length
            if not (isinstance(value, list) and len(value) == len(declared[name]) and all(_number(v) for v in value)):
                raise ValueError(f"{source}: params.{name} = {value!r}: expected {len(declared[name])} numbers")
        elif not isinstance(value, int | float) or isinstance(value, bool) != isinstance(declared[name], bool):
            what = "true or false" if isinstance(declared[name], bool) else "a number"
            raise ValueError(f"{source}: params.{name} = {value!r}: expected {what}")
        if name in bounds:
            check_range(value, bounds[name], f"{source}: params.{name}")
    sections = {name: table.pop(name) for name in SECTIONS if name in table}
    given = resolve_references(sections.get("action", {}), values, "action", source)
    action = {k: v for k, v in sections.get("action", {}).items() if k not in ("low", "high", "scale")}
    chosen = sections.get("environment_state")
    if chosen is not None and not (isinstance(chosen, list) and all(isinstance(f, str) for f in chosen)):
        raise ValueError(f"{source}: environment_state = {chosen!r}: expected a list of observation field names")
    params = FileParams(file=str(path), robot=composed.robot, variant=chosen_variant, values=values,
                        **{**sections, "action": action})  # fmt: skip
    plan: Plan = plan_task(resolved(params, source), source)
    if chosen is not None:  # the fields a file task observes: proprio, its reward terms, its success flag
        from forge_gpu._src.core.lerobot_features import environment_fields

        layout = {"proprio": ((plan.proprio_dim,), "float32")}
        layout.update({group: ((width,), "float32") for group, width in plan.groups.items()})
        if plan.reward_names and plan.record_terms:
            layout["reward_terms"] = ((len(plan.reward_names),), "float32")
        if any(r.stage == "success" for r in plan.rows):
            layout["success"] = ((), "bool")
        try:
            environment_fields(layout, chosen, name=f"task {table.get('task')!r}")
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None
    a = len(plan.action_coords)
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


def _carried_camera(table: dict, source: str) -> dict:
    """``table`` with its robot's ``[camera]`` (the camera it carries) under each ``term = "camera"`` observation
    (the observation's own keys win)."""
    camera = table.pop("camera", None)
    if camera is None:
        return table
    if not isinstance(camera, dict):
        raise ValueError(f"{source}: camera = {camera!r}: expected a table [camera] of the camera's keys")
    entries = table.get("observations", [])
    if isinstance(entries, list):
        table = {**table, "observations": [merge(camera, e) if isinstance(e, dict) and e.get("term") == "camera"
                                           else e for e in entries]}  # fmt: skip
    return table


def _composition_overrides(overrides: dict, source: str) -> tuple[str, str]:
    """The variant and the robot ``overrides`` choose (``variant`` or ``params.variant``; ``params.robot``), taken
    out of them: they choose the files composed, before any other override applies."""
    chosen = {}
    for name, keys in (("variant", ("variant", "params.variant")), ("robot", ("params.robot",))):
        for key in keys:
            if key in overrides:
                value = overrides.pop(key)
                if not isinstance(value, str):
                    raise ValueError(f"{source}: {key} = {value!r}: expected a name (a string)")
                chosen[name] = value
    return chosen.get("variant", ""), chosen.get("robot", "")


def _plain_overrides(overrides: dict) -> dict:
    """Dotted overrides onto the file's own tables: ``params.<section>...`` (run.json's ``config.params``) onto
    the section, ``params.values.NAME`` and ``params.NAME`` onto ``[params]``."""
    plain = {}
    for key, value in overrides.items():
        if key.startswith("params."):
            rest = key[len("params.") :]
            head = rest.split(".")[0]
            if head == "file":
                continue
            if head == "values":
                key = "params" + rest[len("values") :]
            elif head in SECTIONS:
                key = rest
        plain[key] = value
    return plain


def resolve_references(value, values: dict, where: str, source: str):
    """``value`` with every ``"params.NAME"`` (``"-params.NAME"``) replaced by the number (negated)."""
    if isinstance(value, dict):
        return {k: resolve_references(v, values, f"{where}.{k}", source) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_references(v, values, f"{where}[{i}]", source) for i, v in enumerate(value)]
    match = _REFERENCE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return value
    name = match.group(1)
    if name not in values:
        held = ", ".join(values) or "none"
        raise ValueError(f"{source}: {where} = {value!r}: no such parameter; the file's [params] are {held}")
    return -values[name] if value.startswith("-") else values[name]


def resolved(params: FileParams, source: str) -> FileParams:
    """``params`` with every section's ``"params.NAME"`` references replaced by their numbers."""
    changes = {}
    for name in SECTIONS:
        value = getattr(params, name)
        if isinstance(value, dict | list):
            changes[name] = resolve_references(value, params.values, name, source)
    return dataclasses.replace(params, **changes)


def catalog(params: FileParams) -> dict[str, Parameter]:
    """What a task file's ``[randomize]`` may name: the physics parameters (all, or those ``model.randomizable``
    lists), and ``command`` (shape (C,)) where ``[command]`` names one."""
    listed = params.model.get("randomizable")
    if listed is None:
        offered = dict(PHYSICS)
    elif isinstance(listed, list) and all(name in PHYSICS for name in listed):
        offered = {name: PHYSICS[name] for name in listed}
    else:
        raise ValueError(f"{params.file}: model.randomizable = {listed!r}: expected a list of {', '.join(PHYSICS)}")
    offered.update(visuals(params))
    names = params.command.get("names")
    if names:
        nominal = tuple(float(v) for v in params.command.get("default", [0.0] * len(names)))
        offered["command"] = Parameter((len(nominal),), nominal, "the episode's command: " + ", ".join(names))
    return offered


CAMERA_OFFSETS = ("camera_position_offset", "camera_look_at_offset")
"""The camera jitter a task file with a fixed camera offers (added to its position and look_at [m])."""


def visuals(params: FileParams) -> dict[str, Parameter]:
    """The randomizable visuals: each ``[shape_colors]`` name (its shape's colour, nominal the model's) and, with a
    camera that does not follow a body, :data:`CAMERA_OFFSETS`."""
    offered = {}
    colors = params.shape_colors
    if colors:
        from forge_gpu._src.sim.taskfile.model import probe, short_names

        if not isinstance(colors, dict):
            raise ValueError(f"{params.file}: [shape_colors] must be a table of parameter name -> shape name")
        builder = probe(resolved(params, params.file).model, params.file)
        shapes = short_names(builder.shape_label)
        for name, shape in colors.items():
            if shape not in shapes:
                named = ", ".join(sorted(set(shapes))) or "none"
                raise ValueError(
                    f"{params.file}: shape_colors.{name} = {shape!r}: no such shape; the model's are {named}"
                )
            nominal = tuple(float(v) for v in builder.shape_color[shapes.index(shape)])
            offered[name] = Parameter((3,), nominal, f"shape {shape!r}'s colour (linear RGB in [0, 1])")
    camera = [e for e in params.observations if isinstance(e, dict) and e.get("term") == "camera"]
    if camera and "follow" not in camera[0]:
        for name, what in zip(CAMERA_OFFSETS, ("position", "look_at"), strict=True):
            offered[name] = Parameter((3,), (0.0, 0.0, 0.0), f"added to the camera's {what} [m]")
    return offered


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _per_joint(value, count: int, where: str) -> list[float]:
    values = [value] * count if isinstance(value, int | float) and not isinstance(value, bool) else value
    if not isinstance(values, list) or len(values) != count or not all(isinstance(v, int | float) for v in values):
        raise ValueError(f"{where} = {value!r}: expected a number or a list of {count} numbers (one per action joint)")
    return [float(v) for v in values]
