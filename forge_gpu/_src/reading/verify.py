"""``forge-gpu verify``: check every block and every episode of a run (or of each run of a dataset) and list what
is damaged, without building episodes: each run's format checks its own data (``RunReader.verify``, a
format-neutral report; docs/FORMAT.md "Checksums" for the packed layout's blocks), found through the format
registry alone.
"""

from __future__ import annotations

import os

from forge_gpu._src.core.dataset import run_directories
from forge_gpu._src.formats.registry import FORMATS, VERIFY_KEYS, format_of
from forge_gpu._src.reading.runs import open_run


def verify_run(path: str | os.PathLike) -> dict:
    """Check a run directory or every run of a dataset root: ``{"path", "ok", "runs": [one report per run]}``.

    Each run's report holds ``run``, ``ok``, ``format``, ``checksums`` (whether its blocks carry them:
    layout_version 3 on, and schema 1's zip members), ``blocks``, ``episodes``, ``bytes`` (read), ``dropped``
    (episodes a salvage dropped), ``bad_blocks`` (``segment``, ``offset``, ``line``, ``error``), ``bad_episodes``
    (``episode`` as ``"env_id:episode_id"``, ``error``) and ``error`` (what kept the run from being read at all:
    its run.json or commit log, else None). ``ok`` is false on any problem; a run without checksums is not a
    problem. Raises ValueError only for a dataset root whose dataset.json does not read."""
    path = os.fspath(path)
    runs = [_verify_one(run_dir) for run_dir in run_directories(path)]
    return {"path": path, "ok": all(r["ok"] for r in runs), "runs": runs}


def format_verify(report: dict) -> list[str]:
    """:func:`verify_run`'s report as lines: one per run (ok, the bad blocks and episodes, unverified), then its bad
    blocks and episodes, one each."""
    lines = []
    for r in report["runs"]:
        fmt = FORMATS.get(r["format"])  # None where the run's run.json did not read
        blocks = f"{r['blocks']} blocks, " if fmt is not None and fmt.capabilities.blocks else ""
        counts = f"{blocks}{r['episodes']} episodes, {r['bytes']:,} bytes"
        if r["error"] is not None:
            lines.append(f"{r['run']}: unreadable: {r['error']}")
            continue
        bad = [_count(len(r["bad_blocks"]), "bad block"), _count(len(r["bad_episodes"]), "bad episode")]
        bad = ", ".join(b for b in bad if not b.startswith("0 ")) or "ok"
        unverified = "" if r["checksums"] else "unverified (no checksums; otherwise read and checked): "
        dropped = f"; {_count(r['dropped'], 'episode')} dropped earlier by repair --salvage" if r["dropped"] else ""
        lines.append(f"{r['run']}: {unverified}{bad} ({counts}{dropped})")
        lines += [
            f"  bad block {b['segment']}:{b['offset']} (commit line {b['line']}): {b['error']}" for b in r["bad_blocks"]
        ]
        lines += [f"  bad episode {e['episode']}: {e['error']}" for e in r["bad_episodes"]]
        if r["bad_blocks"] or r["bad_episodes"]:
            lines.append(f"  forge-gpu repair --salvage {r['run']} keeps every episode that checks and drops these")
    return lines


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _verify_one(run_dir: str) -> dict:
    report = {"run": run_dir, "ok": False, "format": None, "checksums": False, "blocks": 0, "episodes": 0, "bytes": 0}
    report["dropped"] = 0
    report.update(bad_blocks=[], bad_episodes=[], error=None)
    try:
        reader = open_run(run_dir)
        report["format"] = format_of(reader.manifest).name
        found = reader.verify()
        report.update({key: found[key] for key in VERIFY_KEYS})
    except (ValueError, OSError) as exc:
        report["error"] = str(exc)
    report["ok"] = report["error"] is None and not report["bad_blocks"] and not report["bad_episodes"]
    return report
