"""Every name of a task file bound to its model: the :class:`Plan` the task runs.

:func:`plan_task` resolves the file's sections (their ``"params.NAME"`` references already replaced,
``spec.resolved``) against one world of the model (``model.probe``): its joints and bodies, the term library
(``terms``) and the user's module of ``@wp.func`` terms: a name the model lacks, an unknown term or key, a list of
the wrong length is a ``ValueError`` of one line naming the file, the key and what the model has.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
from dataclasses import dataclass, field
from typing import Any

from forge_gpu._src.core.cameras import FRONT, camera_fields, check_name
from forge_gpu._src.core.checks import finite_number, plain_number
from forge_gpu._src.sim.camera import check_pose
from forge_gpu._src.tasks.taskfile import ee_action, terms, user_terms
from forge_gpu._src.tasks.taskfile.actuators import actuator_columns
from forge_gpu._src.tasks.taskfile.model import (
    BALL,
    FIXED,
    FREE,
    end_of,
    params_module_name,
    probe,
    probe_actuators,
    short_names,
    user_module,
)

_ACTION_KEYS = ("kind", "joints", "scale", "low", "high", "stiffness", "damping", "clip_to_limits", "relative",
                "follow", *ee_action.KEYS)  # fmt: skip
_TERM_KEYS = ("term", "weight", "noise", "args", "name", "params")
POLICY = "policy"
"""The observation group recorded as ``proprio`` (what a policy observes); every other group is its own field."""
_RESERVED = ("proprio", "reward_terms", "success", "rgb", "depth", "env_id", "episode_id", "step_id", "time",
             "action", "reward", "terminated", "truncated", "instruction", "state", "params")  # fmt: skip
_RESET_KEYS = ("joint_position", "joint_velocity", "joints")
_REWARD_KEYS = ("terms", "zero_on_termination")
CAMERA_KEYS = ("term", "name", "size", "fov", "position", "look_at", "up", "follow", "mount", "depth", "enabled")
TARGET_KEYS = ("yaw", "radius", "height", "marker", "marker_offset", "position")
OBJECT_KEYS = ("body", "shape", "size", "radius", "height", "mass", "friction", "position", "yaw")
BOX_SHAPE, CYLINDER_SHAPE = 7, 6
"""Newton's box and cylinder (``newton.GeoType``): the shapes an ``[objects]`` entry may be."""
SIZES = (8, 512)
"""The square image sizes [px] a task file's camera takes."""
PRISMATIC, D6 = 0, 6
"""Newton's slide joint and its D6 joint (``newton.JointType``): the joints a planar root is made of."""
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
    draws: list[tuple[int, int, float]]
    """The reset's draws in order: (0 a coordinate's position offset or 1 a dof's velocity, its index, range)."""
    lower: list[float]
    upper: list[float]
    rows: list[Row]
    command_names: list[str]
    proprio_dim: int
    reward_names: list[str]
    record_terms: bool = True
    zero_on_termination: bool = False
    action_state: bool = True
    """Whether the recorded state holds the executed actions (a term observes them or reads the one before)."""
    noise_state: bool = True
    """Whether the recorded state holds the observation noise key (an observation has noise)."""
    cameras: list[dict] = dataclasses.field(default_factory=list)
    """The enabled camera observations in the file's order (:func:`camera_entry`; ``task.FileCameras`` renders
    them), each with a distinct name."""
    root_body: int = 0
    """The body the model's root joint moves (the ``*_rb`` root terms and ``root_pos``, ``root_pitch`` read it)."""
    partial_root: bool = False
    """The root is made of slide and hinge joints (a planar robot's), not a free joint."""
    contact: bool = False
    """A term reads the bodies' contact timers (the task records them: state ``contact_timers``)."""
    pairs: list[tuple[int, int]] = field(default_factory=list)
    """The pairs of bodies (per-world indices) that ``bodies_touch`` terms read, in order (``Frame.touch``'s
    columns; the task records their flags: state ``contact_pairs``)."""
    targets: list[dict] = field(default_factory=list)
    """The file's ``[targets]`` in order (:func:`target_entries`): each a point drawn at every reset."""
    action_relative: bool = True
    """Position targets are the default pose + action * scale (else action * scale: ``action.relative``)."""
    objects: list[dict] = field(default_factory=list)
    """The file's ``[objects]`` in order (:func:`object_entries`): each a free box placed at every reset."""
    follow: list[tuple[int, int, int]] = field(default_factory=list)
    """``[action] follow``: (the following joint's coordinate, its dof, the action column it copies): a position
    target driven from another joint's column (a coupled gripper's second finger)."""
    groups: dict = field(default_factory=dict)
    """The observation groups beyond ``policy``: name -> width, in the order the file first names them (each the
    float32 field of that name, e.g. ``critic``)."""
    ik: dict | None = None
    """``[action] kind = "ee_delta"``: the IK's tables (``ee_action.ee_columns``); None for the other kinds."""


