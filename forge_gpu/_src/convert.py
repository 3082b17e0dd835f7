"""Convert a run between the packed layout (schema 2, docs/FORMAT.md) and schema 1 (FORMAT.md).

Every episode is read and checked, then written unchanged: the episodes of the new run read back equal,
bit for bit, to those of the old one. The new run is written into a temporary directory beside ``out``
and renamed to ``out`` only when complete. numpy, pyarrow and the standard library.
"""

from __future__ import annotations

import datetime
import os
import shutil
import uuid

import numpy as np

from forge_gpu._src.episode_format import (
    RUN_MANIFEST,
    episode_stem,
    make_marker,
    new_partial,
    publish_directory,
    write_json_atomic,
)
from forge_gpu._src.npz_writer import write_episode_file, write_marker_atomic
from forge_gpu._src.options import COMPRESSIONS_BY_FORMAT, FORMATS
from forge_gpu._src.packed import (
    COMMIT_LOG,
    LAYOUT,
    PackedWriter,
    arrow_schema,
    run_columns,
    stack_episodes,
)
from forge_gpu._src.packed import SCHEMA_VERSION as PACKED_SCHEMA_VERSION
from forge_gpu._src.reader import Episode, EpisodeReadOptions, is_dataset, open_run

#: Rows the packed writer appends at once while converting [bytes].
_BLOCK_BYTES = 8 << 20


def convert_run(run_dir: str | os.PathLike, out: str | os.PathLike, *, to: str, compression: str = "none") -> dict:
    """Write the episodes of the closed run ``run_dir`` as a new run ``out`` in format ``to``
    (``"packed"`` or ``"npz"``); return ``{"episodes": count, "out": out}``.

    ``compression``: packed ``none``, ``lz4`` or ``zstd``; npz ``none`` or ``deflate``. Raises
    ValueError for bad arguments, a run that is still recording, or invalid data; FileExistsError when
    ``out`` exists. Nothing is left at ``out`` unless the conversion completed.
    """
    if to not in FORMATS:
        raise ValueError(f"to must be one of {list(FORMATS)}, got {to!r}")
    allowed = COMPRESSIONS_BY_FORMAT[to]
    if compression not in allowed:
        raise ValueError(f"compression {compression!r}: converting to {to} takes {', '.join(allowed)}")
    run_dir, out = os.fspath(run_dir), os.fspath(out)
    if is_dataset(run_dir):
        raise ValueError(f"{run_dir} is a dataset root; convert its runs one by one")
    run = open_run(run_dir)
    if run.manifest["status"] == "recording":
        raise ValueError(
            f"{run_dir}: the run is still recording (or its process was killed: run forge-gpu repair {run_dir})"
        )
    manifest = dict(run.manifest)
    manifest.update(
        run_id=uuid.uuid4().hex,
        status="closed",
        converted_from={
            "run_id": run.manifest["run_id"],
            "path": os.path.abspath(run_dir),
            "format": "npz" if run.manifest["schema_version"] == 1 else LAYOUT,
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        },
    )
    for key in ("layout", "recorder", "repaired"):
        manifest.pop(key, None)
    work = new_partial(out)
    try:
        episodes = run.read(list(range(len(run))), EpisodeReadOptions())
        if to == "npz":
            count = _write_npz(work, episodes, compression)
            manifest["schema_version"] = 1
        else:
            count = _write_packed(work, episodes, compression)
            manifest.update(schema_version=PACKED_SCHEMA_VERSION, layout=LAYOUT)
            manifest["recorder"] = {"compression": compression, "converted": True}
        manifest["completed_episodes"] = count
        write_json_atomic(os.path.join(work, RUN_MANIFEST), manifest)
        publish_directory(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return {"episodes": count, "out": out}


def _write_npz(directory: str, episodes, compression: str) -> int:
    count = 0
    for episode in episodes:
        base = os.path.join(directory, episode_stem(episode.env_id, episode.episode_id))
        frames = {f: np.concatenate([episode.obs[f], episode.next[f][-1:]]) for f in episode.obs}
        write_episode_file(
            base + ".npz",
            frames,
            episode.action,
            episode.reward,
            episode.terminated,
            episode.truncated,
            compression=compression,
        )
        write_marker_atomic(base + ".json", make_marker(episode.env_id, episode.episode_id, episode.steps))
        count += 1
    return count


def _write_packed(directory: str, episodes, compression: str) -> int:
    """Lay the episodes end to end (stride 1), a block of whole episodes at a time."""
    writer = None
    block: list[Episode] = []
    block_bytes = count = 0
    try:
        for episode in episodes:
            if writer is None:
                writer = _packed_writer(directory, episode, compression)
            block.append(episode)
            block_bytes += sum(a.nbytes for a in episode.obs.values()) + episode.action.nbytes
            if block_bytes >= _BLOCK_BYTES:
                count += _write_block(writer, block)
                block, block_bytes = [], 0
        if block:
            count += _write_block(writer, block)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:  # no episode: an empty commit log
        open(os.path.join(directory, COMMIT_LOG), "wb").close()
    return count


def _packed_writer(directory: str, episode: Episode, compression: str) -> PackedWriter:
    fields = {f: (a.shape[1:], a.dtype) for f, a in episode.obs.items()}
    columns = run_columns(fields, episode.action.shape[1], episode.action.dtype, episode.reward.dtype)
    return PackedWriter(directory, arrow_schema(columns), compression=compression)


def _write_block(writer: PackedWriter, block: list[Episode]) -> int:
    _, columns, episodes = stack_episodes(block)
    episodes["first_row"] += writer.rows
    writer.write(columns, episodes)
    return len(block)
