"""Writing a packed run (schema 2, docs/FORMAT.md): the segments and their blocks, checked episodes written as a new
run (convert), and the recorder.

Writing a packed run (schema 2, docs/FORMAT.md): blocks of rows appended to rotating Arrow IPC segments,
each published by one commit line; the episodes that end in a block; and checked episodes written end to end
(``convert --to packed``, and any writer of a run from :class:`Episode` objects).

numpy, pyarrow and the standard library; no Warp, Newton or torch.

PackedRecorder: stream host batches, step-major, into a packed run (schema 2, docs/FORMAT.md).

Memory is one ring of whole batches (``max_buffer_bytes``), whatever the episode length: ``append``
checks a batch, copies it into the ring and returns; one writer thread appends the buffered steps to
the current segment as one Arrow record batch and then publishes them, with the episodes that ended in
them, by one line in the commit log. Everything per block is the writer's, whole-column (the statistics, the
episodes that end, the checksum): nothing runs per row or per episode in Python on either side. When the
ring is full, ``append`` waits (backpressure; the wait is counted in ``stall_seconds``). Each episode's
instruction is made from its params as its block is written (layout 4: ``episodes.instruction``).

numpy, pyarrow and the standard library: the env is only read as a description.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.codecs import CodecSpec, EncodedFrames, decode_frames, encode_frames, field_codecs
from forge_gpu._src.core.files import sync_directory
from forge_gpu._src.core.frames import stack_episodes
from forge_gpu._src.core.instructions import INSTRUCTION
from forge_gpu._src.core.manifest import RunDescription, check_description, initial_manifest
from forge_gpu._src.formats.packed.commits import (
    EPISODES,
    PARAMS_PREFIX,
    FactorizedInstructions,
    append_commit,
    encode_episodes,
    open_commit_log,
)
from forge_gpu._src.formats.packed.identity import COMMIT_LOG, COMPRESSIONS, IDENTITY, LAYOUT_VERSION, segment_name
from forge_gpu._src.formats.packed.layout import (
    EncodedColumn,
    arrow_schema,
    crc32c,
    pyarrow,
    run_columns,
    to_record_batch,
)
from forge_gpu._src.recording.base import RecorderBase
from forge_gpu._src.recording.stats import StatsAccumulator
from forge_gpu._src.recording.tracker import EpisodeTracker, result_groups


def ended_episodes(columns: Mapping[str, np.ndarray], first_row: int, stride: int) -> dict[str, np.ndarray]:
    """The episodes that end in a block of step-major rows (``stride`` rows per step) starting at run row
    ``first_row``: one entry per row whose transition terminated or truncated, with its ``params/<name>`` where
    the columns hold them per row (the recorder's ring; the last row of an episode holds its params)."""
    rows = np.flatnonzero(columns["terminated"] | columns["truncated"])
    steps = columns["obs/step_id"][rows].astype(np.int64)
    return {
        "env_id": columns["obs/env_id"][rows].astype(np.int64),
        "episode_id": columns["obs/episode_id"][rows].astype(np.int64),
        "steps": steps,
        "first_row": first_row + rows - steps * stride,
        "stride": np.full(rows.size, stride, np.int64),
        **{name: values[rows] for name, values in columns.items() if name.startswith(PARAMS_PREFIX)},
    }


class PackedWriter:
    """Appends blocks of rows to rotating segments and publishes each with one commit line, which holds the block's
    CRC32C (read back from the just-written bytes, :meth:`_checksum`).

    Not thread-safe: one writer thread owns it. ``write`` returns the bytes it added to the segment.
    """

    def __init__(
        self,
        directory: str,
        schema,
        *,
        compression: str = "none",
        segment_bytes: int = 1 << 30,
        durability: str = "process",
    ):
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, got {compression!r}")
        pa = pyarrow()
        self._directory, self._schema = directory, schema
        self._options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
        self._segment_bytes = segment_bytes
        self._segment = -1
        self._sink = self._stream = None
        self._readback = -1  # the current segment, opened for reading back what was written (and for its syncs)
        self._buffer = bytearray()
        self._rows = 0  # run rows written so far
        self._log = open_commit_log(directory, create=True)
        self._durable = durability == "machine"
        """Sync each block's data before its commit line and the log after it (docs/FORMAT.md "Durability")."""
        if self._durable:
            sync_directory(directory)  # the commit log's name

    @property
    def rows(self) -> int:
        return self._rows

    def write(self, columns: Mapping[str, np.ndarray], episodes: Mapping[str, np.ndarray]) -> int:
        """Append a block of rows, then publish it and ``episodes`` (those whose last row is in it), with the block's
        checksum. The episodes (params included) go into the commit line and, as the copy a reader checks the line
        against and repair publishes a block from (a kill between the two writes), into the record batch's custom
        metadata."""
        pa = pyarrow()
        new_segment = self._stream is None
        if new_segment:
            self._segment += 1
            path = os.path.join(self._directory, segment_name(self._segment))
            self._sink = pa.OSFile(path, "wb")
            self._readback = os.open(path, os.O_RDONLY)
            self._stream = pa.ipc.new_stream(self._sink, self._schema, options=self._options)
        batch = to_record_batch(self._schema, columns)
        offset = self._sink.tell()
        entry = encode_episodes(episodes)
        self._stream.write_batch(batch, {EPISODES: entry})
        length = self._sink.tell() - offset
        if self._durable:  # the block's bytes (and a new segment's name) before the line that publishes them
            os.fdatasync(self._readback)
            if new_segment:
                sync_directory(self._directory)
        append_commit(
            self._log,
            segment=self._segment,
            offset=offset,
            length=length,
            first_row=self._rows,
            rows=batch.num_rows,
            episodes=entry,
            crc32c=self._checksum(offset, length),
        )
        if self._durable:  # one sync pair per block: group commit of every episode that ends in it
            os.fdatasync(self._log)
        self._rows += batch.num_rows
        if offset + length >= self._segment_bytes:
            self._end_segment()
        return length

    def _checksum(self, offset: int, length: int) -> int:
        """The CRC32C of the current segment's bytes ``[offset, offset + length)``, read back (from the page cache)
        into a reused buffer: exactly the bytes the block's line publishes."""
        if len(self._buffer) < length:
            self._buffer = bytearray(length)
        view = memoryview(self._buffer)[:length]
        done = 0
        while done < length:
            count = os.preadv(self._readback, [view[done:]], offset + done)
            if count <= 0:
                raise OSError(f"segment {segment_name(self._segment)}: read back {done} of the {length} bytes written")
            done += count
        return crc32c(view)

    def _end_segment(self) -> None:
        if self._readback >= 0:
            os.close(self._readback)
            self._readback = -1
        if self._stream is not None:
            stream, sink, self._stream, self._sink = self._stream, self._sink, None, None
            try:
                stream.close()
            finally:
                sink.close()

    def close(self) -> None:
        try:
            self._end_segment()
        finally:
            if self._log >= 0:
                os.close(self._log)
                self._log = -1


#: Bytes of episodes :func:`write_episodes` appends at once.
_WRITE_BLOCK_BYTES = 8 << 20


def write_episodes(
    directory: str, episodes: Iterable, compression: str, codecs: Mapping[str, CodecSpec] | None = None
) -> tuple[int, dict]:
    """Write checked episodes (reader ``Episode`` objects, all of one run, with the same fields, state and params)
    into the empty ``directory`` as segments and a commit log, end to end (stride 1), a block of whole episodes at
    a time: each episode's ``state`` as ``state/<name>`` columns, its ``params`` and ``instruction`` in the commit
    line; return the count. The directory's run.json is the caller's (``convert_run``, replay): its env_spec
    describes the state and params, and its layout_version is :data:`identity.LAYOUT_VERSION`. ``codecs``: field ->
    codec as the recorder takes them (:func:`core.codecs.field_codecs`; none: the default codecs); returns the
    count and run.json's ``codecs`` (column -> codec) of what was written. An episode's field given as its stored
    payloads (an ``EncodedColumn``: ``PackedRunReader.read``'s ``encoded``) is written as those payloads where its
    codec is the field's here, not decoded, and decoded where it is not."""
    writer = None
    encoded: dict[str, CodecSpec] = {}
    fields: dict = {}
    pool = concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="forge-gpu-encode")
    block: list = []
    block_bytes = count = 0

    def write_block() -> int:
        stored = {f for f, values in block[0].obs.items() if isinstance(values, EncodedColumn)}
        rows = [dataclasses.replace(ep, obs=_without(ep.obs, stored), next=_without(ep.next, stored)) for ep in block]
        _, columns, table = stack_episodes(rows)
        for f in stored:  # each episode's frames as read, then its last next frame: the payloads as stored
            frames = EncodedFrames.concatenate(
                [part for ep in block for part in (ep.obs[f].frames, ep.next[f].frames.take([len(ep.next[f]) - 1]))]
            )
            spec, (shape, dtype) = encoded.get(f"obs/{f}"), fields[f]
            same = spec is not None and frames.spec == spec
            columns[f"obs/{f}"] = frames if same else decode_frames(frames.spec, frames, shape, dtype, pool=pool)
        for column, spec in encoded.items():
            if not isinstance(columns[column], EncodedFrames):
                columns[column] = encode_frames(spec, columns[column], pool=pool)
        table["first_row"] += writer.rows
        writer.write(columns, table)
        return len(block)

    try:
        for episode in episodes:
            if writer is None:
                fields, state = (
                    {k: (a.shape[1:], a.dtype) for k, a in d.items()} for d in (episode.obs, episode.state)
                )
                action, reward = episode.action, episode.reward
                columns = run_columns(fields, action.shape[1], action.dtype, reward.dtype, state=state)
                encoded = {f"obs/{f}": spec for f, spec in field_codecs(fields, codecs or {}).items()}
                writer = PackedWriter(directory, arrow_schema(columns, encoded), compression=compression)
            block.append(episode)
            arrays = (*episode.obs.values(), *episode.state.values(), episode.action)
            block_bytes += sum(a.nbytes for a in arrays)
            if block_bytes >= _WRITE_BLOCK_BYTES:
                count += write_block()
                block, block_bytes = [], 0
        if block:
            count += write_block()
    finally:
        pool.shutdown()
        if writer is not None:
            writer.close()
    if writer is None:  # no episode: an empty commit log
        open(os.path.join(directory, COMMIT_LOG), "wb").close()
    return count, {column: spec.to_json() for column, spec in encoded.items()}


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
        self._stats = StatsAccumulator(tracker.fields, tracker.action_dim) if statistics else None
        self._counted = 0  # steps the statistics counted (the writer's)
        if self._stats is not None:  # min and max of published episodes only (they cannot be subtracted)
            channels = {key: stats.channels for key, stats in self._stats.stats.items()}
            # key -> [envs, channels]: each env's current episode; key -> [channels]: the published episodes'.
            self._episode_lo = {k: np.full((num_envs, c), np.inf) for k, c in channels.items()}
            self._episode_hi = {k: np.full((num_envs, c), -np.inf) for k, c in channels.items()}
            self._published_lo = {k: np.full(c, np.inf) for k, c in channels.items()}
            self._published_hi = {k: np.full(c, -np.inf) for k, c in channels.items()}
            self._pending: dict | None = None  # the block being written: its ended episodes' extremes
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
        if self._stats is not None:  # the block's rows, whole-column: raw but for the lossy codecs (what is stored)
            self._pending = self._count_block(columns, encoded, start, count)
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
        self._publish_extremes()
        return nbytes, episodes

    def _frames(self, field: str, start: int, count: int, encoded: EncodedFrames | None = None) -> np.ndarray:
        """Ring slots ``[start, start + count)`` of an observation field as ``[count * N, ...]`` frames, the values a
        reader decodes: the ring's rows (lossless codecs), with the slots a producer handed encoded decoded;
        ``quantized``: the rows quantized as the codec does, whole-array; ``jpeg``/``webp``: the block's frames
        decoded (``encoded``, else encoded first)."""
        ring = self._ring[f"obs/{field}"]
        spec, block = self._codecs.get(field), ring[start : start + count]
        if spec is None:
            return block.reshape(-1, *ring.shape[2:])
        shape, dtype = self._tracker.fields[field]
        if spec.name in ("jpeg", "webp"):
            encoded = encoded if encoded is not None else self._encode(field, spec, start, count)
            return decode_frames(spec, encoded, shape, dtype, pool=self._pool)
        handed = self._encoded[field][start : start + count]
        if spec.name == "quantized":  # core.codecs.transform and untransform, in one
            step = spec.param("step_um") * 1e-6
            block = (np.rint(block.astype(np.float64) / step) * step).astype(np.float32)
        elif any(h is not None for h in handed):
            block = block.copy()
        for k, frames in enumerate(handed):
            if frames is not None:
                decode_frames(spec, frames, shape, dtype, pool=self._pool, out=block[k])
        return block.reshape(-1, *ring.shape[2:])

    def _count_block(self, columns: Mapping[str, np.ndarray], encoded: Mapping, start: int, count: int) -> dict:
        """Count the block's rows (every row's frame, the transitions of the active rows) and follow each env's
        current episode's min and max; return, per key, the min and max of the episodes that end in the block,
        merged into the run's once the block is published (:meth:`_publish_extremes`)."""
        n = self._num_envs
        frames = {
            f: self._frames(f, start, count, encoded.get(f"obs/{f}")) if f in self._codecs else columns[f"obs/{f}"]
            for f in self._stats.fields
        }
        self._stats.update_frames(frames)
        active = columns["obs/step_id"] != 0  # a reset row has step_id 0, a transition's is >= 1
        action, reward = columns["action"], columns["reward"]
        if active.all():
            self._stats.update_transitions(action, reward)
        else:
            self._stats.update_transitions(action[active], reward[active])
        reset = ~active.reshape(count, n)
        ended = (columns["terminated"] | columns["truncated"]).reshape(count, n)
        values = {f"obs/{f}": v for f, v in frames.items()}
        values.update(action=action, reward=reward)
        pending = {}
        for key, rows in values.items():
            channels = self._stats.stats[key].channels
            lo, hi = _row_extremes(rows.reshape(count, n, -1, channels))  # [count, n, channels]
            if key in ("action", "reward"):  # a reset row has no transition
                lo[reset], hi[reset] = np.inf, -np.inf
            episode_lo, episode_hi = self._episode_lo[key], self._episode_hi[key]
            ended_lo, ended_hi = np.full(channels, np.inf), np.full(channels, -np.inf)
            for k in range(count):  # per step, whole-array over the envs
                episode_lo[reset[k]], episode_hi[reset[k]] = np.inf, -np.inf
                np.minimum(episode_lo, lo[k], out=episode_lo)
                np.maximum(episode_hi, hi[k], out=episode_hi)
                if ended[k].any():
                    ended_lo = np.minimum(ended_lo, episode_lo[ended[k]].min(axis=0))
                    ended_hi = np.maximum(ended_hi, episode_hi[ended[k]].max(axis=0))
            pending[key] = (ended_lo, ended_hi)
        return pending

    def _publish_extremes(self) -> None:
        """Merge the min and max of the episodes the last written block published into the run's."""
        if self._stats is None or self._pending is None:
            return
        for key, (lo, hi) in self._pending.items():
            np.minimum(self._published_lo[key], lo, out=self._published_lo[key])
            np.maximum(self._published_hi[key], hi, out=self._published_hi[key])
        self._pending = None

    def _encode(self, field: str, spec: CodecSpec, start: int, count: int) -> EncodedFrames:
        """Ring slots ``[start, start + count)`` of an encoded field as one :class:`EncodedFrames`: runs of slots
        holding raw frames encoded in the pool, slots the producer handed encoded taken as they are."""
        handed, ring, parts = self._encoded[field], self._ring[f"obs/{field}"], []
        k = start
        while k < start + count:
            if handed[k] is not None:
                parts.append(handed[k])
                k += 1
                continue
            end = k
            while end < start + count and handed[end] is None:
                end += 1
            frames = ring[k:end].reshape(-1, *ring.shape[2:])
            parts.append(encode_frames(spec, frames, pool=self._pool))
            k = end
        return EncodedFrames.concatenate(parts)

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
                    self._subtract_unpublished()  # may decode frames a producer handed encoded, over the pool
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
            self._publish_extremes()
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

        removed = StatsAccumulator(self._tracker.fields, self._tracker.action_dim)
        names = ["obs/step_id", *(f"obs/{f}" for f in self._stats.fields), "action", "reward"]
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
                self._count_rows(removed, {name: arrays[name][takes[k]] for name in names})
        for step in range(committed, counted):  # counted, never committed: still in the ring
            slot, envs = self._slot(step), unpublished(step * n + np.arange(n))
            rows = {name: self._ring[name][slot][envs] for name in ("obs/step_id", "action", "reward")}
            rows.update({f"obs/{f}": self._frames(f, slot, 1)[envs] for f in self._stats.fields})
            self._count_rows(removed, rows)
        self._stats.subtract(removed)
        for key, stats in self._stats.stats.items():
            stats.min, stats.max = self._published_lo[key].copy(), self._published_hi[key].copy()

    def _count_rows(self, into: StatsAccumulator, rows: Mapping[str, np.ndarray]) -> None:
        """Count rows of the run into ``into``: every row's frame, the transitions of the active rows."""
        into.update_frames({f: rows[f"obs/{f}"] for f in self._stats.fields})
        active = rows["obs/step_id"] != 0
        into.update_transitions(rows["action"][active], rows["reward"][active])


def _row_extremes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Min and max of ``rows`` [count, n, values, channels] over its values axis, as float64 [count, n, channels].
    Several channels: halving the values axis, each pass whole contiguous runs (numpy's reduction down a middle axis
    of a few interleaved channels runs one tiny inner loop per value: 40x slower on an [H*W, 3] image)."""
    count, n, _, channels = rows.shape
    if channels == 1:
        flat = rows.reshape(count, n, -1)
        return flat.min(axis=2, keepdims=True).astype(np.float64), flat.max(axis=2, keepdims=True).astype(np.float64)
    out = []
    for op in (np.minimum, np.maximum):
        x = rows.reshape(count * n, -1, channels)
        while x.shape[1] > 1:
            half = x.shape[1] // 2
            y = op(x[:, :half], x[:, half : 2 * half])
            if x.shape[1] % 2:
                y[:, :1] = op(y[:, :1], x[:, 2 * half :])
            x = y
        out.append(x[:, 0].reshape(count, n, channels).astype(np.float64))
    return out[0], out[1]


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


def _without(frames: Mapping, names: set[str]) -> dict:
    return {k: v for k, v in frames.items() if k not in names}
