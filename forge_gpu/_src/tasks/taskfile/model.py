"""A task file's ``[model]``: the robot of one world, from a model file (MJCF, URDF or USD, a path or a Newton
example asset) or a model builder in code (``builder = "module:function"``, for a model made of parameters).

:func:`add_model` adds it to a builder as ``[model]`` says; :func:`probe` builds one world of it, once per process,
for ``plan.plan_task`` to bind the file's names to; :func:`sites` and :func:`per_world` find its names (a site in a
body, a shape or body in each world).
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import re
import sys
import zlib
from pathlib import Path
from typing import Any

from forge_gpu._src.core.checks import finite_number, number_list
from forge_gpu._src.sim.newton_notes import said_once
from forge_gpu._src.tasks.taskfile.entries import check_keys
from forge_gpu._src.tasks.taskfile.modelfile import ModelFile, read_model_file, short_names
from forge_gpu._src.tasks.taskfile.scene import add_scene, scene_entries
from forge_gpu._src.tasks.taskfile.trust import check_import

MODEL_KEYS = (
    "asset", "file", "builder", "args", "position", "rotation", "floating", "ground", "contacts", "ignore_names",
    "pose", "randomizable", "scene",
)  # fmt: skip
FREE, BALL, FIXED = 4, 2, 3
"""Newton's joint types that ``plan_task`` treats apart (``newton.JointType``)."""


def model_file(model: dict, source: str) -> tuple[str, str]:
    """``(path, kind)`` of ``[model]``'s ``asset`` (a Newton example asset) or ``file`` (relative to the TOML),
    kind ``mjcf``, ``urdf`` or ``usd`` (``.usd``, ``.usda``, ``.usdc``); or ``(builder, "code")`` for a model
    ``builder``."""
    given = [k for k in ("asset", "file", "builder") if k in model]
    if len(given) != 1:
        raise ValueError(
            f"{source}: [model] needs exactly one of asset (a Newton example asset), file (a path) or builder"
        )
    for key in ("asset", "file"):
        if key in model and not isinstance(model[key], str):
            raise ValueError(f"{source}: model.{key} = {model[key]!r}: expected a file name (a string)")
    if "builder" in model:
        _builder(model, source)
        return model["builder"], "code"
    if "args" in model:
        raise ValueError(f"{source}: model.args: only a model builder takes args")
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
    kinds = {".xml": "mjcf", ".mjcf": "mjcf", ".urdf": "urdf", ".usd": "usd", ".usda": "usd", ".usdc": "usd"}
    kind = kinds.get(Path(path).suffix.lower())
    if kind is None:
        raise ValueError(f"{source}: model: {Path(path).name}: expected an MJCF (.xml), URDF (.urdf) or USD (.usd, "
                         ".usda, .usdc) file")  # fmt: skip
    return path, kind


def _builder(model: dict, source: str):
    given = model["builder"]
    module, _, name = str(given).partition(":")
    check_import(f"model.builder = {given!r}", str(given))
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ValueError(f"{source}: model.builder = {given!r}: cannot load it ({e}); expected module:function") from e
    args = model.get("args", {})
    if not isinstance(args, dict):
        raise ValueError(f"{source}: model.args = {args!r}: expected a table of the builder's arguments")
    return function, args


def check_model_values(model: dict, source: str) -> None:
    """Every ``[model]`` key's value of the right type and length: ``ValueError`` naming the file and the key."""

    def numbers(key: str, count: int) -> None:
        value = model[key]
        if not number_list(value, count):
            raise ValueError(f"{source}: model.{key} = {value!r}: expected a list of {count} numbers")

    for key, count in (("position", 3), ("rotation", 4)):
        if key in model:
            numbers(key, count)
    for key in ("floating", "ground", "contacts"):
        if key in model and not isinstance(model[key], bool):
            raise ValueError(f"{source}: model.{key} = {model[key]!r}: expected true or false")
    names = model.get("ignore_names", [])
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise ValueError(f"{source}: model.ignore_names = {names!r}: expected a list of name patterns (regex)")
    pose = model.get("pose", {})
    if not isinstance(pose, dict | str):
        raise ValueError(f"{source}: model.pose = {pose!r}: expected a keyframe's name or a table of joint -> value")
    scene_entries(model.get("scene", {}), source)


