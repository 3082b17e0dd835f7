"""``repair --salvage`` of a packed run (docs/FORMAT.md "Repair"): every committed block that fails its checks is
replaced, in place, by an empty block of the same rows and bytes, and the episodes with a row in one are dropped
from the commit log (each line names the ones it drops); every block that checks keeps its bytes, and every
episode whose blocks all check stays published.

numpy, pyarrow, crc32c (its C function, formats/packed/checksum.py) and the standard library.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

import numpy as np

from forge_gpu._src.formats.packed.blocks import PackedRun, in_rows
from forge_gpu._src.formats.packed.checksum import crc32c
from forge_gpu._src.formats.packed.commits import DROPPED, EPISODES, append_commit, encode_episodes, open_commit_log
from forge_gpu._src.formats.packed.identity import COMMIT_LOG, COMPRESSIONS, segment_name
from forge_gpu._src.formats.packed.scan import run_schema
from forge_gpu._src.formats.packed.schema import empty_arrays, pyarrow, to_record_batch

END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def episode_names(episodes: Mapping[str, np.ndarray], select: np.ndarray) -> list[str]:
    """``"env_id:episode_id"`` of the ``select``-ed entries (a mask) of ``episodes``."""
    pairs = zip(episodes["env_id"][select].tolist(), episodes["episode_id"][select].tolist(), strict=True)
    return [f"{e}:{k}" for e, k in pairs]


def salvage_blocks(run: PackedRun, bad: list[int], manifest: dict, report: dict) -> None:
    """Empty the committed blocks ``bad`` (indices into ``run.commits``, each failing its checks) of ``run`` and drop
    the episodes with a row in one; fill ``report``'s ``cut``, ``lost_episodes`` and ``actions``.

    Each damaged block is overwritten by a block of as many zero rows in as many bytes (its record batch's copy of
    episodes: the ones its line published, all dropped), its line given the new checksum; then the log is
    rewritten, as a whole (a temporary file renamed over it), without the dropped episodes, each line listing
    under ``dropped`` those of its block's copy that it no longer publishes. A crash before the rename leaves the
    old log, whose lines still name the damaged blocks: salvage again. ValueError where an empty block does not fit
    in a damaged one's bytes."""
    pa = pyarrow()
    commits = run.commits
    spans = [(commits[k]["first_row"], commits[k]["first_row"] + commits[k]["rows"]) for k in bad]
    lost = in_rows(run.episodes, spans)
    compression = manifest.get("recorder", {}).get("compression", "none")
    if compression not in COMPRESSIONS:
        compression = "none"
    checksums = {}
    try:
        for k in bad:
            commit = commits[k]
            schema, _ = run_schema(run, commit["segment"])
            block = _empty_block(schema, commit, encode_episodes(commit["episodes"]), compression)
            path = os.path.join(run.directory, segment_name(commit["segment"]))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
            try:
                view = memoryview(block)
                while view:
                    view = view[os.pwrite(fd, view, commit["offset"] + len(block) - len(view)) :]
            finally:
                os.close(fd)
            checksums[k] = crc32c(block)
    except pa.ArrowException as exc:
        raise ValueError(f"{run.directory}: cannot write an empty block: {exc}") from exc
    temporary = COMMIT_LOG + ".tmp"
    with contextlib.suppress(FileNotFoundError):  # left by a salvage that was stopped
        os.remove(os.path.join(run.directory, temporary))
    log = open_commit_log(run.directory, create=True, name=temporary)
    bounds = np.searchsorted(run.episode_commit, np.arange(len(commits) + 1))  # each line's episodes
    try:
        for k, commit in enumerate(commits):
            gone = lost[bounds[k] : bounds[k + 1]]
            entry = {key: values[~gone] for key, values in commit["episodes"].items()}
            dropped = commit.get(DROPPED, {"env_id": np.zeros(0, np.int64), "episode_id": np.zeros(0, np.int64)})
            dropped = {key: np.concatenate([dropped[key], commit["episodes"][key][gone]]) for key in dropped}
            append_commit(
                log,
                segment=commit["segment"],
                offset=commit["offset"],
                length=commit["length"],
                first_row=commit["first_row"],
                rows=commit["rows"],
                episodes=entry,
                crc32c=checksums.get(k, commit.get("crc32c")),
                dropped=dropped if len(dropped["env_id"]) else None,
            )
    finally:
        os.close(log)
    os.replace(os.path.join(run.directory, temporary), os.path.join(run.directory, COMMIT_LOG))
    names = episode_names(run.episodes, lost)
    rows = sum(commits[k]["rows"] for k in bad)
    report["cut"] = {"blocks": len(bad), "rows": rows, "episodes": len(names)}
    report["lost_episodes"] = names
    where = ", ".join(f"{segment_name(commits[k]['segment'])}:{commits[k]['offset']}" for k in bad[:5])
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    report["actions"].append(
        f"salvaged: emptied {len(bad)} damaged block(s) ({where}{more}; {rows} rows) in place and dropped the "
        f"{len(names)} episode(s) with rows in them from {COMMIT_LOG}"
    )


