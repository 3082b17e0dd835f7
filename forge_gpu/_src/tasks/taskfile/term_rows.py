"""The term binding: each entry of a task file's ``[[observations]]``, ``[[rewards]]``, ``[[terminations]]`` and
``[[success]]`` bound to the model as a :class:`Row` (:func:`term_row`): its function (a library term of
``terms.py`` or a ``@wp.func`` of the user's module), its integer and float arguments, its width and what it reads.
A name the model lacks, an unknown term or key, a number of the wrong kind is a ``ValueError`` of one line naming
the file and the key.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forge_gpu._src.core.checks import number_list, plain_number
from forge_gpu._src.tasks.taskfile import terms, user_terms
from forge_gpu._src.tasks.taskfile.entries import check_keys, number, shown
from forge_gpu._src.tasks.taskfile.model import params_module_name

_TERM_KEYS = ("term", "weight", "noise", "args", "name", "params")
POLICY = "policy"
"""The observation group recorded as ``proprio`` (what a policy observes); every other group is its own field."""
_RESERVED = ("proprio", "reward_terms", "success", "rgb", "depth", "env_id", "episode_id", "step_id", "time",
             "action", "reward", "terminated", "truncated", "instruction", "state", "params")  # fmt: skip
_NAMES = ("joints", "body", "other", "relative_to", "bodies", "axis", "command")
"""The keys of a library term that name something (not numbers: ``params = { ... }`` cannot give them)."""
_COMMAND_COLUMNS = {"track_lin_vel": 2, "track_lin_vel_heading": 2, "track_yaw_rate": 1}
"""The command columns a tracking term reads by default (the first 3 otherwise)."""
_NO_POINT = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
_POINT_KEYS = {"body": ("site", "offset"), "other": ("other_site", "other_offset")}
_SIGNATURES = {
    "observations": ("(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int",
                     ("Frame", int, int, "array2d", int), int),
    "rewards": ("(f: Frame, worldid: int, t: int) -> float", ("Frame", int, int), float),
    "terminations": ("(f: Frame, worldid: int, t: int) -> bool", ("Frame", int, int), bool),
    "success": ("(f: Frame, worldid: int, t: int) -> bool", ("Frame", int, int), bool),
}  # fmt: skip
"""Per stage: the signature a user's term must have (as the docs write it, its parameters' types, its return)."""


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
    reads: str = ""
    """``action`` (the executed action), ``previous`` (the action before it too) or empty."""
    joints: list[str] = field(default_factory=list)
    point: list[float] = field(default_factory=lambda: list(_NO_POINT))
    """The term's row of the ``tp`` table: its body's point and frame, the second body's point (``TP_*``)."""
    contact: bool = False
    """Reads the bodies' contact timers."""
    pair: bool = False
    """Reads whether its two bodies touch (``bodies_touch``): its ``ti[TI_PAIR]`` is its pair's column."""
    group: str = POLICY
    """An observation's group: ``policy`` (the field ``proprio``) or another group (its own field)."""
    params: dict = field(default_factory=dict)
    """A user term's named parameters, as given (``params = { ... }``: its ``tf`` columns in declared order)."""
    hold: float = 0.0
    """A condition's ``hold`` [s]: it counts once it has been true this long without a break (its timer, the
    task's state ``condition_timers``); 0: at once."""
    require: bool = False
    """A condition that must hold besides its stage's others (ANDed; the stage's other conditions are ORed)."""


@dataclass(frozen=True)
class Scope:
    """What a term entry may name: the model's joints and bodies, its root, sites, the action's width, the
    ``[command]`` and ``[targets]`` names, and the user's module of terms."""

    source: str
    joints: Callable
    """``joints(patterns, where)``: the coordinates, dofs and names of the movable joints the patterns match."""
    body: Callable
    """``body(name, where)``: a body's index in a world."""
    root: str
    """``free``, ``partial`` (slide and hinge joints) or the first joint's name (a fixed base)."""
    action_width: int
    command_names: list[str]
    sites: dict
    """The model's sites (``model.sites``)."""
    body_names: list[str]
    target_names: list[str]
    module: Any = None


@dataclass(frozen=True)
class _Term:
    """An entry's term: its :class:`terms.TermInfo`, whether it is the user's, the user's named parameters (their
    ``tf`` columns) and the keys the entry may hold."""

    info: Any
    user: bool
    allowed: tuple
    named: list = field(default_factory=list)
    declared: Any = None


