"""What a model file says beyond the bodies and joints Newton imports: its keyframes, its ``<option>``, its own
floor, its URDF joint limits, and the elements forge_gpu does not simulate; a malformed file is refused in one
line naming the file and the line.

:func:`read_model_file` reads an MJCF (``<include>`` expanded), a URDF or a USD stage (with usd-core, the
``meshes`` extra) once per process (per path and modification time) into a :class:`ModelFile`;
``model.add_model`` and ``task.FileTask`` act on it and say what they did (:class:`ModelWarning`).
"""

from __future__ import annotations

import math
import os
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

NOT_SIMULATED_MJCF = {
    "flexcomp": "flexcomp (deformables)",
    "flex": "flex (deformables)",
    "composite": "composite",
    "skin": "skin",
    "plugin": "plugin",
}
"""MJCF elements (anywhere in the file) that forge_gpu's MuJoCo-Warp worlds do not simulate, and how to name them."""
USD_STEP_RATES = ("newton:timeStepsPerSecond", "physxScene:timeStepsPerSecond")
"""A USD physics scene's attributes that set its step rate [1/s] (``mjc:option:timestep`` sets the step)."""
SOLVER_OPTIONS = ("iterations", "ls_iterations", "integrator", "cone", "impratio")
"""The ``<option>`` attributes a task's ``[solver]`` sets (its values replace the model's)."""


