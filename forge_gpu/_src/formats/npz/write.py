"""Writing a schema-1 run (docs/FORMAT-v1.md): episode files and markers, checked episodes written as a new run
(convert), and the recorder.

The schema-1 episode file writer (docs/FORMAT-v1.md): one ``.npz`` per episode, written atomically.

A hand-written zip: stored members are laid out straight from the episode buffers (``os.writev``, no
stacked copies) with a precomputed layout per field set; deflated and large (zip64) members go through
zlib and :mod:`zipfile`. Also the schema-1 sides of ``convert`` (:func:`write_episodes`) and ``repair``
(:func:`remove_unmarked`). Numpy and the standard library (plus ISA-L's CRC-32 where installed). The names
and schema rules are in :mod:`formats.npz.files`, run.json's in :mod:`core.manifest`.

NpzRecorder: append host batches into preallocated per-env episode buffers and publish complete
episodes to a run directory (docs/FORMAT-v1.md) from a pool of writer threads, with bounded memory.

Pure numpy and the standard library: the env is only read as a description (config, spec, calibration,
task, seed), so this module never imports Warp or Newton.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import os
import struct
import threading
import time
import zipfile
import zlib
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.episode import episode_stem, parse_episode_stem
from forge_gpu._src.core.fields import without_groups
from forge_gpu._src.core.files import remove_quietly
from forge_gpu._src.core.manifest import RunDescription, check_description, initial_manifest
from forge_gpu._src.formats.npz.files import (
    EPISODE_SUFFIX,
    MARKER_SUFFIX,
    TRANSITION_MEMBERS,
    InstructionLog,
    encode_marker,
    make_marker,
)
from forge_gpu._src.formats.npz.identity import COMPRESSIONS, IDENTITY, INSTRUCTIONS_FILE, INSTRUCTIONS_KEY
from forge_gpu._src.recording.base import RecorderBase
from forge_gpu._src.recording.stats import StatsAccumulator
from forge_gpu._src.recording.tracker import ACTION_DTYPE, REWARD_DTYPE, EpisodeTracker, result_groups

try:  # ISA-L's CRC-32 runs about 10x faster than zlib's; the values are the same
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency; this keeps a bare install working
    _crc32 = zlib.crc32

# Members larger than this are written with zip64 headers (the zip limit without them is 2 GiB).
_ZIP64_THRESHOLD = 1 << 30


def write_episode_file(
    path: str | os.PathLike,
    frames: Mapping[str, np.ndarray],
    action: np.ndarray,
    reward: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    *,
    compression: str = "none",
    compression_level: int = 1,
) -> int:
    """Publish one episode at ``path`` atomically; return the file's size in bytes.

    ``frames[F]`` holds the episode's ``T + 1`` observation frames of field ``F`` (shape ``[T+1, ...]``); it
    is laid out twice, as ``obs/F = frames[:T]`` and ``next/F = frames[1:]``, straight from the given
    buffers (no stacked copies). The file is written to ``<path>.tmp`` and renamed over ``path``.
    """
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
    path = os.fspath(path)
    steps = len(action)
    columns = list(frames.values())
    arrays = [a[:steps] for a in columns] + [a[1 : steps + 1] for a in columns]
    arrays += [action, reward, terminated, truncated]
    tmp = path + ".tmp"
    try:
        layout = None
        if compression == "none":
            layout = _stored_layout((tuple(frames), *[(a.shape, a.dtype) for a in columns + arrays[-4:]]))
        if layout is not None and layout.size < _ZIP64_THRESHOLD:
            try:
                chunks = layout.chunks(arrays)
            except ValueError:  # a member that is not C-contiguous: lay out contiguous copies
                chunks = layout.chunks([np.ascontiguousarray(a) for a in arrays])
            nbytes = _write_chunks(tmp, chunks, layout.size)
        else:
            members = list(zip(_member_names(tuple(frames)), (np.ascontiguousarray(a) for a in arrays), strict=True))
            if sum(a.nbytes for _, a in members) >= _ZIP64_THRESHOLD:
                nbytes = _write_large_npz(tmp, members, compression, compression_level)
            else:
                chunks = _deflated_zip(members, compression_level)
                nbytes = _write_chunks(tmp, chunks, sum(len(c) for c in chunks))
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    return nbytes


# Fixed zip entry timestamp (1980-01-01 00:00): the files' content does not depend on the clock.
_DOS_TIME, _DOS_DATE = 0, (0 << 9) | (1 << 5) | 1
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # signature ... crc (offset 14), sizes, name length
_CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")  # signature ... crc (offset 16) ... local offset
_END_RECORD = struct.Struct("<IHHHHIIH")
_CRC = struct.Struct("<I")
_IOV_MAX = 1024  # the fewest iovecs os.writev takes on Linux and macOS


def _local_header(name: bytes, method: int, crc: int, packed: int, size: int) -> bytes:
    return _LOCAL_HEADER.pack(0x04034B50, 20, 0, method, _DOS_TIME, _DOS_DATE, crc, packed, size, len(name), 0) + name


def _central_header(name: bytes, method: int, crc: int, packed: int, size: int, offset: int) -> bytes:
    fields = (0x02014B50, 20, 20, 0, method, _DOS_TIME, _DOS_DATE, crc, packed, size, len(name), 0, 0, 0, 0)
    return _CENTRAL_HEADER.pack(*fields, 0o600 << 16, offset) + name


def _end_record(count: int, directory_size: int, directory_offset: int) -> bytes:
    return _END_RECORD.pack(0x06054B50, 0, 0, count, count, directory_size, directory_offset, 0)


class _StoredLayout:
    """Every byte of a zip of stored ``.npy`` members except the members' data and CRC-32s.

    Episodes of one recorder repeat a few member layouts (one per episode length), so the headers,
    the central directory and the end record are laid out once per layout; a write then only
    checksums the data and patches 2 CRCs per member into a copy of the header bytes.
    """

    def __init__(self, members: list[tuple[str, np.dtype, tuple[int, ...]]]):
        headers = bytearray()  # the local headers (each with its .npy header), then the directory
        directory = bytearray()
        self.slices: list[slice] = []  # headers[slice] goes before member k's data
        self.npy_crcs: list[int] = []  # CRC-32 of member k's .npy header: the data's CRC continues it
        local_crcs, central_crcs = [], []
        offset = 0  # the file offset of the next local header
        for member, dtype, shape in members:
            name = (member + ".npy").encode()
            npy = _npy_header(dtype.str, shape)
            size = len(npy) + math.prod(shape) * dtype.itemsize
            local = _local_header(name, 0, 0, size, size)
            local_crcs.append(len(headers) + 14)
            central_crcs.append(len(directory) + 16)
            self.slices.append(slice(len(headers), len(headers) + len(local) + len(npy)))
            self.npy_crcs.append(zlib.crc32(npy))
            headers += local + npy
            directory += _central_header(name, 0, 0, size, size, offset)
            offset += len(local) + size
        tail = len(headers)
        headers += directory + _end_record(len(members), len(directory), offset)
        self.tail = slice(tail, len(headers))
        self.size = offset + len(headers) - tail
        self.headers = bytes(headers)
        self.crc_at = local_crcs + [tail + c for c in central_crcs]  # where each CRC goes, local then central

    def chunks(self, arrays: list[np.ndarray]) -> list:
        """The file as a list of buffers: patched header slices interleaved with the members' data."""
        crcs = [_crc32(a, c) for a, c in zip(arrays, self.npy_crcs, strict=True)]
        headers = bytearray(self.headers)
        for at, crc in zip(self.crc_at, crcs + crcs, strict=True):
            _CRC.pack_into(headers, at, crc)
        view = memoryview(headers)
        out = []
        for where, array in zip(self.slices, arrays, strict=True):
            out += (view[where], array)
        out.append(view[self.tail])
        return out


