"""Shared helpers of the bench scripts: argument defaults, timing, JSON and table output."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """What the figures were measured on."""
    import warp as wp

    info = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version()}
    if wp.get_cuda_device_count() > 0:
        info["gpu"] = wp.get_device("cuda:0").name
    return info


def timed(fn, *, min_seconds: float, min_reps: int = 3) -> list[float]:
    """Call ``fn()`` repeatedly for at least ``min_seconds`` and ``min_reps``; per-call seconds."""
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def table(rows: list[dict], columns: list[str]) -> str:
    """A markdown table of ``rows`` (floats shown with 4 significant digits)."""

    def cell(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def save(name: str, payload: dict, markdown: str, out_dir: Path | None = None) -> Path:
    """Write ``<name>.json`` and ``<name>.md`` under ``bench/results`` (or ``out_dir``)."""
    out = Path(out_dir or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
    (out / f"{name}.md").write_text(markdown + "\n")
    return out / f"{name}.json"
