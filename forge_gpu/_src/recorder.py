"""EpisodeRecorder: append host batches into preallocated per-env episode buffers and publish complete
episodes to a run directory (FORMAT.md) from a pool of writer threads, with bounded memory.

Pure numpy and the standard library: the env is only read as a description (config, spec, calibration,
task, seed), so this module never imports Warp or Newton.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from forge_gpu._src.episode_format import (
    COMPRESSIONS,
    ID_FIELDS,
    REQUIRED_FIELDS,
    RUN_MANIFEST,
    SCHEMA_VERSION,
    episode_stem,
    make_marker,
    per_env_nbytes,
    write_episode_file,
    write_json_atomic,
    write_marker_atomic,
)

#: Distributions whose versions shape the data; recorded in run.json where installed.
RECORDED_PACKAGES = ("numpy", "newton", "warp-lang", "mujoco", "mujoco-warp", "torch", "forge-gpu")

# Action and reward are kept (and written) as float32, the dtype the env produces.
_ACTION_DTYPE = np.dtype(np.float32)
_REWARD_DTYPE = np.dtype(np.float32)


class EpisodeRecorder:
    """Records batches of ``num_envs`` env rows and publishes each completed episode exactly once.

    Memory is preallocated once: ``num_envs + spare_buffers`` episode buffers ("slots"), each with room
    for ``max_steps + 1`` observation frames per field and ``max_steps`` transitions. Every env owns a
    slot; when its episode completes the slot goes to the writers and the env takes a spare at its
    next reset frame. When no spare is free, `append` waits for a writer (backpressure; the wait is
    counted in `stall_seconds`): it never drops data and never grows memory.

    Args:
        directory: the run directory to create; it must not exist.
        env: the env description: ``config`` (num_envs, max_steps, seed, device, ``to_dict()``), ``spec``,
            ``calibration``, ``task.spec.id``, ``task.scene`` (a dataclass with ``kind``) and ``seed``.
        max_buffer_bytes: budget for all episode buffers [bytes]; must hold ``num_envs + 1`` slots.
        writers: number of writer threads.
        compression: ``"none"`` (stored members) or ``"deflate"``.
        compression_level: deflate level, 0-9.
        spare_buffers: number of spare slots; None takes as many as the budget allows, capped at
            ``num_envs``.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        env: Any,
        *,
        max_buffer_bytes: int = 2**30,
        writers: int = 2,
        compression: str = "none",
        compression_level: int = 1,
        spare_buffers: int | None = None,
    ) -> None:
        _check_int("max_buffer_bytes", max_buffer_bytes, minimum=1)
        _check_int("writers", writers, minimum=1)
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, got {compression!r}")
        _check_int("compression_level", compression_level, minimum=0, maximum=9)
        if spare_buffers is not None:
            _check_int("spare_buffers", spare_buffers, minimum=1)

        num_envs = int(env.config.num_envs)
        max_steps = int(env.config.max_steps)
        if num_envs < 1 or max_steps < 1:
            raise ValueError(f"env.config needs num_envs >= 1 and max_steps >= 1, got {num_envs}, {max_steps}")
        self._fields = _observation_layout(env.spec)
        action_shape = env.spec.get("action_shape")
        if not isinstance(action_shape, list | tuple) or len(action_shape) != 1 or int(action_shape[0]) < 1:
            raise ValueError(f"env.spec['action_shape'] must be [A] with A >= 1, got {action_shape!r}")
        action_dim = int(action_shape[0])

        frame_bytes = sum(per_env_nbytes(shape, dtype) for shape, dtype in self._fields.values())
        transition_bytes = action_dim * _ACTION_DTYPE.itemsize + _REWARD_DTYPE.itemsize + 2
        slot_bytes = (max_steps + 1) * frame_bytes + max_steps * transition_bytes
        needed = (num_envs + 1) * slot_bytes
        if max_buffer_bytes < needed:
            raise ValueError(
                f"max_buffer_bytes={max_buffer_bytes} is too small: {num_envs} envs of max_steps={max_steps} "
                f"plus 1 spare need {needed} bytes ({num_envs + 1} episode buffers of {slot_bytes} bytes); "
                f"raise max_buffer_bytes to at least {needed} or record fewer envs or steps"
            )
        if spare_buffers is None:
            spare_buffers = min(num_envs, max_buffer_bytes // slot_bytes - num_envs)
        elif (num_envs + spare_buffers) * slot_bytes > max_buffer_bytes:
            raise ValueError(
                f"spare_buffers={spare_buffers} does not fit max_buffer_bytes={max_buffer_bytes}: "
                f"{num_envs + spare_buffers} episode buffers need {(num_envs + spare_buffers) * slot_bytes} bytes"
            )
        slot_count = num_envs + spare_buffers

        self._directory = os.fspath(directory)
        self._num_envs = num_envs
        self._max_steps = max_steps
        self._action_dim = action_dim
        self._compression = compression
        self._compression_level = compression_level
        self._spare_buffers = spare_buffers
        self._buffer_bytes = slot_count * slot_bytes
        self._manifest = _initial_manifest(env, max_buffer_bytes)
        self._manifest["recorder"] = {
            "writers": writers,
            "compression": compression,
            "compression_level": compression_level,
            "spare_buffers": spare_buffers,
            "buffer_bytes": self._buffer_bytes,
        }
        try:
            json.dumps(self._manifest, default=_json_default)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the env description cannot be written to run.json: {exc}") from exc

        parent = os.path.dirname(os.path.abspath(self._directory))
        os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(self._directory)
        except FileExistsError:
            raise FileExistsError(
                f"run directory {self._directory} already exists; each recording needs a new directory"
            ) from None

        # Episode buffers, one row per slot; np.empty so untouched pages cost no memory.
        self._frames = {
            field: np.empty((slot_count, max_steps + 1, *shape), dtype)
            for field, (shape, dtype) in self._fields.items()
        }
        self._action = np.empty((slot_count, max_steps, action_dim), _ACTION_DTYPE)
        self._reward = np.empty((slot_count, max_steps), _REWARD_DTYPE)
        self._terminated = np.empty((slot_count, max_steps), np.bool_)
        self._truncated = np.empty((slot_count, max_steps), np.bool_)

        # Per-env state, shape (num_envs,); touched only by the appending thread.
        self._slot = np.arange(num_envs, dtype=np.int64)  # -1 once the slot went to the writers
        self._episode = np.full(num_envs, -1, np.int64)  # -1 before the env's first frame
        self._steps = np.zeros(num_envs, np.int64)  # transitions recorded in the current episode
        self._last_time = np.zeros(num_envs, np.float64)  # time of the last frame [s]
        self._ended = np.zeros(num_envs, np.bool_)  # the last transition terminated or truncated
        self._abandoned: list[dict] = []  # episodes given up by a reset, with >= 1 transition
        self._transitions_recorded = 0

        # Shared with the writers, under one lock: `_cond` wakes `append`, `flush` and `close`, `_work`
        # wakes the writers.
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._work = threading.Condition(lock)
        self._todo: deque[tuple[int, int, int, int]] = deque()  # (slot, env_id, episode_id, steps)
        self._stopping = False
        self._free_slots = list(range(num_envs, slot_count))
        self._pending = 0
        self._wanted = 0  # free slots `append` waits for (0: not waiting); writers wake it only then
        self._completed = 0
        self._transitions_published = 0
        self._bytes_written = 0
        self._stall_seconds = 0.0
        self._unwritten: list[dict] = []  # completed episodes dropped after a write failure
        self._error: BaseException | None = None
        self._error_text = ""
        self._closed = False
        self._manifest_lock = threading.Lock()

        self._write_manifest("recording")
        self._threads = [
            threading.Thread(target=self._writer_loop, name=f"forge-gpu-writer-{i}", daemon=True)
            for i in range(writers)
        ]
        for thread in self._threads:
            thread.start()

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
        """Total time `append` waited for a free episode buffer [s]."""
        return self._stall_seconds

    @property
    def bytes_written(self) -> int:
        """Bytes of the episode files published so far."""
        return self._bytes_written

    @property
    def backlog(self) -> int:
        """Completed episodes handed to the writers and not yet published."""
        return self._pending

    @property
    def incomplete_episodes(self) -> list[dict]:
        """Episodes started and not completed (``env_id``, ``episode_id``, ``steps``): those abandoned by a
        reset and those still running; episodes with no transition yet are left out."""
        return self._incomplete_episodes()

    @property
    def spare_buffers(self) -> int:
        """Number of spare episode buffers."""
        return self._spare_buffers

    @property
    def buffer_bytes(self) -> int:
        """Bytes reserved for all episode buffers."""
        return self._buffer_bytes

    # -- recording ------------------------------------------------------------------------------

    def append(self, observation: Mapping[str, np.ndarray], result: Any) -> None:
        """Record one batch: ``observation`` (field -> [N, ...]) and ``result`` (reward, flags, info).

        The batch is checked whole first; a bad batch raises ValueError and changes nothing. May wait
        for a writer to free an episode buffer. Raises RuntimeError after a write failure.
        """
        self._raise_if_unusable()
        active, reward, terminated, truncated, action = self._check_batch(observation, result)

        needs_slot = np.flatnonzero(~active & (self._slot < 0))
        new_slots = self._take_free_slots(needs_slot.size) if needs_slot.size else None

        # Nothing below can fail on bad input: commit.
        inactive = ~active
        for env_id in np.flatnonzero(inactive & ~self._ended & (self._steps >= 1)):
            self._abandoned.append(
                {
                    "env_id": int(env_id),
                    "episode_id": int(self._episode[env_id]),
                    "steps": int(self._steps[env_id]),
                }
            )
        if new_slots is not None:
            self._slot[needs_slot] = new_slots
        slot = self._slot
        frame = np.where(active, self._steps + 1, 0)  # this row's frame index within its episode
        for field, buffer in self._frames.items():
            buffer[slot, frame] = observation[field]
        rows = np.flatnonzero(active)
        if rows.size:
            at = (slot[rows], frame[rows] - 1)
            self._action[at] = action[rows]
            self._reward[at] = reward[rows]
            self._terminated[at] = terminated[rows]
            self._truncated[at] = truncated[rows]
        self._steps[:] = frame
        self._episode[:] = observation["episode_id"]
        self._last_time[:] = observation["time"]
        self._ended[:] = active & (terminated | truncated)
        self._transitions_recorded += rows.size

        ended = np.flatnonzero(self._ended)
        if ended.size:
            columns = (slot[ended], ended, self._episode[ended], self._steps[ended])
            episodes = zip(*(a.tolist() for a in columns), strict=True)
            slot[ended] = -1
            with self._cond:
                self._todo.extend(episodes)
                self._pending += ended.size
                self._work.notify(ended.size)

    def flush(self) -> None:
        """Wait until every completed episode is published; raise RuntimeError after a write failure."""
        with self._cond:
            while self._pending and self._error is None:
                self._cond.wait()
        self._raise_if_failed()

    def close(self, error: BaseException | None = None) -> None:
        """Publish the remaining completed episodes, write the final manifest and stop the writers.

        Episodes still in progress are listed in the manifest's ``incomplete_episodes``, never published.
        ``error``: the run failed outside the recorder (the policy or the env raised); the completed
        episodes are still published and the manifest says ``failed`` with that error.
        Idempotent. Raises RuntimeError (once) if a write failed.
        """
        if self._closed:
            return
        self._closed = True
        if error is not None:
            self._manifest["error"] = f"{type(error).__name__}: {error}"
        with self._cond:
            while self._pending and self._error is None:
                self._cond.wait()
        with self._cond:
            self._stopping = True
            self._work.notify_all()
        for thread in self._threads:
            thread.join()
        failed = self._error is not None or error is not None
        try:
            self._write_manifest("failed" if failed else "closed")
        except OSError:
            if not failed:
                raise
        self._raise_if_failed()

    def __enter__(self) -> EpisodeRecorder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        # An exception is already on its way out; do not replace it with the recorder's.
        try:
            self.close()
        except RuntimeError:
            pass

    # -- checks ---------------------------------------------------------------------------------

    def _check_batch(self, observation, result):
        """Check a batch against the spec and each env's state; return the transition arrays."""
        n = self._num_envs
        if not isinstance(observation, Mapping):
            raise ValueError(f"observation must be a dict of arrays, got {type(observation).__name__}")
        missing = [f for f in self._fields if f not in observation]
        if missing:
            raise ValueError(f"observation lacks field(s) {missing}")
        extra = [f for f in observation if f not in self._fields]
        if extra:
            raise ValueError(f"observation field(s) {extra} are not described by env.spec['observation']")
        for field, (shape, dtype) in self._fields.items():
            _check_array(f"observation[{field!r}]", observation[field], (n, *shape), dtype)
        info = getattr(result, "info", None)
        if not isinstance(info, Mapping) or "active" not in info or "executed_action" not in info:
            raise ValueError("result.info must be a dict with 'active' and 'executed_action'")
        active = _check_array("result.info['active']", info["active"], (n,), np.bool_)
        action = _check_array(
            "result.info['executed_action']", info["executed_action"], (n, self._action_dim), _ACTION_DTYPE
        )
        reward = _check_array("result.reward", getattr(result, "reward", None), (n,), _REWARD_DTYPE)
        terminated = _check_array("result.terminated", getattr(result, "terminated", None), (n,), np.bool_)
        truncated = _check_array("result.truncated", getattr(result, "truncated", None), (n,), np.bool_)

        env_id = observation["env_id"]
        episode_id = observation["episode_id"]
        step_id = observation["step_id"]
        seen = self._episode >= 0
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
            inactive & seen & (episode_id != self._episode + 1),
            "an inactive (reset) row must have episode_id = the env's previous episode_id + 1",
        )
        _reject(active & ~seen, "an active row came before the env's first reset frame")
        _reject(
            active & seen & self._ended,
            "an active row came for an env whose previous transition ended; expected its reset frame",
        )
        known = active & seen & ~self._ended
        _reject(known & (episode_id != self._episode), "an active row changed episode_id")
        _reject(known & (step_id != self._steps + 1), "an active row's step_id is not the previous step_id + 1")
        _reject(
            known & (step_id > self._max_steps),
            f"an active row's step_id exceeds max_steps={self._max_steps} (episodes must truncate there)",
        )
        _reject(known & ~(observation["time"] > self._last_time), "an active row's time does not advance")
        return active, reward, terminated, truncated, action

    # -- slots and writers ----------------------------------------------------------------------

    def _take_free_slots(self, count: int) -> list[int]:
        with self._cond:
            if len(self._free_slots) < count:
                start = time.perf_counter()
                self._wanted = count
                try:
                    while len(self._free_slots) < count and self._error is None:
                        self._cond.wait()
                finally:
                    self._wanted = 0
                    self._stall_seconds += time.perf_counter() - start
            if self._error is not None:
                raise self._failure()
            taken = self._free_slots[-count:]
            del self._free_slots[-count:]
        return taken

    def _writer_loop(self) -> None:
        """Take episodes in order and publish them; one lock round per episode (finish one, take the next)."""
        done = None  # the episode just handled and its file's size (None: not published)
        while True:
            with self._cond:
                if done is not None:
                    self._finish(*done)
                while not self._todo and not self._stopping:
                    self._work.wait()
                if not self._todo:  # stopping, and every episode is handled
                    return
                slot, env_id, episode_id, steps = self._todo.popleft()
                failed = self._error is not None  # after a failure, nothing more is published
            nbytes = None
            if not failed:
                try:
                    nbytes = self._publish(slot, env_id, episode_id, steps)
                except BaseException as exc:  # every error must reach the caller
                    self._fail(exc, episode_stem(env_id, episode_id))
            done = (slot, env_id, episode_id, steps, nbytes)

    def _finish(self, slot: int, env_id: int, episode_id: int, steps: int, nbytes: int | None) -> None:
        """Account for a handled episode and free its slot; the caller holds the lock."""
        if nbytes is None:
            self._unwritten.append({"env_id": env_id, "episode_id": episode_id, "steps": steps})
        else:
            self._completed += 1
            self._transitions_published += steps
            self._bytes_written += nbytes
        self._pending -= 1
        self._free_slots.append(slot)
        if self._pending == 0 or 0 < self._wanted <= len(self._free_slots):
            self._cond.notify_all()

    def _publish(self, slot: int, env_id: int, episode_id: int, steps: int) -> int:
        base = os.path.join(self._directory, episode_stem(env_id, episode_id))
        try:
            nbytes = write_episode_file(
                base + ".npz",
                {field: buffer[slot, : steps + 1] for field, buffer in self._frames.items()},
                self._action[slot, :steps],
                self._reward[slot, :steps],
                self._terminated[slot, :steps],
                self._truncated[slot, :steps],
                compression=self._compression,
                compression_level=self._compression_level,
            )
        except BaseException:
            _remove_quietly(base + ".npz.tmp")
            raise
        try:
            write_marker_atomic(base + ".json", make_marker(env_id, episode_id, steps))
        except BaseException:
            _remove_quietly(base + ".npz")  # an unmarked file is invisible anyway; do not leave it behind
            raise
        return nbytes

    def _fail(self, exc: BaseException, stem: str) -> None:
        with self._cond:
            if self._error is not None:
                return
            self._error = exc
            self._error_text = f"writing {stem}: {type(exc).__name__}: {exc}"
            self._cond.notify_all()
        try:
            self._write_manifest("failed")
        except OSError:
            pass  # the disk may be what failed; close() tries again and the caller gets the error

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

    def _incomplete_episodes(self) -> list[dict]:
        running = np.flatnonzero((self._episode >= 0) & ~self._ended & (self._steps >= 1))
        in_progress = [
            {"env_id": int(e), "episode_id": int(self._episode[e]), "steps": int(self._steps[e])} for e in running
        ]
        return self._abandoned + in_progress

    def _write_manifest(self, status: str) -> None:
        with self._manifest_lock:
            manifest = dict(self._manifest)
            with self._cond:
                manifest.update(
                    status=status,
                    completed_episodes=self._completed,
                    transitions=self._transitions_published,
                    transitions_recorded=self._transitions_recorded,
                    bytes_written=self._bytes_written,
                    stall_seconds=self._stall_seconds,
                )
                if self._error is not None:
                    manifest["error"] = self._error_text
                    manifest["unwritten_episodes"] = list(self._unwritten)
            if status != "recording":
                manifest["incomplete_episodes"] = self._incomplete_episodes()
            write_json_atomic(os.path.join(self._directory, RUN_MANIFEST), _jsonable(manifest))


def _initial_manifest(env: Any, max_buffer_bytes: int) -> dict:
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
    scene = env.task.scene
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "config": env.config.to_dict(),
        "env_spec": env.spec,
        "calibration": env.calibration,
        "python": platform.python_version(),
        "packages": packages,
        "dependency_sources": sources,
        "status": "recording",
        "completed_episodes": 0,
        "transport": "host_snapshot",
        "scene": f"{scene.kind}:v1",
        "scene_spec": dataclasses.asdict(scene),
        "task": env.task.spec.id,
        "seed": int(env.seed),
        "max_buffer_bytes": max_buffer_bytes,
        "incomplete_episodes": [],
    }


def _observation_layout(spec: Mapping) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
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


def _check_int(name: str, value: Any, *, minimum: int, maximum: int | None = None) -> None:
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    if (
        not isinstance(value, int | np.integer)
        or isinstance(value, bool)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic | np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays turned into plain Python values."""
    return json.loads(json.dumps(obj, default=_json_default))


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