def model_info(model: dict, source: str) -> ModelFile | None:
    """The :class:`ModelFile` of ``[model]``'s file (None for a model builder)."""
    path, kind = model_file(model, source)
    return None if kind == "code" else read_model_file(path, kind, source)


def add_model(builder, model: dict, source: str) -> list[str]:
    """Add one world's robot, its scene objects (``[model.scene]``, ``scene.py``) and the ground as ``[model]``
    says; set the default pose (``[model.pose]`` or ``pose = "<keyframe>"``). Returns what the build decided that
    the model file did not say (the root's placement, the floor, the gravity), as phrases for one line."""
    import warp as wp

    check_model_values(model, source)
    path, kind = model_file(model, source)
    info = None if kind == "code" else read_model_file(path, kind, source)
    notes: list[str] = []
    placed = "position" in model or "rotation" in model
    position = tuple(float(v) for v in model.get("position", (0.0, 0.0, 0.0)))
    xform = wp.transform(position, tuple(float(v) for v in model.get("rotation", (0, 0, 0, 1))))
    ground = model.get("ground", True)
    name = Path(path).name
    first_joint = len(builder.joint_type)
    if kind == "code":
        function, args = _builder(model, source)
        function(builder, source=source, **args)
    elif kind == "mjcf":
        ignore = list(model.get("ignore_names", []))
        if ground and info.floors:
            ignore += [re.escape(f) + "$" for f in info.floors]
            if "ground" not in model:  # the default chose: said (model.ground = true says it is the file's choice)
                floors = ", ".join(repr(f) for f in info.floors)
                notes.append(f"its floor {floors} replaced by the ground plane (z = 0; model.ground = true says so, "
                             "model.ground = false keeps the model's floor)")  # fmt: skip
        elif ground and info.unnamed_floors:
            notes.append("its own floor (an unnamed plane) kept besides the ground plane; name it to replace it")
        _height_fields(info, ignore, source)
        bodies, joints = builder.body_count, len(builder.joint_type)
        given = info.source or path  # the file as MuJoCo reads it, where its includes' asset folders need that
        _imported(lambda: builder.add_mjcf(given, xform=xform if placed else None, override_root_xform=placed,
                                           ignore_names=ignore), path, source)  # fmt: skip
        if info.gravity is not None:
            builder.gravity = info.gravity
        _massless(builder, bodies, joints, model, source)
        notes += _total_mass(builder, bodies, info, source)
        notes += _merged_tendons(info)
    elif kind == "usd":
        notes += _add_usd(builder, model, path, info, xform if placed else None, source)
    else:
        _imported(lambda: builder.add_urdf(path, xform=xform, floating=bool(model.get("floating", True))), path,
                  source)  # fmt: skip
    pose = model.get("pose", {})
    if isinstance(pose, str):
        _keyframe(builder, info, pose, placed, source)
    else:
        _pose_table(builder, pose, source)
    notes += outside_ranges(builder, 0 if kind == "code" else first_joint, source)
    add_scene(builder, model.get("scene", {}), source)
    if ground:
        builder.add_ground_plane()
    return [f"{name}: {n}" for n in notes]


def _height_fields(info: ModelFile, ignore: list[str], source: str) -> None:
    """A floor that is a height field is refused in one line: Newton imports it but MuJoCo Warp's worlds built
    from it do not hold a body up (it falls through)."""
    kept = [h for h in info.height_fields if not any(re.match(p, h) for p in ignore)]
    if kept:
        raise ValueError(f"{source}: model file {Path(info.path).name}: its floor {kept[0]!r} is a height field "
                         "(<geom type=\"hfield\">), which forge_gpu does not simulate (bodies fall through it): "
                         f'set model.ignore_names = ["{kept[0]}"] to stand on the ground plane instead')  # fmt: skip