def _is_float(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def short_names(labels) -> list[str]:
    """A label's last path component (``ant/worldbody/torso/hip_1`` -> ``hip_1``)."""
    return [str(label).rsplit("/", 1)[-1] for label in labels]


class ModelWarning(UserWarning):
    """What a model file holds that is not simulated, and how the model was placed and stepped (one line each)."""


@dataclass
class ModelFile:
    """One model file's own settings, as written."""

    path: str
    kind: str
    keyframes: dict[str, list[float]] = field(default_factory=dict)
    """MJCF ``<key name=...>``: its ``qpos`` (MuJoCo's order: a free joint's x y z qw qx qy qz)."""
    joints: list[tuple[str, str]] = field(default_factory=list)
    """MJCF joints in tree order: (name, type), type ``free``, ``ball``, ``slide`` or ``hinge``."""
    timestep: float | None = None
    gravity: tuple[float, float, float] | None = None
    options: dict[str, str] = field(default_factory=dict)
    """The ``<option>`` attributes of :data:`SOLVER_OPTIONS` the file sets."""
    floors: list[str] = field(default_factory=list)
    """Named plane geoms of the world body (the model's own floor); USD: the prim paths of its static collision
    planes (colliders outside every rigid body)."""
    unnamed_floors: int = 0
    root: str = ""
    """The first body of the world body (MJCF) or the root link (URDF)."""
    root_position: tuple[float, float, float] = (0.0, 0.0, 0.0)
    efforts: dict[str, float] = field(default_factory=dict)
    """URDF: joint name -> ``<limit effort>`` [N or N m] (joints that give one above 0)."""
    not_simulated: list[str] = field(default_factory=list)
    """What the file holds that is not simulated, each as a short phrase."""
    meshes: list[str] = field(default_factory=list)
    """The mesh files the model names."""
    compiler: dict[str, str] = field(default_factory=dict)
    """MJCF: every ``<compiler>``'s attributes (of the file and its includes), merged in document order, the later
    winning, as MuJoCo merges them."""
    tendons: dict[str, list[str]] = field(default_factory=dict)
    """MJCF: each fixed tendon's joints, by the tendon's name."""
    body_joints: dict[str, list[str]] = field(default_factory=dict)
    """MJCF: each body's joints (hinge and slide), by the body's name; a body of two or more Newton imports as one
    joint of several axes."""
    height_fields: list[str] = field(default_factory=list)
    """MJCF: the world body's height-field geoms (a floor of ``type="hfield"``)."""
    source: str | None = None
    """MJCF: the file as MuJoCo reads it, its includes in place and every asset path resolved as MuJoCo resolves it
    (its merged ``<compiler>`` directories), where a ``<compiler>`` setting asset directories comes from an included
    file or after an include; None otherwise (the file itself is imported)."""


_READ: dict[tuple[str, float], ModelFile] = {}


def read_model_file(path: str, kind: str, source: str) -> ModelFile:
    """The :class:`ModelFile` of ``path`` (``mjcf``, ``urdf`` or ``usd``); a malformed file is a ``ValueError`` of one
    line naming the file, the line and the column (a USD file: the file and the reason); a USD file without
    usd-core, one naming the extra that installs it."""
    key = (path, os.path.getmtime(path))
    if key not in _READ:
        if kind == "usd":
            _READ[key] = _usd(path, source)
        else:
            root = _parse(path, source)
            _READ[key] = _mjcf(path, root, source) if kind == "mjcf" else _urdf(path, root)
    return _READ[key]


def usd_modules(path: str, source: str):
    """``pxr``'s ``Usd``, ``UsdGeom`` and ``UsdPhysics``, or a ``ValueError`` naming the extra that installs them
    (usd-core, and newton-usd-schemas, Newton's USD schemas that its importer requires)."""
    try:
        from pxr import Usd, UsdGeom, UsdPhysics
    except ImportError:
        raise ValueError(
            f'{source}: model file {path} is USD, which needs usd-core: pip install "forge-gpu[meshes]"'
        ) from None
    try:
        import newton_usd_schemas  # noqa: F401
    except ImportError:
        raise ValueError(
            f'{source}: model file {path} is USD, which needs newton-usd-schemas: pip install "forge-gpu[meshes]"'
        ) from None
    return Usd, UsdGeom, UsdPhysics


def _usd(path: str, source: str) -> ModelFile:
    """A USD stage's facts: its articulation root, its static collision planes (its floor), and its physics scene's
    step (``newton:`` or ``physxScene:timeStepsPerSecond``, ``mjc:option:timestep``) and gravity as authored."""
    Usd, UsdGeom, UsdPhysics = usd_modules(path, source)
    try:
        stage = Usd.Stage.Open(path)
    except Exception as e:  # pxr's Tf errors: a message of several lines, the reason among them
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        reason = next((line for line in lines if "rror" in line or "parse" in line.lower()), lines[0] if lines else "")
        raise ValueError(f"{path}: malformed USD ({reason[:200]}); the model file of {source}") from None
    if stage is None:
        raise ValueError(f"{source}: model file {path}: cannot open it as a USD stage")
    info = ModelFile(path=path, kind="usd")
    meters = UsdGeom.GetStageMetersPerUnit(stage) or 1.0
    for prim in stage.Traverse():
        if prim.HasAPI(UsdPhysics.ArticulationRootAPI) and not info.root:
            info.root = str(prim.GetPath())
        if prim.IsA(UsdGeom.Plane) and prim.HasAPI(UsdPhysics.CollisionAPI) and not _in_body(prim, UsdPhysics):
            info.floors.append(str(prim.GetPath()))
        if prim.IsA(UsdPhysics.Scene):
            for name in (*USD_STEP_RATES, "mjc:option:timestep"):
                attribute = prim.GetAttribute(name)
                value = attribute.Get() if attribute and attribute.HasAuthoredValue() else None
                if value and value > 0:
                    info.timestep = float(value) if name.startswith("mjc:") else 1.0 / float(value)
                    break
            scene = UsdPhysics.Scene(prim)
            direction, magnitude = scene.GetGravityDirectionAttr(), scene.GetGravityMagnitudeAttr()
            if direction.HasAuthoredValue() and magnitude.HasAuthoredValue() and math.isfinite(magnitude.Get()):
                d = [float(v) for v in direction.Get()]
                norm = math.sqrt(sum(v * v for v in d)) or 1.0
                g = float(magnitude.Get()) * meters
                if UsdGeom.GetStageUpAxis(stage) == UsdGeom.Tokens.y:  # Newton turns a Y-up stage to Z-up
                    d = [d[0], -d[2], d[1]]
                info.gravity = (d[0] / norm * g, d[1] / norm * g, d[2] / norm * g)
    return info


def _in_body(prim, UsdPhysics) -> bool:
    """Whether ``prim`` or a prim above it is a rigid body."""
    while prim and prim.IsValid():
        if prim.HasAPI(UsdPhysics.RigidBodyAPI):
            return True
        prim = prim.GetParent()
    return False


def _parse(path: str, source: str) -> ET.Element:
    try:
        return ET.parse(path).getroot()
    except ET.ParseError as e:
        line, column = e.position
        reason = str(e).split(":")[0]
        raise ValueError(f"{path}:{line}:{column}: malformed XML ({reason}); the model file of {source}") from None
    except OSError as e:
        raise ValueError(f"{source}: model file {path}: cannot read it ({e.strerror})") from None


def _expanded(path: str, root: ET.Element, source: str, depth: int = 0, main: str | None = None) -> ET.Element:
    """``root`` with every ``<include file=...>`` replaced by the included file's children (a file named relative
    to the main file's folder, as MuJoCo reads it, or else to the including file's)."""
    main = main or str(Path(path).parent)
    for parent in list(root.iter()):
        for i, child in enumerate(list(parent)):
            if child.tag == "include" and depth < 8:
                given = child.get("file", "")
                included = str(Path(main) / given)
                if not Path(included).is_file():
                    included = str(Path(path).parent / given)
                sub = _expanded(included, _parse(included, source), source, depth + 1, main)
                for compiler in sub.iter("compiler"):
                    compiler.set(_INCLUDED, "1")
                parent.remove(child)
                for k, grandchild in enumerate(list(sub)):
                    parent.insert(i + k, grandchild)
    return root


_ASSET_DIRS = ("meshdir", "texturedir", "assetdir")
_ASSET_DIR_OF = {"mesh": "meshdir", "hfield": "meshdir", "skin": "meshdir", "texture": "texturedir"}


_INCLUDED = "forge_gpu_included"
"""The mark :func:`_expanded` puts on a ``<compiler>`` read from an included file (taken off again)."""


def _asset_dirs_apart(own: ET.Element, expanded: ET.Element) -> bool:
    """Whether MuJoCo's reading of the asset directories can differ from a per-file one: the file (``own``, as
    written; ``expanded``, its includes in place) includes others and a ``<compiler>`` that sets an asset directory
    is in an included file, or after an include in the file itself."""
    children = list(own.iter())
    includes = [i for i, e in enumerate(children) if e.tag == "include"]
    if not includes:
        return False
    own_dirs = [i for i, e in enumerate(children) if e.tag == "compiler" and set(e.attrib) & set(_ASSET_DIRS)]
    included = [c for c in expanded.iter("compiler") if c.attrib.pop(_INCLUDED, None)]
    return any(i > includes[0] for i in own_dirs) or any(set(c.attrib) & set(_ASSET_DIRS) for c in included)


def _as_mujoco_reads(path: str, root: ET.Element) -> str:
    """The expanded ``root`` as one MJCF text whose asset files are absolute paths resolved as MuJoCo resolves them:
    the main file's folder, then the merged ``<compiler>``'s directory of the asset's kind (``meshdir``, else
    ``assetdir``; ``texturedir`` for textures), then the file."""
    merged: dict[str, str] = {}
    for compiler in root.iter("compiler"):
        merged.update(compiler.attrib)
        for key in _ASSET_DIRS:
            compiler.attrib.pop(key, None)
    main = Path(path).parent
    for element in root.iter():
        given = element.get("file")
        if element.tag not in _ASSET_DIR_OF or not given or Path(given).is_absolute():
            continue
        folder = merged.get(_ASSET_DIR_OF[element.tag], merged.get("assetdir", ""))
        element.set("file", str((main / folder / given).resolve()))
    return ET.tostring(root, encoding="unicode")


def _floats(text: str | None, count: int | None = None) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split()]
    except ValueError:
        return None
    return values if count is None or len(values) == count else None


