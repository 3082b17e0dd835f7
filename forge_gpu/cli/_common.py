"""What every ``forge-gpu`` command shares: bad input (:class:`UsageError`), argument checks, signals and
the progress display. Nothing here imports Warp, Newton or torch."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from forge_gpu._src.formats.registry import FORMATS


class UsageError(Exception):
    """Bad command-line input: reported in one line with exit status 2."""


def parse_set(items: list[str]) -> dict:
    import tomllib

    overrides = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected KEY=VALUE, e.g. --set solver.name=featherstone")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text  # a bare word is a string
        overrides[key.strip()] = value
    return overrides


def check_out(out: str | None, task: str) -> Path:
    """``collect``'s ``--out`` (default ``runs/<task>-<time>``): a new directory in a writable place."""
    path = Path(out) if out else Path("runs") / f"{task}-{time.strftime('%Y%m%d-%H%M%S')}"
    check_new(path, "--out ")
    return path


def check_new(path: str | os.PathLike, option: str = "", *, kind: str = "directory") -> None:
    """Refuse (UsageError) an output ``path`` that already exists (``kind``: what to give instead) or cannot be
    made (:func:`check_writable`); ``option``: how the command line names it (``"--out "``, or ``""`` for a
    positional argument)."""
    if os.path.lexists(path):
        raise UsageError(f"{option}{path}: already exists; give a new {kind}")
    check_writable(path, option)


def check_writable(path: str | os.PathLike, option: str = "") -> None:
    """Refuse (UsageError) an output ``path`` whose nearest existing ancestor is not a directory this process can
    write in (a regular file, a read-only mount): the directories missing above ``path`` are made when it is
    written, so nothing else stops it. Nothing is left on disk."""
    path = Path(path)
    parent = path.parent
    while not os.path.lexists(parent):
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{option}{path}: cannot write in {parent}: not a directory; choose a writable place")
    try:  # the sure test (os.access misjudges read-only mounts for some users): make a directory, remove it
        os.rmdir(tempfile.mkdtemp(prefix=".forge-gpu-", dir=parent))
    except OSError as e:
        raise UsageError(f"{option}{path}: cannot write in {parent} ({e.strerror}); choose a writable place") from e


def check_run(path: str, *, dataset: bool = False) -> None:
    """Refuse a path that holds no run (with ``dataset``: nor a dataset root) as bad input; a run whose files
    are damaged is the command's to report (exit 1)."""
    from forge_gpu._src.core.dataset import DATASET_MANIFEST
    from forge_gpu._src.core.manifest import RUN_MANIFEST

    what = "a run directory or dataset root" if dataset else "a run directory"
    manifests = (RUN_MANIFEST, DATASET_MANIFEST) if dataset else (RUN_MANIFEST,)
    if not Path(path).is_dir():
        raise UsageError(f"{path}: not {what} ({'not a directory' if os.path.lexists(path) else 'no such directory'})")
    if not any((Path(path) / name).is_file() for name in manifests):
        runs = sorted(p.name for p in Path(path).iterdir() if (p / RUN_MANIFEST).is_file())
        held = ""
        if runs:  # a dataset root given to a command of one run: name the runs it holds
            shown = ", ".join(str(Path(path) / name) for name in runs[:4]) + (", ..." if len(runs) > 4 else "")
            kind = "a dataset root" if (Path(path) / DATASET_MANIFEST).is_file() else "a directory"
            held = f"; it is {kind} of {len(runs)} run(s): give one of them, e.g. {shown}"
        raise UsageError(f"{path}: not {what}: it holds no {' or '.join(manifests)}{held}")


def parse_episode(text: str) -> tuple[int, int]:
    """``ENV:EPISODE`` (e.g. ``0:3``) as a pair of ints; UsageError otherwise."""
    env_id, sep, episode = text.partition(":")
    if not sep or not env_id.isdigit() or not episode.isdigit():
        raise UsageError(f"--episode {text!r}: expected ENV:EPISODE, e.g. 0:3")
    return int(env_id), int(episode)


def check_compression(format: str, compression: str) -> None:
    allowed = FORMATS[format].capabilities.compressions
    if compression not in allowed:
        raise UsageError(f"--compression {compression}: the {format} format takes {', '.join(allowed)}")


@contextlib.contextmanager
def stop_on_signals():
    """For the block, SIGINT and SIGTERM set the yielded ``stop`` event and are appended to the yielded
    ``caught`` list instead of interrupting; the previous handlers come back after. Signals reach the main
    thread only, so elsewhere nothing is installed."""
    stop = threading.Event()
    caught: list[int] = []

    def on_signal(signum, frame):
        caught.append(signum)
        stop.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop, caught
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def signal_exit(signum: int) -> tuple[str, int]:
    """The name of a stopping signal and the exit status it gives (128 + its number, as shells do)."""
    return ("SIGINT", 130) if signum == signal.SIGINT else ("SIGTERM", 143)


class Progress:
    """A live progress bar on a terminal (rich, when installed); otherwise (a CI log, a pipe, a file) a plain
    line every PLAIN_EVERY seconds and one at the end, never cut to a terminal's width."""

    PLAIN_EVERY = 10.0

    def __init__(self, task, env, out):
        self._bar = None
        self._last = 0.0
        self._label = f"{task} x{env.num_envs}"
        self._unprinted = ""  # the latest plain line, when it came too soon after the previous one
        self._printed = ""  # the last plain line printed: the same line is not printed twice
        if not sys.stdout.isatty():
            return
        try:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn(f"[bold]{task}[/] x{env.num_envs}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} {task.fields[unit]}"),
                TextColumn("{task.fields[rate]:,.0f} env-steps/s"),
                TextColumn("stall {task.fields[stall]:.0%}"),
                TextColumn("backlog {task.fields[backlog]}"),
                TextColumn("{task.fields[mb]:.1f} MB"),
                TimeRemainingColumn(),
            )
            self._bar.start()
            self._task = None
        except ImportError:
            pass

    def update(self, c: dict) -> None:
        done = c["episodes_ended"] if c["unit"] == "episodes" else c["steps"]
        fields = dict(
            unit=c["unit"],
            rate=c["env_steps_per_s"],
            stall=c["stall_fraction"],
            backlog=c["backlog"],
            mb=c["bytes_written"] / 1e6,
        )
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task("collect", total=c["target"], **fields)
            self._bar.update(self._task, completed=min(done, c["target"]), **fields)
            return
        self._unprinted = (
            f"{self._label}  {min(done, c['target'])}/{c['target']} {c['unit']}  {c['env_steps_per_s']:,.0f} "
            f"env-steps/s  stall {c['stall_fraction']:.0%}  backlog {c['backlog']}  "
            f"{c['bytes_written'] / 1e6:.1f} MB  {c['seconds']:.0f} s"
        )
        if time.monotonic() - self._last >= self.PLAIN_EVERY:
            self._print_plain()

    def _print_plain(self) -> None:
        self._last = time.monotonic()
        if self._unprinted != self._printed:
            print(self._unprinted, flush=True)
            self._printed = self._unprinted
        self._unprinted = ""

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self._unprinted:
            self._print_plain()
