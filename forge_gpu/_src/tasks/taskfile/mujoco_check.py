"""A model as forge_gpu builds it against the same file as MuJoCo itself loads it (``forge-gpu check-model``).

:func:`check_model` loads the model file with the ``mujoco`` package (the reference for what a model file means)
and as a task builds it (``model.add_model``: Newton's import and what forge_gpu does on top, converted to
MuJoCo by Newton's SolverMuJoCo, the model MuJoCo Warp steps), and lists every difference that changes the
physics or the data, one line each: bodies (found, mass, inertia), joints (found, type, range, merged), the
default pose against the joint ranges, actuators (what each drives, gain, bias, control range), tendons and
their joints, equality constraints, excluded contacts, keyframes, meshes, gravity; then both models step the
same zero-control rollout from the same start (MuJoCo's ``qpos0`` or the keyframe ``model.pose`` names) with the
same timestep and solver options, and the largest distance between a body's positions in the two is said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MASS_TOLERANCE = 1e-4
"""Relative difference of a body's mass (or of an inertia's principal moment) counted as different."""
RANGE_TOLERANCE = 1e-4
"""Difference of a joint's range bound [rad or m], a gain or a control bound counted as different."""
POSITION_TOLERANCE = 1e-3
"""Distance between a body's positions in the two rollouts counted as different [m]."""
LISTED = 6
"""Names listed in one line at most (the rest counted)."""
ROLLOUT_STEPS = 200
"""Steps of the zero-control rollout compared, unless told."""


@dataclass
class ModelCheck:
    """What :func:`check_model` found."""

    path: str
    """The model file checked."""
    differences: list[str] = field(default_factory=list)
    """Each difference between MuJoCo's model and forge_gpu's, one line each."""
    rollout: str = ""
    """The rollout's summary line: its length and the largest distance between the two models' bodies."""
    notes: list[str] = field(default_factory=list)
    """What the task chose that the model file does not say (the ground plane for the file's floor), said but not
    a difference: the reference makes the same choice."""


def model_of(target: str) -> tuple[dict, str]:
    """``([model] table, source)`` of a model file (``.xml``, ``.urdf``), or of a task or robot file (``.toml``)."""
    path = Path(target)
    if not path.is_file():
        raise ValueError(f"{target}: no such file")
    if path.suffix.lower() != ".toml":
        return {"file": path.name}, str(path.resolve())
    from forge_gpu._src.tasks.taskfile.compose import compose
    from forge_gpu._src.tasks.taskfile.spec import resolve_references

    source = str(path.resolve())
    table = compose(path.resolve()).table
    if not isinstance(table.get("model"), dict):
        raise ValueError(f"{target}: no [model] (a task or robot file names its model there)")
    params = table.get("params") if isinstance(table.get("params"), dict) else {}
    values = {name: v["value"] if isinstance(v, dict) and "value" in v else v for name, v in params.items()}
    return dict(resolve_references(table["model"], values, "model", source)), source


def check_model(target: str, steps: int = ROLLOUT_STEPS) -> ModelCheck:
    """The differences between MuJoCo's model of ``target`` (a model file, or the ``[model]`` of a task or robot
    file, its ``params.NAME`` references replaced) and forge_gpu's, and a zero-control rollout of ``steps`` steps of
    both. ``ValueError`` (one line) for a file neither can load, or one MuJoCo does not read (USD, a model
    builder)."""
    model, source = model_of(target)
    return check_table(model, source, steps)