def _massless(builder, bodies: int, joints: int, model: dict, source: str) -> None:
    """A body the import kept that moves (its joint is not fixed) but has no mass, because ``ignore_names``
    removed its geoms: refused in one line (MuJoCo refuses a massless moving body)."""
    if not model.get("ignore_names"):
        return
    names = short_names(builder.body_label)
    for j in range(joints, len(builder.joint_type)):
        child = builder.joint_child[j]
        if child >= bodies and int(builder.joint_type[j]) != FIXED and builder.body_mass[child] <= 0.0:
            shapes = [s for s in range(len(builder.shape_body)) if builder.shape_body[s] == child]
            if shapes:
                continue
            body = names[child]
            raise ValueError(f"{source}: model.ignore_names = {model['ignore_names']!r} removes every geom of body "
                             f"{body!r}, which moves on a joint and so has no mass left (MuJoCo refuses a massless "
                             f"moving body): ignore the body itself ('{body}$') or keep a geom")  # fmt: skip


def _total_mass(builder, bodies: int, info: ModelFile, source: str) -> list[str]:
    """``<compiler settotalmass>``: every body's mass and inertia scaled so that the bodies weigh it, as MuJoCo
    does. Returns the note to say."""
    given = info.compiler.get("settotalmass")
    if given is None:
        return []
    try:
        total = float(given)
    except ValueError:
        raise ValueError(f"{source}: model file {Path(info.path).name}: <compiler settotalmass={given!r}>: expected "
                         "a number") from None  # fmt: skip
    if total <= 0:  # MuJoCo: a value <= 0 leaves the masses as computed
        return []
    mass = sum(builder.body_mass[b] for b in range(bodies, builder.body_count))
    if mass <= 0:
        return []
    scale = total / mass
    for b in range(bodies, builder.body_count):
        builder.body_mass[b] *= scale
        builder.body_inertia[b] = builder.body_inertia[b] * scale
        builder.body_inv_mass[b] = 1.0 / builder.body_mass[b] if builder.body_mass[b] > 0 else 0.0
        inverse = builder.body_inv_inertia[b]
        builder.body_inv_inertia[b] = inverse * (1.0 / scale)
    return [f"<compiler settotalmass=\"{given}\"> applied: its bodies' masses and inertias scaled by {scale:.4g} "
            f"(from {mass:.4g} kg)"]  # fmt: skip


def _merged_tendons(info: ModelFile) -> list[str]:
    """Fixed tendons on a joint of a body that has several: Newton imports such a body's joints as one joint of
    several axes, which a tendon cannot couple; the tendon acts without that joint. Returns the note to say."""
    merged = {j: body for body, joints in info.body_joints.items() if len(joints) > 1 for j in joints}
    lost = [(t, j) for t, joints in info.tendons.items() for j in joints if j in merged]
    if not lost:
        return []
    said = ", ".join(f"tendon {t!r} loses joint {j!r} (body {merged[j]!r} has joints "
                     f"{', '.join(repr(k) for k in info.body_joints[merged[j]])}, imported as one joint)"
                     for t, j in lost)  # fmt: skip
    return [f"{said}: the tendon couples the rest (forge-gpu check-model compares it with MuJoCo)"]


def outside_ranges(builder, first: int, source: str) -> list[str]:
    """The default pose's hinge and slide coordinates outside their joint's range (joints from ``first`` on), as
    one note naming each joint, its value and its range; the episode starts there (reset noise stays within the
    range or at the pose)."""
    import newton

    names, found = short_names(builder.joint_label), []
    for j in range(first, len(builder.joint_type)):
        if int(builder.joint_type[j]) not in (int(newton.JointType.REVOLUTE), int(newton.JointType.PRISMATIC)):
            continue
        q, d = builder.joint_q[builder.joint_q_start[j]], builder.joint_qd_start[j]
        low, high = builder.joint_limit_lower[d], builder.joint_limit_upper[d]
        if q < low - 1e-6 or q > high + 1e-6:
            found.append(f"{names[j]!r} at {q:.4g} against [{low:.4g}, {high:.4g}]")
    if not found:
        return []
    return [
        f"its default pose is outside a joint's range: {', '.join(found)} (the episodes start there; set "
        "model.pose to a pose within the ranges)"
    ]