def term_row(stage: str, i: int, entry, library: dict, scope: Scope, where: str = "") -> Row:
    """The :class:`Row` of the ``i``-th entry of ``stage``: a term of ``library`` or of the user's module, every
    key checked, every name bound to the model; ``where`` names the entry in messages (default ``STAGE[i]``)."""
    source, where = scope.source, where or f"{stage}[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("term"), str):
        raise ValueError(f'{source}: {where} = {entry!r}: expected a table with term = "<name>"')
    name = entry["term"]
    term = _term(stage, where, entry, library, scope)
    entry, conditions = _entry_keys(stage, where, entry, term, source)
    group = _group(stage, where, entry, source)
    point = _point(entry, term.info, f"{source}: {where}", scope.sites)
    info = _root_variant(term.info, name, where, scope)
    weight, noise = number(entry, "weight", 1.0, where, source), number(entry, "noise", 0.0, where, source)
    if noise < 0 or (stage != "observations" and "noise" in entry):
        what = "a range >= 0" if stage == "observations" else "nothing: only observations take noise"
        raise ValueError(f"{source}: {where}.noise = {shown(entry['noise'])}: expected {what}")
    label = entry.get("name", name)
    if not isinstance(label, str) or not label:
        raise ValueError(f"{source}: {where}.name = {shown(label)}: expected a name (a string)")
    ints, listed, chosen, numbers, width = _arguments(entry, info, name, where, scope)
    floats = [weight, noise, *numbers, *term.named, *_args(entry, where, source)]
    width = {"action": scope.action_width, "command": len(scope.command_names)}.get(width, width)
    if stage == "observations" and (not isinstance(width, int) or width < 1):
        raise ValueError(f"{source}: {where}: observation {name!r} has width {width!r}; expected at least 1")
    reads = "previous" if term.user else info.reads  # a user's term may read anything
    row = Row(stage, label, info.func, ints + listed, floats, width, "noise" in entry, term.user, reads, chosen)
    row.contact, row.point, row.group = info.contact, point, group
    row.pair = info.pair
    if row.pair and ints[1] == ints[2]:
        raise ValueError(f"{source}: {where}: {name} needs two different bodies (body and other)")
    if conditions:
        row.hold, row.require = conditions
    if term.user and term.declared is not None:
        row.params = dict(zip(term.declared.params, term.named, strict=True))
    return row


def _term(stage: str, where: str, entry: dict, library: dict, scope: Scope) -> _Term:
    """The entry's term: a library term's, or a ``@wp.func`` of the user's module (:func:`_user_term`)."""
    source, module, name = scope.source, scope.module, entry["term"]
    info = library.get(name)
    user = info is None and module is not None and hasattr(module, name)
    if info is None and not user:
        own = f" or a @wp.func of {params_module_name(module)}" if module is not None else ""
        known = ", ".join([*library, *(["camera"] if stage == "observations" else [])])
        raise ValueError(f"{source}: {where}.term = {name!r}: unknown; the library has {known}{own}")
    if user:
        return _user_entry(stage, where, entry, scope)
    points = tuple(k for owner in ("body", "other") if owner in info.keys for k in _POINT_KEYS[owner])
    if name in ("body_quat", "body_ang_vel"):  # a frame's, the same at every point of the body
        points = tuple(k for k in points if k != "offset")
    if info.pair:  # two bodies touching: no point of them
        points = ()
    return _Term(info, False, (*_TERM_KEYS, *info.keys, *points, *(("max_angle",) if name == "tilt" else ())))


def _user_entry(stage: str, where: str, entry: dict, scope: Scope) -> _Term:
    """A user's term: its ``@wp.func`` of the stage's signature, its ``contact`` flag, its declared parameters'
    values (``params = { ... }``) and its width."""
    source, module, name = scope.source, scope.module, entry["term"]
    func = _user_term(getattr(module, name), stage, f"{source}: {where}.term = {name!r}", module)
    contact = entry.get("contact", False)
    if not isinstance(contact, bool):
        raise ValueError(f"{source}: {where}.contact = {contact!r}: expected true or false")
    declared = user_terms.declaration(func)
    given = entry.get("params", {})
    if given and declared is None:
        raise ValueError(f"{source}: {where}.params: {params_module_name(module)}.{name} declares no parameters; "
                         "declare them with @forge_gpu.sim.terms.term(params={...})")  # fmt: skip
    if not isinstance(given, dict):
        raise ValueError(f"{source}: {where}.params = {shown(given)}: expected a table of named parameters")
    named = declared.values(given, f"{source}: {where}", name) if declared is not None else []
    width = (declared.width if declared is not None else None) or 1
    if stage == "observations" and "width" in entry:
        width = entry["width"]
    width = width if stage == "observations" else 0
    info = terms.TermInfo(func, width=width, contact=contact)
    return _Term(info, True, (*_TERM_KEYS, "width", "contact"), named, declared)


