"""PackedRecorder: stream host batches, step-major, into a packed run (schema 2, docs/FORMAT.md).

Memory is one ring of whole batches (``max_buffer_bytes``), whatever the episode length: ``append``
checks a batch, copies it into the ring and returns; one writer thread appends the buffered steps to
the current segment as one Arrow record batch (:class:`~forge_gpu._src.formats.packed.write.PackedWriter`) and then
publishes them, with the episodes that ended in them, by one line in the commit log. Everything per block is the
writer's, whole-column (the encode, the statistics, the episodes that end, the checksum): nothing runs per row or per
episode in Python on either side. When the ring is full, ``append`` waits (backpressure; the wait is counted in
``stall_seconds``). Each episode's instruction is made from its params as its block is written (layout 4:
``episodes.instruction``). The statistics are :class:`recording.stats.BlockStatistics`, fed each block's values as
its encoder gave them (:func:`core.codecs.encode_frames` with ``values``; a producer that hands encoded frames hands
their values with them, or, a device encoder whose frames stay on the device, each frame's byte histogram counted
before it encoded them: ``EncodedFrames.counts``): nothing decodes a payload to count it, but, at close, the rows of
the episodes never published, read back from the segments (not those of counted fields: ``BlockStatistics``
follows each env's episode's counts and takes them out itself).

numpy, pyarrow and the standard library: the env is only read as a description.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.codecs import (
    CodecSpec,
    EncodedFrames,
    encode_frames,
    field_codecs,
    frame_values,
    stored_values,
)
from forge_gpu._src.core.instructions import INSTRUCTION
from forge_gpu._src.core.manifest import RunDescription, check_description, initial_manifest
from forge_gpu._src.formats.packed.commits import PARAMS_PREFIX, FactorizedInstructions
from forge_gpu._src.formats.packed.identity import COMPRESSIONS, IDENTITY, LAYOUT_VERSION
from forge_gpu._src.formats.packed.layout import arrow_schema, run_columns
from forge_gpu._src.formats.packed.write import PackedWriter, ended_episodes
from forge_gpu._src.recording.base import RecorderBase
from forge_gpu._src.recording.stats import BlockStatistics, count_rows
from forge_gpu._src.recording.tracker import EpisodeTracker, result_groups

#: Default ring size [bytes].
DEFAULT_BUFFER_BYTES = 256 << 20
#: Default segment size at which a new segment file is started [bytes].
DEFAULT_SEGMENT_BYTES = 1 << 30
#: Default largest block the writer appends at once [bytes]; it bounds how long a finished episode
#: waits to become visible (one block write) as much as how often a commit line is written.
DEFAULT_BLOCK_BYTES = 8 << 20
#: How long the writer lets buffered steps wait for more to fill a block [s]: it writes once a block is full,
#: the first buffered step has waited this long, the ring's end is reached, or ``flush``/``close`` ask. A block's
#: cost is mostly per block (the Arrow batch, the commit line, the checksum call), so gathering the steps of a fast
#: producer costs a finished episode at most this much more wait before it is visible.
BLOCK_WAIT_SECONDS = 0.1


class PackedRecorder(RecorderBase):
    """Records batches of ``num_envs`` env rows into a packed run; every ended episode is published once.

    Args:
        directory: the run directory to create; it must not exist.
        run: the run's :class:`RunDescription` (``forge_gpu.sim.describe_run(env)`` describes an env).
        max_buffer_bytes: the ring of buffered batches [bytes]; must hold at least 2 batches.
        compression: ``"none"``, ``"lz4"`` or ``"zstd"`` (Arrow IPC buffer compression).
        segment_bytes: a segment file is closed and the next one started once it reaches this size.
        block_bytes: the writer appends at most this many bytes of buffered steps at once (at least one step).
        statistics: compute normalization statistics of the published episodes and write them as ``stats.json``
            at close (forge_gpu/_src/recording/stats.py): every block counted as it is written, the rows of the
            episodes never published subtracted at close.
        durability: ``process`` (page cache: a published episode survives a killed process) or ``machine``
            (each block synced before its commit line, the log after it: it survives a machine crash).
        codecs: image field -> :class:`CodecSpec` (``*``: every image field not named; ``none``: raw); an image
            field named nowhere gets :func:`core.codecs.default_codec` (docs/FORMAT.md "Encoded fields").
        encode_threads: the writer's pool of threads that encode a block's frames (the codecs let go of the GIL).

    For an encoded field ``append`` takes either the raw ``[N, ...]`` frames (the writer pool encodes them) or an
    :class:`EncodedFrames` of N frames of the field's codec, encoded by the producer (the GPU path), stored as
    they are.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        run: RunDescription,
        *,
        max_buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        compression: str = "none",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        statistics: bool = True,
        durability: str = "process",
        codecs: Mapping[str, CodecSpec] | None = None,
        encode_threads: int = 2,
    ) -> None:
        check_int("max_buffer_bytes", max_buffer_bytes, minimum=1)
        if durability not in ("process", "machine"):
            raise ValueError(f"durability must be 'process' or 'machine', got {durability!r}")
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)} (packed), got {compression!r}")
        check_int("segment_bytes", segment_bytes, minimum=1)
        check_int("block_bytes", block_bytes, minimum=1)
        check_int("encode_threads", encode_threads, minimum=1)
        run = check_description(run)
        num_envs, max_steps = run.num_envs, run.max_steps
        tracker = EpisodeTracker(run.spec, num_envs, max_steps)
        asked = {k: v if isinstance(v, CodecSpec) else CodecSpec.parse(v) for k, v in (codecs or {}).items()}
        self._codecs = field_codecs(tracker.fields, asked)  # checked before anything is created
        batch_bytes = num_envs * (tracker.frame_bytes + tracker.state_bytes + tracker.transition_bytes)
        capacity = _ring_steps(max_buffer_bytes, batch_bytes, num_envs)
        self._num_envs = num_envs
        self._capacity = capacity
        self._block_steps = max(1, min(capacity // 2, block_bytes // batch_bytes))
        self._buffer_bytes = capacity * batch_bytes
        manifest = initial_manifest(run, max_buffer_bytes, {**IDENTITY, "layout_version": LAYOUT_VERSION})
        manifest["recorder"] = {
            "compression": compression,
            "durability": durability,
            "segment_bytes": segment_bytes,
            "block_steps": self._block_steps,
            "buffer_steps": capacity,
            "buffer_bytes": self._buffer_bytes,
        }
        if self._codecs:
            manifest["recorder"]["encode_threads"] = encode_threads
        manifest["codecs"] = {f"obs/{f}": spec.to_json() for f, spec in self._codecs.items()}

        self._ring = _allocate_ring(tracker, capacity)
        self._head = 0  # steps appended
        self._statistics = BlockStatistics(tracker.fields, tracker.action_dim, num_envs) if statistics else None
        self._stats = self._statistics.accumulator if statistics else None  # what the base writes at close
        self._counted = 0  # steps the statistics counted (the writer's)
        self._counted_fields: set[str] | None = None  # the encoded fields handed with counts (the first batch's)
        self._tail = 0  # steps written and published (both under the base's lock)
        # The step held by the ring's first slot: step k lives in slot (k - origin) % capacity. ``append`` moves it
        # to the next step whenever the ring is empty, so a writer that keeps up reuses the ring's first slots,
        # whose pages are already mapped, instead of touching fresh memory every step (a first touch costs the
        # stepping side a page fault per 4 KiB; bench/packed.py's pipeline).
        self._origin = 0
        self._wake_at = 1  # buffered steps at which ``append`` wakes the writer (set by the writer as it waits)
        # The batches a producer handed encoded, by field and ring slot (None where the slot holds raw frames).
        self._encoded: dict[str, list] = {f: [None] * capacity for f in self._codecs}
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(encode_threads, thread_name_prefix="forge-gpu-encode")
            if self._codecs
            else None
        )

        super().__init__(directory, tracker, manifest, durable=durability == "machine")
        columns = run_columns(tracker.fields, tracker.action_dim, state=tracker.state)
        schema = arrow_schema(columns, {f"obs/{f}": spec for f, spec in self._codecs.items()})
        self._writer = PackedWriter(
            self._directory, schema, compression=compression, segment_bytes=segment_bytes, durability=durability
        )
        self._thread = threading.Thread(target=self._writer_loop, name="forge-gpu-packed-writer", daemon=True)
        self._thread.start()

    # -- progress -------------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        """Batches buffered and not yet published."""
        return self._head - self._tail

    @property
    def buffer_bytes(self) -> int:
        """Bytes of the ring."""
        return self._buffer_bytes

    # -- recording ------------------------------------------------------------------------------

    def append(self, observation: Mapping[str, np.ndarray], result: Any) -> None:
        """Record one batch: ``observation`` (field -> [N, ...]) and ``result`` (reward, flags, info, and the
        ``state`` and ``params`` the spec describes).

        The batch is checked whole first; a bad batch raises ValueError and changes nothing. May wait for
        the writer to free room in the ring. Raises RuntimeError after a write failure.
        """
        self._raise_if_unusable()
        tracker = self._tracker
        active, reward, terminated, truncated, action = tracker.check(observation, result, encoded=self._codecs)
        handed = {f for f in self._codecs if isinstance(observation.get(f), EncodedFrames)}
        self._check_counted(observation, handed)
        groups = result_groups(result)
        with self._cond:
            if self._head - self._tail >= self._capacity:
                start = time.perf_counter()
                while self._head - self._tail >= self._capacity and self._error is None:
                    self._cond.wait()
                self._stall_seconds += time.perf_counter() - start
            if self._error is not None:
                raise self._failure()
            if self._head == self._tail:  # nothing buffered, nothing being written: start again at slot 0
                self._origin = self._head
            index = self._slot(self._head)
        ring = self._ring
        for field in tracker.fields:
            if field in handed:
                self._encoded[field][index] = observation[field]
            else:
                ring[f"obs/{field}"][index] = observation[field]
                if field in self._encoded:
                    self._encoded[field][index] = None
        for group in ("state", "params"):
            for name, values in groups[group].items():
                ring[f"{group}/{name}"][index] = values
        ring["action"][index] = action
        ring["reward"][index] = reward
        ring["terminated"][index] = terminated
        ring["truncated"][index] = truncated
        tracker.commit(observation, active, terminated, truncated, groups["params"])
        with self._cond:
            self._head += 1
            if self._head - self._tail >= self._wake_at:  # else the writer is waiting for more, with a timeout
                self._work.notify()

    def _check_counted(self, observation: Mapping, handed: set[str]) -> None:
        """A field's frames come counted (with ``EncodedFrames.counts``) in every batch or in none: its first batch
        decides, since its statistics then follow each env's episode from those counts (``BlockStatistics``)."""
        if self._statistics is None:
            return
        counted = {f for f in handed if observation[f].counts is not None}
        if self._head == 0 and self._counted_fields is None:
            self._counted_fields = counted
        if counted != self._counted_fields:
            field = sorted(counted ^ self._counted_fields)[0]
            had = "with" if field in self._counted_fields else "without"
            raise ValueError(
                f"observation[{field!r}]: the run's first batch handed its frames {had} counts; a producer hands "
                "a field's counts in every batch or in none"
            )

    # -- the writer -----------------------------------------------------------------------------

    def _writer_loop(self) -> None:
        """Append the buffered steps in blocks, each at most `_block_steps` and never across the ring's end."""
        while True:
            with self._cond:
                self._wait_for_block()
                if self._tail == self._head or self._error is not None:
                    return
                first = self._tail
                start = self._slot(first)
                count = min(self._head - first, self._block_steps, self._capacity - start)
            try:
                nbytes, episodes = self._write_block(start, count, first)
            except BaseException as exc:  # every error must reach the caller
                self._fail(exc, f"steps {first}..{first + count - 1}")
                return
            with self._cond:
                self._tail += count
                self._add_published(len(episodes["steps"]), int(episodes["steps"].sum()), nbytes)
                self._cond.notify_all()

    def _slot(self, step: int) -> int:
        """The ring slot of a buffered step (under the lock)."""
        return (step - self._origin) % self._capacity

    def _wait_for_block(self) -> None:
        """Wait (under the lock) until a block is worth writing (:data:`BLOCK_WAIT_SECONDS`) or the writer stops.
        A full ring is a full block (it holds at least two), so ``append``'s backpressure never waits on this."""
        since = None
        while not self._stopping:
            pending = self._head - self._tail
            full = min(self._block_steps, self._capacity - self._slot(self._tail))
            if pending and (self._draining or pending >= full):
                return
            if not pending:
                since = None
                self._wake_at = 1
                self._work.wait()
                continue
            now = time.monotonic()
            since = now if since is None else since
            if now - since >= BLOCK_WAIT_SECONDS:
                return
            self._wake_at = full
            self._work.wait(since + BLOCK_WAIT_SECONDS - now)

    def _write_block(self, start: int, count: int, first_step: int) -> tuple[int, dict]:
        columns = {name: ring[start : start + count].reshape(-1, *ring.shape[2:]) for name, ring in self._ring.items()}
        encoded = {f"obs/{field}": self._encode(field, spec, start, count) for field, spec in self._codecs.items()}
        if self._statistics is not None:  # the block's rows, whole-column, an encoded field's as a reader decodes them
            counted = {f"obs/{f}" for f in self._counted_fields or ()}  # or its counts, taken before it was encoded
            values = {column: frames.values for column, frames in encoded.items() if column not in counted}
            counts = {column: encoded[column].counts for column in counted}
            self._statistics.count_block({**columns, **values}, count, counts)
            self._counted = first_step + count
        columns.update(encoded)
        episodes = ended_episodes(columns, first_step * self._num_envs, self._num_envs)
        count, tracker = len(episodes["steps"]), self._tracker
        if tracker.template is None:  # every episode has the run's instruction
            episodes[INSTRUCTION] = FactorizedInstructions([tracker.instruction][:count], np.zeros(count, np.int64))
        else:  # each episode's, from its params
            params = {k[len(PARAMS_PREFIX) :]: v for k, v in episodes.items() if k.startswith(PARAMS_PREFIX)}
            episodes[INSTRUCTION] = np.array(tracker.instructions(params, count), dtype=object).reshape(-1)
        nbytes = self._writer.write(columns, episodes)
        if self._statistics is not None:
            self._statistics.published()
        return nbytes, episodes

    def _encode(self, field: str, spec: CodecSpec, start: int, count: int) -> EncodedFrames:
        """Ring slots ``[start, start + count)`` of an encoded field as one :class:`EncodedFrames`: runs of slots
        holding raw frames encoded in the pool, slots the producer handed encoded taken as they are. With statistics,
        with their ``values`` (what a reader decodes) as the encoders gave them."""
        handed, ring, parts = self._encoded[field], self._ring[f"obs/{field}"], []
        counted = self._statistics is not None
        k = start
        while k < start + count:
            if handed[k] is not None:
                counted_here = counted and field not in (self._counted_fields or ())
                parts.append(self._with_values(field, handed[k]) if counted_here else handed[k])
                k += 1
                continue
            end = k
            while end < start + count and handed[end] is None:
                end += 1
            frames = ring[k:end].reshape(-1, *ring.shape[2:])
            parts.append(encode_frames(spec, frames, pool=self._pool, values=counted))
            k = end
        return EncodedFrames.concatenate(parts)

    def _with_values(self, field: str, frames: EncodedFrames) -> EncodedFrames:
        """Frames a producer handed encoded, with their values: those it handed with them (counted before they were
        encoded), else (a producer that handed the payloads alone, neither values nor counts) their payloads
        decoded."""
        if frames.values is not None:
            return frames
        return dataclasses.replace(frames, values=frame_values(frames, *self._tracker.fields[field], pool=self._pool))

    def _ring_values(self, field: str, slot: int) -> np.ndarray:
        """A ring slot's frames of an observation field as a reader decodes them (:func:`core.codecs.stored_values`),
        ``[N, ...]``."""
        spec, frames = self._codecs.get(field), self._ring[f"obs/{field}"][slot]
        if spec is None:
            return frames
        handed = self._encoded[field][slot]
        if handed is not None:
            return self._with_values(field, handed).values
        return stored_values(spec, frames, pool=self._pool)

    def _unwritten(self) -> list[dict]:
        """Episodes that ended in batches still in the ring (after a failure they are never published)."""
        out = []
        for step in range(self._tail, self._head):
            index = self._slot(step)
            block = {name: ring[index] for name, ring in self._ring.items()}
            ended = ended_episodes(block, step * self._num_envs, self._num_envs)
            out += [
                {"env_id": int(e), "episode_id": int(k), "steps": int(s)}
                for e, k, s in zip(ended["env_id"], ended["episode_id"], ended["steps"], strict=True)
            ]
        return out

    # -- what the base asks -------------------------------------------------------------------

    def _busy(self) -> bool:
        return self._tail < self._head

    def _join(self) -> None:
        self._thread.join()
        try:
            try:
                self._writer.close()
            except BaseException as exc:
                self._fail(exc, "the end of the segment")
            if self._stats is not None:  # after a write failure too: the committed episodes are published
                try:
                    self._subtract_unpublished()  # reads back the unpublished rows, decoded over the pool
                except BaseException as exc:  # every error must reach the caller
                    self._fail(exc, "the statistics of the published episodes")
        finally:
            if self._pool is not None:
                self._pool.shutdown()

    def _subtract_unpublished(self) -> None:
        """Take the rows of the episodes never published out of the statistics, once the segments are closed: every
        counted row that no published episode holds (the episode each env still ran when the run stopped, those
        lost to a write failure, those a reset abandoned), read back from the segments for just those rows, or from
        the ring for a block counted but never committed. Then ``stats.json`` equals what ``forge-gpu stats``
        computes from the run."""
        from forge_gpu._src.formats.packed.read import PackedRun, read_blocks

        run, n, counted = PackedRun(self._directory, self._manifest), self._num_envs, self._counted
        committed = run.rows // n  # steps published
        if committed >= counted:  # a block whose write failed after its commit line: published all the same
            self._statistics.published()
        # The published episodes as sorted, disjoint intervals of keys env * counted + step.
        episodes = run.episodes
        first = episodes["first_row"]
        starts = first % n * counted + first // n
        order = np.argsort(starts)
        starts, ends = starts[order], (starts + episodes["steps"])[order]

        def unpublished(rows: np.ndarray) -> np.ndarray:
            if not starts.size:  # no episode published
                return np.arange(rows.size)
            keys = rows % n * counted + rows // n
            at = np.searchsorted(starts, keys, side="right") - 1
            return np.flatnonzero((at < 0) | (keys > ends[np.maximum(at, 0)]))

        removed, skip = self._statistics.new_removed(), self._statistics.counted_fields  # those it subtracts itself
        fields = [f for f in self._statistics.fields if f not in skip]
        names = ["obs/step_id", *(f"obs/{f}" for f in fields), "action", "reward"]
        takes = {}  # commit index -> the rows it holds that are not published
        for k, commit in enumerate(run.commits):
            take = unpublished(commit["first_row"] + np.arange(commit["rows"]))
            if take.size:
                takes[k] = take
        segments = {run.commits[k]["segment"] for k in takes}  # a segment is read from its first block on
        indices = [k for k, c in enumerate(run.commits) if c["segment"] in segments]
        read = read_blocks(run, [run.commits[k] for k in indices], names, verify=False)
        for k, (_, arrays) in zip(indices, read, strict=True):
            if k in takes:
                count_rows(removed, {name: arrays[name][takes[k]] for name in names}, skip=skip)
        for step in range(committed, counted):  # counted, never committed: still in the ring
            slot, envs = self._slot(step), unpublished(step * n + np.arange(n))
            rows = {name: self._ring[name][slot][envs] for name in ("obs/step_id", "action", "reward")}
            rows.update({f"obs/{f}": self._ring_values(f, slot)[envs] for f in fields})
            count_rows(removed, rows, skip=skip)
        self._statistics.finish(removed)


def _ring_steps(max_buffer_bytes: int, batch_bytes: int, num_envs: int) -> int:
    """Batches the ring holds within ``max_buffer_bytes``; ValueError when fewer than 2 fit."""
    capacity = max_buffer_bytes // batch_bytes
    if capacity < 2:
        raise ValueError(
            f"max_buffer_bytes={max_buffer_bytes} is too small: the packed recorder buffers whole batches of "
            f"{num_envs} envs ({batch_bytes} bytes each) and needs room for 2; raise it to at least {2 * batch_bytes}"
        )
    return capacity


def _allocate_ring(tracker: EpisodeTracker, capacity: int) -> dict[str, np.ndarray]:
    """The ring, column by column: step k of the run lives at index k % capacity; np.empty, so untouched pages
    cost nothing. ``params/<name>`` too is kept per row (the segments hold it per episode, in the commit log)."""
    n = tracker.num_envs
    ring = {
        f"{group}/{name}": np.empty((capacity, n, *shape), dtype)
        for group, layout in (("obs", tracker.fields), ("state", tracker.state), ("params", tracker.params))
        for name, (shape, dtype) in layout.items()
    }
    ring["action"] = np.empty((capacity, n, tracker.action_dim), np.float32)
    ring["reward"] = np.empty((capacity, n), np.float32)
    ring["terminated"] = np.empty((capacity, n), np.bool_)
    ring["truncated"] = np.empty((capacity, n), np.bool_)
    return ring
