"""Writing a schema-1 run (docs/FORMAT-v1.md): markers, checked episodes written as a new run (convert), and the
recorder; each episode file is :mod:`formats.npz.zipwriter`'s.

Also the schema-1 sides of ``convert`` (:func:`write_episodes`) and ``repair`` (:func:`remove_unmarked`,
:func:`drop_damaged`). The names and schema rules are in :mod:`formats.npz.files`, run.json's in
:mod:`core.manifest`.

NpzRecorder: append host batches into preallocated per-env episode buffers and publish complete
episodes to a run directory (docs/FORMAT-v1.md) from a pool of writer threads, with bounded memory.

Pure numpy and the standard library: the env is only read as a description (config, spec, calibration,
task, seed), so this module never imports Warp or Newton.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
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
    InstructionLog,
    encode_marker,
    make_marker,
)
from forge_gpu._src.formats.npz.identity import COMPRESSIONS, IDENTITY, INSTRUCTIONS_FILE, INSTRUCTIONS_KEY
from forge_gpu._src.formats.npz.zipwriter import write_chunks, write_episode_file
from forge_gpu._src.recording.base import RecorderBase
from forge_gpu._src.recording.stats import StatsAccumulator
from forge_gpu._src.recording.tracker import ACTION_DTYPE, REWARD_DTYPE, EpisodeTracker, result_groups


def write_marker_atomic(path: str, marker: dict) -> None:
    """Publish a completion marker: ``<path>.tmp``, then a rename. One writer per episode, so the
    temporary name is fixed (cheaper than :func:`write_json_atomic`'s unique one)."""
    tmp = path + ".tmp"
    data = encode_marker(marker)
    try:
        write_chunks(tmp, [data], len(data))
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
