"""Run pytest in a child process and read what it did: the command (the installed package first on the path), a
run stopped with SIGINT at a deadline, and the counts from its junit XML, or from its ``-v`` lines where it was
stopped before writing one. tools/gpu_check.py's ``tests`` section runs it on the device. Standard library only."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from isolate import child_setup


def junit_counts(path: Path) -> dict | None:
    """passed / failed / errors / skipped and the failed tests' ids of a pytest junit XML; None if unreadable."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    for case in root.iter("testcase"):
        if not case.get("name"):
            continue  # the test that was running when pytest was interrupted
        name = f"{case.get('classname', '')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            counts["failed" if bad.tag == "failure" else "errors"] += 1
            message = (bad.get("message") or "").splitlines()[0][:120] if bad.get("message") else ""
            counts["failures"].append(f"{name} ({message})" if message else name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


VERBOSE_RESULT = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", re.M)
COLLECTED = re.compile(r"collected (\d+) items?(?: / (\d+) deselected)?(?: / (\d+) selected)?")


def pytest_command(paths: list[str], marks: str | None, root: Path) -> tuple[list[str], dict]:
    """The tests section's pytest command and environment. ``-P``: the working directory (the repository root) is
    not put first on sys.path, so ``forge_gpu`` is the installed one (the wheel layout: /tmp/site on PYTHONPATH,
    where the source tree's ``forge_gpu`` lacks ``forge_gpu.kernels``); the root goes last on PYTHONPATH, so
    ``tests.crashsim`` and the other helpers import, and an editable install (which maps ``forge_gpu.kernels``
    onto ``kernels/``) behaves as in CI."""
    command = [sys.executable, "-P", "-u", "-m", "pytest", *paths, *(["-m", marks] if marks else []), "-v", "-rA"]
    command += ["-p", "no:cacheprovider", "--ignore=tests/test_bench_smoke.py"]
    env = {k: v for k, v in os.environ.items() if k != "FORGE_GPU_VERBOSE"}  # tests check Warp's quiet start
    env["PYTHONPATH"] = os.pathsep.join([*filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)), str(root)])
    return command, env


def run_pytest(
    command: list[str], env: dict, cwd: Path, junit: Path, deadline: float, grace: float, say: Callable[[str], None]
) -> dict:
    """Run the pytest ``command`` (its output copied to this process's), stopped with SIGINT at ``deadline`` seconds
    and killed ``grace - 5`` seconds later; return its ``counts`` (:func:`junit_counts`, or from the ``-v`` lines),
    their ``source``, ``selected`` (as pytest reported it), ``stopped`` (why, or ""), ``seconds`` and ``returncode``."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=child_setup,
    )
    chunks: list[bytes] = []

    def copy_output():
        while chunk := os.read(proc.stdout.fileno(), 65536):
            chunks.append(chunk)
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()

    reader = threading.Thread(target=copy_output, daemon=True)
    reader.start()
    stopped = ""
    try:
        proc.wait(deadline)
    except subprocess.TimeoutExpired:
        running = b"".join(chunks).decode(errors="replace").rsplit("\n", 1)[-1].strip()
        stopped = f"stopped at its deadline of {deadline:.0f} s" + (f" during {running}" if "::" in running else "")
        say(f"{stopped}: SIGINT")
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(grace - 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            stopped += ", killed (no answer to SIGINT)"
    reader.join(5)
    seconds = time.perf_counter() - started
    output = b"".join(chunks).decode(errors="replace")
    counts = junit_counts(junit)
    source = "junit XML"
    if counts is None:  # killed before it wrote the XML: count the -v lines
        source = "-v output (no junit XML)"
        counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
        for nodeid, result in VERBOSE_RESULT.findall(output):
            key = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "errors"}.get(result, "skipped")
            counts[key] += 1
            if key in ("failed", "errors"):
                counts["failures"].append(nodeid)
    collected, selected = COLLECTED.search(output), "?"
    if collected:
        selected = collected.group(3) or str(int(collected.group(1)) - int(collected.group(2) or 0))
    return {
        "counts": counts,
        "source": source,
        "selected": selected,
        "stopped": stopped,
        "seconds": seconds,
        "returncode": proc.returncode,
    }