def check_table(model: dict, source: str, steps: int = ROLLOUT_STEPS) -> ModelCheck:
    """:func:`check_model` of a ``[model]`` table read from ``source`` (a task's, its references replaced). Its
    ``scene`` shapes are the task's, not the model file's: the check leaves them out."""
    import mujoco

    from forge_gpu._src.sim.output import init_warp
    from forge_gpu._src.tasks.taskfile.model import check_model_values, model_file, model_info

    model = {k: v for k, v in model.items() if k != "scene"}
    check_model_values(model, source)
    placement = {k: model[k] for k in ("position", "rotation") if k in model}  # the task's: a free root's start
    model = {k: v for k, v in model.items() if k not in placement}
    path, kind = model_file(model, source)
    if kind not in ("mjcf", "urdf"):
        raise ValueError(f"{source}: model {path}: MuJoCo reads MJCF and URDF files; a {kind} model has no reference")
    info = model_info(model, source)
    found = ModelCheck(path=path)
    try:
        spec = mujoco.MjSpec.from_file(path)
        _compiled(spec, found.notes)
    except ValueError as e:
        reason = " ".join(str(e).split())
        raise ValueError(f"{path}: MuJoCo refuses the model file ({reason})") from None
    init_warp()
    ours, solver, builder = _ours(model, source)
    reference = _reference(path, model, info, ours, found.notes)
    _same_options(ours, reference)
    names = _Names(reference, ours, solver)
    found.differences += _bodies(reference, ours, names)
    found.differences += _joints(reference, ours, names, found.notes)
    found.differences += _pose(builder, source)
    found.differences += _actuators(reference, ours, names)
    found.differences += _tendons(reference, ours, names)
    found.differences += _counts(reference, ours, info)
    start = _start(reference, model, placement)
    lines, found.rollout = _rollout(reference, ours, names, start, steps, found.notes)
    found.differences += lines
    return found


_CONTACT = ("friction", "solref", "solimp", "condim", "margin", "gap", "priority", "solmix")
"""A geom's contact settings (MjSpec attributes; ``geom_`` arrays of a compiled model)."""


def _reference(path: str, model: dict, info, ours, notes: list[str]):
    """MuJoCo's model of the file, with the ground plane the task adds (``model.ground``, the default) added the
    same way: at z = 0, with the ground plane's contact settings, in place of the file's named floors. That choice
    is the task's, said when it builds; where the ground plane's contact settings differ from the floor's, a note
    says so, not a difference."""
    import mujoco

    spec = mujoco.MjSpec.from_file(path)
    if any("sensors" in note for note in notes):  # MuJoCo refused them (_compiled): the reference goes without
        for sensor in list(spec.sensors):
            spec.delete(sensor)
    if info is not None and info.kind == "urdf" and model.get("floating", True):  # MuJoCo fixes a URDF's root
        root = spec.worldbody.first_body()
        if root is not None and not any(j.type == mujoco.mjtJoint.mjJNT_FREE for j in root.joints):
            root.add_freejoint()
            notes.append("the URDF's root floats on a free joint as model.floating = true says (MuJoCo loads it "
                         "fixed; the reference floats it too)")  # fmt: skip
    planes = [g for g in range(ours.ngeom) if int(ours.geom_type[g]) == int(mujoco.mjtGeom.mjGEOM_PLANE)]
    if not model.get("ground", True) or not planes:
        return _quiet_compile(spec)
    named = info.floors if info is not None and info.kind == "mjcf" else []
    floors = [g for g in spec.geoms if g.name in named]
    ground = planes[-1]  # added last
    plane = spec.worldbody.add_geom(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1])
    differ = []
    for name in _CONTACT:
        value = np.asarray(getattr(ours, f"geom_{name}")[ground], dtype=float)
        setattr(plane, name, value.tolist() if value.ndim else type(getattr(plane, name))(value.item()))
        own = np.asarray(getattr(floors[0], name), dtype=float) if floors else value
        if name != "gap" and own.shape == value.shape and np.abs(own - value).max() > 1e-6:  # gap: inactive contacts
            differ.append(f"{name} {_shown(value)} (the floor's {_shown(own)})")
    if floors:
        plane.contype, plane.conaffinity = floors[0].contype, floors[0].conaffinity
    if differ:
        notes.append(f"the ground plane replaces floor {floors[0].name!r}: {', '.join(differ)}; model.ground = false "
                     "keeps the floor")  # fmt: skip
    elif not floors:
        notes.append("a ground plane at z = 0 added (the file names no floor; model.ground = false leaves it out)")
    for floor in floors:
        spec.delete(floor)
    return _quiet_compile(spec)