def plan_task(params, source: str) -> Plan:
    """Resolve every section of ``params`` (a ``spec.FileParams`` whose references are replaced:
    ``spec.resolved``) against the model: ValueError (one line, the key and what the model has)."""
    builder = probe(params.model, source)
    names, bodies = short_names(builder.joint_label), short_names(builder.body_label)
    types = [int(t) for t in builder.joint_type]
    qs, ds = list(builder.joint_q_start), list(builder.joint_qd_start)
    coords, dofs = len(builder.joint_q), builder.joint_dof_count
    root = bool(types) and types[0] == FREE
    partial = not root and _translating_root(builder, types)
    root_body = int(builder.joint_child[0]) if root or partial else 0
    root_kind = "free" if root else "partial" if partial else names[0] if names else ""
    sites = _sites(builder)
    movable = [j for j, t in enumerate(types) if t not in (FREE, FIXED)]

    def joints(patterns, where: str) -> tuple[list[int], list[int], list[str]]:
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            example = f" (joints = [{shown(patterns)}])" if isinstance(patterns, str) else ""
            raise ValueError(f"{source}: {where} = {shown(patterns)}: expected a list of joint name patterns{example}")
        allowed = ", ".join(names[j] for j in movable)
        for p in patterns:
            if not any(fnmatch.fnmatchcase(names[j], p) for j in movable):
                raise ValueError(f"{source}: {where}: {p!r} matches no joint; the model's joints are {allowed}")
        chosen = [j for j in movable if any(fnmatch.fnmatchcase(names[j], p) for p in patterns)]
        for j in chosen:
            if types[j] == BALL:
                raise ValueError(f"{source}: {where}: joint {names[j]!r} is a ball joint; name hinge or slide joints")
        cs = [c for j in chosen for c in range(qs[j], end_of(qs, j, coords))]
        dd = [d for j in chosen for d in range(ds[j], end_of(ds, j, dofs))]
        return cs, dd, [names[j] for j in chosen]

    def body(name, where: str) -> int:
        if name not in bodies:
            raise ValueError(f"{source}: {where} = {name!r}: no such body; the model's bodies are {', '.join(bodies)}")
        return bodies.index(name)

    action = params.action
    for key in action:
        if key not in _ACTION_KEYS:
            raise ValueError(f"{source}: unknown key action.{key}; allowed keys are {', '.join(_ACTION_KEYS)}")
    actuators = probe_actuators(params.model, source)
    kind = action.get("kind", "actuators" if len(actuators) and "joints" not in action else "effort")
    if kind not in ("actuators", "effort", "position", ee_action.KIND):
        raise ValueError(f"{source}: action.kind = {kind!r}: allowed values are 'actuators', 'effort', 'position', "
                         f"'{ee_action.KIND}'")  # fmt: skip
    for key in ee_action.KEYS:
        if key in action and kind != ee_action.KIND:
            raise ValueError(f"{source}: action.{key}: only kind = '{ee_action.KIND}' takes it")
    relative = action.get("relative", True)
    if not isinstance(relative, bool) or (kind not in ("position", ee_action.KIND) and "relative" in action):
        raise ValueError(f"{source}: action.relative = {shown(relative)}: expected true or false, with kind = "
                         f"'position' or '{ee_action.KIND}'")  # fmt: skip
    targets = target_entries(getattr(params, "targets", {}), source, short_names(builder.shape_label))
    objects = object_entries(getattr(params, "objects", {}), source, builder)
    ik = None
    if kind == "actuators":
        a_coords, a_dofs, a_names = actuator_columns(action, actuators, source)
    elif kind == ee_action.KIND:
        a_coords, a_dofs, a_names, ik = ee_action.ee_columns(action, builder, joints, sites, bodies, source)
    else:
        a_coords, a_dofs, a_names = joints(action.get("joints", ["*"]), "action.joints")
    follow = _follow(action, kind, a_names, joints, source)
    r_coords, r_dofs, _ = joints(["*"], "reset") if movable else ([], [], [])
    draws = _draws(params.reset, joints, source) if movable else []
    command = params.command
    command_names = list(command.get("names", []))
    if set(command) - {"names", "default"} or len(command.get("default", command_names)) != len(command_names):
        raise ValueError(f"{source}: [command] takes names = [...] and default = [...] of the same length")
    if not all(isinstance(c, str) for c in command_names):
        raise ValueError(f"{source}: command.names = {shown(command_names)}: expected a list of names (strings)")
    for i in range(len(command.get("default", []))):
        number(command["default"], i, 0.0, "command.default", source)
    lower, upper = [-1e10] * coords, [1e10] * coords
    for c, d in zip(r_coords, r_dofs, strict=True):
        lower[c], upper[c] = builder.joint_limit_lower[d], builder.joint_limit_upper[d]
    module = user_module(params.module, source) if params.module else None
    rows: list[Row] = []
    cameras: list[dict] = []
    libraries = {"observations": terms.OBSERVATIONS, "rewards": terms.REWARDS,
                 "terminations": terms.CONDITIONS, "success": terms.CONDITIONS}  # fmt: skip
    for stage, library in libraries.items():
        entries = getattr(params, stage)
        if not isinstance(entries, list):
            raise ValueError(f"{source}: {stage} must be a list of tables ([[{stage}]])")
        for i, entry in enumerate(entries):
            if stage == "observations" and isinstance(entry, dict) and entry.get("term") == "camera":
                camera = camera_entry(entry, f"observations[{i}]", source, body)
                named = [c["name"] for c in cameras]
                if camera["name"] in named:
                    raise ValueError(f"{source}: observations[{i}].name = {camera['name']!r}: a second camera of "
                                     "that name; each camera of a task file has its own name")  # fmt: skip
                cameras.append(camera)
                continue
            row = _row(stage, i, entry, library, module, source, joints, body, root_kind, a_coords, command_names,
                       sites=sites, body_names=bodies, target_names=[t["name"] for t in targets])  # fmt: skip
            rows.append(row)
    if not isinstance(params.observation_noise, bool):
        raise ValueError(f"{source}: observation_noise = {shown(params.observation_noise)}: expected true or false")
    if not params.observation_noise:
        rows = [dataclasses.replace(r, noise=False) for r in rows]
    taken = {f for c in cameras for f in camera_fields(c["name"])}
    for r in rows:
        if r.stage == "observations" and r.group in taken:
            raise ValueError(f"{source}: observations: group {r.group!r} is a camera's field; name the group "
                             "otherwise")  # fmt: skip
    if ik is not None:
        for r in rows:
            if r.func is terms.REWARDS["energy"].func:
                raise ValueError(f"{source}: {r.stage}: term 'energy' reads joint torques; kind = "
                                 f"'{ee_action.KIND}' has none (its columns are a pose change)")  # fmt: skip
    pairs: list[tuple[int, int]] = []
    for row in rows:  # each pair of bodies that a contact-pair term reads: one column of Frame.touch
        if row.pair:
            key = tuple(sorted(row.ints[1:3]))
            if key not in pairs:
                pairs.append(key)
            row.ints[3] = pairs.index(key)
    proprio = sum(r.width for r in rows if r.stage == "observations" and r.group == POLICY)
    groups: dict[str, int] = {}
    for r in rows:
        if r.stage == "observations" and r.group != POLICY:
            groups[r.group] = groups.get(r.group, 0) + r.width
    if proprio == 0:
        raise ValueError(f"{source}: observations: the task observes nothing; add [[observations]] terms")
    reward = params.reward
    for key, value in reward.items():
        if key not in _REWARD_KEYS or not isinstance(value, bool):
            raise ValueError(f"{source}: reward.{key} = {value!r}: [reward] takes true or false for {_REWARD_KEYS}")
    record = reward.get("terms", True)
    action_state = any(r.reads == "previous" or (r.reads == "action" and (r.stage == "observations" or (
        r.stage == "rewards" and record))) for r in rows)  # fmt: skip
    return Plan(
        joint_names=names, body_names=bodies, root=root, coords=coords, action_kind=kind, action_joints=a_names,
        action_coords=a_coords, action_dofs=a_dofs, reset_coords=r_coords, reset_dofs=r_dofs, draws=draws,
        lower=lower, upper=upper, rows=rows, command_names=command_names, proprio_dim=proprio,
        reward_names=[r.name for r in rows if r.stage == "rewards"], record_terms=record,
        zero_on_termination=reward.get("zero_on_termination", False), action_state=action_state,
        noise_state=any(r.noise for r in rows), cameras=[c for c in cameras if c["enabled"]], root_body=root_body,
        partial_root=partial,
        contact=any(r.contact for r in rows), targets=targets, action_relative=relative, groups=groups,
        objects=objects, follow=follow, ik=ik, pairs=pairs,
    )  # fmt: skip


