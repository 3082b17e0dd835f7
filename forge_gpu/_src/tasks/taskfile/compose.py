"""A task file composed of the files it names: ``extends`` (a file it builds on), ``robot`` (a robot file) and
``[variants.NAME]`` (named changes chosen when the task is made), into the one table ``spec.read_task_file`` reads.

The merge rule, everywhere: the later table wins key by key; where both hold a table (``[model]``, ``[action]``,
``[params]``, ``[variants.play]``, ...) the two merge key by key again, at every depth; any other value (a number,
a string, a list, a list of tables such as ``[[observations]]``) is replaced whole. The order, first to last:

1. the robot file (with its own ``extends``), under
2. the ``extends`` chain of the task file (the file it extends first, each file above it), under
3. the task file itself, then
4. the chosen variant (``[variants.NAME]`` of the merged table), then the overrides (``--set``).

``robot = "name"`` (no ``.toml``) is a robot id: ``robots/<name>.toml`` in the task file's folder or the nearest
folder above it that has one, else the shipped ``configs/robots/<name>.toml``; ``robot = "path.toml"`` is a path
relative to the file that names it. ``extends = "path.toml"`` is relative to the file that names it. A robot file
holds the robot alone (:data:`ROBOT_KEYS`). Paths inside a file (``model.file``, ``module``, ``robot``) stay
relative to the file that wrote them: the composed table names them relative to the task file.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROBOT_KEYS = ("model", "action", "reset", "params", "solver", "expert", "camera", "cameras", "control_dt",
              "substeps", "environment_state", "variants", "extends")  # fmt: skip
"""What a robot file holds: its model, its actuators (``[action]``), its start spread (``[reset]``), the numbers
they use (``[params]``), the solver's room its contacts need (``[solver]``), its scripted expert, the camera it
carries (``[camera]``: the defaults of a task's unnamed ``term = "camera"`` observation; ``[cameras.NAME]``: a named
camera, a wrist camera, that every task on the robot with a camera records), its control rate, and variants."""
_NOT_IN_VARIANT = ("extends", "robot", "variants", "task")
_PATHS = (("model", "file"), ("module",), ("robot",))
"""The keys whose value is a path relative to the file that wrote it (``robot`` where it ends in ``.toml``)."""


@dataclass
class Composed:
    """A task file's merged table and what it was made of."""

    table: dict
    files: list[Path] = field(default_factory=list)
    """Every file read (the task file first), for the run's stored copy of the task."""
    robot: str = ""
    """The robot file's path relative to the task file's folder (posix), or empty."""
    variants: list[str] = field(default_factory=list)
    """The variants the merged table offers."""


