"""A task file's files, stored in the runs it records (docs/FORMAT.md "The task's files"): the run carries its task.

:func:`gather` reads what building the task reads from disk: the task file, its model file (MJCF, URDF or USD) with
every file that references (``<include>``, meshes, textures, height fields, skins; a URDF's meshes; a USD stage's
sublayers, references, payloads and asset paths) and the term module's source (a ``.py`` path). They keep their
paths relative to the folder that holds them all, so that the stored task file names its model and module as the
original did. A Newton example asset (``asset = ...``) is part of the
installed Newton and code named by a dotted name is installed code: neither is stored.

``collect`` (and ``replay``, for the run it writes) puts them in the run's ``task/`` folder, listed with their
sha256 in run.json's ``scene_spec.stored``; ``replay`` checks them (:func:`stored_task_file`) and builds the task
from them, so a run replays from itself alone, on another machine, after its task file moved.
"""

from __future__ import annotations

import hashlib
import os
import xml.etree.ElementTree as ET
from pathlib import Path

FOLDER = "task"
"""The run's folder of its task's files."""
_ASSET_TAGS = {"mesh": "meshdir", "hfield": "meshdir", "skin": "meshdir", "texture": "texturedir"}


def gather(
    task_file: str, model: tuple[str, str] | None, module: str, composed: list | tuple = ()
) -> tuple[dict[str, bytes], str]:
    """``({name: bytes}, the task file's name)`` of what the task reads: ``task_file`` (absolute), the files it is
    composed of (``composed``: the files it extends, its robot file and the robot's: ``compose.Composed.files``),
    ``model`` (``(path, kind)`` of ``model_file``: ``mjcf``, ``urdf`` and ``usd`` files are stored with what they
    reference, an asset or a builder is not) and the term ``module`` as the file gives it (a ``.py`` path relative
    to the task file)."""
    paths = [Path(task_file).resolve(), *(Path(p).resolve() for p in composed)]
    if model is not None and model[1] in ("mjcf", "urdf", "usd") and not _is_newton_asset(model[0]):
        paths += model_files(Path(model[0]).resolve(), model[1])
    if module.endswith(".py"):
        paths.append((paths[0].parent / module).resolve())
    paths = list(dict.fromkeys(p for p in paths if p.is_file()))
    root = Path(os.path.commonpath([str(p.parent) for p in paths]))
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in paths}
    return files, paths[0].relative_to(root).as_posix()


def listing(files: dict[str, bytes], task_name: str) -> dict:
    """run.json's ``scene_spec.stored``: the folder, the task file's name in it, and each file's sha256 and size."""
    listed = {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)} for name, data in files.items()}
    return {"folder": FOLDER, "task_file": task_name, "files": dict(sorted(listed.items()))}