@functools.lru_cache(maxsize=1024)
def _stored_layout(key: tuple) -> _StoredLayout:
    """The layout of an episode: ``key`` is the field names, then (shape, dtype) of each field's frames
    and of action, reward, terminated and truncated."""
    fields, frames, transitions = key[0], key[1:-4], key[-4:]
    steps = transitions[0][0][0]
    shapes = [((steps, *shape[1:]), dtype) for shape, dtype in frames] * 2 + list(transitions)
    names = _member_names(fields)
    return _StoredLayout([(name, dtype, shape) for name, (shape, dtype) in zip(names, shapes, strict=True)])


@functools.lru_cache(maxsize=64)
def _member_names(fields: tuple[str, ...]) -> list[str]:
    """Member names (without ``.npy``) in file order: ``obs/`` fields, ``next/`` fields, transitions."""
    return [f"obs/{f}" for f in fields] + [f"next/{f}" for f in fields] + list(TRANSITION_MEMBERS)


def _deflated_zip(members: list[tuple[str, np.ndarray]], level: int) -> list[bytes]:
    """The zip of deflate-compressed ``.npy`` members, as a list of buffers."""
    out: list[bytes] = []
    directory: list[bytes] = []
    offset = 0
    for member, array in members:
        name = (member + ".npy").encode()
        npy = _npy_header(array.dtype.str, array.shape)
        deflate = zlib.compressobj(level, zlib.DEFLATED, -15)
        packed = deflate.compress(npy) + deflate.compress(array) + deflate.flush()
        crc, size = _crc32(array, zlib.crc32(npy)), len(npy) + array.nbytes
        local = _local_header(name, 8, crc, len(packed), size)
        directory.append(_central_header(name, 8, crc, len(packed), size, offset))
        out += (local, packed)
        offset += len(local) + len(packed)
    central = b"".join(directory)
    return [*out, central, _end_record(len(directory), len(central), offset)]


