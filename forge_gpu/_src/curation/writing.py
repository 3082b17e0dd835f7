"""The writing of a new run from read episodes, shared by ``convert`` and the curation commands
(:mod:`curate`) and read by ``stats``: the source opened (a closed run only), the new run.json, the
codecs it is written with, the target checked, and the run written whole (a temporary directory renamed when
complete). numpy, pyarrow and the standard library."""

from __future__ import annotations

import datetime
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from forge_gpu._src.core.codec_specs import RAW, CodecSpec
from forge_gpu._src.core.episode import Episode
from forge_gpu._src.core.fields import without_groups
from forge_gpu._src.core.files import new_partial, publish, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.formats.npz.identity import INSTRUCTIONS_KEY
from forge_gpu._src.formats.packed.layout import CODECS, stored_codecs
from forge_gpu._src.formats.registry import FORMATS, RunReader, check_codecs, format_of
from forge_gpu._src.reading.runs import open_run


def open_closed_run(run_dir: str | os.PathLike) -> RunReader:
    """:func:`open_run` of a run that is not still recording (ValueError naming ``repair`` otherwise)."""
    run = open_run(run_dir)
    if run.manifest["status"] == "recording":
        raise ValueError(
            f"{run_dir}: the run is still recording (or its process was killed: run forge-gpu repair {run_dir})"
        )
    return run


def now() -> str:
    """The time now, UTC, to the second (ISO 8601): when a run was made from others."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def new_manifest(manifest: dict, to: str, **added) -> dict:
    """run.json of a new closed run in format ``to`` made from the run whose run.json is ``manifest``: a new
    ``run_id``, without the old format's own keys (but ``codecs``, which :func:`write_run` takes as the source's),
    with the env_spec describing only the state and params ``to`` stores, and the keys ``added``."""
    manifest = dict(manifest)
    manifest.update(run_id=uuid.uuid4().hex, status="closed", **added)
    old_keys = [k for k in format_of(manifest).identity if k != "schema_version"]
    for key in ("recorder", "repaired", "layout_version", INSTRUCTIONS_KEY, *old_keys):  # the old format's own keys
        manifest.pop(key, None)
    manifest["env_spec"] = without_groups(manifest["env_spec"], keep=FORMATS[to].capabilities.spec_groups)
    return manifest


def write_run(
    out: str,
    manifest: dict,
    episodes: Iterable[Episode],
    *,
    to: str,
    compression: str,
    before_publish: Callable[[str], None] | None = None,
    codecs: Mapping[str, Any] | None = None,
    carried_from: str | None = None,
) -> int:
    """Write ``episodes`` as the new run ``out`` in format ``to`` with the run.json ``manifest`` (its format keys
    and ``completed_episodes`` set here), in a temporary directory beside ``out`` renamed to it when whole
    (``before_publish(directory)`` is called just before, e.g. to add ``stats.json``); return the count.
    ``codecs`` (packed): field -> codec as ``RecordingOptions.codecs`` takes them; a field named nowhere keeps the
    codec of the source (``manifest["codecs"]``: raw where it has none). ``carried_from``: the source run whose
    task files (the folder run.json's ``scene_spec.stored`` lists, docs/FORMAT.md "The task's files") the new run
    carries, copied as they are. FileExistsError when ``out`` exists; nothing is left at ``out`` on any error."""
    request = codec_request(manifest.pop(CODECS, {}), codecs, to)
    work = new_partial(out)
    try:
        count, keys = FORMATS[to].write(work, episodes, compression, **({"codecs": request} if request else {}))
        manifest.update(keys, completed_episodes=count)
        if carried_from is not None:
            carry_task_files(carried_from, manifest, work)
        write_json_atomic(os.path.join(work, RUN_MANIFEST), manifest)
        if before_publish is not None:
            before_publish(work)
        publish(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return count


def carry_task_files(source: str, manifest: dict, work: str) -> None:
    """Copy the task's folder of the run ``source`` (``scene_spec.stored.folder`` of ``manifest``, its run.json)
    into ``work``, where the source has one (a run without it replays from where its task file was)."""
    stored = manifest.get("scene_spec", {}).get("stored")
    folder = stored.get("folder") if isinstance(stored, dict) else None
    if not isinstance(folder, str) or not folder or os.path.basename(folder) != folder or folder in (".", ".."):
        return
    if os.path.isdir(os.path.join(source, folder)):
        shutil.copytree(os.path.join(source, folder), os.path.join(work, folder))


def codec_request(source: Any, codecs: Mapping[str, Any] | None, to: str) -> dict:
    """The codecs a new run of format ``to`` is written with (field -> ``CodecSpec``, ``*`` raw): the source's
    (run.json's ``codecs``, column -> codec; none where ``codecs`` names ``*``), then ``codecs`` over them.
    ValueError for codecs asked of a format other than packed."""
    asked = check_codecs(codecs or {}, to)  # OptionError (a ValueError) naming a bad one
    if not FORMATS[to].capabilities.codecs:
        return {}
    kept = {
        column.removeprefix("obs/"): spec for column, spec in stored_codecs({CODECS: source}, name="run.json").items()
    }
    return {"*": CodecSpec(RAW), **({} if "*" in asked else kept), **asked}  # an asked "*" overrides the source


def check_target(to: str, compression: str) -> None:
    """``to`` must be a registered format and ``compression`` one it takes (ValueError naming both)."""
    if to not in FORMATS:
        raise ValueError(f"to must be one of {list(FORMATS)}, got {to!r}")
    allowed = FORMATS[to].capabilities.compressions
    if compression not in allowed:
        raise ValueError(f"compression {compression!r}: writing {to} takes {', '.join(allowed)}")