def _entry_keys(stage: str, where: str, entry: dict, term: _Term, source: str) -> tuple[dict, tuple | None]:
    """The entry with a library term's ``params = { ... }`` merged into it and a condition's ``hold`` and
    ``require`` taken out (returned: :func:`_condition_keys`), every key checked against what the term takes."""
    allowed = (*term.allowed, "group") if stage == "observations" else term.allowed
    conditions = _condition_keys(stage, entry, f"{source}: {where}")
    if conditions:
        allowed = (*allowed, "hold", "require")
        entry = {k: v for k, v in entry.items() if k not in ("hold", "require")}
    given = entry.get("params", {})
    if not isinstance(given, dict):
        raise ValueError(f"{source}: {where}.params = {shown(given)}: expected a table of named parameters")
    name, keys = entry["term"], term.info.keys
    if not term.user:  # a library term's named numbers may be given in params = { ... } too
        for key in given:
            if key in entry:
                raise ValueError(f"{source}: {where}.params.{key}: given twice (also {where}.{key})")
            if key not in keys or key in _NAMES:
                held = ", ".join(k for k in keys if k not in _NAMES) or "none"
                raise ValueError(f"{source}: {where}.params.{key}: unknown parameter of {name}; it takes {held}")
        entry = {**{k: v for k, v in entry.items() if k != "params"}, **given}
    check_keys(entry, allowed, where, f"{name} takes", source)
    return entry, conditions


def _group(stage: str, where: str, entry: dict, source: str) -> str:
    """An observation's group (``policy`` unless named)."""
    group = entry.get("group", POLICY)
    if stage == "observations" and (not isinstance(group, str) or not group.isidentifier() or group in _RESERVED):
        raise ValueError(f"{source}: {where}.group = {shown(group)}: expected a group name (policy, critic, ...: a "
                         f"name, not one of {', '.join(_RESERVED)})")  # fmt: skip
    return group


def _root_variant(info, name: str, where: str, scope: Scope):
    """A root term's variant for the model's root: as is for a free root, its ``*_rb`` function for a planar one;
    refused for a fixed base."""
    source, root = scope.source, scope.root
    if info.root and root == "partial":
        if info.partial is None:
            raise ValueError(f"{source}: {where}.term = {name!r}: {info.instead}")
        return dataclasses.replace(info, func=info.partial)
    if info.root and root != "free":
        raise ValueError(
            f"{source}: {where}.term = {name!r} reads the root; the model's base is fixed (its first joint "
            f"{root!r} neither is free nor slides): use body_pos, body_lin_vel, body_height, ... with body = ..."
        )
    return info


def _arguments(entry: dict, info, name: str, where: str, scope: Scope) -> tuple:
    """The term's arguments from the keys it takes: ``ti`` (a count, two bodies, an axis), the indices it lists
    after them (joints' coordinates and dofs, bodies, command columns or a target), its joints' names, the numbers
    it takes (``tf`` after weight and noise) and its width (``joints`` or ``bodies``: their count)."""
    ints, listed, chosen, numbers, width = [0, 0, -1, 0], [], [], [], info.width
    for key in info.keys:
        if key == "joints":
            cs, dd, chosen = scope.joints(entry.get("joints", ["*"]), f"{where}.joints")
            listed, ints[0] = cs + dd, len(cs)
            width = len(cs) if width == "joints" else width
        elif key in ("body", "other", "relative_to"):
            slot = 1 if key == "body" else 2
            ints[slot] = _body_argument(entry, key, ints[slot], name, where, scope)
        elif key == "bodies":
            listed = _bodies(entry.get("bodies"), f"{scope.source}: {where}.bodies", list(scope.body_names))
            ints[0] = len(listed)
            width = len(listed) if width == "bodies" else width
        elif key == "axis":
            axis = entry.get("axis", "x")
            if axis not in ("x", "y", "z"):
                raise ValueError(f"{scope.source}: {where}.axis = {axis!r}: allowed values are 'x', 'y', 'z'")
            ints[3] = "xyz".index(axis)
        elif key == "command":
            listed = _command_columns(entry, name, where, scope)
        elif key == "target":
            listed = [_target(entry, where, scope)]
        else:
            numbers.append(_number_argument(entry, key, name, where, scope.source))
    return ints, listed, chosen, numbers, width