def _follow(action: dict, kind: str, columns: list[str], joints, source: str) -> list[tuple[int, int, int]]:
    """``[action] follow = { "<joint>" = "<action joint>" }``: each joint's position target is the action joint's
    (both driven with the action's gains); only with kind = "position", a follower not an action joint itself."""
    given = action.get("follow", {})
    if not given:
        return []
    if kind not in ("position", ee_action.KIND) or not isinstance(given, dict):
        raise ValueError(f'{source}: action.follow = {shown(given)}: expected a table joint = "<action joint>", with '
                         f'kind = "position" or "{ee_action.KIND}"')  # fmt: skip
    out = []
    for name, leader in given.items():
        cs, ds, found = joints([name], f"action.follow.{name}")
        if len(found) != 1 or len(cs) != 1 or found[0] in columns:
            raise ValueError(f"{source}: action.follow.{name}: expected one hinge or slide joint that is not an action "
                             f"joint ({', '.join(columns)})")  # fmt: skip
        if leader not in columns:
            raise ValueError(f"{source}: action.follow.{name} = {shown(leader)}: not an action joint; the action's "
                             f"joints are {', '.join(columns)}")  # fmt: skip
        out.append((cs[0], ds[0], columns.index(leader)))
    return out


def _translating_root(builder, types: list[int]) -> bool:
    """Whether the model's first joint joins a body to the world by slide (and hinge) joints, at least one slide:
    a planar robot's root (Newton's importers merge a body's slide-x, slide-z, hinge-y into one D6 joint)."""
    if not types or int(builder.joint_parent[0]) != -1:
        return False
    if types[0] == PRISMATIC:
        return True
    return types[0] == D6 and int(builder.joint_dof_dim[0][0]) > 0


