"""``forge-gpu verify``: check every block and every episode of a run (or of each run of a dataset) and list what
is damaged, without building episodes.

A packed run is read once, sequentially, block by block (:func:`formats.packed.scan.scan_blocks`: every block's
checksum, record batch and copy of its line's episodes), and its episodes checked whole-column as they complete
(:func:`core.rules.check_frames` over the bookkeeping and transition columns; every float column of every block
for finiteness), so memory holds about the rows one episode spans. A schema-1 run's episodes are read one by one
(each member's zip CRC-32 and the episode rules). Data side: numpy and the readers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from forge_gpu._src.core.dataset import run_directories
from forge_gpu._src.core.episode import EpisodeReadOptions
from forge_gpu._src.core.rules import check_frames
from forge_gpu._src.formats.packed.blocks import CHECK_COLUMNS, episode_rows, gather_episodes
from forge_gpu._src.formats.packed.commits import DROPPED
from forge_gpu._src.formats.packed.identity import segment_name
from forge_gpu._src.formats.packed.reader import PackedRunReader
from forge_gpu._src.formats.packed.scan import run_schema, scan_blocks
from forge_gpu._src.formats.registry import format_of
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
        blocks = f"{r['blocks']} blocks, " if r["format"] == "packed" else ""
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
        if isinstance(reader, PackedRunReader):
            _verify_packed(reader, report)
        else:
            _verify_episodes(reader, report)
    except (ValueError, OSError) as exc:
        report["error"] = str(exc)
    report["ok"] = report["error"] is None and not report["bad_blocks"] and not report["bad_episodes"]
    return report


def _verify_episodes(reader, report: dict) -> None:
    """Any other format: its episodes read one by one through its reader, which checks them."""
    report["checksums"] = True  # schema 1: every zip member's CRC-32, checked as it is read
    options = EpisodeReadOptions(state=True)
    for k in range(len(reader)):
        env_id, episode_id, _ = reader.ids(k)
        report["episodes"] += 1
        try:
            for episode in reader.read([k], options):
                report["bytes"] += sum(a.nbytes for a in (*episode.obs.values(), episode.action, episode.reward))
        except ValueError as exc:
            report["bad_episodes"].append({"episode": f"{env_id}:{episode_id}", "error": str(exc)})


def _verify_packed(reader: PackedRunReader, report: dict) -> None:
    run = reader.run
    report["checksums"], report["episodes"] = run.checksums, len(run)
    report["dropped"] = sum(len(c[DROPPED]["env_id"]) for c in run.commits if DROPPED in c)
    try:  # the segments' columns against run.json and one another
        for _ in reader.groups([], EpisodeReadOptions()):
            pass
        columns, mismatch = run.columns(), None
    except ValueError as exc:  # a damaged schema message is a bad block below; anything else is the run's error
        columns, mismatch = (run_schema(run, run.commits[0]["segment"])[1] if run.commits else {}), str(exc)
    # Raw float columns are scanned for non-finite values; an encoded one's bytes are its blocks' checksums' (its
    # frames were checked finite when recorded, and a block salvage emptied holds no payload to decode).
    floats = [
        n for n, (_, dtype) in columns.items() if dtype.kind == "f" and n not in CHECK_COLUMNS and n not in run.codecs
    ]
    unfinite: list[tuple[np.ndarray, str]] = []  # run rows of a float column holding NaN or infinity, and which

    def blocks() -> Iterator[tuple[dict, dict | None]]:
        for commit, found, error in scan_blocks(run, run.commits, [*CHECK_COLUMNS, *floats]):
            report["blocks"] += 1
            report["bytes"] += commit["length"]
            if error is not None:
                where = {"segment": segment_name(commit["segment"]), "offset": commit["offset"], "line": commit["line"]}
                report["bad_blocks"].append({**where, "error": error})
                yield commit, None
                continue
            for name in floats:
                values = found[name].reshape(commit["rows"], -1)
                if not np.isfinite(values).all():
                    rows = commit["first_row"] + np.flatnonzero(~np.isfinite(values).all(axis=1))
                    unfinite.append((rows, f"{name} holds a non-finite value"))
            yield commit, {n: found[n].copy() for n in CHECK_COLUMNS}  # the views last until the next block

    scan = blocks()
    bad = report["bad_episodes"]
    for group, gathered, starts, lost in gather_episodes(run, scan, np.arange(len(run))):
        bad += [{"episode": f"{e}:{k}", "error": "it has rows in a bad block"} for e, k in _ids(lost)]
        if not len(group["steps"]):
            continue
        errors = _broken(gathered, group, starts, name=run.directory)
        if unfinite:
            rows, _ = episode_rows(group)
            owner = np.repeat(np.arange(len(group["steps"])), group["steps"] + 1)
            for found, message in unfinite:
                for k in np.unique(owner[np.isin(rows, found)]).tolist():
                    errors.setdefault(k, f"{run.directory}: {message}")
        ids = list(_ids(group))
        bad += [{"episode": "{}:{}".format(*ids[k]), "error": errors[k]} for k in sorted(errors)]
    for _ in scan:  # the blocks after the last episode's
        pass
    if mismatch is not None and not report["bad_blocks"]:
        report["error"] = mismatch


def _ids(entries: dict) -> Iterator[tuple[int, int]]:
    return zip(entries["env_id"].tolist(), entries["episode_id"].tolist(), strict=True)


def _broken(columns: dict, episodes: dict, starts: np.ndarray, *, name: str) -> dict[int, str]:
    """The episodes (index -> the break) of a group laid end to end that break :func:`core.rules.check_frames`'s
    rules: the group at once, then, where it breaks one, each episode on its own."""
    try:
        check_frames(columns, episodes, starts, name=name)
        return {}
    except ValueError:
        pass
    broken = {}
    for k in range(len(starts) - 1):
        s, e = int(starts[k]), int(starts[k + 1])
        one = {key: values[k : k + 1] for key, values in episodes.items()}
        try:
            check_frames({n: c[s:e] for n, c in columns.items()}, one, np.array([0, e - s]), name=name)
        except ValueError as exc:
            broken[k] = str(exc)
    return broken
