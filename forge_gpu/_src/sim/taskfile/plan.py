"""Every name of a task file bound to its model: the :class:`Plan` the task runs.

:func:`plan_task` resolves the file's sections (their ``"params.NAME"`` references already replaced,
``spec.resolved``) against one world of the model (``model.probe``): its joints and bodies, the term library
(``terms``) and the user's module of ``@wp.func`` terms: a name the model lacks, an unknown term or key, a list of
the wrong length is a ``ValueError`` of one line naming the file, the key and what the model has.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from typing import Any

from forge_gpu._src.sim.taskfile import terms
from forge_gpu._src.sim.taskfile.actuators import actuator_columns
from forge_gpu._src.sim.taskfile.model import (
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
from forge_gpu._src.sim.tasks.camera import check_pose

_ACTION_KEYS = ("kind", "joints", "scale", "low", "high", "stiffness", "damping", "clip_to_limits")
_TERM_KEYS = ("term", "weight", "noise", "args", "name")
_RESET_KEYS = ("joint_position", "joint_velocity", "joints")
_REWARD_KEYS = ("terms", "zero_on_termination")
CAMERA_KEYS = ("term", "size", "fov", "position", "look_at", "follow", "depth")
SIZES = (8, 512)
"""The square image sizes [px] a task file's camera takes."""


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
    camera: dict | None = None
    """The camera observation (:func:`camera_entry`; ``task.FileCamera`` renders it), or None."""


def plan_task(params, source: str) -> Plan:
    """Resolve every section of ``params`` (a ``spec.FileParams`` whose references are replaced:
    ``spec.resolved``) against the model: ValueError (one line, the key and what the model has)."""
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
    if kind not in ("actuators", "effort", "position"):
        raise ValueError(f"{source}: action.kind = {kind!r}: allowed values are 'actuators', 'effort', 'position'")
    if kind == "actuators":
        a_coords, a_dofs, a_names = actuator_columns(action, actuators, source)
    else:
        a_coords, a_dofs, a_names = joints(action.get("joints", ["*"]), "action.joints")
    r_coords, r_dofs, _ = joints(["*"], "reset") if movable else ([], [], [])
    draws = _draws(params.reset, joints, source) if movable else []
    command = params.command
    command_names = list(command.get("names", []))
    if set(command) - {"names", "default"} or len(command.get("default", command_names)) != len(command_names):
        raise ValueError(f"{source}: [command] takes names = [...] and default = [...] of the same length")
    lower, upper = [-1e10] * coords, [1e10] * coords
    for c, d in zip(r_coords, r_dofs, strict=True):
        lower[c], upper[c] = builder.joint_limit_lower[d], builder.joint_limit_upper[d]
    module = user_module(params.module, source) if params.module else None
    rows: list[Row] = []
    camera = None
    libraries = {"observations": terms.OBSERVATIONS, "rewards": terms.REWARDS,
                 "terminations": terms.CONDITIONS, "success": terms.CONDITIONS}  # fmt: skip
    for stage, library in libraries.items():
        entries = getattr(params, stage)
        if not isinstance(entries, list):
            raise ValueError(f"{source}: {stage} must be a list of tables ([[{stage}]])")
        for i, entry in enumerate(entries):
            if stage == "observations" and isinstance(entry, dict) and entry.get("term") == "camera":
                if camera is not None:
                    raise ValueError(f"{source}: observations[{i}]: a task file has one camera")
                camera = camera_entry(entry, f"observations[{i}]", source, body)
                continue
            rows.append(_row(stage, i, entry, library, module, source, joints, body, root, a_coords, command_names))
    proprio = sum(r.width for r in rows if r.stage == "observations")
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
        noise_state=any(r.noise for r in rows), camera=camera,
    )  # fmt: skip


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


def _row(stage, i, entry, library, module, source, joints, body, root, a_coords, command_names) -> Row:
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
            elif key != "relative_to":
                raise ValueError(f'{source}: {where}: {name} needs {key} = "<body name>"')
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
    reads = "previous" if user else info.reads  # a user's term may read anything
    noise = "noise" in entry
    return Row(stage, entry.get("name", name), info.func, ints + listed, floats, width, noise, user, reads, chosen)


def camera_entry(entry: dict, where: str, source: str, body) -> dict:
    """The checked camera of ``entry`` (``body(name, key)`` resolves a body name to its index)."""
    for key in entry:
        if key not in CAMERA_KEYS:
            raise ValueError(f"{source}: unknown key {where}.{key}; camera takes {', '.join(CAMERA_KEYS)}")
    size, fov, depth = entry.get("size", 64), entry.get("fov", 45.0), entry.get("depth", True)
    if not isinstance(size, int) or isinstance(size, bool) or not SIZES[0] <= size <= SIZES[1]:
        raise ValueError(f"{source}: {where}.size = {size!r}: expected a whole number of pixels in {list(SIZES)}")
    if not isinstance(fov, int | float) or isinstance(fov, bool) or not 5.0 <= fov <= 120.0:
        raise ValueError(f"{source}: {where}.fov = {fov!r}: expected a field of view in [5, 120] degrees")
    if not isinstance(depth, bool):
        raise ValueError(f"{source}: {where}.depth = {depth!r}: expected true or false")
    for key in ("position", "look_at"):
        if not isinstance(entry.get(key), list):
            raise ValueError(f"{source}: {where}: camera needs {key} = [x, y, z] (metres)")
    check_pose(entry["position"], entry["look_at"], f"{source}: {where}.position", f"{where}.look_at")
    follow = body(entry["follow"], f"{where}.follow") if "follow" in entry else -1
    return {
        "size": size, "fov": float(fov), "position": [float(v) for v in entry["position"]],
        "look_at": [float(v) for v in entry["look_at"]], "follow": follow, "follow_name": entry.get("follow"),
        "depth": depth,
    }  # fmt: skip
