"""What both recorders share: the env description they read, batch checks, per-env episode state, and the
lifecycle of a recording (directory, manifest, failure, flush, close).

Pure numpy and the standard library: the env is only read as a description (config, spec, calibration,
task, seed), so this module never imports Warp or Newton.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import importlib.metadata
import json
import os
import platform
import threading
import uuid
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from forge_gpu._src.core.manifest import RUN_MANIFEST, remove_quietly, write_json_atomic
from forge_gpu._src.formats.npz.layout import ID_FIELDS, REQUIRED_FIELDS, per_env_nbytes
from forge_gpu._src.formats.options import check_int
from forge_gpu._src.recording.stats import STATS_FILE, StatsAccumulator

#: Distributions whose versions shape the data; recorded in run.json where installed.
RECORDED_PACKAGES = ("numpy", "newton", "warp-lang", "mujoco", "mujoco-warp", "torch", "forge-gpu", "pyarrow")

#: Room kept for the final run.json while recording, so that a full disk still ends with a manifest that says
#: `failed`: removed just before that write. Its name ends in .tmp, so `forge-gpu repair` removes one that a
#: killed process left behind.
MANIFEST_RESERVE = RUN_MANIFEST + ".reserve.tmp"

# Action and reward are kept (and written) as float32, the dtype the env produces.
ACTION_DTYPE = np.dtype(np.float32)
REWARD_DTYPE = np.dtype(np.float32)


class EpisodeTracker:
    """Per-env episode state of a recording, and the checks each batch must pass against it.

    ``check`` looks at a batch without changing anything; ``commit`` then advances the state. All
    state is ``(num_envs,)`` arrays, updated with whole-array operations.
    """

    def __init__(self, spec: Mapping, num_envs: int, max_steps: int):
        self.fields = observation_layout(spec)
        action_shape = spec.get("action_shape")
        if not isinstance(action_shape, list | tuple) or len(action_shape) != 1 or int(action_shape[0]) < 1:
            raise ValueError(f"env.spec['action_shape'] must be [A] with A >= 1, got {action_shape!r}")
        self.action_dim = int(action_shape[0])
        self.num_envs, self.max_steps = num_envs, max_steps
        self.episode = np.full(num_envs, -1, np.int64)  # -1 before the env's first frame
        self.steps = np.zeros(num_envs, np.int64)  # transitions recorded in the current episode
        self.last_time = np.zeros(num_envs, np.float64)  # time of the last frame [s]
        self.ended = np.zeros(num_envs, np.bool_)  # the last transition terminated or truncated
        self.abandoned: list[dict] = []  # episodes given up by a reset, with >= 1 transition
        self.transitions = 0  # transitions recorded

    @property
    def frame_bytes(self) -> int:
        """Bytes of one env's observation frame."""
        return sum(per_env_nbytes(shape, dtype) for shape, dtype in self.fields.values())

    @property
    def transition_bytes(self) -> int:
        """Bytes of one transition: action, reward and the two flags."""
        return self.action_dim * ACTION_DTYPE.itemsize + REWARD_DTYPE.itemsize + 2

    def check(self, observation, result) -> tuple[np.ndarray, ...]:
        """Check a batch against the spec and each env's state; return (active, reward, terminated,
        truncated, action). Raises ValueError naming the rule and the env rows; changes nothing."""
        n = self.num_envs
        if not isinstance(observation, Mapping):
            raise ValueError(f"observation must be a dict of arrays, got {type(observation).__name__}")
        missing = [f for f in self.fields if f not in observation]
        if missing:
            raise ValueError(f"observation lacks field(s) {missing}")
        extra = [f for f in observation if f not in self.fields]
        if extra:
            raise ValueError(f"observation field(s) {extra} are not described by env.spec['observation']")
        for field, (shape, dtype) in self.fields.items():
            _check_array(f"observation[{field!r}]", observation[field], (n, *shape), dtype)
        info = getattr(result, "info", None)
        if not isinstance(info, Mapping) or "active" not in info or "executed_action" not in info:
            raise ValueError("result.info must be a dict with 'active' and 'executed_action'")
        active = _check_array("result.info['active']", info["active"], (n,), np.bool_)
        action = _check_array(
            "result.info['executed_action']", info["executed_action"], (n, self.action_dim), ACTION_DTYPE
        )
        reward = _check_array("result.reward", getattr(result, "reward", None), (n,), REWARD_DTYPE)
        terminated = _check_array("result.terminated", getattr(result, "terminated", None), (n,), np.bool_)
        truncated = _check_array("result.truncated", getattr(result, "truncated", None), (n,), np.bool_)

        env_id = observation["env_id"]
        episode_id = observation["episode_id"]
        step_id = observation["step_id"]
        seen = self.episode >= 0
        inactive = ~active
        _reject(env_id != np.arange(n), "observation['env_id'] must equal arange(N)")
        _reject(terminated & truncated, "a row is both terminated and truncated")
        _reject(
            inactive & ((reward != 0) | terminated | truncated),
            "an inactive (reset) row has nonzero reward or a set flag",
        )
        _reject(inactive & (step_id != 0), "an inactive (reset) row has step_id != 0")
        _reject(inactive & (episode_id < 0), "an inactive (reset) row has a negative episode_id")
        _reject(
            inactive & seen & (episode_id != self.episode + 1),
            "an inactive (reset) row must have episode_id = the env's previous episode_id + 1",
        )
        _reject(active & ~seen, "an active row came before the env's first reset frame")
        _reject(
            active & seen & self.ended,
            "an active row came for an env whose previous transition ended; expected its reset frame",
        )
        known = active & seen & ~self.ended
        _reject(known & (episode_id != self.episode), "an active row changed episode_id")
        _reject(known & (step_id != self.steps + 1), "an active row's step_id is not the previous step_id + 1")
        _reject(
            known & (step_id > self.max_steps),
            f"an active row's step_id exceeds max_steps={self.max_steps} (episodes must truncate there)",
        )
        _reject(known & ~(observation["time"] > self.last_time), "an active row's time does not advance")
        return active, reward, terminated, truncated, action

    def commit(self, observation, active, terminated, truncated) -> np.ndarray:
        """Advance the state by a checked batch; return the env rows whose episode ended in it."""
        for env_id in np.flatnonzero(~active & ~self.ended & (self.steps >= 1)):
            self.abandoned.append(
                {"env_id": int(env_id), "episode_id": int(self.episode[env_id]), "steps": int(self.steps[env_id])}
            )
        self.steps[:] = np.where(active, self.steps + 1, 0)
        self.episode[:] = observation["episode_id"]
        self.last_time[:] = observation["time"]
        self.ended[:] = active & (terminated | truncated)
        self.transitions += int(np.count_nonzero(active))
        return np.flatnonzero(self.ended)

    def incomplete(self) -> list[dict]:
        """Episodes started and not completed: those abandoned by a reset and those still running;
        episodes with no transition yet are left out."""
        running = np.flatnonzero((self.episode >= 0) & ~self.ended & (self.steps >= 1))
        in_progress = [
            {"env_id": int(e), "episode_id": int(self.episode[e]), "steps": int(self.steps[e])} for e in running
        ]
        return self.abandoned + in_progress


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunDescription:
    """What a recorder needs to know of the run it records: plain data, no env object. :func:`describe_run`
    builds one from a :class:`VectorEnv` (or anything with its description attributes)."""

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


