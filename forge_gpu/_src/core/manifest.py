"""run.json, which every run format shares: its keys and their checks, the plain description of a run that a
recorder writes into it (:class:`RunDescription`), and the first manifest of a new run.

Which format a manifest names (its ``schema_version`` and ``layout``) is the format registry's question
(:func:`formats.registry.read_manifest` checks both). The standard library only.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from forge_gpu._src.core.checks import check_int

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
    """Check run.json's keys and their types (docs/FORMAT-v1.md, "run.json"; docs/FORMAT.md adds the packed
    keys); raise ValueError naming the file and the key. Whether a registered format reads it is
    :func:`formats.registry.read_manifest`'s check."""
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
    if manifest["status"] not in MANIFEST_STATUSES:
        raise ValueError(f"{name}: key 'status' is {manifest['status']!r}; allowed: {', '.join(MANIFEST_STATUSES)}")
    if manifest["completed_episodes"] < 0:
        raise ValueError(f"{name}: key 'completed_episodes' is negative")
    for entry in manifest.get("incomplete_episodes", []):
        if not isinstance(entry, dict) or not {"env_id", "episode_id", "steps"} <= entry.keys():
            raise ValueError(f"{name}: key 'incomplete_episodes' holds {entry!r}; expected env_id, episode_id, steps")


#: Distributions whose versions shape the data; recorded in run.json where installed.
RECORDED_PACKAGES = ("numpy", "newton", "warp-lang", "mujoco", "mujoco-warp", "torch", "forge-gpu", "pyarrow")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunDescription:
    """What a recorder needs to know of the run it records: plain data, no env object. ``forge_gpu.sim.describe_run``
    builds one from a :class:`VectorEnv`."""

    spec: Mapping
    """The env's spec: ``observation`` (field -> shape, dtype), ``action_shape`` [A], bounds, ... (env.spec)."""
    config: Mapping
    """The task config as a dict; ``num_envs`` and ``max_steps`` are read from it."""
    task: str
    """Task id."""
    scene: Any
    """The scene description: a dataclass with a ``kind`` field."""
    seed: int
    calibration: Mapping = dataclasses.field(default_factory=dict)
    """Camera intrinsics and extrinsics, when the task renders."""
    transport: str = "host_snapshot"
    """How batches reached the recorder (run.json's ``transport``)."""
    step_mode: str | None = None
    """``graph`` or ``eager: <why>`` (VectorEnv.step_mode)."""

    def __post_init__(self) -> None:
        for name in ("num_envs", "max_steps"):
            check_int(
                f"config[{name!r}]", self.config.get(name) if isinstance(self.config, Mapping) else None, minimum=1
            )
        if not dataclasses.is_dataclass(self.scene) or not hasattr(self.scene, "kind"):
            raise ValueError(f"scene must be a dataclass with a 'kind' field, got {self.scene!r}")

    @property
    def num_envs(self) -> int:
        return int(self.config["num_envs"])

    @property
    def max_steps(self) -> int:
        return int(self.config["max_steps"])


def check_description(run: Any) -> RunDescription:
    """``run`` if it is a :class:`RunDescription`; else a TypeError saying how to describe an env."""
    if not isinstance(run, RunDescription):
        raise TypeError(
            f"run: expected a RunDescription, got {type(run).__name__}; describe an env with "
            "forge_gpu.sim.describe_run(env)"
        )
    return run


def initial_manifest(run: RunDescription, max_buffer_bytes: int, identity: Mapping[str, Any]) -> dict:
    """run.json of a new run, before its first episode; checked to be writable as JSON. ``identity``: the
    keys that mark the run's format (``RunFormat.identity``: schema_version, layout)."""
    import importlib.metadata  # only a new run needs these: a reader starts without them (~15 ms)
    import platform
    import uuid

    packages, sources = {}, {}
    for name in RECORDED_PACKAGES:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        packages[name] = dist.version
        text = dist.read_text("direct_url.json")
        if text:
            try:
                sources[name] = json.loads(text)
            except ValueError:
                pass
    scene = run.scene
    manifest = {
        **identity,
        "run_id": uuid.uuid4().hex,
        "config": dict(run.config),
        "env_spec": run.spec,
        "calibration": run.calibration,
        "python": platform.python_version(),
        "packages": packages,
        "dependency_sources": sources,
        "status": "recording",
        "completed_episodes": 0,
        "transport": run.transport,
        "step_mode": run.step_mode,
        "scene": f"{scene.kind}:v1",
        "scene_spec": dataclasses.asdict(scene),
        "task": run.task,
        "seed": int(run.seed),
        "max_buffer_bytes": max_buffer_bytes,
        "incomplete_episodes": [],
    }
    try:
        json.dumps(manifest, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the env description cannot be written to run.json: {exc}") from exc
    return manifest


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):  # numpy scalars and arrays, without importing numpy
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays turned into plain Python values."""
    return json.loads(json.dumps(obj, default=_json_default))