def _write_chunks(path: str, chunks: list, total: int) -> int:
    """Create ``path`` and write the buffers (``total`` bytes) one after another; return ``total``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        written = os.writev(fd, chunks) if len(chunks) <= _IOV_MAX else 0
        if written != total:  # a short write (rare: a signal) or too many buffers: go on piece by piece
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                view, written = view[min(written, view.nbytes) :], max(written - view.nbytes, 0)
                while view:
                    view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return total


@functools.lru_cache(maxsize=4096)
def _npy_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` (version 1.0) header of a C-ordered array; episodes repeat a few shapes."""
    header = io.BytesIO()
    description = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(header, description)
    return header.getvalue()


def _write_large_npz(path: str, members: list[tuple[str, np.ndarray]], compression: str, compression_level: int) -> int:
    """The zip64-capable path for members of a GiB and more, through ``zipfile``."""
    mode = zipfile.ZIP_STORED if compression == "none" else zipfile.ZIP_DEFLATED
    level = None if compression == "none" else compression_level
    with zipfile.ZipFile(path, "w", compression=mode, compresslevel=level) as archive:
        for member, array in members:
            with archive.open(member + ".npy", "w", force_zip64=array.nbytes > _ZIP64_THRESHOLD) as f:
                np.lib.format.write_array(f, array, allow_pickle=False)
    return os.path.getsize(path)


def write_marker_atomic(path: str, marker: dict) -> None:
    """Publish a completion marker: ``<path>.tmp``, then a rename. One writer per episode, so the
    temporary name is fixed (cheaper than :func:`write_json_atomic`'s unique one)."""
    tmp = path + ".tmp"
    data = encode_marker(marker)
    try:
        _write_chunks(tmp, [data], len(data))
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def write_episodes(directory: str, episodes, compression: str) -> int:
    """Write checked episodes (reader ``Episode`` objects) into ``directory`` as schema-1 episode files, each
    published by its marker after its line in ``instructions.jsonl``; return the count. The directory's run.json is
    the caller's (``convert_run``; it names the instructions file, ``NpzFormat.write``)."""
    count = 0
    log = InstructionLog(directory)
    try:
        for episode in episodes:
            _write_one(directory, episode, compression, log)
            count += 1
    finally:
        log.close()
    return count


