"""Repairing a packed run (docs/FORMAT.md "Repair"): a crashed run cut at its first damaged block and what was
written whole published, and ``repair --salvage``.

Repairing a packed run a killed recorder or a crashed machine left (schema 2, docs/FORMAT.md "Repair"): the
torn last commit line cut off; the run cut at its first committed block that fails its checks (layout 3: its
checksum), or, with ``salvage``, every damaged block emptied and only the episodes with rows in one dropped
(below); the blocks written whole after the last line published (with the episodes their
record batches carry); torn bytes cut off and the stream ended.

numpy, pyarrow and the standard library.

``repair --salvage`` of a packed run (docs/FORMAT.md "Repair"): every committed block that fails its checks is
replaced, in place, by an empty block of the same rows and bytes, and the episodes with a row in one are dropped
from the commit log (each line names the ones it drops); every block that checks keeps its bytes, and every
episode whose blocks all check stays published.

numpy, pyarrow, crc32c (its C function, formats/packed/layout.py) and the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping

import numpy as np

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.formats.packed.commits import (
    DROPPED,
    EPISODES,
    PARAMS,
    append_commit,
    decode_episodes,
    decode_params,
    encode_episodes,
    open_commit_log,
    read_commits,
)
from forge_gpu._src.formats.packed.identity import COMMIT_LOG, COMPRESSIONS, SEGMENT_RE, segment_name
from forge_gpu._src.formats.packed.layout import (
    column_to_numpy,
    crc32c,
    empty_arrays,
    pyarrow,
    schema_columns,
    to_record_batch,
)
from forge_gpu._src.formats.packed.read import PackedRun, in_rows, run_schema, scan_blocks
from forge_gpu._src.formats.packed.write import ended_episodes


def repair_packed(run_dir: str, manifest: dict, *, salvage: bool = False) -> dict:
    """Make a packed run left by a killed process or a crash whole again; return what was done (``RunFormat.repair``'s
    report: ``removed`` files, ``actions``, ``recovered_episodes``; and ``cut``, the ``blocks``, ``rows`` and
    ``episodes`` cut or emptied, and ``lost_episodes``, theirs as ``"env_id:episode_id"``).

    Every committed block is checked first (:func:`read.scan_blocks`: its checksum, in a run that has them). A block
    that fails is treated as a torn one: in a run still at ``recording`` the run is cut at the first one (its line
    and every later one, its bytes and every later byte), which keeps every episode published before it; with
    ``salvage`` (any run) each failing block is instead replaced by an empty block of its size and only the
    episodes with a row in one are dropped from the log (:func:`salvage_blocks`). A closed run with a
    failing block is refused without ``salvage``, before anything changes.

    Then a torn last commit line is cut off; blocks written whole after the last line (the process died between
    the block and its line) are published with the episodes their record batch carries (layout 3; older: found
    from its flags at the recorder's stride, :func:`recorder_stride`, their params from its custom metadata);
    bytes after the last whole block are cut off and the stream is ended; segment files past it are removed.
    Blocks that check and their episodes are never changed. Running it again changes nothing.
    """
    pa = pyarrow()
    log = os.path.join(run_dir, COMMIT_LOG)
    created = not os.path.exists(log) and manifest["status"] == "recording"
    if created:  # the process stopped between run.json and the log: nothing was published
        open(log, "wb").close()
    damaged = _first_damaged_line(log)
    if damaged and not salvage and manifest["status"] != "recording":
        raise ValueError(
            f"{log}:{damaged}: a damaged commit line in a closed run; forge-gpu repair --salvage {run_dir} cuts the "
            "log before it, keeping every episode published before it (nothing was changed)"
        )
    cut_lines = _cut_lines(log, damaged) if damaged else 0
    run = PackedRun(run_dir, manifest)  # first: a layout this code does not know is left as it is
    if salvage and not run.checksums:
        raise ValueError(
            f"{run_dir}: layout_version {run.version} stores no checksums, so no damaged block can be told apart; "
            "salvage needs layout_version 3 (nothing was changed)"
        )
    rows_per_step = recorder_stride(manifest, name=os.path.join(run_dir, RUN_MANIFEST))
    bad = (
        [(k, error) for k, (_, _, error) in enumerate(scan_blocks(run, run.commits, [])) if error]
        if run.checksums
        else []
    )
    if bad and not salvage and manifest["status"] != "recording":
        raise ValueError(
            f"{run_dir}: {len(bad)} committed block(s) fail their checks (the first: {bad[0][1]}); a closed run is "
            f"not cut: forge-gpu repair --salvage {run_dir} keeps every episode whose blocks check "
            "(nothing was changed)"
        )
    report = {
        "removed": [],
        "actions": [],
        "recovered_episodes": 0,
        "cut": {"blocks": 0, "rows": 0, "episodes": 0},
        "lost_episodes": [],
    }
    actions = report["actions"]
    if created:
        actions.append(f"created the missing {COMMIT_LOG} (the recording stopped before it was created)")
    if cut_lines:
        actions.append(f"cut {COMMIT_LOG} before its damaged line {damaged} ({cut_lines} line(s) and their episodes)")
    with open(log, "rb") as f:
        data = f.read()
    whole = data[: data.rfind(b"\n") + 1]
    if len(whole) != len(data):
        os.truncate(log, len(whole))
        actions.append(f"cut a torn line of {len(data) - len(whole)} bytes off {COMMIT_LOG}")
    if bad and salvage:
        salvage_blocks(run, [k for k, _ in bad], manifest, report)
    elif bad:
        _cut(run, *bad[0], whole, report)
    commits, _ = read_commits(run_dir, run.groups["params"], checksums=run.checksums, instructions=run.instructions)
    segments = sorted(int(m.group(1)) for m in map(SEGMENT_RE.match, os.listdir(run_dir)) if m)
    segment = commits[-1]["segment"] if commits else 0
    committed = [c for c in commits if c["segment"] == segment]
    next_row = sum(c["rows"] for c in commits)
    writer_log = open_commit_log(run_dir)
    try:
        while segment in segments:
            path = os.path.join(run_dir, segment_name(segment))
            blocks, end, clean = _whole_blocks(path, len(committed), run)
            for offset, length, columns, metadata, checksum in blocks:
                rows = len(columns["obs/step_id"])
                ended = _ended(run, columns, metadata, next_row, rows_per_step, where=f"{path}: the block at {offset}")
                if ended is None:  # a layout-3 block without a readable copy of its episodes: torn
                    clean, end = False, offset
                    break
                append_commit(
                    writer_log,
                    segment=segment,
                    offset=offset,
                    length=length,
                    first_row=next_row,
                    rows=rows,
                    episodes=ended,
                    crc32c=checksum,
                )
                report["recovered_episodes"] += len(ended["steps"])
                next_row += rows
                actions.append(f"published a whole block of {rows} rows at {segment_name(segment)}:{offset}")
            if not clean:
                _end_segment(run_dir, segment, end, segments, actions, "a torn block")
                break
            segment, committed = segment + 1, []
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{run_dir}: cannot repair the segments: {exc}") from exc
    finally:
        os.close(writer_log)
    return report


def recorder_stride(manifest: dict, *, name: str) -> int:
    """The rows per step of the recorder that wrote the run: its ``config.num_envs`` (it appends one row per env
    and step; a converted run, stride 1, is always closed, so repair never needs its stride). ValueError
    naming ``name`` when run.json does not hold one."""
    num_envs = manifest["config"].get("num_envs")
    check_int(f"{name}: config.num_envs", num_envs, minimum=1)
    return int(num_envs)


def _cut(run: PackedRun, index: int, error: str, log: bytes, report: dict) -> None:
    """Cut ``run`` at its committed block ``index`` (which fails its checks: ``error``): the log's lines from it on
    (``log``: the log's whole lines), the segment's bytes from its offset on, and every later segment."""
    cut = run.commits[index:]
    first = cut[0]
    end = 0
    for _ in range(index):
        end = log.index(b"\n", end) + 1
    os.truncate(os.path.join(run.directory, COMMIT_LOG), end)
    segments = sorted(int(m.group(1)) for m in map(SEGMENT_RE.match, os.listdir(run.directory)) if m)
    lost = run.episode_commit >= index
    names = episode_names(run.episodes, lost)
    rows = sum(c["rows"] for c in cut)
    report["cut"] = {"blocks": len(cut), "rows": rows, "episodes": len(names)}
    report["lost_episodes"] = names
    report["actions"].append(
        f"cut the run at the block at {segment_name(first['segment'])}:{first['offset']} "
        f"(commit line {first['line']}), which fails its checks ({error}): {len(cut)} block(s), {rows} rows and "
        f"{len(names)} episode(s) cut"
    )
    _end_segment(run.directory, first["segment"], first["offset"], segments, report["actions"], "a damaged block")


def _end_segment(run_dir: str, segment: int, end: int, segments: list[int], actions: list, why: str) -> None:
    """Cut segment ``segment`` after byte ``end`` and end its stream (remove it where ``end`` is 0: it holds no whole
    block), and remove every later segment of ``segments``; say so in ``actions`` (``why``: what was cut)."""
    name = segment_name(segment)
    path = os.path.join(run_dir, name)
    if end == 0:
        if os.path.exists(path):
            os.remove(path)
            actions.append(f"removed {name} (it held no whole block)")
    else:
        with open(path, "r+b") as f:
            f.truncate(end)
            f.seek(end)
            f.write(END_OF_STREAM)
        actions.append(f"cut {name} after byte {end} ({why}) and ended its stream")
    for later in [s for s in segments if s > segment]:
        os.remove(os.path.join(run_dir, segment_name(later)))
        actions.append(f"removed {segment_name(later)} (after {why})")


def _ended(run: PackedRun, columns: dict, metadata: dict, first_row: int, stride: int, *, where: str) -> dict | None:
    """The episodes that end in a block written whole but never committed, starting at run row ``first_row``:
    layout 3, its record batch's copy of them (None where it has none that reads: the block is torn); older
    layouts, found from its flags at ``stride``, with the params of its custom metadata."""
    params = run.groups["params"]
    if run.checksums:
        rows = len(columns["obs/step_id"])
        try:
            entry = decode_episodes(
                json.loads(metadata[EPISODES.encode()]), where, params, instructions=run.instructions
            )
        except (KeyError, ValueError, UnicodeDecodeError):
            return None
        last = entry["first_row"] + entry["steps"] * entry["stride"]
        return entry if ((last >= first_row) & (last < first_row + rows)).all() else None
    ended = ended_episodes(columns, first_row, stride)
    if params:
        where = f"{where}: its custom metadata {PARAMS!r}"
        try:
            entry = json.loads(metadata.get(PARAMS.encode(), b"null"))
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON: {exc}") from exc
        ended.update(decode_params(entry, params, len(ended["steps"]), where=where))
    return ended


def _whole_blocks(path: str, skip: int, run: PackedRun) -> tuple[list[tuple], int, bool]:
    """The whole record batches of a segment after its first ``skip`` ones: ``(offset, length, columns, custom
    metadata, checksum)`` each (the checksum of its bytes where ``run`` has checksums, else None); the end of the
    last whole message; and whether the stream ended cleanly (no torn bytes)."""
    pa = pyarrow()
    with pa.memory_map(path) as source:
        size = source.size()
        try:
            schema = pa.ipc.read_schema(source)
            columns = schema_columns(schema, name=path)
            source.seek(0)
            reader = pa.ipc.open_stream(source)
        except (pa.ArrowException, EOFError, ValueError):
            return [], 0, size == 0
        end = 0  # a segment's first block starts at 0: it holds the stream's schema message too
        for _ in range(skip):
            reader.read_next_batch()
            end = source.tell()
        blocks = []
        while True:
            try:
                batch, metadata = reader.read_next_batch_with_custom_metadata()
                batch.validate(full=True)
            except StopIteration:
                return blocks, source.tell(), source.tell() == size
            except (pa.ArrowException, EOFError, ValueError, OSError):  # OSError: a message body cut short
                return blocks, end, False
            names = ["obs/env_id", "obs/episode_id", "obs/step_id", "terminated", "truncated"]
            found = {n: column_to_numpy(batch.column(n), *columns[n], name=path) for n in names}
            length = source.tell() - end
            checksum = None
            if run.checksums:
                here = source.tell()
                source.seek(end)
                checksum = crc32c(source.read_buffer(length))
                source.seek(here)
            blocks.append((end, length, found, dict(metadata or {}), checksum))
            end = source.tell()


def _first_damaged_line(log: str) -> int:
    """After a crash a line of the log can be damaged (zeroed, half written) while later ones reached the disk: the
    number of the first whole line that is not a JSON object, or 0."""
    with open(log, "rb") as f:
        lines = f.read().split(b"\n")[:-1]
    for number, line in enumerate(lines, 1):
        try:
            if isinstance(json.loads(line), dict):
                continue
        except (ValueError, UnicodeDecodeError):
            pass
        return number
    return 0


def _cut_lines(log: str, number: int) -> int:
    """Cut the log before its line ``number``; return how many whole lines were cut."""
    with open(log, "rb") as f:
        lines = f.read().split(b"\n")[:-1]
    os.truncate(log, sum(len(x) + 1 for x in lines[: number - 1]))
    return len(lines) - number + 1


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
        schemas = {k: run_schema(run, commits[k]["segment"])[0] for k in bad}
        for k in bad:  # every block's counts first: a refusal leaves every block as it was
            check_emptiable(schemas[k], commits[k], compression)
        for k in bad:
            commit, schema = commits[k], schemas[k]
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
    check_emptiable(schema, commit, compression)
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


def check_emptiable(schema, commit: Mapping, compression: str) -> None:
    """An empty block of ``commit["rows"]`` zero rows of ``schema`` could take ``commit["length"]`` bytes, as far as
    the counts tell, before anything is allocated: ValueError naming the block otherwise. Its rows take at least
    their bits over the most ``compression`` shrinks zeros; its padding goes into the batch message's metadata,
    whose size is a 32-bit integer."""
    rows = commit["rows"]
    least = -(-rows * _row_bits(schema) // (8 * _MOST_SHRUNK[compression]))
    if least > commit["length"] or commit["length"] >= 1 << 31:
        raise ValueError(
            f"segment {commit['segment']}: the damaged block at offset {commit['offset']} (commit line "
            f"{commit['line']}) holds {commit['length']} bytes; an empty block of its {rows} rows takes at least "
            f"{least}: it cannot be emptied in place"
        )


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
