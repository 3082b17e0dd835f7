"""PackedRecorder: stream host batches, step-major, into a packed run (schema 2, docs/FORMAT.md).

Memory is one ring of whole batches (``max_buffer_bytes``), whatever the episode length: ``append``
checks a batch, copies it into the ring and returns; one writer thread appends the buffered steps to
the current segment as one Arrow record batch and then publishes them, with the episodes that ended in
them, by one line in the commit log. When the ring is full, ``append`` waits (backpressure; the wait
is counted in ``stall_seconds``).

numpy, pyarrow and the standard library: the env is only read as a description.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from forge_gpu._src.episode_format import RUN_MANIFEST, write_json_atomic
from forge_gpu._src.packed import (
    COMPRESSIONS,
    LAYOUT,
    SCHEMA_VERSION,
    PackedWriter,
    arrow_schema,
    ended_episodes,
    run_columns,
)
from forge_gpu._src.tracker import EpisodeTracker, check_int, describe_env, initial_manifest, jsonable

#: Default ring size [bytes].
DEFAULT_BUFFER_BYTES = 256 << 20
#: Default segment size at which a new segment file is started [bytes].
DEFAULT_SEGMENT_BYTES = 1 << 30
#: Default largest block the writer appends at once [bytes]; it bounds how long a finished episode
#: waits to become visible (one block write) as much as how often a commit line is written.
DEFAULT_BLOCK_BYTES = 8 << 20


class PackedRecorder:
    """Records batches of ``num_envs`` env rows into a packed run; every ended episode is published once.

    Args:
        directory: the run directory to create; it must not exist.
        env: the env description: ``config`` (num_envs, max_steps, seed, ``to_dict()``), ``spec``,
            ``calibration``, ``task.spec.id``, ``task.scene`` (a dataclass with ``kind``) and ``seed``.
        max_buffer_bytes: the ring of buffered batches [bytes]; must hold at least 2 batches.
        compression: ``"none"``, ``"lz4"`` or ``"zstd"`` (Arrow IPC buffer compression).
        segment_bytes: a segment file is closed and the next one started once it reaches this size.
        block_bytes: the writer appends at most this many bytes of buffered steps at once (at least one step).
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        env: Any,
        *,
        max_buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        compression: str = "none",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
    ) -> None:
        check_int("max_buffer_bytes", max_buffer_bytes, minimum=1)
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)} (packed), got {compression!r}")
        check_int("segment_bytes", segment_bytes, minimum=1)
        check_int("block_bytes", block_bytes, minimum=1)
        num_envs, max_steps = describe_env(env)
        tracker = EpisodeTracker(env.spec, num_envs, max_steps)
        batch_bytes = num_envs * (tracker.frame_bytes + tracker.transition_bytes)
        capacity = max_buffer_bytes // batch_bytes
        if capacity < 2:
            raise ValueError(
                f"max_buffer_bytes={max_buffer_bytes} is too small: the packed recorder buffers whole batches of "
                f"{num_envs} envs ({batch_bytes} bytes each) and needs room for 2; raise it to at least "
                f"{2 * batch_bytes}"
            )
        self._directory = os.fspath(directory)
        self._tracker = tracker
        self._num_envs = num_envs
        self._capacity = capacity
        self._block_steps = max(1, min(capacity // 2, block_bytes // batch_bytes))
        self._buffer_bytes = capacity * batch_bytes
        self._schema = arrow_schema(run_columns(tracker.fields, tracker.action_dim))
        self._manifest = initial_manifest(env, max_buffer_bytes, SCHEMA_VERSION)
        self._manifest["layout"] = LAYOUT
        self._manifest["recorder"] = {
            "compression": compression,
            "segment_bytes": segment_bytes,
            "block_steps": self._block_steps,
            "buffer_steps": capacity,
            "buffer_bytes": self._buffer_bytes,
        }
        parent = os.path.dirname(os.path.abspath(self._directory))
        os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(self._directory)
        except FileExistsError:
            raise FileExistsError(
                f"run directory {self._directory} already exists; each recording needs a new directory"
            ) from None

        # The ring: step k of the run lives at index k % capacity; np.empty, so untouched pages cost nothing.
        self._ring = {
            f"obs/{name}": np.empty((capacity, num_envs, *shape), dtype)
            for name, (shape, dtype) in tracker.fields.items()
        }
        self._ring["action"] = np.empty((capacity, num_envs, tracker.action_dim), np.float32)
        self._ring["reward"] = np.empty((capacity, num_envs), np.float32)
        self._ring["terminated"] = np.empty((capacity, num_envs), np.bool_)
        self._ring["truncated"] = np.empty((capacity, num_envs), np.bool_)

        # Shared with the writer under one lock: `_cond` wakes `append`, `flush` and `close`; `_work` the writer.
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._work = threading.Condition(lock)
        self._head = 0  # steps appended
        self._tail = 0  # steps written and published
        self._stopping = False
        self._completed = 0
        self._transitions_published = 0
        self._bytes_written = 0
        self._stall_seconds = 0.0
        self._error: BaseException | None = None
        self._error_text = ""
        self._closed = False
        self._manifest_lock = threading.Lock()

        self._write_manifest("recording")
        self._writer = PackedWriter(self._directory, self._schema, compression=compression, segment_bytes=segment_bytes)
        self._thread = threading.Thread(target=self._writer_loop, name="forge-gpu-packed-writer", daemon=True)
        self._thread.start()

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
        """Total time `append` waited for room in the ring [s]."""
        return self._stall_seconds

    @property
    def bytes_written(self) -> int:
        """Bytes appended to the segments so far."""
        return self._bytes_written

    @property
    def backlog(self) -> int:
        """Batches buffered and not yet published."""
        return self._head - self._tail

    @property
    def incomplete_episodes(self) -> list[dict]:
        """Episodes started and not completed (``env_id``, ``episode_id``, ``steps``)."""
        return self._tracker.incomplete()

    @property
    def buffer_bytes(self) -> int:
        """Bytes of the ring."""
        return self._buffer_bytes

    # -- recording ------------------------------------------------------------------------------

    def append(self, observation: Mapping[str, np.ndarray], result: Any) -> None:
        """Record one batch: ``observation`` (field -> [N, ...]) and ``result`` (reward, flags, info).

        The batch is checked whole first; a bad batch raises ValueError and changes nothing. May wait for
        the writer to free room in the ring. Raises RuntimeError after a write failure.
        """
        self._raise_if_unusable()
        tracker = self._tracker
        active, reward, terminated, truncated, action = tracker.check(observation, result)
        with self._cond:
            if self._head - self._tail >= self._capacity:
                start = time.perf_counter()
                while self._head - self._tail >= self._capacity and self._error is None:
                    self._cond.wait()
                self._stall_seconds += time.perf_counter() - start
            if self._error is not None:
                raise self._failure()
            index = self._head % self._capacity
        ring = self._ring
        for field in tracker.fields:
            ring[f"obs/{field}"][index] = observation[field]
        ring["action"][index] = action
        ring["reward"][index] = reward
        ring["terminated"][index] = terminated
        ring["truncated"][index] = truncated
        tracker.commit(observation, active, terminated, truncated)
        with self._cond:
            self._head += 1
            self._work.notify()

    def flush(self) -> None:
        """Wait until every appended batch is published; raise RuntimeError after a write failure."""
        with self._cond:
            while self._tail < self._head and self._error is None:
                self._cond.wait()
        self._raise_if_failed()

    def close(self, error: BaseException | None = None) -> None:
        """Publish what is buffered, write the final manifest and stop the writer.

        Episodes in progress are listed in the manifest's ``incomplete_episodes``, never published.
        ``error``: the run failed outside the recorder; what was appended is still published and the
        manifest says ``failed`` with that error. Idempotent. Raises RuntimeError (once) if a write failed.
        """
        if self._closed:
            return
        self._closed = True
        if error is not None:
            self._manifest["error"] = f"{type(error).__name__}: {error}"
        with self._cond:
            while self._tail < self._head and self._error is None:
                self._cond.wait()
            self._stopping = True
            self._work.notify_all()
        self._thread.join()
        try:
            self._writer.close()
        except BaseException as exc:
            if self._error is None:
                self._error, self._error_text = exc, f"closing the segment: {type(exc).__name__}: {exc}"
        failed = self._error is not None or error is not None
        try:
            self._write_manifest("failed" if failed else "closed")
        except OSError:
            if not failed:
                raise
        self._raise_if_failed()

    def __enter__(self) -> PackedRecorder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # an exception is already on its way out; do not replace it with the recorder's
            self.close()
        except RuntimeError:
            pass

    # -- the writer -----------------------------------------------------------------------------

    def _writer_loop(self) -> None:
        """Append the buffered steps in blocks, each at most `_block_steps` and never across the ring's end."""
        while True:
            with self._cond:
                while self._tail == self._head and not self._stopping:
                    self._work.wait()
                if self._tail == self._head or self._error is not None:
                    return
                first = self._tail
                start = first % self._capacity
                count = min(self._head - first, self._block_steps, self._capacity - start)
            try:
                nbytes, episodes = self._write_block(start, count, first)
            except BaseException as exc:  # every error must reach the caller
                self._fail(exc)
                return
            with self._cond:
                self._tail += count
                self._completed += len(episodes["steps"])
                self._transitions_published += int(episodes["steps"].sum())
                self._bytes_written += nbytes
                self._cond.notify_all()

    def _write_block(self, start: int, count: int, first_step: int) -> tuple[int, dict]:
        columns = {name: ring[start : start + count].reshape(-1, *ring.shape[2:]) for name, ring in self._ring.items()}
        episodes = ended_episodes(columns, first_step * self._num_envs, self._num_envs)
        return self._writer.write(columns, episodes), episodes

    def _unwritten_episodes(self) -> list[dict]:
        """Episodes that ended in batches still in the ring (after a failure they are never published)."""
        out = []
        for step in range(self._tail, self._head):
            index = step % self._capacity
            block = {name: ring[index] for name, ring in self._ring.items()}
            ended = ended_episodes(block, step * self._num_envs, self._num_envs)
            out += [
                {"env_id": int(e), "episode_id": int(k), "steps": int(s)}
                for e, k, s in zip(ended["env_id"], ended["episode_id"], ended["steps"], strict=True)
            ]
        return out

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            if self._error is not None:
                return
            self._error = exc
            self._error_text = f"writing steps {self._tail}..: {type(exc).__name__}: {exc}"
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
            if failed:
                manifest["unwritten_episodes"] = self._unwritten_episodes()
            if status != "recording":
                manifest["incomplete_episodes"] = self._tracker.incomplete()
            write_json_atomic(os.path.join(self._directory, RUN_MANIFEST), jsonable(manifest))