def write(directory: str | os.PathLike, files: dict[str, bytes]) -> None:
    """Write ``files`` into ``directory``'s ``task/`` folder (a new run's: nothing there yet)."""
    for name, data in files.items():
        path = Path(directory, FOLDER, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def stored_task_file(run_dir: str | os.PathLike, stored: dict) -> Path:
    """The stored task file of the run ``run_dir`` whose run.json lists ``stored``, after checking every file of
    ``task/`` it lists against its sha256 (what else the folder holds is not read). ValueError (one line) for a
    listed file missing or changed, or a listing that is not one."""
    folder = Path(run_dir, FOLDER)
    files = stored.get("files") if isinstance(stored, dict) else None
    name = stored.get("task_file") if isinstance(stored, dict) else None
    if not isinstance(files, dict) or name not in files or not all(_safe(n) for n in files):
        raise ValueError(f"{run_dir}: run.json's scene_spec.stored is not a listing of the task's files: {stored!r}")
    if not folder.is_dir():
        raise ValueError(f"{run_dir}: run.json lists the task's files in {FOLDER}/, which is not there")
    for relative, entry in files.items():
        path = folder / relative
        if not path.is_file():
            raise ValueError(f"{path}: listed in run.json's scene_spec.stored, not there")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if not isinstance(entry, dict) or digest != entry.get("sha256"):
            want = entry.get("sha256") if isinstance(entry, dict) else entry
            raise ValueError(
                f"{path}: changed after the run was recorded (sha256 {digest}, run.json lists {want}); "
                "replay builds the task the run recorded only"
            )
    return folder / name


def _safe(name) -> bool:
    """Whether a listed name stays inside the folder (relative, no ``..``)."""
    return isinstance(name, str) and bool(name) and not Path(name).is_absolute() and ".." not in Path(name).parts


def _is_newton_asset(path: str) -> bool:
    import newton.examples

    return Path(path).resolve().parent == Path(newton.examples.get_asset("nv_ant.xml")).resolve().parent


def model_files(path: Path, kind: str) -> list[Path]:
    """The model file and the files it references that exist: an MJCF's includes (followed), meshes, height fields,
    skins and textures (under the main file's ``<compiler>`` ``meshdir``, ``texturedir`` or ``assetdir``, or beside
    the file that names them); a URDF's mesh files (plain or ``file://`` paths); a USD stage's layers and assets
    (:func:`usd_files`)."""
    found = [path]
    if kind == "usd":
        return usd_files(path)
    if kind == "urdf":
        for element in _parse(path).iter("mesh"):
            given = element.get("filename", "")
            given = given[len("file://") :] if given.lower().startswith("file://") else given
            if given and "://" not in given:
                found.append((path.parent / given).resolve())
        return [p for p in dict.fromkeys(found) if p.is_file()]
    main = path.parent
    found += _mujoco_assets(path)
    folders = {}
    for compiler in _expanded_compilers(path):  # every file's, the later winning, as MuJoCo merges them
        assetdir = compiler.get("assetdir", folders.get("assetdir"))
        folders["assetdir"] = assetdir
        folders["meshdir"] = compiler.get("meshdir", folders.get("meshdir", assetdir))
        folders["texturedir"] = compiler.get("texturedir", folders.get("texturedir", assetdir))
    pending, seen = [path], set()
    while pending:
        current = pending.pop()
        if current in seen or not current.is_file():
            continue
        seen.add(current)
        found.append(current)
        for element in _parse(current).iter():
            given = element.get("file")
            if not given:
                continue
            if element.tag == "include":
                pending += [(current.parent / given).resolve(), (main / given).resolve()]
            elif element.tag in _ASSET_TAGS:
                folder = folders.get(_ASSET_TAGS[element.tag])
                for base in ([main / folder] if folder else []) + [main, current.parent]:
                    found.append((base / given).resolve())
    return [p for p in dict.fromkeys(found) if p.is_file()]


def _mujoco_assets(path: Path) -> list[Path]:
    """The asset files MuJoCo itself reads for the MJCF ``path`` (meshes, height fields, textures, skins): its
    parser resolves the includes and merges their ``<compiler>`` folders; none where MuJoCo cannot parse it (the
    file walk of :func:`model_files` finds them then)."""
    try:
        import mujoco

        spec = mujoco.MjSpec.from_file(str(path))
    except Exception:  # MuJoCo's own refusal is said when the model is built
        return []
    found = []
    for items, folder in ((spec.meshes, spec.meshdir), (spec.hfields, spec.meshdir), (spec.skins, spec.meshdir),
                          (spec.textures, spec.texturedir)):  # fmt: skip
        for item in items:
            given = getattr(item, "file", "")
            if given:
                found.append((path.parent / (folder or "") / given).resolve())
    return found


def _expanded_compilers(path: Path, main: Path | None = None, depth: int = 0) -> list[ET.Element]:
    """The ``<compiler>`` elements of ``path`` and the files it includes (named relative to the main file's folder,
    else to the including file's), in document order."""
    main, found = main or path.parent, []
    for element in _parse(path).iter():
        if element.tag == "compiler":
            found.append(element)
        elif element.tag == "include" and element.get("file") and depth < 8:
            included = next((p for p in (main / element.get("file"), path.parent / element.get("file"))
                             if p.is_file()), None)  # fmt: skip
            if included is not None:
                found += _expanded_compilers(included.resolve(), main, depth + 1)
    return found


def usd_files(path: Path) -> list[Path]:
    """A USD file and what it references that exists: its sublayers, references and payloads (followed, with
    usd-core's ``UsdUtils.ComputeAllDependencies``) and the asset paths its layers name (textures, meshes, ...);
    only the file itself where usd-core is not installed (the model could not be built then)."""
    try:
        from pxr import UsdUtils
    except ImportError:
        return [path]
    try:
        layers, assets, _ = UsdUtils.ComputeAllDependencies(str(path))
    except Exception as e:  # pxr's Tf errors
        reason = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise ValueError(f"{path}: cannot read the model file to store it with the run ({reason})") from None
    found = [path] + [Path(layer.realPath).resolve() for layer in layers if layer.realPath]
    found += [Path(asset).resolve() for asset in assets if asset and "://" not in asset]
    return [p for p in dict.fromkeys(found) if p.is_file()]


def _parse(path: Path) -> ET.Element:
    try:
        return ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        raise ValueError(f"{path}: cannot read the model file to store it with the run ({e})") from e