def _mjcf(path: str, root: ET.Element, source: str) -> ModelFile:
    own = root
    root = _expanded(path, ET.fromstring(ET.tostring(own)), source)
    apart = _asset_dirs_apart(own, root)
    info = ModelFile(path=path, kind="mjcf")
    for compiler in root.iter("compiler"):
        info.compiler.update(compiler.attrib)
    if apart:
        info.source = _as_mujoco_reads(path, ET.fromstring(ET.tostring(root)))
    for option in root.iter("option"):
        if "timestep" in option.attrib:
            info.timestep = float(option.get("timestep"))
        gravity = _floats(option.get("gravity"), 3)
        if gravity is not None:
            info.gravity = (gravity[0], gravity[1], gravity[2])
        info.options.update({k: option.get(k) for k in SOLVER_OPTIONS if k in option.attrib})
    for key in root.iter("key"):
        qpos = _floats(key.get("qpos"))
        if qpos is not None:
            info.keyframes[key.get("name", f"key {len(info.keyframes)}")] = qpos
    worlds = root.findall("worldbody")  # one per included file that has one: MuJoCo reads them all
    for world in worlds:
        for geom in world.findall("geom"):
            if geom.get("type") == "plane":
                if geom.get("name"):
                    info.floors.append(geom.get("name"))
                else:
                    info.unnamed_floors += 1
            elif geom.get("type") == "hfield":
                info.height_fields.append(geom.get("name") or geom.get("hfield") or "hfield")
    first = next((b for world in worlds for b in world.findall("body")), None)
    if first is not None:
        info.root = first.get("name", "")
        position = _floats(first.get("pos"), 3)
        info.root_position = tuple(position) if position else (0.0, 0.0, 0.0)

    def walk(body: ET.Element) -> None:
        for child in body:
            if child.tag == "freejoint":
                info.joints.append((child.get("name", ""), "free"))
            elif child.tag == "joint":
                kind = child.get("type", "hinge")
                info.joints.append((child.get("name", ""), kind))
                if kind in ("hinge", "slide"):
                    info.body_joints.setdefault(body.get("name", ""), []).append(child.get("name", ""))
        for child in body.findall("body"):
            walk(child)

    for world in worlds:
        for body in world.findall("body"):
            walk(body)
    for tendon in root.iter("fixed"):
        info.tendons[tendon.get("name", f"tendon {len(info.tendons)}")] = [
            j.get("joint", "") for j in tendon.findall("joint")
        ]
    for tag, phrase in NOT_SIMULATED_MJCF.items():
        found = [e.get("name") or e.get("file") or tag for e in root.iter(tag)]
        if found:
            info.not_simulated.append(f"{phrase} {', '.join(repr(n) for n in found)}")
    sensors = [s.get("name") or s.tag for section in root.iter("sensor") for s in section]
    if sensors:
        info.not_simulated.append(f"{len(sensors)} sensor(s) {', '.join(repr(n) for n in sensors)} (no sensor data)")
    info.meshes = [m.get("file") for m in root.iter("mesh") if m.get("file")]
    return info