def _add_usd(builder, model: dict, path: str, info: ModelFile, xform, source: str) -> list[str]:
    """Import a USD stage as ``[model]`` says: ``ignore_names`` are prim-path patterns (regex); ``floating``
    replaces the root's joint to the world (free or fixed; unset: the file's own, or free where it has none);
    ``xform`` (``position``, ``rotation``) replaces the root body's pose, as an MJCF's. Returns the notes to say."""
    ignore, notes = list(model.get("ignore_names", [])), []
    if model.get("ground", True) and info.floors:
        ignore += info.floors  # prim paths: Newton takes a pattern without ".*" as a path as well
        if "ground" not in model:
            floors = ", ".join(repr(f) for f in info.floors)
            notes.append(f"its floor {floors} replaced by the ground plane (z = 0; model.ground = true says so, "
                         "model.ground = false keeps the model's floor)")  # fmt: skip
    given = {"floating": model.get("floating"), "ignore_paths": ignore}
    if xform is not None:
        given.update(xform=_usd_root_offset(path, xform, given, source), override_root_xform=True)
    joints = len(builder.joint_type)
    _imported(lambda: builder.add_usd(path, **given), path, source)
    names, starts = short_names(builder.joint_label), builder.joint_qd_start
    driven = [
        names[j]
        for j in range(joints, len(builder.joint_type))
        if any(builder.joint_target_mode[d] for d in range(starts[j], end_of(starts, j, builder.joint_dof_count)))
    ]
    if driven:  # PhysicsDriveAPI: Newton's joint targets with the file's gains
        notes.append(f"its joint drives on {', '.join(repr(n) for n in driven)} kept as written (they act besides "
                     'an effort action; [action] kind = "position" replaces their gains)')  # fmt: skip
    return notes


def _usd_root_offset(path: str, xform, given: dict, source: str):
    """The ``xform`` that Newton's ``override_root_xform`` needs to put the root body at ``xform``: Newton replaces
    the articulation root prim's pose, which the root body may sit away from (a fixed base's joint to the world,
    a body below the prim), so the body's pose relative to that prim, found by importing once at the origin, is
    taken off."""
    import newton
    import warp as wp

    scratch = newton.ModelBuilder()
    _imported(lambda: scratch.add_usd(path, xform=wp.transform_identity(), override_root_xform=True, **given), path,
              source)  # fmt: skip
    roots = [scratch.joint_child[j] for j in range(len(scratch.joint_parent)) if scratch.joint_parent[j] == -1]
    if not roots:
        return xform
    return xform * wp.transform_inverse(wp.transform(*scratch.body_q[roots[0]]))


def _imported(load, path: str, source: str) -> None:
    """Run the importer ``load``: a missing mesh package names the extra; any other failure names the file."""
    try:
        load()
    except ImportError as e:
        missing = getattr(e, "name", None) or str(e)
        if any(m in str(missing) for m in ("trimesh", "collada")):
            raise ValueError(f"{source}: model file {path} has meshes, which need {missing}: "
                             f'pip install "forge-gpu[meshes]"') from None  # fmt: skip
        if "pxr" in str(missing) or "usd-schemas" in str(e):  # Newton's USD support started without them
            raise ValueError(f'{source}: model file {path} is USD, which needs usd-core and newton-usd-schemas '
                             'when Newton is imported: pip install "forge-gpu[meshes]"') from None  # fmt: skip
        raise ValueError(f"{source}: model file {path}: cannot import it ({type(e).__name__}: {e})") from None
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, OSError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{source}: model file {path}: cannot import it ({reason})") from None


def _pose_table(builder, pose: dict, source: str) -> None:
    names = short_names(builder.joint_label)
    for pattern, value in pose.items():
        hits = [j for j, name in enumerate(names) if fnmatch.fnmatchcase(name, pattern)]
        if not hits or not finite_number(value):
            what = "matches no joint" if not hits else "expected a number"
            raise ValueError(f"{source}: model.pose.{pattern} = {value!r}: {what}; the model has {', '.join(names)}")
        for j in hits:
            start, end = builder.joint_q_start[j], end_of(builder.joint_q_start, j, len(builder.joint_q))
            for c in range(start, end):
                builder.joint_q[c] = float(value)