def _write_one(directory: str, episode, compression: str, log: InstructionLog) -> None:
    """One checked episode as its file, its instruction's line and its marker."""
    base = os.path.join(directory, episode_stem(episode.env_id, episode.episode_id))
    frames = {f: np.concatenate([episode.obs[f], episode.next[f][-1:]]) for f in episode.obs}
    write_episode_file(
        base + EPISODE_SUFFIX,
        frames,
        episode.action,
        episode.reward,
        episode.terminated,
        episode.truncated,
        compression=compression,
    )
    log.append(episode.env_id, episode.episode_id, episode.instruction)
    write_marker_atomic(base + MARKER_SUFFIX, make_marker(episode.env_id, episode.episode_id, episode.steps))


def remove_unmarked(run_dir: str) -> list[str]:
    """Remove the episode files that have no marker (a killed writer's unpublished leftovers, never visible to
    readers); return their names."""
    removed = []
    for name in sorted(os.listdir(run_dir)):
        stem, suffix = os.path.splitext(name)
        if (
            suffix == EPISODE_SUFFIX
            and parse_episode_stem(stem) is not None
            and not os.path.exists(os.path.join(run_dir, stem + MARKER_SUFFIX))
        ):
            os.remove(os.path.join(run_dir, name))
            removed.append(name)
    return removed


def drop_damaged(run_dir: str, manifest: dict) -> dict:
    """``repair --salvage`` of a schema-1 run: read every marked episode (as ``verify`` does: each member's zip
    CRC-32 and the episode rules) and unpublish each one that fails, by removing its marker (its episode file is
    then an unmarked leftover, removed by :func:`remove_unmarked`); every episode that reads is kept as it is.
    Returns the ``cut`` (``blocks`` 0, ``rows``, ``episodes``) and ``lost_episodes`` (``"env_id:episode_id"``) of
    the repair report."""
    from forge_gpu._src.core.episode import EpisodeReadOptions
    from forge_gpu._src.formats.npz.read import NpzRunReader

    reader = NpzRunReader(run_dir, manifest)
    options = EpisodeReadOptions(state=True)
    lost, rows = [], 0
    for k, (path, marker) in enumerate(reader.marked):
        try:
            for _ in reader.read([k], options):
                pass
        except ValueError:
            os.remove(os.path.splitext(path)[0] + MARKER_SUFFIX)
            lost.append(f"{marker['env_id']}:{marker['episode_id']}")
            rows += marker["steps"] + 1
    return {"cut": {"blocks": 0, "rows": rows, "episodes": len(lost)}, "lost_episodes": lost}


#: Default budget of all episode buffers [bytes].
DEFAULT_BUFFER_BYTES = 1 << 30