def _sites(builder) -> dict[str, tuple[int, list[float]]]:
    """The model's sites (MJCF ``<site>``, kept by Newton as shapes flagged SITE): name -> (body, position and
    quaternion xyzw in the body's frame)."""
    import newton

    found = {}
    for label, body, flags, pose in zip(
        short_names(builder.shape_label), builder.shape_body, builder.shape_flags, builder.shape_transform, strict=True
    ):
        if int(flags) & int(newton.ShapeFlags.SITE) and int(body) >= 0:
            found[label] = (int(body), [float(v) for v in pose])
    return found


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
            if not isinstance(value, list) or len(value) != 3 or not all(finite_number(v) for v in value):
                raise ValueError(f"{where}.{offset_key} = {value!r}: expected [x, y, z] in metres, the body's frame")
            point[start : start + 3] = [float(v) for v in value]
    return point


def _draws(reset: dict, joints, source: str) -> list[tuple[int, int, float]]:
    """``[reset]``'s draws in order: ``joint_position`` and ``joint_velocity`` (every movable joint, per joint its
    position then its velocity), or ``[[reset.joints]]`` entries of ``joints``, ``position``, ``velocity`` (in the
    entries' order; per joint of an entry, its position then its velocity)."""
    for key in reset:
        if key not in _RESET_KEYS:
            raise ValueError(f"{source}: unknown key reset.{key}; allowed keys are {', '.join(_RESET_KEYS)}")
    entries = reset.get("joints")
    for key in ("joint_position", "joint_velocity"):
        value = reset.get(key, 0.0)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{source}: reset.{key} = {value!r}: expected a range >= 0 (a number)")
    if entries is None:
        entries = [{"joints": ["*"], "position": reset.get("joint_position", 0.0),
                    "velocity": reset.get("joint_velocity", 0.0)}]  # fmt: skip
    elif set(reset) != {"joints"} or not isinstance(entries, list):
        raise ValueError(f"{source}: [reset] takes joint_position and joint_velocity, or [[reset.joints]] entries")
    draws = []
    for i, entry in enumerate(entries):
        where = f"reset.joints[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"joints", "position", "velocity"}:
            raise ValueError(f"{source}: {where} = {entry!r}: expected a table of joints, position, velocity")
        for key in ("position", "velocity"):
            value = entry.get(key, 0.0)
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{source}: {where}.{key} = {value!r}: expected a range >= 0 (a number)")
        cs, dd, _ = joints(entry.get("joints", ["*"]), f"{where}.joints")
        for c, d in zip(cs, dd, strict=True):
            if "position" in entry:
                draws.append((0, c, float(entry["position"])))
            if "velocity" in entry:
                draws.append((1, d, float(entry["velocity"])))
    return draws