def _quiet_compile(spec):
    """``spec.compile()`` without MuJoCo's deprecation warnings (``settotalmass``: the model file's, not the user's
    command's)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecated.*", category=UserWarning)
        return spec.compile()


def _compiled(spec, notes: list[str]):
    """``spec`` compiled; where MuJoCo refuses it for a sensor (which forge_gpu does not simulate), compiled without
    its sensors, and that noted."""
    try:
        return _quiet_compile(spec)
    except ValueError as e:
        if not spec.sensors or "sensor" not in str(e):
            raise
        reason = " ".join(str(e).split())
        for sensor in list(spec.sensors):
            spec.delete(sensor)
        notes.append(f"MuJoCo refuses the file's sensors ({reason}); compared without them (forge_gpu does not "
                     "simulate sensors)")  # fmt: skip
        return _quiet_compile(spec)


def _shown(value: np.ndarray):
    return value.round(6).tolist() if value.ndim else round(float(value), 6)


def _ours(model: dict, source: str):
    """forge_gpu's model of ``[model]`` (one world) as MuJoCo: Newton's SolverMuJoCo's ``mj_model``."""
    import newton

    from forge_gpu._src.sim.newton_notes import said_once
    from forge_gpu._src.tasks.taskfile.model import add_model

    builder = newton.ModelBuilder()
    newton.solvers.SolverMuJoCo.register_custom_attributes(builder)
    with said_once():
        add_model(builder, model, source)
        built = builder.finalize(device="cpu")
        try:
            solver = newton.solvers.SolverMuJoCo(built, disable_contacts=False)
        except (ValueError, RuntimeError) as e:
            reason = " ".join(str(e).split())
            raise ValueError(f"{source}: Newton cannot convert the model for MuJoCo Warp ({reason})") from None
    return solver.mj_model, solver, builder


def _same_options(ours, reference) -> None:
    """The reference's timestep and solver options on ``ours`` (the rollout compares the models, not the
    settings a task's ``[solver]`` chooses)."""
    for name in ("timestep", "integrator", "cone", "iterations", "ls_iterations", "impratio", "tolerance",
                 "ls_tolerance", "noslip_iterations", "jacobian", "solver"):  # fmt: skip
        setattr(ours.opt, name, getattr(reference.opt, name))
    ours.opt.disableflags = reference.opt.disableflags
    ours.opt.enableflags = reference.opt.enableflags


class _Names:
    """Names of the two models' bodies, joints and tendons, forge_gpu's by the file's names (Newton's labels'
    last component), and which of forge_gpu's MuJoCo joints is each of the file's: by name, or, for the joints of
    a body Newton imported as one joint of several axes, in Newton's order (the slides, then the hinges, each in
    the file's order)."""

    def __init__(self, reference, ours, solver):
        model = solver.model
        to_body = solver.mjc_body_to_newton.numpy().reshape(-1)[: ours.nbody]
        to_joint = solver.mjc_jnt_to_newton_jnt.numpy().reshape(-1)[: ours.njnt]
        self.ref_bodies = [reference.body(i).name for i in range(reference.nbody)]
        self.ref_joints = [reference.joint(i).name for i in range(reference.njnt)]
        # Newton's labels are paths (model/worldbody/.../name); a file's name may hold "/" itself (a prefix)
        body_paths = ["world" if b < 0 else str(model.body_label[b]) for b in to_body]
        self.our_bodies = _named(body_paths, self.ref_bodies)
        labels = _named([str(model.joint_label[j]) if j >= 0 else "" for j in to_joint], self.ref_joints)
        self.ref_tendons = [reference.tendon(i).name for i in range(reference.ntendon)]
        self.our_tendons = [ours.tendon(i).name for i in range(ours.ntendon)]
        self.joint_of: dict[int, int] = {}
        """The file's joint index -> forge_gpu's MuJoCo joint index."""
        self.merged: list[str] = []
        """The file's joints Newton imported as one joint with the others of their body."""
        free = [k for k in range(ours.njnt) if int(ours.jnt_type[k]) == 0]
        for i, name in enumerate(self.ref_joints):
            hits = [k for k, label in enumerate(labels) if label == name]
            if len(hits) == 1:
                self.joint_of[i] = hits[0]
            elif int(reference.jnt_type[i]) == 0 and len(free) == 1:  # an unnamed free root
                self.joint_of[i] = free[0]
        for body in range(1, reference.nbody):
            k = self.body(self.ref_bodies[body])
            mine = [j for j in range(reference.njnt) if reference.jnt_bodyid[j] == body and j not in self.joint_of]
            theirs = [j for j in range(ours.njnt) if ours.jnt_bodyid[j] == k and j not in self.joint_of.values()]
            if k < 0 or not mine or len(mine) != len(theirs):
                continue
            mine.sort(key=lambda j: int(reference.jnt_type[j]) != 2)  # slides first, as Newton orders the axes
            self.joint_of.update(zip(mine, theirs, strict=True))
            self.merged += [self.ref_joints[j] for j in mine]
        self.our_joints = list(labels)
        for i, k in self.joint_of.items():
            self.our_joints[k] = self.ref_joints[i]

    def body(self, name: str) -> int:
        return self.our_bodies.index(name) if name and self.our_bodies.count(name) == 1 else -1

    def joint(self, i: int) -> int:
        """forge_gpu's MuJoCo joint of the file's joint ``i``, or -1."""
        return self.joint_of.get(i, -1)