class NpzRecorder(RecorderBase):
    """Records batches of ``num_envs`` env rows and publishes each completed episode exactly once.

    Memory is preallocated once: ``num_envs + spare_buffers`` episode buffers ("slots"), each with room
    for ``max_steps + 1`` observation frames per field and ``max_steps`` transitions. Every env owns a
    slot; when its episode completes the slot goes to the writers and the env takes a spare at its
    next reset frame. When no spare is free, `append` waits for a writer (backpressure; the wait is
    counted in `stall_seconds`): it never drops data and never grows memory.

    Args:
        directory: the run directory to create; it must not exist.
        run: the run's :class:`RunDescription` (``forge_gpu.sim.describe_run(env)`` describes an env).
        max_buffer_bytes: budget for all episode buffers [bytes]; must hold ``num_envs + 1`` slots.
        writers: number of writer threads.
        compression: ``"none"`` (stored members) or ``"deflate"``.
        compression_level: deflate level, 0-9.
        spare_buffers: number of spare slots; None takes as many as the budget allows, capped at
            ``num_envs``.
        statistics: compute normalization statistics of every published episode and write them as ``stats.json``
            at close (forge_gpu/_src/recording/stats.py).
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        run: RunDescription,
        *,
        max_buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        writers: int = 2,
        compression: str = "none",
        compression_level: int = 1,
        spare_buffers: int | None = None,
        statistics: bool = True,
    ) -> None:
        check_int("max_buffer_bytes", max_buffer_bytes, minimum=1)
        check_int("writers", writers, minimum=1)
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, got {compression!r}")
        check_int("compression_level", compression_level, minimum=0, maximum=9)
        if spare_buffers is not None:
            check_int("spare_buffers", spare_buffers, minimum=1)

        run = check_description(run)
        num_envs, max_steps = run.num_envs, run.max_steps
        tracker = EpisodeTracker(run.spec, num_envs, max_steps)
        slot_bytes = (max_steps + 1) * tracker.frame_bytes + max_steps * tracker.transition_bytes
        spare_buffers = _spare_buffers(num_envs, max_steps, slot_bytes, max_buffer_bytes, spare_buffers)
        slot_count = num_envs + spare_buffers

        self._compression = compression
        self._compression_level = compression_level
        self._spare_buffers = spare_buffers
        self._buffer_bytes = slot_count * slot_bytes
        # Schema 1 stores no state or params (docs/FORMAT.md): its env_spec does not describe them.
        manifest = initial_manifest(dataclasses.replace(run, spec=without_groups(run.spec)), max_buffer_bytes, IDENTITY)
        manifest["recorder"] = {
            "writers": writers,
            "compression": compression,
            "compression_level": compression_level,
            "spare_buffers": spare_buffers,
            "buffer_bytes": self._buffer_bytes,
        }
        manifest[INSTRUCTIONS_KEY] = INSTRUCTIONS_FILE  # every episode's instruction, beside the contract's files
        self._allocate(tracker, slot_count, max_steps)

        # Each env's slot, shape (num_envs,); -1 once the slot went to the writers. Touched only by the
        # appending thread, like the tracker's state.
        self._slot = np.arange(num_envs, dtype=np.int64)
        self._stats = StatsAccumulator(tracker.fields, tracker.action_dim) if statistics else None
        self._stats_lock = threading.Lock()  # the writers count each episode they publish

        # Shared with the writers under the base's lock.
        self._todo: deque[tuple[int, int, int, int, str]] = deque()  # (slot, env_id, episode_id, steps, instruction)
        self._free_slots = list(range(num_envs, slot_count))
        self._pending = 0
        self._wanted = 0  # free slots `append` waits for (0: not waiting); writers wake it only then
        self._dropped: list[dict] = []  # completed episodes dropped after a write failure

        super().__init__(directory, tracker, manifest)
        self._instructions = InstructionLog(self._directory)
        self._threads = [
            threading.Thread(target=self._writer_loop, name=f"forge-gpu-writer-{i}", daemon=True)
            for i in range(writers)
        ]
        for thread in self._threads:
            thread.start()

    def _allocate(self, tracker: EpisodeTracker, slot_count: int, max_steps: int) -> None:
        """The episode buffers, one row per slot; np.empty, so untouched pages cost no memory."""
        self._frames = {
            field: np.empty((slot_count, max_steps + 1, *shape), dtype)
            for field, (shape, dtype) in tracker.fields.items()
        }
        self._action = np.empty((slot_count, max_steps, tracker.action_dim), ACTION_DTYPE)
        self._reward = np.empty((slot_count, max_steps), REWARD_DTYPE)
        self._terminated = np.empty((slot_count, max_steps), np.bool_)
        self._truncated = np.empty((slot_count, max_steps), np.bool_)

    # -- progress -------------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        """Completed episodes handed to the writers and not yet published."""
        return self._pending

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
        """Record one batch: ``observation`` (field -> [N, ...]) and ``result`` (reward, flags, info; its
        ``state`` and ``params`` are checked, not stored: schema 1 holds neither).

        The batch is checked whole first; a bad batch raises ValueError and changes nothing. May wait
        for a writer to free an episode buffer. Raises RuntimeError after a write failure.
        """
        self._raise_if_unusable()
        tracker = self._tracker
        active, reward, terminated, truncated, action = tracker.check(observation, result)

        needs_slot = np.flatnonzero(~active & (self._slot < 0))
        new_slots = self._take_free_slots(needs_slot.size) if needs_slot.size else None

        # Nothing below can fail on bad input: commit.
        if new_slots is not None:
            self._slot[needs_slot] = new_slots
        slot = self._slot
        frame = np.where(active, tracker.steps + 1, 0)  # this row's frame index within its episode
        for field, buffer in self._frames.items():
            buffer[slot, frame] = observation[field]
        rows = np.flatnonzero(active)
        if rows.size:
            at = (slot[rows], frame[rows] - 1)
            self._action[at] = action[rows]
            self._reward[at] = reward[rows]
            self._terminated[at] = terminated[rows]
            self._truncated[at] = truncated[rows]
        ended = tracker.commit(observation, active, terminated, truncated, result_groups(result)["params"])
        if ended.size:
            columns = (slot[ended], ended, tracker.episode[ended], tracker.steps[ended])
            texts = tracker.instructions({k: v[ended] for k, v in tracker.episode_params.items()}, ended.size)
            episodes = zip(*(a.tolist() for a in columns), texts, strict=True)
            slot[ended] = -1
            with self._cond:
                self._todo.extend(episodes)
                self._pending += ended.size
                self._work.notify(ended.size)

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
                slot, env_id, episode_id, steps, instruction = self._todo.popleft()
                failed = self._error is not None  # after a failure, nothing more is published
            nbytes = None
            if not failed:
                try:
                    nbytes = self._publish(slot, env_id, episode_id, steps, instruction)
                except BaseException as exc:  # every error must reach the caller
                    self._fail(exc, episode_stem(env_id, episode_id))
            done = (slot, env_id, episode_id, steps, nbytes)

    def _finish(self, slot: int, env_id: int, episode_id: int, steps: int, nbytes: int | None) -> None:
        """Account for a handled episode and free its slot; the caller holds the lock."""
        if nbytes is None:
            self._dropped.append({"env_id": env_id, "episode_id": episode_id, "steps": steps})
        else:
            self._add_published(1, steps, nbytes)
        self._pending -= 1
        self._free_slots.append(slot)
        if self._pending == 0 or 0 < self._wanted <= len(self._free_slots):
            self._cond.notify_all()

    def _publish(self, slot: int, env_id: int, episode_id: int, steps: int, instruction: str) -> int:
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
            remove_quietly(base + ".npz.tmp")
            raise
        try:
            self._instructions.append(env_id, episode_id, instruction)  # before the marker that publishes it
            write_marker_atomic(base + ".json", make_marker(env_id, episode_id, steps))
        except BaseException:
            remove_quietly(base + ".npz")  # an unmarked file is invisible anyway; do not leave it behind
            raise
        if self._stats is not None:  # a published episode's frames and transitions: never an unpublished one's
            with self._stats_lock:
                self._stats.update_frames({field: buffer[slot, : steps + 1] for field, buffer in self._frames.items()})
                self._stats.update_transitions(self._action[slot, :steps], self._reward[slot, :steps])
        return nbytes

    # -- what the base asks -------------------------------------------------------------------

    def _busy(self) -> bool:
        return self._pending > 0

    def _join(self) -> None:
        for thread in self._threads:
            thread.join()
        self._instructions.close()

    def _unwritten(self) -> list[dict]:
        with self._cond:
            return list(self._dropped)


def _spare_buffers(num_envs: int, max_steps: int, slot_bytes: int, max_buffer_bytes: int, spare: int | None) -> int:
    """The spare episode buffers the budget holds (``spare``, checked to fit; or as many as fit, at most
    ``num_envs``); ValueError saying what to change when not even one spare fits."""
    needed = (num_envs + 1) * slot_bytes
    if max_buffer_bytes < needed:
        raise ValueError(
            f"max_buffer_bytes={max_buffer_bytes} is too small: {num_envs} envs of max_steps={max_steps} "
            f"plus 1 spare need {needed} bytes ({num_envs + 1} episode buffers of {slot_bytes} bytes); "
            f"raise max_buffer_bytes to at least {needed}, record fewer envs or steps, or use the packed "
            f"format, whose memory does not grow with episode length"
        )
    if spare is None:
        return min(num_envs, max_buffer_bytes // slot_bytes - num_envs)
    if (num_envs + spare) * slot_bytes > max_buffer_bytes:
        raise ValueError(
            f"spare_buffers={spare} does not fit max_buffer_bytes={max_buffer_bytes}: "
            f"{num_envs + spare} episode buffers need {(num_envs + spare) * slot_bytes} bytes"
        )
    return spare
