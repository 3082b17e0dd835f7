"""The recorder seam: the :class:`Recorder` protocol ``collect`` drives, and :class:`RecorderBase`, the lifecycle
every recorder shares (run directory, manifest, progress counters, a write failure that reaches the caller,
flush and close). Format-neutral: a format's recorder subclasses it. numpy and the standard library."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from forge_gpu._src.core.files import remove_quietly, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST, jsonable
from forge_gpu._src.recording.progress import MAX_ROWS, ROW_BYTES, ProgressSeries
from forge_gpu._src.recording.stats import STATS_FILE, StatsAccumulator
from forge_gpu._src.recording.tracker import EpisodeTracker

#: Room kept for the final run.json while recording, so that a full disk still ends with a manifest that says
#: `failed`: removed just before that write. Its name ends in .tmp, so `forge-gpu repair` removes one that a
#: killed process left behind.
MANIFEST_RESERVE = RUN_MANIFEST + ".reserve.tmp"


@runtime_checkable
class Recorder(Protocol):
    """What ``collect`` needs of a recorder: :class:`PackedRecorder` (schema 2) and :class:`NpzRecorder`
    (schema 1) implement it, on :class:`RecorderBase`. A run format (:class:`formats.registry.RunFormat`) makes its
    recorder."""

    def append(self, observation: Mapping[str, np.ndarray], result: Any) -> None:
        """Record one host batch (field -> [N, ...], and the step's reward, flags and info)."""

    def flush(self) -> None:
        """Block until everything appended is published."""

    def close(self, error: BaseException | None = None) -> None:
        """Publish what is complete, close the manifest (``failed`` with ``error``)."""

    def note(self, key: str, value: Any) -> None:
        """Put ``key: value`` (plain JSON) into the manifest that ``close`` writes."""

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

    def __init__(self, directory: str | os.PathLike, tracker: EpisodeTracker, manifest: dict, *, durable: bool = False):
        self._directory = os.fspath(directory)
        self._durable = durable  # run.json and stats.json synced (and their directory) when written
        self._tracker = tracker
        self._manifest = manifest
        # Shared with the writers, under one lock: `_cond` wakes `append`, `flush` and `close`; `_work` the
        # writers.
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._work = threading.Condition(lock)
        self._stopping = False
        self._draining = 0  # flush or close calls waiting: a writer that gathers steps into blocks writes at once
        self._completed = 0
        self._transitions_published = 0
        self._bytes_written = 0
        self._stall_seconds = 0.0
        self._progress = ProgressSeries()  # run.json's "progress": the counters over time, sampled as writers publish
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
        self._progress.sample(*self._counters())

    def _counters(self) -> tuple[int, int, int, float, int]:
        """What a progress sample holds (:data:`progress.PROGRESS_COLUMNS` after ``seconds``); under the lock."""
        return self._completed, self._transitions_published, self._bytes_written, self._stall_seconds, int(self.backlog)

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
    def backlog(self) -> int:
        """What the writers hold and have not yet published (batches or episodes): each format's own."""
        raise NotImplementedError

    @property
    def incomplete_episodes(self) -> list[dict]:
        """Episodes started and not completed (``env_id``, ``episode_id``, ``steps``): those abandoned by a
        reset and those still running; episodes with no transition yet are left out."""
        return self._tracker.incomplete()

    # -- flush and close ------------------------------------------------------------------------

    def flush(self) -> None:
        """Wait until everything appended is published; raise RuntimeError after a write failure."""
        with self._draining_writers():
            while self._busy() and self._error is None:
                self._cond.wait()
        self._raise_if_failed()

    @contextlib.contextmanager
    def _draining_writers(self):
        """Hold the lock with ``_draining`` raised and the writers woken: a writer waiting for more steps to
        fill a block writes what it has."""
        with self._cond:
            self._draining += 1
            self._work.notify_all()
            try:
                yield
            finally:
                self._draining -= 1

    def note(self, key: str, value: Any) -> None:
        """Put ``key: value`` (plain JSON, small: it lives in the room kept for the last manifest) into the manifest
        that ``close`` writes, e.g. the collection's ``solver_overflow``."""
        with self._manifest_lock:
            self._manifest[key] = value

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
        with self._draining_writers():
            while self._busy() and self._error is None:
                self._cond.wait()
            self._stopping = True
            self._work.notify_all()
        self._join()
        if self._stats is not None:  # before the manifest: a closed run has its statistics
            try:
                self._stats.write(self._directory, "recorded", durable=self._durable)
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
        written), the progress table at its largest and 64 KiB for the file system's own blocks."""
        first = len(json.dumps(jsonable(self._manifest), indent=2))
        return 2 * first + 3 * 96 * self._tracker.num_envs + (MAX_ROWS + 1) * ROW_BYTES + (64 << 10)

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
                    progress=self._progress.to_json(self._counters() if status != "recording" else None),
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
            path = os.path.join(self._directory, RUN_MANIFEST)  # one line per listed episode and per progress row
            write_json_atomic(path, jsonable(manifest), durable=self._durable, levels=2)


def _preallocate(path: str, size: int) -> None:
    """Create ``path`` with ``size`` bytes allocated to it (zeros where the file system cannot preallocate)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
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