def _named(paths: list[str], names: list[str]) -> list[str]:
    """Each of Newton's label ``paths`` as the file's name it ends with (``.../vx300s_left/waist`` is the file's
    ``vx300s_left/waist``), the longest that matches; else its last component."""
    by_length = sorted({n for n in names if n}, key=len, reverse=True)
    out = []
    for path in paths:
        found = next((n for n in by_length if path == n or path.endswith("/" + n)), None)
        out.append(found if found is not None else path.rsplit("/", 1)[-1])
    return out


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def _bodies(reference, ours, names: _Names) -> list[str]:
    lines, missing = [], []
    for i in range(1, reference.nbody):
        name = names.ref_bodies[i]
        k = names.body(name)
        if k < 0:
            if name:  # an unnamed body has no name to find it by (the rollout compares the named ones)
                missing.append(name)
            continue
        a, b = float(reference.body_mass[i]), float(ours.body_mass[k])
        if _relative(a, b) > MASS_TOLERANCE:
            lines.append(f"body {name!r}: mass {b:.6g} kg, MuJoCo {a:.6g} kg")
        elif max(_relative(x, y) for x, y in zip(np.sort(reference.body_inertia[i]), np.sort(ours.body_inertia[k]),
                                                  strict=True)) > 10 * MASS_TOLERANCE:  # fmt: skip
            lines.append(f"body {name!r}: principal inertia {np.sort(ours.body_inertia[k]).round(6).tolist()}, "
                         f"MuJoCo {np.sort(reference.body_inertia[i]).round(6).tolist()} kg m^2")  # fmt: skip
    if missing:
        lines.append(f"bodies MuJoCo has and forge_gpu does not: {', '.join(repr(n) for n in missing)}")
    total_ref, total_ours = float(reference.body_mass.sum()), float(ours.body_mass.sum())
    if _relative(total_ref, total_ours) > MASS_TOLERANCE and len(lines) > 1:
        lines.append(f"total mass {total_ours:.6g} kg, MuJoCo {total_ref:.6g} kg")
    return lines


_JOINT_KINDS = {0: "free", 1: "ball", 2: "slide", 3: "hinge"}


