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

from forge_gpu._src.core.cameras import FRONT, check_name
from forge_gpu._src.core.checks import check_range, number_list, plain_number
from forge_gpu._src.sim.config import TaskConfig, _merge, build_dataclass, param_bounds, parse_randomize
from forge_gpu._src.sim.randomize import PHYSICS, Parameter, check_ranges
from forge_gpu._src.tasks.taskfile import distractors
from forge_gpu._src.tasks.taskfile.compose import compose, merge
from forge_gpu._src.tasks.taskfile.objects import object_entries
from forge_gpu._src.tasks.taskfile.plan import Plan, plan_task

SECTIONS = (
    "model", "action", "reset", "command", "observations", "rewards", "reward", "terminations", "success",
    "instruction_template", "expert", "module", "environment_state", "targets", "shape_colors", "palette", "objects",
    "observation_noise", "subtasks", "distractors",
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
    subtasks: list = field(default_factory=list)
    """``[[subtasks]]``: the task's object-centric subtasks in order (``subtasks.subtask_entries``): each a name,
    the object its motion is relative to and the conditions that end it; demonstration generation cuts and
    moves source episodes by them."""
    instruction_template: dict = field(default_factory=dict)
    expert: dict = field(default_factory=dict)
    module: str = ""
    """The user's module of ``@wp.func`` terms: a dotted name or a ``.py`` path (relative to the file)."""
    environment_state: list | None = None
    """The observation fields of LeRobot's ``observation.environment_state``, in order (``[]``: none; absent: every
    vector field but ``proprio``); the env spec's ``environment_state``."""
    observation_noise: bool = True
    """``observation_noise = false`` switches every observation's ``noise`` off (a ``play`` variant's evaluation
    without corruption); the ``noise`` values are still checked."""
    targets: dict = field(default_factory=dict)
    """``[targets.NAME]``: points drawn at every reset (``targets.target_entries``), read by the target terms and
    recorded as state ``NAME_pos``."""
    shape_colors: dict = field(default_factory=dict)
    """``[shape_colors]``: randomizable parameter name -> a shape's name; ``[randomize]`` may then draw that shape's
    colour per episode (linear RGB in [0, 1]); or a table ``{ shape = ..., color = "<a [palette] name>" }`` (and
    ``differs_from = "<another such entry>"``): ``[randomize]`` then draws a palette index (``dist = "integer"``)."""
    palette: dict = field(default_factory=dict)
    """``[palette]``: colour name -> linear RGB, the colours ``[shape_colors]`` tables choose from, in order."""
    distractors: dict = field(default_factory=dict)
    """``[distractors]``: ``count`` small boxes on the table, seen and untouched, placed and coloured per episode
    (``distractors.py``: the randomizable ``distractor_position`` and ``distractor_color``)."""
    objects: dict = field(default_factory=dict)
    """``[objects.NAME]``: a free body (``body``) with a box shape (``shape``) whose edge ``size`` [m], ``mass``
    [kg], ``friction``, start centre ``position = [x, y]`` [m] and ``yaw`` [rad] are the randomizable parameters
    ``NAME_size``, ``NAME_mass``, ``NAME_friction``, ``NAME_position``, ``NAME_yaw``; placed at every reset resting
    on the table top (z = 0), at rest (``objects.object_entries``)."""

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
            if not number_list(value, len(declared[name]), finite=False):
                raise ValueError(f"{source}: params.{name} = {value!r}: expected {len(declared[name])} numbers")
        elif (
            isinstance(declared[name], dict)
            and isinstance(declared[name].get("value"), str)
            and "choices" in declared[name]
        ):
            if not isinstance(value, str):
                raise ValueError(f"{source}: params.{name} = {value!r}: expected a name (a string)")
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
    offered = catalog(params)
    try:
        check_ranges(randomize, offered, f"{table.get('task')}")
    except ValueError as e:  # the line names the file, as every other line of the task file's
        raise ValueError(f"{source}: {e}") from None
    check_color_pairs(params, randomize, source)
    resolved_params = resolved(params, source)
    entry = distractors.distractor_entry(resolved_params.distractors, params.palette, source)
    distractors.check(entry, randomize, offered, color_entries(resolved_params), source)
    config = dataclasses.replace(build_dataclass(TaskConfig, table, source), randomize=randomize, params=params)
    if any(lo >= hi for lo, hi in zip(config.action.low, config.action.high, strict=True)):
        raise ValueError(f"{source}: action.low {list(config.action.low)} must be below action.high")
    template = run_template(params.instruction_template, {r.name for r in randomize}, offered)
    if template:  # over the params the episodes record: the randomized ones
        from forge_gpu._src.core.instructions import check_template

        shapes = {r.name: (offered[r.name].shape, np.dtype("float32")) for r in randomize}
        check_template(template, shapes, name=f"{source}: instruction_template")
    return config


def _carried_camera(table: dict, source: str) -> dict:
    """``table`` with its robot's cameras in its camera observations (the observation's own keys win): ``[camera]``
    (the defaults of the unnamed camera, ``front``) under each unnamed (or ``name = "front"``) camera observation,
    and each ``[cameras.NAME]`` under the observation ``name = NAME``, or, where the task has none of that name but
    observes with a camera, as a camera observation of its own (a task without cameras stays without)."""
    camera = table.pop("camera", None)
    carried = table.pop("cameras", None)
    if camera is None and carried is None:
        return table
    if camera is not None and not isinstance(camera, dict):
        raise ValueError(f"{source}: camera = {camera!r}: expected a table [camera] of the camera's keys")
    if carried is not None and not (isinstance(carried, dict) and all(isinstance(v, dict) for v in carried.values())):
        raise ValueError(f"{source}: cameras = {carried!r}: expected tables [cameras.NAME] of a camera's keys")
    for name, keys in (carried or {}).items():
        check_name(name, f"{source}: cameras.{name}")
        if name == FRONT:
            raise ValueError(f"{source}: [cameras.{FRONT}]: the unnamed camera's defaults are [camera]")
        if "name" in keys:
            raise ValueError(f"{source}: cameras.{name}.name: the table's name is the camera's; drop the key")
    entries = table.get("observations", [])
    if not isinstance(entries, list):
        return table
    out, seen = [], set()
    for e in entries:
        if isinstance(e, dict) and e.get("term") == "camera":
            name = e.get("name", FRONT)
            seen.add(name)
            base = camera if name == FRONT else (carried or {}).get(name)
            e = merge(base, e) if base else e
        out.append(e)
    if seen:
        out += [{"term": "camera", "name": name, **keys} for name, keys in (carried or {}).items() if name not in seen]
    return {**table, "observations": out}


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
    if not value.startswith("-"):
        return values[name]
    found = values[name]
    if isinstance(found, list) and all(plain_number(v) for v in found):
        return [-v for v in found]
    if not plain_number(found):
        raise ValueError(f"{source}: {where} = {value!r}: params.{name} is {found!r}, which cannot be negated")
    return -found


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
    offered.update(placements(resolved(params, params.file)))
    entry = distractors.distractor_entry(resolved(params, params.file).distractors, params.palette, params.file)
    offered.update(distractors.offered(entry, params.palette))
    names = params.command.get("names")
    if names:
        nominal = tuple(float(v) for v in params.command.get("default", [0.0] * len(names)))
        offered["command"] = Parameter((len(nominal),), nominal, "the episode's command: " + ", ".join(names))
    return offered


OBJECT_KEYS = {
    "size": ((), "the edge of object {!r}'s box [m]", ("SHAPE_PROPERTIES", "BODY_INERTIAL_PROPERTIES")),
    "radius": ((), "the radius of object {!r}'s cylinder [m]", ("SHAPE_PROPERTIES", "BODY_INERTIAL_PROPERTIES")),
    "height": ((), "the full height of object {!r}'s cylinder [m]", ("SHAPE_PROPERTIES", "BODY_INERTIAL_PROPERTIES")),
    "mass": ((), "object {!r}'s mass [kg] (a solid box's or cylinder's inertia)", ("BODY_INERTIAL_PROPERTIES",)),
    "friction": ((), "object {!r}'s friction coefficient", ("SHAPE_PROPERTIES",)),
    "position": ((2,), "object {!r}'s start centre x, y on the table [m]", ()),
    "yaw": ((), "object {!r}'s start yaw about +z [rad]", ()),
}
"""An ``[objects.NAME]`` key -> its parameter ``NAME_KEY``'s shape, description and the model flags it writes."""


def placements(params: FileParams) -> dict[str, Parameter]:
    """The parameters of ``[objects]`` (:data:`OBJECT_KEYS`) and of the ``[targets]`` placed by a parameter
    (``position = [x, y]``: ``NAME_position``), nominal the file's values (``params`` resolved)."""
    offered = {}
    for entry in object_entries(params.objects, params.file, None):
        for key, (shape, doc, notify) in OBJECT_KEYS.items():
            if key not in entry:
                continue  # a cube has no radius and height, a cylinder no size
            value = entry[key]
            nominal = tuple(value) if isinstance(value, list) else (value,)
            offered[f"{entry['name']}_{key}"] = Parameter(shape, nominal, doc.format(entry["name"]), notify=notify)
    targets = params.targets if isinstance(params.targets, dict) else {}
    for name, entry in targets.items():
        if isinstance(entry, dict) and "position" in entry and isinstance(entry["position"], list):
            doc = f"target {name!r}'s place x, y on the table top [m]"
            # A marker that collides (a scene box) moves for the solver too.
            notify = ("SHAPE_PROPERTIES",) if entry.get("marker") is not None else ()
            offered[f"{name}_position"] = Parameter((2,), tuple(float(v) for v in entry["position"]), doc,
                                                    notify=notify)  # fmt: skip
    return offered


CAMERA_OFFSETS = ("camera_position_offset", "camera_look_at_offset")
"""The camera jitter a task file with a fixed ``front`` camera offers (added to its position and look_at [m])."""


def visuals(params: FileParams) -> dict[str, Parameter]:
    """The randomizable visuals: each ``[shape_colors]`` name (its shape's colour, nominal the model's) and, with a
    ``front`` camera that neither follows nor rides a body, :data:`CAMERA_OFFSETS`."""
    offered = {}
    colors = params.shape_colors
    if colors:
        from forge_gpu._src.tasks.taskfile.model import probe, short_names

        if not isinstance(colors, dict):
            raise ValueError(f"{params.file}: [shape_colors] must be a table of parameter name -> shape name")
        builder = probe(resolved(params, params.file).model, params.file)
        shapes = short_names(builder.shape_label)
        palette = color_entries(resolved(params, params.file))
        for name, shape in colors.items():
            if name in palette:
                shape, index = palette[name]["shape"], palette[name]["color"]
                if shape not in shapes:
                    named = ", ".join(sorted(set(shapes))) or "none"
                    raise ValueError(f"{params.file}: shape_colors.{name}.shape = {shape!r}: no such shape; the "
                                     f"model's are {named}")  # fmt: skip
                doc = f"shape {shape!r}'s colour (an index into [palette])"
                offered[name] = Parameter((), (float(index),), doc, names=tuple(params.palette))
                continue
            if shape not in shapes:
                named = ", ".join(sorted(set(shapes))) or "none"
                raise ValueError(
                    f"{params.file}: shape_colors.{name} = {shape!r}: no such shape; the model's are {named}"
                )
            nominal = tuple(float(v) for v in builder.shape_color[shapes.index(shape)])
            offered[name] = Parameter((3,), nominal, f"shape {shape!r}'s colour (linear RGB in [0, 1])")
    camera = [e for e in params.observations
              if isinstance(e, dict) and e.get("term") == "camera" and e.get("name", FRONT) == FRONT]  # fmt: skip
    if camera and "follow" not in camera[0] and "mount" not in camera[0]:
        for name, what in zip(CAMERA_OFFSETS, ("position", "look_at"), strict=True):
            offered[name] = Parameter((3,), (0.0, 0.0, 0.0), f"added to the camera's {what} [m]")
    return offered


def color_entries(params: FileParams) -> dict[str, dict]:
    """The ``[shape_colors]`` entries that choose from ``[palette]`` (tables), checked: name -> {shape, color
    (its index), differs_from (another such entry, or None)}."""
    out, names = {}, list(params.palette)
    for name, entry in params.shape_colors.items():
        if not isinstance(entry, dict):
            continue
        where = f"{params.file}: shape_colors.{name}"
        if set(entry) - {"shape", "color", "differs_from"} or not isinstance(entry.get("shape"), str):
            raise ValueError(f"{where} = {entry!r}: expected {{ shape = ..., color = ..., differs_from = ... }}")
        if entry.get("color") not in names:
            held = ", ".join(names) or "none: add a [palette]"
            raise ValueError(f"{where}.color = {entry.get('color')!r}: not a [palette] colour ({held})")
        other = entry.get("differs_from")
        if other is not None and not isinstance(params.shape_colors.get(other), dict):
            raise ValueError(f"{where}.differs_from = {other!r}: not a [shape_colors] table of a palette colour")
        out[name] = {"shape": entry["shape"], "color": names.index(entry["color"]), "differs_from": other}
    return out


def check_color_pairs(params: FileParams, ranges, source: str) -> None:
    """ValueError where two palette colours that must differ (``differs_from``) are equal and neither is drawn, or
    where the one that moves on a clash (the drawn one; this one where both are) draws one colour alone that the
    other can take: it has nowhere to move within its draw (``ranges``: the run's ``[randomize]``)."""
    raw, ranges = params.shape_colors, {r.name: r for r in ranges}
    entries = color_entries(resolved(params, source))
    count = len(params.palette)
    for name, entry in entries.items():
        other = entry["differs_from"]
        if other is None:
            continue
        if {name, other} & set(ranges):
            moving, still = (name, other) if name in ranges else (other, name)
            own = ranges[moving].allowed(count)
            held = ranges[still].allowed(count) if still in ranges else [entries[still]["color"]]
            if len(own) == 1 and own[0] in held:
                color = list(params.palette)[own[0]]
                raise ValueError(f"{source}: randomize.{moving} = {ranges[moving].to_table()}: its one colour "
                                 f"{color!r} can equal {still}'s, and shape_colors.{name} differs_from {other}: "
                                 "allow a second colour to move to")  # fmt: skip
            continue
        if entry["color"] == entries[other]["color"]:
            color = list(params.palette)[entry["color"]]
            a, b = raw[other]["color"], raw[name]["color"]
            raise ValueError(f"{source}: {a} and {b} are both {color!r}: shape_colors.{name} differs_from {other} "
                             f"({raw[other]['shape']!r} and {raw[name]['shape']!r} must differ)")  # fmt: skip


def run_template(template: dict, randomized: set[str], offered: dict[str, Parameter]) -> dict | None:
    """The instruction template of a run that randomizes ``randomized``: a slot whose parameter is not drawn is
    written out, its name that of the parameter's fixed value (a slot of ``names`` alone), or dropped with the space
    before it (a slot that bins a value: ``edges``); None where no slot is drawn (the task's ``instruction``
    stands)."""
    if not template:
        return None
    text, slots = template.get("text"), dict(template.get("slots", {}))
    if not isinstance(text, str) or not isinstance(slots, dict):
        return template  # check_template names what is wrong
    for name, slot in list(slots.items()):
        param = slot.get("param") if isinstance(slot, dict) else None
        if param in randomized or param not in offered:
            continue
        del slots[name]
        if "edges" in slot:
            text = text.replace(" {" + name + "}", "").replace("{" + name + "}", "")
        else:
            index = int(offered[param].nominal[int(slot.get("component", 0))])
            text = text.replace("{" + name + "}", str(slot.get("names", [])[index]))
    return {**template, "text": text, "slots": slots} if slots else None


def _per_joint(value, count: int, where: str) -> list[float]:
    values = [value] * count if plain_number(value) else value
    if not isinstance(values, list) or len(values) != count or not all(isinstance(v, int | float) for v in values):
        raise ValueError(f"{where} = {value!r}: expected a number or a list of {count} numbers (one per action joint)")
    return [float(v) for v in values]
