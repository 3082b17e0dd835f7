"""dataset.json: a dataset root names its run directories (written by the distributed collector, read by every
reader). Its schema version is its own, apart from a run's. The standard library only."""

from __future__ import annotations

import os

from forge_gpu._src.core.files import load_json, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST

DATASET_MANIFEST = "dataset.json"


DATASET_KIND = "forge_gpu.dataset"


#: The version of dataset.json's own schema (not a run's).
DATASET_SCHEMA_VERSION = 1


def is_dataset(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a dataset root (holds ``dataset.json``) rather than a run directory."""
    return os.path.isfile(os.path.join(os.fspath(path), DATASET_MANIFEST))


def read_dataset_manifest(root: str | os.PathLike) -> dict:
    """Load and check ``dataset.json`` of a dataset root."""
    root = os.fspath(root)
    path = os.path.join(root, DATASET_MANIFEST)
    manifest = load_json(path)
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: must hold a JSON object")
    if manifest.get("schema_version") != DATASET_SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema_version is {manifest.get('schema_version')!r}; this reader reads {DATASET_SCHEMA_VERSION}"
        )
    if manifest.get("kind") != DATASET_KIND:
        raise ValueError(f"{path}: kind is {manifest.get('kind')!r}, expected {DATASET_KIND!r}")
    runs = manifest.get("runs")
    if not isinstance(runs, list):
        raise ValueError(f"{path}: runs must be a list")
    for entry in runs:
        name = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name in ("", ".", "..") or os.path.basename(name) != name:
            raise ValueError(f"{path}: each run needs a path naming a directory beside dataset.json, got {entry!r}")
    if os.path.isfile(os.path.join(root, RUN_MANIFEST)):
        raise ValueError(f"{root}: holds both {RUN_MANIFEST} and {DATASET_MANIFEST}; it must be one or the other")
    return manifest


def run_directories(path: str | os.PathLike) -> list[str]:
    """The run directories of a dataset root in ``dataset.json`` order, or ``[path]`` for a run directory."""
    path = os.fspath(path)
    if not is_dataset(path):
        return [path]
    return [os.path.join(path, entry["path"]) for entry in read_dataset_manifest(path)["runs"]]


def write_dataset_manifest(root: str | os.PathLike, results: list[dict]) -> None:
    """Write ``dataset.json``: the runs whose directory exists, and the workers that failed before that."""
    keys = ("path", "run_id", "worker", "device", "status", "episodes", "seed", "error")
    made = [os.path.isdir(os.path.join(root, r["path"])) for r in results]
    runs = [{k: r[k] for k in keys} for r, m in zip(results, made, strict=True) if m]
    failed = [{"worker": r["worker"], "error": r["error"]} for r, m in zip(results, made, strict=True) if not m]
    manifest = {"schema_version": DATASET_SCHEMA_VERSION, "kind": DATASET_KIND, "runs": runs, "failed_workers": failed}
    write_json_atomic(os.path.join(root, DATASET_MANIFEST), manifest)
