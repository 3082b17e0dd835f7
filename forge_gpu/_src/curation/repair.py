"""Repair a run left at ``status: recording`` by a killed process or a crash, or salvage a damaged one.

The format's own part (:meth:`RunFormat.repair`) publishes what was written whole and removes unpublished
leftovers. Schema 1: an episode file without a marker was never visible to readers and is removed. Packed
runs: the run is cut at its first committed block that fails its checksum (as after a power cut), the blocks
written whole but not yet committed are published (with the episodes that end in them) and torn bytes are cut
off; with ``salvage``, damaged blocks anywhere in the run are emptied instead and only the episodes with rows in
them are dropped. Then, whatever the format, stale temporary files are removed, the episodes are recounted, and
the manifest is closed (``repaired`` records when and what). An episode whose data checks is never deleted or
rewritten (but for those after a cut), and running it twice changes nothing.
"""

from __future__ import annotations

import datetime
import os

from forge_gpu._src.core.files import load_json, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST, validate_manifest
from forge_gpu._src.formats.registry import REPAIR_EXTRA_KEYS, REPAIR_KEYS, format_of


def repair_run(run_dir: str | os.PathLike, *, salvage: bool = False) -> dict:
    """Close an interrupted run (or, with ``salvage``, drop the damaged episodes of any run); return what was done:
    ``run``, ``status_before``, ``episodes`` (published now), the format's report (``removed``, the files removed,
    temporaries included; ``actions``; ``recovered_episodes``; ``cut``, the ``blocks``, ``rows`` and ``episodes``
    cut off or emptied as damaged; ``lost_episodes``, theirs as ``"env_id:episode_id"``) and ``changed``. Raises
    ValueError for a directory that is not a run, a format that cannot salvage, or a closed run with damaged
    blocks without ``salvage`` (nothing is changed then)."""
    run_dir = os.fspath(run_dir)
    path = os.path.join(run_dir, RUN_MANIFEST)
    manifest = load_json(path)
    validate_manifest(manifest, name=path)
    fmt = format_of(manifest, name=path)
    if salvage and not fmt.capabilities.salvage:
        raise ValueError(f"{run_dir}: the {fmt.name} format cannot salvage a run (nothing was changed)")
    temporaries = sorted(name for name in os.listdir(run_dir) if name.endswith(".tmp"))
    for name in temporaries:
        os.remove(os.path.join(run_dir, name))
    done = fmt.repair(run_dir, manifest, salvage=True) if salvage else fmt.repair(run_dir, manifest)
    if not isinstance(done, dict) or not set(REPAIR_KEYS) <= set(done) <= {*REPAIR_KEYS, *REPAIR_EXTRA_KEYS}:
        raise TypeError(f"format {fmt.name!r}: repair must return a dict with exactly the keys {list(REPAIR_KEYS)}")
    done = {**REPAIR_EXTRA_KEYS, **done}
    removed = sorted(temporaries + done["removed"])
    episodes = len(fmt.open(run_dir, manifest))
    report = {"run": run_dir, "status_before": manifest["status"], "episodes": episodes, **done, "removed": removed}
    lost = done["lost_episodes"]
    if manifest["status"] != "recording" and not lost:
        report["changed"] = bool(removed or done["actions"])
        return report
    if manifest["status"] == "recording":
        note = (
            "closed by forge-gpu repair after the recording process stopped without closing the run; every episode "
            f"its {fmt.published_by} published is kept; episodes that were in progress were lost and are not listed"
        )
    else:
        note = "salvaged by forge-gpu repair --salvage"
    if lost:
        note += (
            "; the episodes with data in damaged blocks (lost_episodes) were dropped; stats.json, where the run has "
            "one, still counts them (forge-gpu stats --recompute)"
        )
    earlier = manifest.get("repaired")
    manifest.update(status="closed" if manifest["status"] == "recording" else manifest["status"])
    manifest.update(completed_episodes=episodes)
    manifest.setdefault("incomplete_episodes", [])
    manifest["repaired"] = {
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "removed_files": removed,
        **({"actions": done["actions"]} if done["actions"] else {}),
        **({"lost_episodes": lost} if lost else {}),
        "note": note,
        **({"earlier": earlier} if earlier else {}),
    }
    write_json_atomic(path, manifest)
    report["changed"] = True
    return report