def _urdf(path: str, root: ET.Element) -> ModelFile:
    info = ModelFile(path=path, kind="urdf")
    children = {j.find("child").get("link") for j in root.iter("joint") if j.find("child") is not None}
    links = [link.get("name", "") for link in root.iter("link")]
    info.root = next((name for name in links if name not in children), "")
    velocities = []
    for joint in root.iter("joint"):
        limit = joint.find("limit")
        if joint.get("type") not in ("revolute", "continuous", "prismatic") or limit is None:
            continue
        effort = _floats(limit.get("effort"), 1)
        if effort and effort[0] > 0 and math.isfinite(effort[0]):
            info.efforts[joint.get("name", "")] = effort[0]
        if limit.get("velocity") is not None:
            velocities.append(joint.get("name", ""))
    if velocities:
        info.not_simulated.append(f"velocity limits of {', '.join(repr(n) for n in velocities)} (MuJoCo has none)")
    transmissions = [t.get("name", "transmission") for t in root.iter("transmission")]
    if transmissions:
        info.not_simulated.append(f"transmission(s) {', '.join(repr(n) for n in transmissions)}")
    info.meshes = [m.get("filename") for m in root.iter("mesh") if m.get("filename")]
    return info


def warn(line: str) -> None:
    """Say one line about the model (a :class:`ModelWarning`; Python shows each distinct line once)."""
    warnings.warn(f"forge_gpu: {line}", ModelWarning, stacklevel=3)


def stepping(info: ModelFile | None, config, source: str) -> list[str]:
    """The model's ``<option>`` against the task: the task steps at ``control_dt / substeps`` (its file's or the
    defaults); a model timestep that differs is replaced, and that is said, naming both; ``[solver]``'s
    iterations, ls_iterations and integrator replace the model's, said the same way; a model gravity other than
    the standard one is used, and said. Returns the phrases to say."""
    if info is None or info.kind not in ("mjcf", "usd"):
        return []
    import tomllib

    from forge_gpu._src.sim.config import TaskConfig

    name, notes = Path(info.path).name, []
    sim_dt = config.control_dt / config.substeps
    try:
        table = tomllib.loads(Path(source.split(" (")[0]).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        table = {}
    if info.timestep is not None and abs(info.timestep - sim_dt) > 1e-9 * max(1.0, sim_dt):
        defaults = TaskConfig.__dataclass_fields__
        given = [k for k in ("control_dt", "substeps") if k in table or getattr(config, k) != defaults[k].default]
        if not given:  # the file's own control_dt / substeps replace it as the file says
            step = f"control_dt / substeps = {config.control_dt:g} / {config.substeps} = {sim_dt:g} s"
            own = (
                f'<option timestep="{info.timestep:g}">'
                if info.kind == "mjcf"
                else f"its physics scene's step {info.timestep:g} s"
            )
            notes.append(f"{own} replaced by the task's default {step} (set control_dt and substeps to choose)")
    solver, given = config.solver, table.get("solver", {})
    for key, value in info.options.items():
        ours = getattr(solver, key, None)
        same = str(value).lower() == str(ours).lower() or (_is_float(value) and _is_float(ours)
                                                             and float(value) == float(ours))  # fmt: skip
        if solver.name == "mujoco" and ours is not None and not same:
            if key not in given:
                notes.append(f'<option {key}="{value}"> replaced by the default [solver] {key} = {ours!r} (set it '
                             "to choose)")  # fmt: skip
    if info.gravity is not None and any(abs(a - b) > 1e-6 for a, b in zip(info.gravity, (0, 0, -9.81), strict=True)):
        notes.append(
            f"gravity {list(info.gravity)} from its " + ("<option>" if info.kind == "mjcf" else "physics scene")
        )
    return [f"{name}: {n}" for n in notes]
