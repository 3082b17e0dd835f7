"""What every export shares: the closed runs of a source (a run or a dataset root, one task) and the
statistics stored with them."""

from __future__ import annotations

import json
import os
import time

from forge_gpu._src.core.dataset import run_directories
from forge_gpu._src.reading.runs import open_run
from forge_gpu._src.recording.stats import StatsAccumulator, load_statistics


def closed_runs(source: str | os.PathLike) -> list:
    """The opened runs of a run directory or dataset root, each checked to be closed and all of one task."""
    runs = []
    for run_dir in run_directories(source):
        run = open_run(run_dir)
        status = run.manifest["status"]
        if status != "closed":
            hint = f"run forge-gpu repair {run_dir}" if status == "recording" else "export only a closed run"
            raise ValueError(f"{run_dir}: the run is not closed (status {status!r}); {hint}")
        runs.append(run)
    if not runs:
        raise ValueError(f"{os.fspath(source)}: a dataset without runs")
    tasks = {(r.manifest["task"], json.dumps(r.manifest["env_spec"], sort_keys=True)) for r in runs}
    if len(tasks) != 1:
        raise ValueError(f"{os.fspath(source)}: its runs differ in task or env_spec; export them one by one")
    return runs


def source_statistics(source: str | os.PathLike) -> StatsAccumulator | None:
    """The statistics stored with the run(s), or None when a run has none (they are then computed while
    exporting)."""
    try:
        return load_statistics(source)
    except LookupError:
        return None


def export_report(out: str, fmt: str, episodes: int, frames: int, nbytes: int, start: float, *, computed: bool) -> dict:
    """What every export returns: where and what it wrote, how long it took since ``start``
    (``time.perf_counter()``) [s], and where the statistics came from."""
    seconds = time.perf_counter() - start
    return {
        "out": out,
        "format": fmt,
        "episodes": episodes,
        "frames": frames,
        "bytes": nbytes,
        "seconds": seconds,
        "frames_per_s": frames / seconds if seconds > 0 else 0.0,
        "statistics": "computed while exporting" if computed else "stored with the run",
    }