def describe_run(env: Any, *, transport: str | None = None) -> RunDescription:
    """The :class:`RunDescription` of ``env`` (its ``config``, ``spec``, ``calibration``, ``task.spec.id``,
    ``task.scene``, ``seed`` and ``step_mode``); a description is returned as it is (with ``transport`` set
    when given)."""
    if isinstance(env, RunDescription):
        return env if transport is None else dataclasses.replace(env, transport=transport)
    return RunDescription(
        spec=env.spec,
        config=env.config.to_dict(),
        task=env.task.spec.id,
        scene=env.task.scene,
        seed=int(env.seed),
        calibration=env.calibration,
        transport=transport or "host_snapshot",
        step_mode=getattr(env, "step_mode", None),
    )


def initial_manifest(run: RunDescription, max_buffer_bytes: int, identity: Mapping[str, Any]) -> dict:
    """run.json of a new run, before its first episode; checked to be writable as JSON. ``identity``: the
    keys that mark the run's format (``RunFormat.identity``: schema_version, layout)."""
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


def observation_layout(spec: Mapping) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """field -> (per-env shape, dtype) from ``spec['observation']``, checked."""
    described = spec.get("observation") if isinstance(spec, Mapping) else None
    if not isinstance(described, Mapping):
        raise ValueError("env.spec must hold 'observation': {field: {'shape': [...], 'dtype': '...'}}")
    layout = {}
    for field, entry in described.items():
        try:
            shape = tuple(int(s) for s in entry["shape"])
            dtype = np.dtype(entry["dtype"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"env.spec['observation'][{field!r}] needs 'shape' and 'dtype': {exc}") from exc
        if dtype.kind not in "biuf":
            raise ValueError(f"observation field {field!r} has non-numeric dtype {dtype}")
        layout[field] = (shape, dtype)
    missing = [f for f in REQUIRED_FIELDS if f not in layout]
    if missing:
        raise ValueError(f"env.spec['observation'] lacks the required field(s) {missing}")
    for field in ID_FIELDS:
        if layout[field][0] != () or layout[field][1].kind not in "iu":
            raise ValueError(f"observation field {field!r} must be a per-env integer scalar")
    if layout["time"][0] != () or len(layout["proprio"][0]) != 1:
        raise ValueError("observation fields 'time' and 'proprio' must have per-env shapes [] and [P]")
    return layout


def _check_array(name: str, array: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(array).__name__}")
    if array.shape != shape or array.dtype != dtype:
        raise ValueError(f"{name} must be {np.dtype(dtype)}{list(shape)}, got {array.dtype}{list(array.shape)}")
    if array.dtype.kind == "f":
        finite = np.isfinite(array).reshape(len(array), -1).all(axis=1)
        _reject(~finite, f"{name} holds non-finite values")
    return array


def _reject(bad_rows: np.ndarray, message: str) -> None:
    if bad_rows.any():
        rows = np.flatnonzero(bad_rows)
        shown = ", ".join(str(r) for r in rows[:10]) + (", ..." if rows.size > 10 else "")
        raise ValueError(f"{message} (env rows {shown})")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic | np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays turned into plain Python values."""
    return json.loads(json.dumps(obj, default=_json_default))


@runtime_checkable
class Recorder(Protocol):
    """What ``collect`` needs of a recorder: :class:`PackedRecorder` (schema 2) and :class:`EpisodeRecorder`
    (schema 1) implement it, on :class:`RecorderBase`. A run format (:class:`formats.RunFormat`) makes its
    recorder."""

    def append(self, observation: Mapping[str, np.ndarray], result: Any) -> None:
        """Record one host batch (field -> [N, ...], and the step's reward, flags and info)."""

    def flush(self) -> None:
        """Block until everything appended is published."""

    def close(self, error: BaseException | None = None) -> None:
        """Publish what is complete, close the manifest (``failed`` with ``error``)."""

    @property
    def directory(self) -> str: ...

    @property
    def completed_episodes(self) -> int: ...

    @property
    def backlog(self) -> int: ...

    @property
    def bytes_written(self) -> int: ...

    @property
    def stall_seconds(self) -> float: ...

    @property
    def incomplete_episodes(self) -> list[dict]: ...


class RecorderBase:
    """The lifecycle both recorders share: the run directory and its manifest, progress counters, a
    write failure that reaches the caller, flush and close. A subclass starts its writer threads after
    ``__init__``, counts what its writers publish (`_add_published`), and says when work is pending (`_busy`),
    how to stop its threads (`_join`) and which ended episodes a failure left unwritten (`_unwritten`)."""

    #: The normalization statistics a subclass feeds in ``append`` (``stats.json`` at close), or None.
    _stats: StatsAccumulator | None = None

    def __init__(self, directory: str | os.PathLike, tracker: EpisodeTracker, manifest: dict):
        self._directory = os.fspath(directory)
        self._tracker = tracker
        self._manifest = manifest
        # Shared with the writers, under one lock: `_cond` wakes `append`, `flush` and `close`; `_work` the
        # writers.
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._work = threading.Condition(lock)
        self._stopping = False
        self._completed = 0
        self._transitions_published = 0
        self._bytes_written = 0
        self._stall_seconds = 0.0
        self._error: BaseException | None = None
        self._error_text = ""
        self._closed = False
        self._manifest_lock = threading.Lock()
        parent = os.path.dirname(os.path.abspath(self._directory))
        os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(self._directory)
        except FileExistsError:
            raise FileExistsError(
                f"run directory {self._directory} already exists; each recording needs a new directory"
            ) from None
        self._reserve = os.path.join(self._directory, MANIFEST_RESERVE)
        try:
            self._write_manifest("recording")
            _preallocate(self._reserve, self._reserve_bytes())
        except OSError as exc:  # nothing was recorded: leave nothing behind
            for name in (self._reserve, os.path.join(self._directory, RUN_MANIFEST)):
                remove_quietly(name)
            with contextlib.suppress(OSError):
                os.rmdir(self._directory)
            raise OSError(exc.errno, f"cannot start a run in {self._directory}: {exc.strerror}") from exc

    # -- what a subclass says -------------------------------------------------------------------

    def _busy(self) -> bool:
        """Whether appended work is not yet published (called under the lock)."""
        raise NotImplementedError

    def _join(self) -> None:
        """Stop the writer threads (``_stopping`` is set and they are woken) and release their files."""
        raise NotImplementedError

    def _unwritten(self) -> list[dict]:
        """Episodes that ended but, after a failure, will never be published."""
        raise NotImplementedError

    def _add_published(self, episodes: int, transitions: int, nbytes: int) -> None:
        """Count what a writer published (the counters run.json and ``collect`` report); the caller holds the
        lock (``with self._cond``)."""
        self._completed += episodes
        self._transitions_published += transitions
        self._bytes_written += nbytes

    # -- progress -------------------------------------------------------------------------------

    @property
    def directory(self) -> str:
        """The run directory."""
        return self._directory

    @property
    def completed_episodes(self) -> int:
        """Episodes published so far."""
        return self._completed

    @property
    def stall_seconds(self) -> float:
        """Total time `append` waited for the writers [s]."""
        return self._stall_seconds

    @property
    def bytes_written(self) -> int:
        """Bytes of episode data written so far."""
        return self._bytes_written

    @property
    def incomplete_episodes(self) -> list[dict]:
        """Episodes started and not completed (``env_id``, ``episode_id``, ``steps``): those abandoned by a
        reset and those still running; episodes with no transition yet are left out."""
        return self._tracker.incomplete()

    # -- flush and close ------------------------------------------------------------------------

    def flush(self) -> None:
        """Wait until everything appended is published; raise RuntimeError after a write failure."""
        with self._cond:
            while self._busy() and self._error is None:
                self._cond.wait()
        self._raise_if_failed()

    def close(self, error: BaseException | None = None) -> None:
        """Publish what was appended, write the final manifest and stop the writers.

        Episodes in progress are listed in the manifest's ``incomplete_episodes``, never published.
        ``error``: the run failed outside the recorder (the policy or the env raised); what was appended
        is still published and the manifest says ``failed`` with that error. Idempotent. Raises
        RuntimeError (once) if a write failed.
        """
        if self._closed:
            return
        self._closed = True
        if error is not None:
            self._manifest["error"] = f"{type(error).__name__}: {error}"
        with self._cond:
            while self._busy() and self._error is None:
                self._cond.wait()
            self._stopping = True
            self._work.notify_all()
        self._join()
        if self._stats is not None:  # before the manifest: a closed run has its statistics
            try:
                self._stats.write(self._directory, "recorded")
            except OSError as exc:
                self._fail(exc, STATS_FILE)
        remove_quietly(self._reserve)  # the writers are done: the final manifest takes the room kept for it
        try:
            self._write_manifest("failed" if self._error is not None or error is not None else "closed")
        except OSError as exc:
            self._record_failure(exc, RUN_MANIFEST)
        self._raise_if_failed()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # an exception is already on its way out; do not replace it with the recorder's
            self.close()
        except RuntimeError:
            pass

    # -- failure --------------------------------------------------------------------------------

    def _fail(self, exc: BaseException, where: str) -> None:
        """Record the first write failure (``where``: what was being written), wake every waiter and try to
        say so in the manifest."""
        if not self._record_failure(exc, where):
            return
        try:
            self._write_manifest("failed")
        except OSError:
            pass  # the disk may be what failed; close() tries again, with the room kept for it

    def _record_failure(self, exc: BaseException, where: str) -> bool:
        """Record ``exc`` if it is the first write failure and wake every waiter; return whether it was."""
        with self._cond:
            if self._error is not None:
                return False
            self._error = exc
            self._error_text = f"writing {where}: {type(exc).__name__}: {exc}"
            self._cond.notify_all()
        return True

    def _failure(self) -> RuntimeError:
        error = RuntimeError(f"recording to {self._directory} failed: {self._error_text}")
        error.__cause__ = self._error
        return error

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._failure()

    def _raise_if_unusable(self) -> None:
        self._raise_if_failed()
        if self._closed:
            raise RuntimeError(f"the recorder of {self._directory} is closed")

    # -- manifest -------------------------------------------------------------------------------

    def _reserve_bytes(self) -> int:
        """The room to keep for the final manifest: the first one twice over (its keys only grow), 96 bytes
        per listed episode (up to 1 incomplete and 2 unwritten per env; an entry takes at most about 90 as
        written) and 64 KiB for the file system's own blocks."""
        first = len(json.dumps(jsonable(self._manifest), indent=2))
        return 2 * first + 3 * 96 * self._tracker.num_envs + (64 << 10)

    def _write_manifest(self, status: str) -> None:
        with self._manifest_lock:
            manifest = dict(self._manifest)
            with self._cond:
                manifest.update(
                    status=status,
                    completed_episodes=self._completed,
                    transitions=self._transitions_published,
                    transitions_recorded=self._tracker.transitions,
                    bytes_written=self._bytes_written,
                    stall_seconds=self._stall_seconds,
                )
                failed = self._error is not None
                if failed:
                    manifest["error"] = self._error_text
            if failed:  # listed up to 2 per env (every one for npz), so that the manifest fits its reserve
                unwritten = self._unwritten()
                manifest["unwritten_episodes"] = unwritten[: 2 * self._tracker.num_envs]
                manifest["unwritten_episode_count"] = len(unwritten)
            if status != "recording":
                manifest["incomplete_episodes"] = self._tracker.incomplete()
            write_json_atomic(os.path.join(self._directory, RUN_MANIFEST), jsonable(manifest))


def _preallocate(path: str, size: int) -> None:
    """Create ``path`` with ``size`` bytes allocated to it (zeros where the file system cannot preallocate)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except (AttributeError, OSError) as exc:  # no posix_fallocate (macOS), or not on this file system
            if getattr(exc, "errno", None) == errno.ENOSPC:
                raise
            view = memoryview(bytes(size))
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