def _row(stage, i, entry, library, module, source, joints, body, root, a_coords, command_names, *, sites=None,
         body_names=(), target_names=()) -> Row:  # fmt: skip
    where = f"{stage}[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("term"), str):
        raise ValueError(f'{source}: {where} = {entry!r}: expected a table with term = "<name>"')
    name = entry["term"]
    info = library.get(name)
    user = info is None and module is not None and hasattr(module, name)
    if info is None and not user:
        own = f" or a @wp.func of {params_module_name(module)}" if module is not None else ""
        known = ", ".join([*library, *(["camera"] if stage == "observations" else [])])
        raise ValueError(f"{source}: {where}.term = {name!r}: unknown; the library has {known}{own}")
    if user:
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
        allowed = (*_TERM_KEYS, "width", "contact")
    else:
        points = tuple(k for owner in ("body", "other") if owner in info.keys for k in _POINT_KEYS[owner])
        if name in ("body_quat", "body_ang_vel"):  # a frame's, the same at every point of the body
            points = tuple(k for k in points if k != "offset")
        if info.pair:  # two bodies touching: no point of them
            points = ()
        allowed = (*_TERM_KEYS, *info.keys, *points, *(("max_angle",) if name == "tilt" else ()))
    if stage == "observations":
        allowed = (*allowed, "group")
    conditions = _condition_keys(stage, entry, f"{source}: {where}")
    if conditions:
        allowed = (*allowed, "hold", "require")
        entry = {k: v for k, v in entry.items() if k not in ("hold", "require")}
    given = entry.get("params", {})
    if not isinstance(given, dict):
        raise ValueError(f"{source}: {where}.params = {shown(given)}: expected a table of named parameters")
    if not user:  # a library term's named numbers may be given in params = { ... } too
        for key in given:
            if key in entry:
                raise ValueError(f"{source}: {where}.params.{key}: given twice (also {where}.{key})")
            if key not in info.keys or key in ("joints", "body", "other", "relative_to", "bodies", "axis", "command"):
                numbers = [k for k in info.keys if k not in ("joints", "body", "other", "relative_to", "bodies",
                                                             "axis", "command")]  # fmt: skip
                held = ", ".join(numbers) or "none"
                raise ValueError(f"{source}: {where}.params.{key}: unknown parameter of {name}; it takes {held}")
        entry = {**{k: v for k, v in entry.items() if k != "params"}, **given}
    for key in entry:
        if key not in allowed:
            raise ValueError(f"{source}: unknown key {where}.{key}; {name} takes {', '.join(allowed)}")
    group = entry.get("group", POLICY)
    if stage == "observations" and (not isinstance(group, str) or not group.isidentifier() or group in _RESERVED):
        raise ValueError(f"{source}: {where}.group = {shown(group)}: expected a group name (policy, critic, ...: a "
                         f"name, not one of {', '.join(_RESERVED)})")  # fmt: skip
    sites = sites or {}
    point = _point(entry, info, f"{source}: {where}", sites)

    def sites_body(site: str) -> int:
        return sites[site][0]

    if info.root and root == "partial":
        if info.partial is None:
            raise ValueError(f"{source}: {where}.term = {name!r}: {info.instead}")
        info = dataclasses.replace(info, func=info.partial)
    elif info.root and root != "free":
        raise ValueError(
            f"{source}: {where}.term = {name!r} reads the root; the model's base is fixed (its first joint "
            f"{root!r} neither is free nor slides): use body_pos, body_lin_vel, body_height, ... with body = ..."
        )
    weight, noise = number(entry, "weight", 1.0, where, source), number(entry, "noise", 0.0, where, source)
    if noise < 0 or (stage != "observations" and "noise" in entry):
        what = "a range >= 0" if stage == "observations" else "nothing: only observations take noise"
        raise ValueError(f"{source}: {where}.noise = {shown(entry['noise'])}: expected {what}")
    label = entry.get("name", name)
    if not isinstance(label, str) or not label:
        raise ValueError(f"{source}: {where}.name = {shown(label)}: expected a name (a string)")
    ints, floats = [0, 0, -1, 0], [weight, noise]
    listed: list[int] = []
    chosen: list[str] = []
    width = info.width
    for key in info.keys:
        if key == "joints":
            cs, dd, chosen = joints(entry.get("joints", ["*"]), f"{where}.joints")
            listed, ints[0] = cs + dd, len(cs)
            width = len(cs) if width == "joints" else width
        elif key in ("body", "other", "relative_to"):
            if key in entry:
                ints[1 if key == "body" else 2] = body(entry[key], f"{where}.{key}")
            elif key in _POINT_KEYS and _POINT_KEYS[key][0] in entry:  # a site names its body
                site = _POINT_KEYS[key][0]
                ints[1 if key == "body" else 2] = sites_body(entry[site])
            elif key != "relative_to":
                raise ValueError(f'{source}: {where}: {name} needs {key} = "<body name>" (or a site)')
            site = _POINT_KEYS.get(key, ("",))[0]
            if key in entry and site in entry and sites_body(entry[site]) != ints[1 if key == "body" else 2]:
                raise ValueError(f"{source}: {where}.{site} = {entry[site]!r} is not on {key} {entry[key]!r}")
        elif key == "bodies":
            listed = _bodies(entry.get("bodies"), f"{source}: {where}.bodies", list(body_names))
            ints[0] = len(listed)
            width = len(listed) if width == "bodies" else width
        elif key == "axis":
            axis = entry.get("axis", "x")
            if axis not in ("x", "y", "z"):
                raise ValueError(f"{source}: {where}.axis = {axis!r}: allowed values are 'x', 'y', 'z'")
            ints[3] = "xyz".index(axis)
        elif key == "command":
            wanted = entry.get(
                "command",
                command_names[: {"track_lin_vel": 2, "track_lin_vel_heading": 2, "track_yaw_rate": 1}.get(name, 3)],
            )
            missing = [c for c in wanted if c not in command_names]
            if missing or not wanted:
                raise ValueError(f"{source}: {where}.command = {wanted!r}: not in [command] names {command_names}")
            listed = [command_names.index(c) for c in wanted]
        elif key == "target":
            chosen_target = entry.get("target")
            if chosen_target not in target_names:
                held = ", ".join(target_names) or "none"
                raise ValueError(f"{source}: {where}.target = {shown(chosen_target)}: not a name of [targets] ({held})")
            listed = [list(target_names).index(chosen_target)]
        else:
            value = entry.get(key)
            if key == "min_up" and value is None and "max_angle" in entry:
                value = 0.0 if entry["max_angle"] == 90 else math.cos(math.radians(entry["max_angle"]))
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"{source}: {where}.{key} = {value!r}: {name} needs a number {key}")
            floats.append(math.radians(value) if key == "max_angle" else float(value))
    if user:
        floats.extend(named)
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(plain_number(v) for v in args):
        raise ValueError(f"{source}: {where}.args = {shown(args)}: expected a list of numbers")
    floats.extend(float(v) for v in args)
    width = {"action": len(a_coords), "command": len(command_names)}.get(width, width)
    if stage == "observations" and (not isinstance(width, int) or width < 1):
        raise ValueError(f"{source}: {where}: observation {name!r} has width {width!r}; expected at least 1")
    reads = "previous" if user else info.reads  # a user's term may read anything
    row = Row(stage, label, info.func, ints + listed, floats, width, "noise" in entry, user, reads, chosen)
    row.contact, row.point, row.group = info.contact, point, group
    row.pair = info.pair
    if row.pair and ints[1] == ints[2]:
        raise ValueError(f"{source}: {where}: {name} needs two different bodies (body and other)")
    if conditions:
        row.hold, row.require = conditions
    if user and declared is not None:
        row.params = dict(zip(declared.params, named, strict=True))
    return row


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
    return func