def _joints(reference, ours, names: _Names, notes: list[str]) -> list[str]:
    lines, missing = [], []
    for i in range(reference.njnt):
        name = names.ref_joints[i]
        k = names.joint(i)
        if k < 0:
            missing.append(name)
            continue
        kind, our_kind = int(reference.jnt_type[i]), int(ours.jnt_type[k])
        if kind != our_kind:
            lines.append(f"joint {name!r}: {_JOINT_KINDS[our_kind]}, MuJoCo {_JOINT_KINDS[kind]}")
            continue
        if kind in (2, 3):
            limited, our_limited = bool(reference.jnt_limited[i]), bool(ours.jnt_limited[k])
            a, b = reference.jnt_range[i], ours.jnt_range[k]
            if limited != our_limited or (limited and np.abs(a - b).max() > RANGE_TOLERANCE):
                want = f"[{a[0]:.6g}, {a[1]:.6g}]" if limited else "unlimited"
                got = f"[{b[0]:.6g}, {b[1]:.6g}]" if our_limited else "unlimited"
                lines.append(f"joint {name!r}: range {got}, MuJoCo {want}")
            for what, field_name in (("damping", "dof_damping"), ("armature", "dof_armature"),
                                     ("frictionloss", "dof_frictionloss")):  # fmt: skip
                x = float(getattr(reference, field_name)[reference.jnt_dofadr[i]])
                y = float(getattr(ours, field_name)[ours.jnt_dofadr[k]])
                if abs(x - y) > RANGE_TOLERANCE * max(1.0, abs(x)):
                    lines.append(f"joint {name!r}: {what} {y:.6g}, MuJoCo {x:.6g}")
        x, y = float(reference.jnt_stiffness[i]), float(ours.jnt_stiffness[k])
        if abs(x - y) > RANGE_TOLERANCE * max(1.0, abs(x)):
            lines.append(f"joint {name!r} ({_JOINT_KINDS[kind]}): stiffness {y:.6g}, MuJoCo {x:.6g}")
    if missing:
        lines.append(f"joints MuJoCo has and forge_gpu does not: {', '.join(repr(n) for n in missing)}")
    if names.merged:  # the same motion (a tendon that loses one is a difference of its own: _tendons)
        notes.append(f"joints imported as one joint of several axes with the others of their body (MuJoCo keeps "
                     f"each): {', '.join(repr(n) for n in names.merged)}")  # fmt: skip
    return lines


def _pose(builder, source: str) -> list[str]:
    from forge_gpu._src.tasks.taskfile.model import outside_ranges

    return outside_ranges(builder, 0, source)


def _target(model, k: int, joints: list[str], tendons: list[str]) -> str:
    kind, target = int(model.actuator_trntype[k]), int(model.actuator_trnid[k][0])
    if kind in (0, 1) and 0 <= target < len(joints):
        return f"joint {joints[target]!r}"
    if kind == 3 and 0 <= target < len(tendons):
        return f"tendon {tendons[target]!r}"
    return {2: "a site", 4: "a site", 5: "a body"}.get(kind, "something else")


def _actuators(reference, ours, names: _Names) -> list[str]:
    ref = {_target(reference, k, names.ref_joints, names.ref_tendons): k for k in range(reference.nu)}
    our = {_target(ours, k, names.our_joints, names.our_tendons): k for k in range(ours.nu)}
    lines = []
    lost = [t for t in ref if t not in our]
    if lost:
        lines.append(f"actuators MuJoCo has and forge_gpu does not: on {', '.join(lost)}")
    for target, k in ref.items():
        if target not in our:
            continue
        o = our[target]
        name = reference.actuator(k).name or target
        # the force on the joint per unit ctrl and per unit of position and velocity: gear times gain and bias
        a = np.concatenate([reference.actuator_gainprm[k, :3], reference.actuator_biasprm[k, :3]])
        b = np.concatenate([ours.actuator_gainprm[o, :3], ours.actuator_biasprm[o, :3]])
        a, b = a * reference.actuator_gear[k, 0], b * ours.actuator_gear[o, 0]
        if np.abs(a - b).max() > RANGE_TOLERANCE * max(1.0, np.abs(a).max()):
            lines.append(f"actuator {name!r} ({target}): gain and bias {b.round(6).tolist()}, MuJoCo "
                         f"{a.round(6).tolist()} (gear times gainprm[:3], biasprm[:3])")  # fmt: skip
        limited, our_limited = bool(reference.actuator_ctrllimited[k]), bool(ours.actuator_ctrllimited[o])
        x, y = reference.actuator_ctrlrange[k], ours.actuator_ctrlrange[o]
        if limited != our_limited or (limited and np.abs(x - y).max() > RANGE_TOLERANCE):
            want = f"[{x[0]:.6g}, {x[1]:.6g}]" if limited else "unlimited"
            got = f"[{y[0]:.6g}, {y[1]:.6g}]" if our_limited else "unlimited"
            lines.append(f"actuator {name!r} ({target}): ctrlrange {got}, MuJoCo {want}")
    return lines


def _tendons(reference, ours, names: _Names) -> list[str]:
    lines = []
    for i, name in enumerate(names.ref_tendons):
        if name not in names.our_tendons:
            lines.append(f"tendon {name!r}: not in forge_gpu's model")
            continue
        k = names.our_tendons.index(name)
        want, got = int(reference.tendon_num[i]), int(ours.tendon_num[k])
        if want != got:
            lines.append(f"tendon {name!r}: couples {got} of its {want} joints (a joint merged with another of its "
                         "body is dropped)")  # fmt: skip
    return lines


