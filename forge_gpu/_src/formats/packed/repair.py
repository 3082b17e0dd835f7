"""Repairing a packed run a killed recorder or a crashed machine left (schema 2, docs/FORMAT.md "Repair"): the
torn last commit line cut off; the run cut at its first committed block that fails its checks (layout 3: its
checksum), or, with ``salvage``, every damaged block emptied and only the episodes with rows in one dropped
(:mod:`formats.packed.salvage`); the blocks written whole after the last line published (with the episodes their
record batches carry); torn bytes cut off and the stream ended.

numpy, pyarrow and the standard library.
"""

from __future__ import annotations

import json
import os

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.formats.packed.blocks import PackedRun
from forge_gpu._src.formats.packed.checksum import crc32c
from forge_gpu._src.formats.packed.commits import (
    EPISODES,
    PARAMS,
    append_commit,
    decode_episodes,
    decode_params,
    open_commit_log,
    read_commits,
)
from forge_gpu._src.formats.packed.identity import COMMIT_LOG, SEGMENT_RE, segment_name
from forge_gpu._src.formats.packed.salvage import END_OF_STREAM, episode_names, salvage_blocks
from forge_gpu._src.formats.packed.scan import scan_blocks
from forge_gpu._src.formats.packed.schema import column_to_numpy, pyarrow, schema_columns
from forge_gpu._src.formats.packed.writer import ended_episodes


def repair_packed(run_dir: str, manifest: dict, *, salvage: bool = False) -> dict:
    """Make a packed run left by a killed process or a crash whole again; return what was done (``RunFormat.repair``'s
    report: ``removed`` files, ``actions``, ``recovered_episodes``; and ``cut``, the ``blocks``, ``rows`` and
    ``episodes`` cut or emptied, and ``lost_episodes``, theirs as ``"env_id:episode_id"``).

    Every committed block is checked first (:func:`scan.scan_blocks`: its checksum, in a run that has them). A block
    that fails is treated as a torn one: in a run still at ``recording`` the run is cut at the first one (its line
    and every later one, its bytes and every later byte), which keeps every episode published before it; with
    ``salvage`` (any run) each failing block is instead replaced by an empty block of its size and only the
    episodes with a row in one are dropped from the log (:func:`salvage.salvage_blocks`). A closed run with a
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