def merge(base: dict, top: dict) -> dict:
    """``top`` over ``base`` (the module's merge rule): tables merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def read_toml(path: Path, what: str = "task file") -> dict:
    """The TOML table of ``path``; ValueError (one line) where it cannot be read or parsed."""
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: cannot read the {what} ({e.strerror})") from e
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from e


def compose(path: str | Path, variant: str = "", robot: str = "") -> Composed:
    """The composed table of the task file ``path``: its robot, its ``extends`` chain, itself, the ``variant``
    (empty: none); ``robot`` (an id or a path relative to the task file) replaces the robot the files name."""
    path = Path(path).resolve()
    files: list[Path] = []
    table = _extended(path, path.parent, files, (), "task file")
    given = robot or table.pop("robot", None)
    table.pop("robot", None)
    where = f"{path}: robot" if not robot else f"{path}: params.robot (override)"
    robot_path = ""
    if given is not None:
        found = robot_file(given, path.parent, where)
        own = _extended(found, path.parent, files, (), "robot file")
        for key in own:
            if key not in ROBOT_KEYS:
                raise ValueError(f"{found}: unknown key {key!r} in a robot file; it holds {', '.join(ROBOT_KEYS)}")
        table = merge(own, table)
        robot_path = Path(os.path.relpath(found, path.parent)).as_posix()
    variants = table.pop("variants", {})
    if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
        raise ValueError(f"{path}: variants = {variants!r}: expected tables [variants.NAME] of changes")
    if variant:
        if variant not in variants:
            held = ", ".join(variants) or "none"
            raise ValueError(f"{path}: variant {variant!r}: no such variant; the task's variants are {held}")
        changes = variants[variant]
        for key in _NOT_IN_VARIANT:
            if key in changes:
                raise ValueError(f"{path}: variants.{variant}.{key}: a variant cannot change {key}")
        table = merge(table, changes)
    return Composed(table=table, files=files, robot=robot_path, variants=list(variants))


def robot_file(given, folder: Path, where: str) -> Path:
    """The robot file ``given`` names from a task file in ``folder``: a path (``*.toml``, relative to ``folder``)
    or an id (``robots/<id>.toml`` in ``folder`` or the nearest folder above, else the shipped robots)."""
    if not isinstance(given, str) or not given:
        raise ValueError(f'{where} = {given!r}: expected a robot id or a robot file (robot = "name" or "path.toml")')
    if given.endswith(".toml"):
        found = (folder / given).resolve()
        if not found.is_file():
            raise ValueError(f"{where} = {given!r}: no such robot file ({found})")
        return found
    for place in (folder, *folder.parents):
        candidate = place / "robots" / f"{given}.toml"
        if candidate.is_file():
            return candidate.resolve()
    from forge_gpu._src.sim.config import config_dir

    shipped = config_dir() / "robots" / f"{given}.toml"
    if shipped.is_file():
        return shipped.resolve()
    known = ", ".join(shipped_robots()) or "none"
    raise ValueError(f"{where} = {given!r}: no robots/{given}.toml beside the task file or above it, and no shipped "
                     f"robot of that id; the shipped robots are {known}")  # fmt: skip


def shipped_robots() -> list[str]:
    """The ids of the robot files shipped with forge_gpu (``configs/robots/<id>.toml``), sorted."""
    from forge_gpu._src.sim.config import config_dir

    return sorted(p.stem for p in (config_dir() / "robots").glob("*.toml"))


def _extended(path: Path, top: Path, files: list[Path], chain: tuple, what: str) -> dict:
    """The table of ``path`` over its ``extends`` chain, its paths rebased onto the folder ``top``."""
    if path in chain:
        cycle = " -> ".join(str(p) for p in (*chain, path))
        raise ValueError(f"{chain[-1]}: extends: a cycle ({cycle})")
    files.append(path)
    table = _rebased(read_toml(path, what), path.parent, top)
    parent = table.pop("extends", None)
    if parent is None:
        return table
    if not isinstance(parent, str) or not parent.endswith(".toml"):
        raise ValueError(f'{path}: extends = {parent!r}: expected the path of a file (extends = "other.toml")')
    base = (path.parent / parent).resolve()
    if not base.is_file():
        raise ValueError(f"{path}: extends = {parent!r}: no such file ({base})")
    return merge(_extended(base, top, files, (*chain, path), what), table)


def _rebased(table: dict, folder: Path, top: Path) -> dict:
    """``table`` (and its variants) with the relative paths it holds made relative to ``top`` instead of
    ``folder``."""
    if folder == top:
        return table
    table = dict(table)
    if isinstance(table.get("variants"), dict):
        table["variants"] = {k: _rebased(v, folder, top) if isinstance(v, dict) else v
                             for k, v in table["variants"].items()}  # fmt: skip
    if isinstance(table.get("extends"), str) and table["extends"].endswith(".toml"):  # from its own folder
        table["extends"] = str((folder / table["extends"]).resolve())
    for keys in _PATHS:
        holder = table
        for key in keys[:-1]:
            holder = holder.get(key) if isinstance(holder.get(key), dict) else None
            if holder is None:
                break
        value = holder.get(keys[-1]) if holder is not None else None
        if not isinstance(value, str) or not (value.endswith(".toml") or keys[-1] != "robot"):
            continue
        if keys[-1] == "module" and not value.endswith(".py"):
            continue  # a dotted module name
        if Path(value).is_absolute():
            continue
        holder = _copied(table, keys[:-1])
        holder[keys[-1]] = Path(os.path.relpath((folder / value).resolve(), top)).as_posix()
    return table


def _copied(table: dict, keys: tuple) -> dict:
    """The table at ``keys`` in ``table``, each one on the way copied (so the file's own tables stay as read)."""
    holder = table
    for key in keys:
        holder[key] = dict(holder[key])
        holder = holder[key]
    return holder