def _body_argument(entry: dict, key: str, current: int, name: str, where: str, scope: Scope) -> int:
    """The body of ``key`` (``body``, ``other``, ``relative_to``): named, or the body of its site; ``current``
    where an optional ``relative_to`` is left out."""
    source, site = scope.source, _POINT_KEYS.get(key, ("",))[0]
    if key in entry:
        index = scope.body(entry[key], f"{where}.{key}")
    elif key in _POINT_KEYS and site in entry:  # a site names its body
        index = scope.sites[entry[site]][0]
    elif key != "relative_to":
        raise ValueError(f'{source}: {where}: {name} needs {key} = "<body name>" (or a site)')
    else:
        return current
    if key in entry and site in entry and scope.sites[entry[site]][0] != index:
        raise ValueError(f"{source}: {where}.{site} = {entry[site]!r} is not on {key} {entry[key]!r}")
    return index


def _command_columns(entry: dict, name: str, where: str, scope: Scope) -> list[int]:
    """The ``[command]`` columns a command term reads: ``command = [names]``, or its default first columns."""
    names = scope.command_names
    wanted = entry.get("command", names[: _COMMAND_COLUMNS.get(name, 3)])
    missing = [c for c in wanted if c not in names]
    if missing or not wanted:
        raise ValueError(f"{scope.source}: {where}.command = {wanted!r}: not in [command] names {names}")
    return [names.index(c) for c in wanted]


def _target(entry: dict, where: str, scope: Scope) -> int:
    """The index of the ``[targets]`` entry a target term names."""
    chosen = entry.get("target")
    if chosen not in scope.target_names:
        held = ", ".join(scope.target_names) or "none"
        raise ValueError(f"{scope.source}: {where}.target = {shown(chosen)}: not a name of [targets] ({held})")
    return list(scope.target_names).index(chosen)


def _number_argument(entry: dict, key: str, name: str, where: str, source: str) -> float:
    """A number a library term takes (``max_angle`` [deg] in radians; ``tilt``'s ``min_up`` from it)."""
    value = entry.get(key)
    if key == "min_up" and value is None and "max_angle" in entry:
        value = 0.0 if entry["max_angle"] == 90 else math.cos(math.radians(entry["max_angle"]))
    if not plain_number(value):
        raise ValueError(f"{source}: {where}.{key} = {value!r}: {name} needs a number {key}")
    return math.radians(value) if key == "max_angle" else float(value)


def _args(entry: dict, where: str, source: str) -> list[float]:
    """``args = [...]``: numbers after the term's own (its ``tf`` columns from ``TF_ARGS``)."""
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(plain_number(v) for v in args):
        raise ValueError(f"{source}: {where}.args = {shown(args)}: expected a list of numbers")
    return [float(v) for v in args]


def _point(entry: dict, info, where: str, sites: dict) -> list[float]:
    """The ``tp`` row of a body term's entry: ``site = "name"`` (its position and frame on its body, which must
    be the entry's body if both are given) or ``offset = [x, y, z]`` (metres, the body's frame) for ``body``, and
    ``other_site`` / ``other_offset`` for ``other``; a site alone names its body."""
    point = list(_NO_POINT)
    keys = info.keys if info is not None else ()
    for owner, (site_key, offset_key) in _POINT_KEYS.items():
        if owner not in keys:
            continue
        if site_key in entry and offset_key in entry:
            raise ValueError(f"{where}: give {site_key} or {offset_key}, not both")
        start = 0 if owner == "body" else 7
        if site_key in entry:
            name = entry[site_key]
            if name not in sites:
                held = ", ".join(sites) or "none"
                raise ValueError(f"{where}.{site_key} = {name!r}: no such site; the model's sites are {held}")
            pose = sites[name][1]
            point[start : start + 3] = pose[:3]
            if owner == "body":
                point[3:7] = pose[3:7]
        elif offset_key in entry:
            value = entry[offset_key]
            if not number_list(value, 3):
                raise ValueError(f"{where}.{offset_key} = {value!r}: expected [x, y, z] in metres, the body's frame")
            point[start : start + 3] = [float(v) for v in value]
    return point