def _keyframe(builder, info: ModelFile | None, pose: str, placed: bool, source: str) -> None:
    """``pose = "<key>"``: the MJCF keyframe's ``qpos`` as the default pose (a free or ball joint's quaternion
    turned from MuJoCo's w x y z into Newton's x y z w)."""
    keys = info.keyframes if info is not None else {}
    if pose not in keys:
        held = ", ".join(repr(k) for k in keys) or "none"
        raise ValueError(f"{source}: model.pose = {pose!r}: no such keyframe (<key name=...>); the model's are {held}")
    qpos, coords = keys[pose], []
    for _, kind in info.joints:
        width = {"free": 7, "ball": 4}.get(kind, 1)
        coords.append(width)
    if sum(coords) != len(qpos) or len(qpos) != len(builder.joint_q):
        raise ValueError(f"{source}: model.pose = {pose!r}: the keyframe has {len(qpos)} qpos values; the model file's "
                         f"joints have {sum(coords)} and the model as built has {len(builder.joint_q)} coordinates "
                         "(a keyframe gives one value per coordinate of every joint, in the file's order)")  # fmt: skip
    if placed and info.joints and info.joints[0][1] == "free":
        raise ValueError(f"{source}: model.position: keyframe {pose!r} places the free root itself; give one of them")
    q, i = [], 0
    for width in coords:
        values = qpos[i : i + width]
        if width == 7:
            values = values[:3] + values[4:7] + values[3:4]
        elif width == 4:
            values = values[1:4] + values[0:1]
        q += values
        i += width
    for c, value in enumerate(q):
        builder.joint_q[c] = float(value)


def end_of(starts, j: int, total: int) -> int:
    """Where joint ``j``'s run of ``starts`` (coordinates or dofs) ends."""
    return starts[j + 1] if j + 1 < len(starts) else total


_PROBES: dict[str, Any] = {}


def probe(model: dict, source: str):
    """One world's :class:`newton.ModelBuilder` of ``[model]`` (kept per process: a file is imported once)."""
    import json

    from forge_gpu._src.sim.output import init_warp

    init_warp()  # quietly, before Newton's import starts Warp
    import newton

    check_keys(model, MODEL_KEYS, "model", "allowed keys are", source)
    check_model_values(model, source)
    key = json.dumps(model, sort_keys=True) + source.split(" (")[0]
    if key not in _PROBES:
        builder = newton.ModelBuilder()
        with said_once():
            add_model(builder, model, source)
        _PROBES[key] = builder
    return _PROBES[key]


_ACTUATORS: dict[str, Any] = {}


def probe_actuators(model: dict, source: str):
    """The model's own actuators (``actuators.model_actuators``) of the :func:`probe` of ``[model]``."""
    import json

    from forge_gpu._src.tasks.taskfile.actuators import model_actuators

    key = json.dumps(model, sort_keys=True) + source.split(" (")[0]
    if key not in _ACTUATORS:
        _ACTUATORS[key] = model_actuators(probe(model, source), model_info(model, source), source)
    return _ACTUATORS[key]


def sites(builder) -> dict[str, tuple[int, list[float]]]:
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


def per_world(labels, name: str, n: int, device):
    """The index of the entry labelled ``name`` (its last path component) in each of the ``n`` worlds, int32 [N]
    (the worlds are added in order, so the i-th match belongs to world i): a ``wp.array``."""
    import numpy as np
    import warp as wp

    found = np.flatnonzero(np.array(short_names(labels)) == name)
    if len(found) != n:
        raise ValueError(
            f"shape or body {name!r}: found {len(found)} in {n} worlds; give each world's one its own name"
        )
    return wp.array(found.astype(np.int32), device=device)


def params_module_name(module) -> str:
    return getattr(module, "__forge_gpu_given__", module.__name__)


def user_module(given: str, source: str):
    """The user's module of terms: a ``.py`` path (relative to the task file) or an importable dotted name."""
    if given.endswith(".py"):
        path = (Path(source.split(" (")[0]).parent / given).resolve()
        if not path.is_file():
            raise ValueError(f"{source}: module = {given!r}: no such file ({path})")
        check_import(f"module = {given!r}", path)
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
        check_import(f"module = {given!r}", given)
        try:
            module = importlib.import_module(given)
        except ImportError as e:
            raise ValueError(f"{source}: module = {given!r}: cannot import it ({e})") from e
    module.__forge_gpu_given__ = given
    return module
