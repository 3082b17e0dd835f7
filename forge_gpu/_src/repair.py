"""Repair a run left at ``status: recording`` by a killed process.

Schema 1: it removes stale temporary files, recounts the published episodes from their markers, and
closes the manifest (``repaired`` records when). An episode file without a marker is an unpublished
leftover of the crash and is removed with the temporaries; it was never visible to readers.
Packed runs: it publishes the blocks that were written whole but not yet committed (with the episodes
that end in them), cuts off torn bytes, recounts the episodes from the commit log and closes the
manifest. Either way it never deletes or rewrites a published episode, and running it twice changes
nothing.
"""

from __future__ import annotations

import datetime
import os

from .episode_format import (
    EPISODE_SUFFIX,
    MARKER_SUFFIX,
    RUN_MANIFEST,
    SCHEMA_VERSION,
    parse_episode_stem,
    validate_manifest,
    write_json_atomic,
)
from .packed import repair_packed
from .reader import load_json, marked_episodes, open_run


def repair_run(run_dir: str | os.PathLike) -> dict:
    """Close an interrupted run; return what was done. Raises ValueError for a directory that is not a run."""
    run_dir = os.fspath(run_dir)
    path = os.path.join(run_dir, RUN_MANIFEST)
    manifest = load_json(path)
    validate_manifest(manifest, name=path)
    if manifest["schema_version"] != SCHEMA_VERSION:
        return _repair_packed_run(run_dir, path, manifest)
    removed = []
    for name in sorted(os.listdir(run_dir)):
        stem, suffix = os.path.splitext(name)
        unmarked = (
            suffix == EPISODE_SUFFIX
            and parse_episode_stem(stem) is not None
            and not os.path.exists(os.path.join(run_dir, stem + MARKER_SUFFIX))
        )
        if name.endswith(".tmp") or unmarked:
            os.remove(os.path.join(run_dir, name))
            removed.append(name)
    marked = marked_episodes(run_dir)
    report = {"run": run_dir, "status_before": manifest["status"], "removed": removed, "episodes": len(marked)}
    if manifest["status"] != "recording":
        report["changed"] = bool(removed)
        return report
    manifest["status"] = "closed"
    manifest["completed_episodes"] = len(marked)
    manifest.setdefault("incomplete_episodes", [])
    manifest["repaired"] = {
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "removed_files": removed,
        "note": "closed by forge-gpu repair after the recording process stopped without closing the run; "
        "episodes that were in progress were lost and are not listed",
    }
    write_json_atomic(path, manifest)
    report["changed"] = True
    return report


def _repair_packed_run(run_dir: str, path: str, manifest: dict) -> dict:
    removed = sorted(name for name in os.listdir(run_dir) if name.endswith(".tmp"))
    for name in removed:
        os.remove(os.path.join(run_dir, name))
    done = repair_packed(run_dir, int(manifest["config"]["num_envs"]))
    episodes = len(open_run(run_dir))
    report = {
        "run": run_dir,
        "status_before": manifest["status"],
        "removed": removed,
        "episodes": episodes,
        "actions": done["actions"],
        "recovered_episodes": done["recovered_episodes"],
    }
    if manifest["status"] != "recording":
        report["changed"] = bool(removed or done["actions"])
        return report
    manifest.update(status="closed", completed_episodes=episodes)
    manifest.setdefault("incomplete_episodes", [])
    manifest["repaired"] = {
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "removed_files": removed,
        "actions": done["actions"],
        "note": "closed by forge-gpu repair after the recording process stopped without closing the run; "
        "every block written whole is published; episodes that were in progress were lost and are not listed",
    }
    write_json_atomic(path, manifest)
    report["changed"] = True
    return report
