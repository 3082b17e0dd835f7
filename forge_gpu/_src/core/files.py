"""File operations every writer shares: read JSON naming the file, write JSON atomically, and publish a new
directory by writing it beside its final name and renaming it into place. The standard library only."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any


def cache_folder(name: str) -> str:
    """forge_gpu's cache folder ``name``: ``$XDG_CACHE_HOME/forge_gpu/NAME`` (default ``~/.cache``), not made."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "forge_gpu", name)


def load_json(path: str) -> Any:
    """The JSON value in ``path``; ValueError naming the file when it cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read JSON: {exc}") from exc


def write_json_atomic(path: str | os.PathLike, obj: Any, *, durable: bool = False, levels: int | None = None) -> None:
    """Write ``obj`` as indented UTF-8 JSON to ``path`` (:func:`write_text_atomic`); ``levels``: indent only the
    outer ``levels`` levels of objects and lists, each value below on one line (:func:`json_text`)."""
    text = json.dumps(obj, indent=2) if levels is None else json_text(obj, levels)
    write_text_atomic(path, text + "\n", durable=durable)


def json_text(obj: Any, levels: int, depth: int = 0) -> str:
    """``obj`` as JSON with its outer ``levels`` levels of objects and lists indented by 2 per level and each value
    below them on one line. The values below are encoded by the json module's C encoder, which ``indent`` turns off:
    a file of long lists (statistics' sketches, a manifest's episode lists) is written tens of times faster, and
    reads the same."""
    if levels <= 0 or not isinstance(obj, dict | list) or not obj:
        return json.dumps(obj)
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(str(k))}: {json_text(v, levels - 1, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    items = [inner + json_text(v, levels - 1, depth + 1) for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + pad + "]"


def write_text_atomic(path: str | os.PathLike, text: str, *, durable: bool = False) -> None:
    """Write ``text`` as UTF-8 to a new temporary file in the same directory, then rename it over ``path``: it
    appears whole or not at all. The file's mode follows the umask, as every other file of a run does (a
    ``tempfile.mkstemp`` file would stay 0600, unreadable by a colleague or a training job under another user).
    With ``durable``, the file's data is synced before the rename and the directory after it, so that the new
    file survives a machine crash once this returns."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    tmp = os.path.join(directory or ".", f"{name}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fdatasync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    if durable:
        sync_directory(directory or ".")


def sync_directory(directory: str) -> None:
    """Make the directory's entries (files created, renamed or removed in it) durable: fsync of the directory."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def partial_path(out: str) -> str:
    """A new, unused name beside ``out`` to write it under until it is whole (its parent is created);
    FileExistsError when ``out`` exists. :func:`publish` then renames it into place."""
    if os.path.lexists(out):
        raise FileExistsError(f"{out} already exists; give a new path")
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    return os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.partial-{uuid.uuid4().hex[:8]}")


def new_partial(out: str) -> str:
    """A new temporary directory beside ``out`` (:func:`partial_path`); FileExistsError when ``out`` exists."""
    partial = partial_path(out)
    os.mkdir(partial)
    return partial


def publish(partial: str, out: str) -> None:
    """Rename the finished ``partial`` (a file or a directory) to ``out``, refusing to replace anything: the
    one way a whole new output appears at once."""
    if os.path.lexists(out):
        raise FileExistsError(f"{out} appeared while it was written; the new one is left at {partial}")
    os.rename(partial, out)


def remove_quietly(path: str) -> None:
    """Remove ``path`` if it is there; an error (already gone, no permission) is ignored."""
    try:
        os.remove(path)
    except OSError:
        pass
