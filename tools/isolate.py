"""Run a command in a process of its own under a timeout, and say what became of it: its process group cut with
SIGTERM, then SIGKILL; SIGKILL on Linux when the parent dies, so no orphan keeps the GPU; the last lines of its
log and the frames of any faulthandler dump. tools/gpu_check.py runs each section so, started anew
(:func:`run_isolated`) or forked from a :class:`Zygote` that imported Newton and Warp once. Standard library only."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
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


def stop_group(pid: int, grace: float, ended) -> str:
    """SIGTERM to the process group ``pid``, SIGKILL after ``grace`` seconds; what it took. ``ended(seconds)``
    waits at most that long for the process to end and says whether it did."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return "exited"
        if ended(wait):
            return "exited on SIGTERM" if sig == signal.SIGTERM else "killed (SIGTERM ignored)"
    return "still there after SIGKILL (stuck in the kernel driver?)"


def kill_group(proc: subprocess.Popen, grace: float) -> str:
    """:func:`stop_group` of a child of this process."""

    def ended(seconds: float) -> bool:
        try:
            proc.wait(seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    return stop_group(proc.pid, grace, ended)


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


# -- the same, forked from a process that imported the heavy modules once -------------------------------------------
#
# A section's process spends most of a CPU smoke run importing Newton and Warp (about 5 of its 7 s here). A zygote
# imports them once, without initializing Warp (no CUDA context: importing Warp or Newton creates none, and the
# zygote checks), and forks each command from there: the child is a process of its own as above (its own session and
# log, SIGKILL with the zygote, which dies with its parent), only its start is cheaper. The protocol is one JSON line
# each way on the zygote's stdin/stdout: {"argv", "log", "env"} in, {"pid"} then {"pid", "code"} out.


class Zygote:
    """A process that imported ``modules`` and forks one command (a Python script and its argv) at a time."""

    def __init__(self, modules: list[str], env: dict):
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(Path(__file__).resolve()), "--zygote", *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
            preexec_fn=child_setup,
        )
        self._fd, self._pending = self.proc.stdout.fileno(), b""
        try:
            ready = self._reply(None)
        except RuntimeError:  # it exited before a word: an import failed (its traceback is on stderr)
            ready = {}
        if not ready.get("ready"):
            self.close()
            raise RuntimeError(f"the zygote did not start: {ready.get('error', 'it exited')}")

    def _reply(self, timeout: float | None) -> dict | None:
        """The zygote's next line, or None after ``timeout`` seconds. Read from the pipe itself into a buffer of
        this object's own: a buffered file object may hold a second line already read, which select cannot see."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._fd], [], [], left)[0]:
                return None
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                raise RuntimeError("the zygote exited")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, argv: list[str], log_path: Path, timeout: float, env: dict, grace: float):
        """As :func:`run_isolated` for ``[sys.executable, *argv]``: ``("done" or "timeout", how it was stopped, its
        exit status, seconds)``; anything the child left running is killed."""
        started = time.perf_counter()
        self.proc.stdin.write((json.dumps({"argv": argv, "log": str(log_path), "env": env}) + "\n").encode())
        self.proc.stdin.flush()
        pid = self._reply(None)["pid"]
        replies = [self._reply(timeout)]

        def ended(seconds: float) -> bool:
            replies.append(self._reply(seconds))
            return replies[-1] is not None

        status, note = "done", ""
        if replies[-1] is None:
            status, note = "timeout", stop_group(pid, grace, ended)
            if replies[-1] is None and note == "exited":  # it ended just before the signal: its status is on its way
                replies.append(self._reply(5.0))
            if replies[-1] is None:
                self.close()  # a child stuck in the kernel driver: this zygote cannot wait for it; the next starts anew
                return status, note, -9, time.perf_counter() - started
        reply = replies[-1]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # anything it left running
        return status, note, reply["code"], time.perf_counter() - started

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _zygote(modules: list[str]) -> None:
    """The zygote's loop (``python isolate.py --zygote MODULE...``)."""
    import importlib
    import runpy

    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # a stray print of an import must not break the protocol
    for module in modules:
        importlib.import_module(module)
    warp_context = sys.modules.get("warp._src.context")
    if warp_context is not None and getattr(warp_context, "runtime", None) is not None:
        protocol.write(json.dumps({"error": "importing those modules initialized Warp: forking is unsafe"}) + "\n")
        return
    protocol.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: a session and a log of its own, then the script as its __main__
            code = 1
            try:
                protocol.close()  # the zygote's alone: a child holding it would hide the zygote's exit
                os.setsid()
                child_setup()
                os.environ.clear()
                os.environ.update(job["env"])
                log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(log, 1)
                os.dup2(log, 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)
                sys.stderr = open(2, "w", buffering=1, closefd=False)
                import faulthandler

                faulthandler.enable()
                sys.argv = list(job["argv"])
                sys.path[0] = str(Path(sys.argv[0]).resolve().parent)
                runpy.run_path(sys.argv[0], run_name="__main__")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        protocol.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        protocol.write(json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__" and sys.argv[1:2] == ["--zygote"]:
    _zygote(sys.argv[2:])
