"""Repairing a packed run a killed recorder left (schema 2, docs/FORMAT.md "Repair"): the torn last commit line
cut off, the blocks written whole after it published (with the params their record batches carry), torn bytes
cut off and the stream ended.

numpy, pyarrow and the standard library.
"""

from __future__ import annotations

import json
import os

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.formats.packed.commits import PARAMS, append_commit, decode_params, open_commit_log, read_commits
from forge_gpu._src.formats.packed.identity import COMMIT_LOG, SEGMENT_RE, segment_name
from forge_gpu._src.formats.packed.schema import column_to_numpy, pyarrow, run_groups, schema_columns
from forge_gpu._src.formats.packed.writer import ended_episodes

_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def repair_packed(run_dir: str, manifest: dict) -> dict:
    """Make a packed run left by a killed process whole again; return what was done (``RunFormat.repair``'s
    report: ``removed`` files, ``actions``, ``recovered_episodes``).

    A torn last commit line is cut off. Blocks that were written whole after the last commit line (the
    process died between the block and its line) are published with the episodes that end in them, at the
    recorder's stride (:func:`recorder_stride`), and their params from the record batch's custom metadata.
    Bytes after the last whole block (a torn block) are cut off and the stream is ended; segment files past it
    are removed. Published blocks and episodes are never changed. Running it again changes nothing.
    """
    pa = pyarrow()
    params = run_groups(run_dir, manifest)["params"]  # first: a layout this code does not know is left as it is
    rows_per_step = recorder_stride(manifest, name=os.path.join(run_dir, RUN_MANIFEST))
    log = os.path.join(run_dir, COMMIT_LOG)
    actions = []
    if not os.path.exists(log):  # the process stopped between run.json and the log: nothing was published
        open(log, "wb").close()
        actions.append(f"created the missing {COMMIT_LOG} (the recording stopped before it was created)")
    with open(log, "rb") as f:
        data = f.read()
    whole = data[: data.rfind(b"\n") + 1]
    if len(whole) != len(data):
        os.truncate(log, len(whole))
        actions.append(f"cut a torn line of {len(data) - len(whole)} bytes off {COMMIT_LOG}")
    commits, _ = read_commits(run_dir, params)
    segments = sorted(int(m.group(1)) for m in map(SEGMENT_RE.match, os.listdir(run_dir)) if m)
    segment = commits[-1]["segment"] if commits else 0
    committed = [c for c in commits if c["segment"] == segment]
    next_row = sum(c["rows"] for c in commits)
    recovered = 0
    writer_log = open_commit_log(run_dir)
    try:
        while segment in segments:
            path = os.path.join(run_dir, segment_name(segment))
            blocks, end, clean = _whole_blocks(path, len(committed))
            for offset, length, columns, metadata in blocks:
                rows = len(columns["obs/step_id"])
                ended = ended_episodes(columns, next_row, rows_per_step)
                if params:
                    where = f"{path}: the record batch at byte {offset}: its custom metadata {PARAMS!r}"
                    try:
                        entry = json.loads(metadata.get(PARAMS.encode(), b"null"))
                    except ValueError as exc:
                        raise ValueError(f"{where}: not JSON: {exc}") from exc
                    ended.update(decode_params(entry, params, len(ended["steps"]), where=where))
                append_commit(
                    writer_log,
                    segment=segment,
                    offset=offset,
                    length=length,
                    first_row=next_row,
                    rows=rows,
                    episodes=ended,
                )
                recovered += len(ended["steps"])
                next_row += rows
                actions.append(f"published a whole block of {rows} rows at {segment_name(segment)}:{offset}")
            if not clean and end == 0:
                os.remove(path)
                actions.append(f"removed {segment_name(segment)} (it held no whole block)")
            elif not clean:
                with open(path, "r+b") as f:
                    f.truncate(end)
                    f.seek(end)
                    f.write(_END_OF_STREAM)
                actions.append(f"cut {segment_name(segment)} after byte {end} (a torn block) and ended its stream")
            if not clean:
                for later in [s for s in segments if s > segment]:
                    os.remove(os.path.join(run_dir, segment_name(later)))
                    actions.append(f"removed {segment_name(later)} (after a torn block)")
                break
            segment, committed = segment + 1, []
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{run_dir}: cannot repair the segments: {exc}") from exc
    finally:
        os.close(writer_log)
    return {"removed": [], "actions": actions, "recovered_episodes": recovered}


def recorder_stride(manifest: dict, *, name: str) -> int:
    """The rows per step of the recorder that wrote the run: its ``config.num_envs`` (it appends one row per env
    and step; a converted run, stride 1, is always closed, so repair never needs its stride). ValueError
    naming ``name`` when run.json does not hold one."""
    num_envs = manifest["config"].get("num_envs")
    check_int(f"{name}: config.num_envs", num_envs, minimum=1)
    return int(num_envs)


def _whole_blocks(path: str, skip: int) -> tuple[list[tuple[int, int, dict, dict]], int, bool]:
    """The whole record batches of a segment after its first ``skip`` ones: ``(offset, length, columns, custom
    metadata)`` each; the end of the last whole message; and whether the stream ended cleanly (no torn bytes)."""
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
            blocks.append((end, source.tell() - end, found, dict(metadata or {})))
            end = source.tell()