def _empty_block(schema, commit: Mapping, episodes: str, compression: str) -> bytes:
    """A block of ``commit["rows"]`` zero rows of ``schema`` in exactly ``commit["length"]`` bytes (the stream's
    schema message first where the block begins its segment), its record batch's copy of episodes ``episodes`` (a
    JSON text): the batch's message is padded after its metadata, which Arrow readers skip."""
    pa = pyarrow()
    rows = commit["rows"]
    least = -(-rows * _row_bits(schema) // (8 * _MOST_SHRUNK[compression]))  # bytes, however well zeros compress
    if least > commit["length"] or commit["length"] >= 1 << 31:  # refused before the rows are allocated; the
        # padding goes into the batch message's metadata, whose size is a 32-bit integer
        raise ValueError(
            f"segment {commit['segment']}: the damaged block at offset {commit['offset']} (commit line "
            f"{commit['line']}) holds {commit['length']} bytes; an empty block of its {rows} rows takes at least "
            f"{least}: it cannot be emptied in place"
        )
    batch = to_record_batch(schema, empty_arrays(schema, rows))
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    with pa.ipc.new_stream(sink, schema, options=options) as writer:
        writer.write_batch(batch, {EPISODES: episodes})
    data = sink.getvalue().to_pybytes()
    source = pa.BufferReader(data)
    pa.ipc.read_message(source)
    head = source.tell()  # the schema message
    pa.ipc.read_message(source)
    message = data[head : source.tell()]
    head = head if commit["offset"] == 0 else 0
    pad = commit["length"] - head - len(message)
    if pad < 0 or pad % 8:
        raise ValueError(
            f"segment {commit['segment']}: the damaged block at offset {commit['offset']} (commit line "
            f"{commit['line']}) holds {commit['length']} bytes; an empty block of its {rows} rows takes "
            f"{head + len(message)}: it cannot be emptied in place"
        )
    size = int.from_bytes(message[4:8], "little")  # the metadata's, after the continuation marker
    padded = message[:4] + (size + pad).to_bytes(4, "little") + message[8 : 8 + size] + bytes(pad) + message[8 + size :]
    return data[:head] + padded


#: The most a compression shrinks zeros: zstd's run-length blocks hold 128 KiB in 4 bytes; an lz4 frame's bytes
#: hold at most 255 times as many.
_MOST_SHRUNK = {"none": 1, "lz4": 255, "zstd": 32768}


def _row_bits(schema) -> int:
    """The bits one zero row of ``schema`` takes before compression: a flag's bit, a value's bytes, and an encoded
    column's 32-bit offset."""
    pa = pyarrow()
    bits = 0
    for field in schema:
        kind = field.type
        if pa.types.is_binary(kind):
            bits += 32
            continue
        size = kind.list_size if pa.types.is_fixed_size_list(kind) else 1
        kind = kind.value_type if pa.types.is_fixed_size_list(kind) else kind
        bits += size * kind.bit_width
    return bits
