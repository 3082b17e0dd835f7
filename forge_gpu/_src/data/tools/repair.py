"""Repair a run left at ``status: recording`` by a killed process.

The format's own part (:meth:`RunFormat.repair`) publishes what was written whole and removes unpublished
leftovers. Schema 1: an episode file without a marker was never visible to readers and is removed. Packed
runs: the blocks written whole but not yet committed are published (with the episodes that end in them) and
torn bytes are cut off. Then, whatever the format, stale temporary files are removed, the episodes are
recounted, and the manifest is closed (``repaired`` records when and what). A published episode is never
deleted or rewritten, and running it twice changes nothing.
"""

from __future__ import annotations

import datetime
import os

from forge_gpu._src.core.files import load_json, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST, validate_manifest
from forge_gpu._src.formats.registry import REPAIR_KEYS, format_of


def repair_run(run_dir: str | os.PathLike) -> dict:
    """Close an interrupted run; return what was done: ``run``, ``status_before``, ``episodes`` (published now),
    the format's report (``removed``, the files removed, temporaries included; ``actions``;
    ``recovered_episodes``) and ``changed``. Raises ValueError for a directory that is not a run."""
    run_dir = os.fspath(run_dir)
    path = os.path.join(run_dir, RUN_MANIFEST)
    manifest = load_json(path)
    validate_manifest(manifest, name=path)
    fmt = format_of(manifest, name=path)
    temporaries = sorted(name for name in os.listdir(run_dir) if name.endswith(".tmp"))
    for name in temporaries:
        os.remove(os.path.join(run_dir, name))
    done = fmt.repair(run_dir, manifest)
    if not isinstance(done, dict) or set(done) != set(REPAIR_KEYS):
        raise TypeError(f"format {fmt.name!r}: repair must return a dict with exactly the keys {list(REPAIR_KEYS)}")
    removed = sorted(temporaries + done["removed"])
    episodes = len(fmt.open(run_dir, manifest))
    report = {"run": run_dir, "status_before": manifest["status"], "episodes": episodes, **done, "removed": removed}
    if manifest["status"] != "recording":
        report["changed"] = bool(removed or done["actions"])
        return report
    manifest.update(status="closed", completed_episodes=episodes)
    manifest.setdefault("incomplete_episodes", [])
    manifest["repaired"] = {
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "removed_files": removed,
        **({"actions": done["actions"]} if done["actions"] else {}),
        "note": "closed by forge-gpu repair after the recording process stopped without closing the run; "
        f"every episode its {fmt.published_by} published is kept; episodes that were in progress were lost and "
        "are not listed",
    }
    write_json_atomic(path, manifest)
    report["changed"] = True
    return report