def _condition_keys(stage: str, entry, where: str) -> tuple[float, bool] | None:
    """A condition's ``hold`` (it counts once true for this long without a break [s]; default 0) and ``require``
    (it must hold besides the stage's others: AND, where the others are ORed); None outside the conditions."""
    if stage not in ("terminations", "success") or not isinstance(entry, dict):
        return None
    hold, require = entry.get("hold", 0.0), entry.get("require", False)
    if not plain_number(hold) or hold < 0:
        raise ValueError(f"{where}.hold = {shown(hold)}: expected a duration >= 0 [s]")
    if not isinstance(require, bool):
        raise ValueError(f"{where}.require = {shown(require)}: expected true or false")
    return float(hold), require


def _bodies(patterns, where: str, names: list[str]) -> list[int]:
    """The bodies (model order) that ``patterns`` (a list of body name patterns, or one) match."""
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
        example = f" (bodies = [{shown(patterns)}])" if isinstance(patterns, str) else ""
        raise ValueError(f"{where} = {shown(patterns)}: expected a list of body name patterns{example}")
    for p in patterns:
        if not any(fnmatch.fnmatchcase(n, p) for n in names):
            raise ValueError(f"{where}: {p!r} matches no body; the model's bodies are {', '.join(names)}")
    return [b for b, n in enumerate(names) if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def _user_term(func, stage: str, where: str, module):
    """``func`` if it is a ``@wp.func`` of the stage's signature; else ValueError naming what it is and the
    signature expected."""
    import warp as wp

    from forge_gpu.kernels.terms import Frame

    text, wanted, returns = _SIGNATURES[stage]
    expected = f"a {stage[:-1] if stage != 'success' else 'success condition'} term is a @wp.func {text}"
    if not isinstance(func, wp.Function):
        given = f"{params_module_name(module)}.{getattr(func, '__name__', '')}"
        raise ValueError(f"{where}: {given} is not a @wp.func; {expected}")
    given = list(func.input_types.values())
    returned = func.func.__annotations__.get("return")

    def same(t, want) -> bool:
        if want == "Frame":
            return t is Frame
        if want == "array2d":
            return getattr(t, "ndim", 0) == 2 and getattr(t, "dtype", None) is wp.float32
        aliases = {int: (int, wp.int32, "int", "wp.int32"), float: (float, wp.float32, "float", "wp.float32"),
                   bool: (bool, wp.bool, "bool", "wp.bool")}  # fmt: skip
        return any(t is a or t == a for a in aliases[want])

    ok = len(given) == len(wanted) and all(same(t, w) for t, w in zip(given, wanted, strict=False))
    if not ok or returned is None or not same(returned, returns):
        names = list(func.input_types)
        signature = ", ".join(f"{n}: {_type_name(t)}" for n, t in zip(names, given, strict=True))
        raise ValueError(f"{where}: {params_module_name(module)}.{func.key} has signature ({signature}) -> "
                         f"{_type_name(returned)}; {expected}")  # fmt: skip
    missing = _missing_frame_fields(func)
    if missing:
        fields = ", ".join(Frame.vars)
        raise ValueError(f"{where}: {params_module_name(module)}.{func.key} reads {missing[0]}, which a Frame does "
                         f"not have; its fields: {fields} (forge_gpu.kernels.terms.Frame)")  # fmt: skip
    return func


def _missing_frame_fields(func) -> list[str]:
    """The attributes ``func``'s source reads from its Frame argument (its first) that a Frame does not have, as
    ``f.name``, in source order: read from the source when the file is read, so the build never meets them. Empty
    where the source is not to be had (Warp's own build then says it)."""
    import ast
    import inspect
    import textwrap

    from forge_gpu.kernels.terms import Frame

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func.func)))
    except (OSError, TypeError, SyntaxError):
        return []
    defined = next((node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)), None)
    if defined is None or not defined.args.args:
        return []
    frame = defined.args.args[0].arg
    reads = [node for node in ast.walk(defined) if isinstance(node, ast.Attribute)]
    reads = [node for node in reads if isinstance(node.value, ast.Name) and node.value.id == frame]
    reads.sort(key=lambda node: (node.lineno, node.col_offset))
    return [f"{frame}.{node.attr}" for node in reads if node.attr not in Frame.vars]


def _type_name(t) -> str:
    if t is None:
        return "None"
    if isinstance(t, str):
        return t
    return getattr(t, "__name__", None) or getattr(getattr(t, "cls", None), "__name__", None) or str(t)
