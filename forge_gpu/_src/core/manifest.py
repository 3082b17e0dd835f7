"""run.json, which every run format shares: its keys and their checks, and the file operations that
publish it (an atomic JSON write, a finished directory renamed into place).

The format a manifest names (its ``schema_version`` and ``layout``) is looked up in :mod:`formats`.
The standard library only.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from typing import Any

from forge_gpu._src.formats.registry import format_of

RUN_MANIFEST = "run.json"
MANIFEST_STATUSES = ("recording", "closed", "failed")

#: The keys run.json must hold and their JSON types (`incomplete_episodes` is complete only after close).
_MANIFEST_TYPES = {
    "schema_version": int,
    "run_id": str,
    "config": dict,
    "env_spec": dict,
    "calibration": dict,
    "python": str,
    "packages": dict,
    "dependency_sources": dict,
    "status": str,
    "completed_episodes": int,
    "transport": str,
    "scene": str,
    "scene_spec": dict,
    "task": str,
    "seed": int,
    "max_buffer_bytes": int,
    "incomplete_episodes": list,
}
MANIFEST_KEYS = tuple(_MANIFEST_TYPES)


def validate_manifest(manifest: Any, *, name: str) -> None:
    """Check run.json's keys and their types (FORMAT.md) and that a registered format reads it; raise
    ValueError naming the file and the key."""
    if not isinstance(manifest, dict):
        raise ValueError(f"{name}: must hold a JSON object, got {type(manifest).__name__}")
    for key, kind in _MANIFEST_TYPES.items():
        if key not in manifest:
            if key == "incomplete_episodes" and manifest.get("status") == "recording":
                continue  # written at close
            raise ValueError(f"{name}: missing key {key!r}")
        value = manifest[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{name}: key {key!r} must be a {kind.__name__}, got {type(value).__name__}")
    format_of(manifest, name=name)
    if manifest["status"] not in MANIFEST_STATUSES:
        raise ValueError(f"{name}: key 'status' is {manifest['status']!r}; allowed: {', '.join(MANIFEST_STATUSES)}")
    if manifest["completed_episodes"] < 0:
        raise ValueError(f"{name}: key 'completed_episodes' is negative")
    for entry in manifest.get("incomplete_episodes", []):
        if not isinstance(entry, dict) or not {"env_id", "episode_id", "steps"} <= entry.keys():
            raise ValueError(f"{name}: key 'incomplete_episodes' holds {entry!r}; expected env_id, episode_id, steps")


def read_manifest(run_dir: str | os.PathLike) -> dict:
    """Load and check ``run.json`` of a run directory."""
    path = os.path.join(os.fspath(run_dir), RUN_MANIFEST)
    manifest = load_json(path)
    validate_manifest(manifest, name=path)
    spec = manifest["env_spec"]
    action_shape = spec.get("action_shape")
    if not isinstance(action_shape, list) or len(action_shape) != 1:
        raise ValueError(f"{path}: env_spec.action_shape must be a list [A], got {action_shape!r}")
    if not isinstance(spec.get("instruction"), str):
        raise ValueError(f"{path}: env_spec.instruction must be a string")
    return manifest


def load_json(path: str) -> Any:
    """The JSON value in ``path``; ValueError naming the file when it cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read JSON: {exc}") from exc


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented UTF-8 JSON to a temporary file in the same directory, then rename it."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=name + ".", suffix=".tmp", dir=directory or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, sort_keys=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def new_partial(out: str) -> str:
    """A new temporary directory beside ``out``; FileExistsError when ``out`` exists."""
    if os.path.lexists(out):
        raise FileExistsError(f"{out} already exists; give a new directory")
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    partial = os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.partial-{uuid.uuid4().hex[:8]}")
    os.mkdir(partial)
    return partial


def publish_directory(partial: str, out: str) -> None:
    """Rename the finished ``partial`` directory to ``out``, refusing to replace anything."""
    if os.path.lexists(out):
        raise FileExistsError(f"{out} appeared while it was written; the new one is left at {partial}")
    os.rename(partial, out)


def remove_quietly(path: str) -> None:
    """Remove ``path`` if it is there; an error (already gone, no permission) is ignored."""
    try:
        os.remove(path)
    except OSError:
        pass