def _type_name(t) -> str:
    if t is None:
        return "None"
    if isinstance(t, str):
        return t
    return getattr(t, "__name__", None) or getattr(getattr(t, "cls", None), "__name__", None) or str(t)


def number(entry: dict | list, key: str | int, default: float, where: str, source: str) -> float:
    """``entry[key]`` (or ``default``) as a float: a TOML number, not a boolean or a string."""
    value = entry.get(key, default) if isinstance(entry, dict) else entry[key]
    if not isinstance(value, int | float) or isinstance(value, bool):
        at = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}"
        raise ValueError(f"{source}: {at} = {shown(value)}: expected a number")
    return float(value)


def shown(value) -> str:
    """``value`` as the TOML file spells it (``true``, ``"x"``, ``["a", "b"]``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def target_entries(targets, source: str, shapes: list[str]) -> list[dict]:
    """The checked ``[targets]``: per name, a point drawn at every reset from the reset's stream (after the joints'
    draws), uniform in a sector of a cylinder about the world's z axis: azimuth in +-``yaw`` about +x [rad], the
    horizontal distance in ``radius = [min, max]`` and the height in ``height = [min, max]`` [m]; ``marker`` (a
    shape's name, optional) is moved to it, plus ``marker_offset`` [m] (visual: a static shape)."""
    if not isinstance(targets, dict):
        raise ValueError(f"{source}: [targets] must be a table of [targets.NAME] tables")
    out = []
    for name, entry in targets.items():
        where = f"targets.{name}"
        if not isinstance(entry, dict):
            raise ValueError(f"{source}: {where} = {shown(entry)}: expected a table of {', '.join(TARGET_KEYS)}")
        for key in entry:
            if key not in TARGET_KEYS:
                raise ValueError(f"{source}: unknown key {where}.{key}; a target takes {', '.join(TARGET_KEYS)}")
        ranges, placed = {}, None
        if "position" in entry:  # placed by the parameter NAME_position, not drawn
            value = entry["position"]
            if set(entry) & {"yaw", "radius", "height"} or not (
                isinstance(value, list) and len(value) == 2 and all(plain_number(v) for v in value)
            ):
                raise ValueError(f"{source}: {where}.position = {shown(value)}: expected [x, y] in metres (and no "
                                 "yaw, radius, height: a placed target is not drawn)")  # fmt: skip
            placed, entry = [float(v) for v in value], {**entry, "radius": [0.0, 0.0], "height": [0.0, 0.0]}
        yaw = number(entry, "yaw", 0.0, where, source)
        for key in ("radius", "height"):
            value = entry.get(key)
            if not (isinstance(value, list) and len(value) == 2
                    and all(plain_number(v) for v in value) and value[0] <= value[1]):  # fmt: skip
                raise ValueError(f"{source}: {where}.{key} = {shown(value)}: expected [min, max] in metres")
            ranges[key] = [float(v) for v in value]
        marker = entry.get("marker")
        if marker is not None and marker not in shapes:
            named = ", ".join(sorted({s for s in shapes if s})) or "none"
            raise ValueError(f"{source}: {where}.marker = {shown(marker)}: no such shape; the model's are {named}")
        offset = entry.get("marker_offset", [0.0, 0.0, 0.0])
        if not (isinstance(offset, list) and len(offset) == 3 and all(plain_number(v) for v in offset)):
            raise ValueError(f"{source}: {where}.marker_offset = {shown(offset)}: expected [x, y, z] in metres")
        out.append({"name": name, "yaw": yaw, **ranges, "marker": marker, "marker_offset": [float(v) for v in offset],
                    "position": placed})  # fmt: skip
    return out


def object_entries(objects, source: str, builder) -> list[dict]:
    """The checked ``[objects]``: per name, its free ``body`` and its ``shape`` (names in the model, checked with
    ``builder``: a one-world probe, or None to check the numbers alone) and its numbers: a cube's ``size`` (its
    edge) or a cylinder's ``radius`` and ``height`` (its full height, along its axis: upright on the table), each
    > 0 [m]; ``mass`` (> 0) [kg], ``friction`` (>= 0), ``position = [x, y]`` [m], ``yaw`` [rad] (default 0). The
    entry's ``kind`` is ``"box"`` (``size``) or ``"cylinder"`` (``radius`` and ``height``); with ``builder`` the
    model's shape must be of that kind, and each entry gains ``coord`` and ``dof``: its free joint's first
    coordinate and dof in a world."""
    if not isinstance(objects, dict):
        raise ValueError(f"{source}: [objects] must be a table of [objects.NAME] tables")
    out = []
    for name, entry in objects.items():
        where = f"{source}: objects.{name}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} = {shown(entry)}: expected a table of {', '.join(OBJECT_KEYS)}")
        for key in entry:
            if key not in OBJECT_KEYS:
                raise ValueError(
                    f"{source}: unknown key objects.{name}.{key}; an object takes {', '.join(OBJECT_KEYS)}"
                )
        item = {"name": name, "yaw": 0.0}
        for key in ("body", "shape"):
            if not isinstance(entry.get(key), str):
                raise ValueError(f'{where}: an object needs {key} = "<its {key} name in the model>"')
            item[key] = entry[key]
        round_keys = [k for k in ("radius", "height") if k in entry]
        if "size" in entry and round_keys:
            raise ValueError(f"{where}.{round_keys[0]}: a cube takes size (its edge), a cylinder radius and height, "
                             "not both")  # fmt: skip
        if round_keys and len(round_keys) < 2:
            missing = "height" if round_keys == ["radius"] else "radius"
            raise ValueError(f"{where}: a cylinder needs radius and height [m]; {missing} is missing")
        item["kind"] = "cylinder" if round_keys else "box"
        dimensions = ("radius", "height") if round_keys else ("size",)
        for key in (*dimensions, "mass", "friction", "yaw"):
            if key not in entry and key == "yaw":
                continue
            value = entry.get(key)
            low = 0.0 if key == "friction" else None
            positive = key in ("size", "radius", "height", "mass")
            if not finite_number(value) or (positive and value <= 0) \
                    or (low is not None and value < 0):  # fmt: skip
                what = "a number" if key == "yaw" else "a number >= 0" if key == "friction" else "a number > 0"
                raise ValueError(f"{where}.{key} = {shown(value)}: expected {what}")
            item[key] = float(value)
        value = entry.get("position")
        if not (isinstance(value, list) and len(value) == 2 and all(plain_number(v) for v in value)):
            raise ValueError(f"{where}.position = {shown(value)}: expected [x, y] in metres")
        item["position"] = [float(v) for v in value]
        if builder is not None:
            bodies, shapes = short_names(builder.body_label), short_names(builder.shape_label)
            if item["body"] not in bodies:
                raise ValueError(f"{where}.body = {item['body']!r}: no such body; the model's are {', '.join(bodies)}")
            body = bodies.index(item["body"])
            joints = [j for j, child in enumerate(builder.joint_child) if int(child) == body]
            if not joints or int(builder.joint_type[joints[0]]) != FREE:
                raise ValueError(f"{where}.body = {item['body']!r}: not on a free joint; an object moves freely")
            if item["shape"] not in shapes or int(builder.shape_body[shapes.index(item["shape"])]) != body:
                raise ValueError(f"{where}.shape = {item['shape']!r}: no such shape on body {item['body']!r}")
            kind = int(builder.shape_type[shapes.index(item["shape"])])
            expected = CYLINDER_SHAPE if item["kind"] == "cylinder" else BOX_SHAPE
            if kind != expected:
                keys = "radius and height" if item["kind"] == "cylinder" else "size"
                other = "box" if kind == BOX_SHAPE else "cylinder" if kind == CYLINDER_SHAPE else "another shape"
                raise ValueError(f"{where}: {keys} describe a {item['kind']}, but shape {item['shape']!r} is a "
                                 f"{other} (a box takes size, a cylinder radius and height)")  # fmt: skip
            item["coord"] = int(builder.joint_q_start[joints[0]])
            item["dof"] = int(builder.joint_qd_start[joints[0]])
        out.append(item)
    return out