def _counts(reference, ours, info) -> list[str]:
    lines = []
    active, our_active = int(reference.eq_active0.sum()), int(ours.eq_active0.sum())
    if active != our_active:
        lines.append(f"{our_active} active equality constraint(s), MuJoCo {active}")
    ref_excluded = {int(v) for v in reference.exclude_signature}
    our_excluded = {int(v) for v in ours.exclude_signature}
    if len(ref_excluded) > len(our_excluded):
        lines.append(f"{len(our_excluded)} excluded contact pair(s), MuJoCo {len(ref_excluded)}")
    used, our_used = _meshes(reference, colliding=True), _meshes(ours)
    if used != our_used:
        lines.append(f"{our_used} mesh(es) in colliding geoms, MuJoCo {used} (a mesh file not found or not loaded)")
    keys = [reference.key(i).name or f"key {i}" for i in range(reference.nkey)]
    read = list(info.keyframes) if info is not None else []
    if info is not None and info.kind == "mjcf" and len(keys) != len(read):
        lines.append(f"keyframes read: {', '.join(read) or 'none'}; MuJoCo's: {', '.join(keys)}")
    for key in keys:
        if info is not None and key in info.keyframes and len(info.keyframes[key]) != reference.nq:
            lines.append(f"keyframe {key!r}: {len(info.keyframes[key])} qpos values, MuJoCo's model has "
                         f"{reference.nq} coordinates")  # fmt: skip
    gravity, our_gravity = _gravity(reference), _gravity(ours)
    if np.abs(gravity - our_gravity).max() > 1e-5:
        lines.append(f"gravity {our_gravity.round(6).tolist()}, MuJoCo {gravity.tolist()}")
    return lines


def _meshes(model, colliding: bool = False) -> int:
    """How many meshes a model's geoms use (an asset no geom names is not compared); ``colliding``: only geoms that
    collide (the file's visual geoms are drawn by forge_gpu's camera, not stepped)."""
    import mujoco

    mesh = int(mujoco.mjtGeom.mjGEOM_MESH)
    return len({int(model.geom_dataid[g]) for g in range(model.ngeom) if int(model.geom_type[g]) == mesh
                and model.geom_dataid[g] >= 0 and (not colliding or model.geom_contype[g] or
                                                  model.geom_conaffinity[g])})  # fmt: skip


def _gravity(model) -> np.ndarray:
    """The gravity a model steps with: none where its ``<flag gravity="disable">`` says so."""
    import mujoco

    off = int(model.opt.disableflags) & int(mujoco.mjtDisableBit.mjDSBL_GRAVITY)
    return np.zeros(3) if off else np.asarray(model.opt.gravity, dtype=float)


def _start(reference, model: dict, placement: dict) -> np.ndarray:
    """The rollouts' start: the keyframe ``model.pose`` names (MuJoCo's own), else MuJoCo's ``qpos0`` with the
    task's ``model.pose`` table and, for a free root, its ``model.position`` and ``rotation``."""
    import fnmatch

    pose = model.get("pose")
    if isinstance(pose, str):
        for i in range(reference.nkey):
            if reference.key(i).name == pose:
                return reference.key_qpos[i].copy()
    start = reference.qpos0.copy()
    if reference.njnt and int(reference.jnt_type[0]) == 0:  # a free root starts where the task places it
        a = int(reference.jnt_qposadr[0])
        if "position" in placement:
            start[a : a + 3] = [float(v) for v in placement["position"]]
        if "rotation" in placement:
            x, y, z, w = (float(v) for v in placement["rotation"])
            start[a + 3 : a + 7] = [w, x, y, z]
    for pattern, value in pose.items() if isinstance(pose, dict) else ():  # a table of joint -> value
        for j in range(reference.njnt):
            if int(reference.jnt_type[j]) in (2, 3) and fnmatch.fnmatchcase(reference.joint(j).name, pattern):
                start[reference.jnt_qposadr[j]] = float(value)
    return start


