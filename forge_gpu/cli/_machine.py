"""The machine: ``forge-gpu doctor``, ``forge-gpu precompile`` and the line that says which device a command runs on
and why."""

from __future__ import annotations

import sys
from pathlib import Path

from ._common import (
    UsageError,
)


def device_line(requested: str | None, env) -> str:
    """Which device the collection runs on, and why, in one line."""
    if requested:
        return f"device: {env.device} (--device {requested})"
    from forge_gpu._src.sim.device import device_choice

    return f"device: {device_choice()[1]}"


def cmd_doctor(args) -> int:
    from forge_gpu._src.machine.doctor import report, run_checks

    checks = run_checks()
    print(report(checks))
    bad = [c.name for c in checks if not c.ok]
    if bad:
        print(f"forge-gpu: collection would not run as designed here ({', '.join(bad)})", file=sys.stderr)
        return 1
    from forge_gpu._src.sim.device import device_choice

    print(f"collection runs as designed here, on {device_choice()[0]} by default")
    return 0


def cmd_precompile(args) -> int:
    """``forge-gpu precompile``: Warp's kernel cache of the tasks' modules, for each --arch, in --out."""
    from forge_gpu._src.machine.precompile import CPU, check_writable, missing_files, parse_arch, precompile
    from forge_gpu._src.sim.names import shipped_tasks

    try:
        archs = list(dict.fromkeys(parse_arch(a) for a in args.arch))
    except ValueError as e:
        raise UsageError(str(e)) from e
    for task in args.tasks:
        if str(task).endswith(".toml"):
            if not Path(task).is_file():
                raise UsageError(f"task file {task}: no such file")
        elif task not in shipped_tasks():
            known = ", ".join(shipped_tasks())
            raise UsageError(f"unknown task {task!r}; known tasks are {known} (or the path of a task file *.toml)")
    out = Path(args.out).absolute()
    try:
        check_writable(out)
    except ValueError as e:
        raise UsageError(str(e)) from e
    tasks = args.tasks or shipped_tasks()
    try:
        result = precompile(tasks, archs, out, say=lambda line: print(line, flush=True))
    except ValueError as e:  # a task file that does not bind to its model
        raise UsageError(str(e)) from e
    missing = missing_files(result)
    for line in result.failed:
        print(f"not built here (the GPU compiles it on first use): {line}")
    names = ", ".join(str(a) if a == CPU else f"sm_{a}" for a in archs)
    built = f"{len(result.variants)} module variants for {names}, {result.compiled} CUDA binaries built"
    print(f"kernel cache {out}: {built}")
    print(f"use it: export WARP_CACHE_PATH={out}")
    if missing and len(missing) > len(result.failed):
        print(f"forge-gpu: {len(missing)} files missing from {result.cache}, first {missing[0]}", file=sys.stderr)
        return 1
    return 0
