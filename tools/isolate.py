"""Run a command in a process of its own under a timeout, and say what became of it: its process group cut with
SIGTERM, then SIGKILL; SIGKILL on Linux when the parent dies, so no orphan keeps the GPU; the last lines of its
log and the frames of any faulthandler dump. tools/gpu_check.py runs each section so. Standard library only."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


def child_setup() -> None:
    """In a child before exec: SIGINT back to its default (a background shell ignores it, and pytest must be
    able to stop on it), and on Linux SIGKILL when the parent dies, so no orphan keeps the GPU."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except Exception:
            pass


FAULT_HEADER = re.compile(r"^(Timeout \(\d+:\d\d:\d\d(\.\d+)?\)!|Fatal Python error: .*)$", re.M)


def log_tail(text: str, lines: int = 6, chars: int = 700) -> tuple[str, str]:
    """The last lines of a section's log before any faulthandler dump, and the innermost frames of the dump
    (the thread that crashed, or the main thread, listed last, for a timeout)."""
    where = ""
    match = FAULT_HEADER.search(text)
    before = text if match is None else text[: match.start()]
    if match is not None:
        dump = text[match.start() :]
        if match.group(0).startswith("Timeout"):
            block = dump.rsplit("(most recent call first):", 1)[-1]
        else:
            block = dump.split("Current thread", 1)[-1].split("(most recent call first):", 1)[-1]
        frames = [line.strip() for line in block.splitlines() if line.strip().startswith("File")][:4]
        where = f"{match.group(0)} " + " <- ".join(frames)
    last = [line.strip() for line in before.splitlines() if line.strip()][-lines:]
    return " | ".join(last)[-chars:], where[:chars]


def kill_group(proc: subprocess.Popen, grace: float) -> str:
    """SIGTERM to the child's process group, SIGKILL after ``grace`` seconds; what it took."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return "exited"
        try:
            proc.wait(wait)
            return "exited on SIGTERM" if sig == signal.SIGTERM else "killed (SIGTERM ignored)"
        except subprocess.TimeoutExpired:
            continue
    return "still there after SIGKILL (stuck in the kernel driver?)"


def run_isolated(
    command: list[str], log_path: Path, timeout: float, env: dict, grace: float
) -> tuple[str, str, int, float]:
    """Run ``command`` in a new session, its output to ``log_path``, for at most ``timeout`` seconds: ``("done" or
    "timeout", how it was stopped, its exit status, seconds)``. Anything it left running is killed."""
    started = time.perf_counter()
    status, note = "done", ""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: a cut takes its children (pytest) too
            preexec_fn=child_setup,
        )
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            status, note = "timeout", kill_group(proc, grace)
        except BaseException:  # Ctrl-C: stop the child, then let the caller save and stop
            kill_group(proc, grace)
            raise
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # anything it left running
            except (ProcessLookupError, PermissionError):
                pass
    return status, note, proc.returncode, time.perf_counter() - started