def camera_entry(entry: dict, where: str, source: str, body) -> dict:
    """The checked camera of ``entry`` (``body(name, key)`` resolves a body name to its index): its name (``front``
    when unnamed), image size, field of view, pose (``position`` looking at ``look_at`` with ``up`` toward image
    up; in the world frame, offsets from a ``follow`` body's position, or in a ``mount`` body's frame), depth on or
    off."""
    for key in entry:
        if key not in CAMERA_KEYS:
            raise ValueError(f"{source}: unknown key {where}.{key}; camera takes {', '.join(CAMERA_KEYS)}")
    name = check_name(entry.get("name", FRONT), f"{source}: {where}.name")
    size, fov, depth = entry.get("size", 64), entry.get("fov", 45.0), entry.get("depth", True)
    if not isinstance(size, int) or isinstance(size, bool) or not SIZES[0] <= size <= SIZES[1]:
        raise ValueError(f"{source}: {where}.size = {size!r}: expected a whole number of pixels in {list(SIZES)}")
    if not isinstance(fov, int | float) or isinstance(fov, bool) or not 5.0 <= fov <= 120.0:
        raise ValueError(f"{source}: {where}.fov = {fov!r}: expected a field of view in [5, 120] degrees")
    if not isinstance(depth, bool):
        raise ValueError(f"{source}: {where}.depth = {depth!r}: expected true or false")
    enabled = entry.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"{source}: {where}.enabled = {enabled!r}: expected true or false")
    for key in ("position", "look_at"):
        if not isinstance(entry.get(key), list):
            raise ValueError(f"{source}: {where}: camera needs {key} = [x, y, z] (metres)")
    up = entry.get("up", [0.0, 0.0, 1.0])
    if not isinstance(up, list):
        raise ValueError(f"{source}: {where}.up = {up!r}: expected 3 values (a direction)")
    check_pose(entry["position"], entry["look_at"], f"{source}: {where}.position", f"{where}.look_at", up=up,
               up_key=f"{where}.up")  # fmt: skip
    if "follow" in entry and "mount" in entry:
        raise ValueError(
            f"{source}: {where}: a camera takes follow (translates with a body) or mount (rides with "
            f"its full pose), not both; got follow = {entry['follow']!r}, mount = {entry['mount']!r}"
        )
    follow = body(entry["follow"], f"{where}.follow") if "follow" in entry else -1
    mount = body(entry["mount"], f"{where}.mount") if "mount" in entry else -1
    return {
        "name": name, "size": size, "fov": float(fov), "position": [float(v) for v in entry["position"]],
        "look_at": [float(v) for v in entry["look_at"]], "up": [float(v) for v in up], "follow": follow,
        "follow_name": entry.get("follow"), "mount": mount, "mount_name": entry.get("mount"), "depth": depth,
        "enabled": enabled,
    }  # fmt: skip
