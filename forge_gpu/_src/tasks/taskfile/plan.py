"""Every name of a task file bound to its model: the :class:`Plan` the task runs.

:func:`plan_task` resolves the file's sections (their ``"params.NAME"`` references already replaced,
``spec.resolved``) against one world of the model (``model.probe``): its joints and bodies, the action, the reset's
draws, the command, the targets (``targets.py``), objects (``objects.py``) and cameras (``cameras.py``), and each
term (``term_rows.py``: the library ``terms`` and the user's module of ``@wp.func`` terms): a name the model lacks,
an unknown term or key, a list of the wrong length is a ``ValueError`` of one line naming the file, the key and what
the model has.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass, field

from forge_gpu._src.core.cameras import camera_fields
from forge_gpu._src.core.checks import plain_number
from forge_gpu._src.tasks.taskfile import ee_action, terms
from forge_gpu._src.tasks.taskfile.actuators import actuator_columns
from forge_gpu._src.tasks.taskfile.cameras import camera_entry
from forge_gpu._src.tasks.taskfile.entries import check_keys, number, shown
from forge_gpu._src.tasks.taskfile.model import (
    BALL,
    FIXED,
    FREE,
    end_of,
    probe,
    probe_actuators,
    short_names,
    sites,
    user_module,
)
from forge_gpu._src.tasks.taskfile.objects import object_entries
from forge_gpu._src.tasks.taskfile.subtasks import Subtask, subtask_entries
from forge_gpu._src.tasks.taskfile.targets import target_entries
from forge_gpu._src.tasks.taskfile.term_rows import POLICY, Row, Scope, term_row

_ACTION_KEYS = ("kind", "joints", "scale", "low", "high", "stiffness", "damping", "clip_to_limits", "relative",
                "follow", *ee_action.KEYS)  # fmt: skip
_RESET_KEYS = ("joint_position", "joint_velocity", "joints")
_REWARD_KEYS = ("terms", "zero_on_termination")
PRISMATIC, D6 = 0, 6
"""Newton's slide joint and its D6 joint (``newton.JointType``): the joints a planar root is made of."""


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
    """The enabled camera observations in the file's order (``cameras.camera_entry``; ``cameras.FileCameras``
    renders them), each with a distinct name."""
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
    """The file's ``[targets]`` in order (``targets.target_entries``): each a point drawn at every reset."""
    action_relative: bool = True
    """Position targets are the default pose + action * scale (else action * scale: ``action.relative``)."""
    objects: list[dict] = field(default_factory=list)
    """The file's ``[objects]`` in order (``objects.object_entries``): each a free box placed at every reset."""
    follow: list[tuple[int, int, int]] = field(default_factory=list)
    """``[action] follow``: (the following joint's coordinate, its dof, the action column it copies): a position
    target driven from another joint's column (a coupled gripper's second finger)."""
    groups: dict = field(default_factory=dict)
    """The observation groups beyond ``policy``: name -> width, in the order the file first names them (each the
    float32 field of that name, e.g. ``critic``)."""
    ik: dict | None = None
    """``[action] kind = "ee_delta"``: the IK's tables (``ee_action.ee_columns``); None for the other kinds."""
    subtasks: list[Subtask] = field(default_factory=list)
    """``[[subtasks]]`` in order (``subtasks.subtask_entries``)."""
    subtask_rows: list[Row] = field(default_factory=list)
    """The subtasks' conditions, in order (stage ``subtasks``); the observe kernel reads them after ``rows`` in the
    term tables (row ``len(rows) + k``)."""

    @property
    def all_rows(self) -> list[Row]:
        """``rows`` then ``subtask_rows``: the term tables' rows."""
        return [*self.rows, *self.subtask_rows]


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
    found_sites = sites(builder)
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
    check_keys(action, _ACTION_KEYS, "action", "allowed keys are", source)
    actuators = probe_actuators(params.model, source)
    own = len(actuators) or actuators.others
    kind = action.get("kind", "actuators" if own and "joints" not in action else "effort")
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
        a_coords, a_dofs, a_names, ik = ee_action.ee_columns(action, builder, joints, found_sites, bodies, source)
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
    scope = Scope(source, joints, body, root_kind, len(a_coords), command_names, found_sites, bodies,
                  [t["name"] for t in targets], module)  # fmt: skip
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
            rows.append(term_row(stage, i, entry, library, scope))
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
    has_success = any(r.stage == "success" for r in rows)
    target_names = [t["name"] for t in targets]
    subtasks, subtask_rows = subtask_entries(getattr(params, "subtasks", []), scope, target_names, has_success)
    pairs: list[tuple[int, int]] = []
    for row in [*rows, *subtask_rows]:  # each pair of bodies that a contact-pair term reads: one column of Frame.touch
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
        contact=any(r.contact for r in [*rows, *subtask_rows]), targets=targets, action_relative=relative,
        groups=groups,
        objects=objects, follow=follow, ik=ik, pairs=pairs, subtasks=subtasks, subtask_rows=subtask_rows,
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


def _draws(reset: dict, joints, source: str) -> list[tuple[int, int, float]]:
    """``[reset]``'s draws in order: ``joint_position`` and ``joint_velocity`` (every movable joint, per joint its
    position then its velocity), or ``[[reset.joints]]`` entries of ``joints``, ``position``, ``velocity`` (in the
    entries' order; per joint of an entry, its position then its velocity)."""
    check_keys(reset, _RESET_KEYS, "reset", "allowed keys are", source)
    entries = reset.get("joints")
    for key in ("joint_position", "joint_velocity"):
        value = reset.get(key, 0.0)
        if not plain_number(value) or value < 0:
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
            if not plain_number(value) or value < 0:
                raise ValueError(f"{source}: {where}.{key} = {value!r}: expected a range >= 0 (a number)")
        cs, dd, _ = joints(entry.get("joints", ["*"]), f"{where}.joints")
        for c, d in zip(cs, dd, strict=True):
            if "position" in entry:
                draws.append((0, c, float(entry["position"])))
            if "velocity" in entry:
                draws.append((1, d, float(entry["velocity"])))
    return draws