def _rollout(reference, ours, names: _Names, start: np.ndarray, steps: int, notes: list[str]) -> tuple[list[str], str]:
    """Both models from the same joint positions (mapped by joint name; a merged joint's coordinates by its body's
    joints in Newton's order: slides, then hinges), zero control, ``steps`` steps; the largest distance between
    one body's positions in the two, at the first frame and over the rollout. The contacts one model makes at the
    first frame and the other does not are differences where the rollouts differ, notes where they agree."""
    import mujoco

    ref_data, our_data = mujoco.MjData(reference), mujoco.MjData(ours)
    ref_data.qpos[:] = start
    our_data.qpos[:] = ours.qpos0
    for i, k in names.joint_of.items():
        width = {0: 7, 1: 4}.get(int(reference.jnt_type[i]), 1)
        a, b = int(reference.jnt_qposadr[i]), int(ours.jnt_qposadr[k])
        our_data.qpos[b : b + width] = start[a : a + width]
    pairs = [(i, names.body(names.ref_bodies[i])) for i in range(1, reference.nbody)]
    pairs = [(i, k) for i, k in pairs if k >= 0]
    if not pairs:
        return [], "rollout: no body in common"
    a, b = np.array([i for i, _ in pairs]), np.array([k for _, k in pairs])
    worst, lines = (0.0, 0, 0), []
    first = 0.0
    for step in range(steps + 1):
        if step:
            mujoco.mj_step(reference, ref_data)
            mujoco.mj_step(ours, our_data)
        else:
            mujoco.mj_forward(reference, ref_data)
            mujoco.mj_forward(ours, our_data)
        distance = np.linalg.norm(ref_data.xpos[a] - our_data.xpos[b], axis=1)
        if step == 0:
            first = float(distance.max())
            contacts = _contacts(reference, ref_data, names.ref_bodies, ours, our_data, names.our_bodies)
        if not np.all(np.isfinite(distance)):
            return [*contacts, f"zero-control rollout: forge_gpu's model diverged (not finite) at step {step}"], ""
        if distance.max() > worst[0]:
            worst = (float(distance.max()), int(a[int(distance.argmax())]), step)
    seconds = steps * reference.opt.timestep
    body = names.ref_bodies[worst[1]] if worst[0] > 0 else ""
    where = f" (body {body!r} at step {worst[2]})" if body else ""
    summary = (f"zero-control rollout of {steps} steps ({seconds:g} s at {reference.opt.timestep:g} s): largest "
               f"body distance {worst[0]:.3g} m{where}")  # fmt: skip
    if first > POSITION_TOLERANCE:
        lines.append(f"first frame: body positions differ from MuJoCo's by up to {first:.3g} m")
    if worst[0] > POSITION_TOLERANCE:
        lines.append(summary)
    if lines:
        lines = contacts + lines
    else:
        notes += [f"{line} (the rollouts agree)" for line in contacts]
    return lines, summary


def _contacts(reference, ref_data, ref_bodies, ours, our_data, our_bodies) -> list[str]:
    """The pairs of bodies in active contact at the first frame in one model and not the other (a contact one of
    them filters: MuJoCo filters a parent and child's contacts unless the parent is welded to the world)."""

    def pairs(model, data, bodies) -> set[tuple[str, str]]:
        found = set()
        for c in data.contact[: data.ncon]:
            if c.exclude == 0 and c.efc_address >= 0:
                pair = sorted((bodies[model.geom_bodyid[c.geom1]], bodies[model.geom_bodyid[c.geom2]]))
                found.add((pair[0], pair[1]))
        return found

    theirs, mine = pairs(reference, ref_data, ref_bodies), pairs(ours, our_data, our_bodies)
    lines = []
    for found, who in ((theirs - mine, "MuJoCo makes and forge_gpu does not"),
                       (mine - theirs, "forge_gpu makes and MuJoCo does not")):  # fmt: skip
        if found:
            listed = sorted(found)
            said = ", ".join(f"{a!r} with {b!r}" for a, b in listed[:LISTED])
            more = f" and {len(listed) - LISTED} more" if len(listed) > LISTED else ""
            lines.append(f"contacts at the first frame that {who}: {said}{more}")
    return lines
