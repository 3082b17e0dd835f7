"""Reading a packed run's committed blocks one by one, each on its own (docs/FORMAT.md "Checksums"): ``verify``
(:func:`verify_packed`, the packed reader's ``verify``) and ``repair`` find every block that fails its checks, not
only the first, and read at the disk's sequential rate, from one reused buffer, with the next block read ahead.

numpy, pyarrow, crc32c (its C function, formats/packed/checksum.py) and the standard library.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import numpy as np

from forge_gpu._src.core.episode import EpisodeReadOptions
from forge_gpu._src.core.fields import observation_layout
from forge_gpu._src.core.rules import check_frames
from forge_gpu._src.formats.packed.blocks import (
    CHECK_COLUMNS,
    PackedRun,
    block_where,
    check_batch,
    check_checksum,
    episode_rows,
    gather_episodes,
    segment_schema,
)
from forge_gpu._src.formats.packed.checksum import crc32c
from forge_gpu._src.formats.packed.commits import DROPPED, check_block_episodes
from forge_gpu._src.formats.packed.identity import segment_name
from forge_gpu._src.formats.packed.schema import arrow_schema, block_arrays, pyarrow, run_columns, stored_codecs


def scan_blocks(
    run: PackedRun, commits: list[dict], names: list[str]
) -> Iterator[tuple[dict, dict | None, str | None]]:
    """Every block of ``commits`` (lines of ``run``'s log, in log order), each read on its own: ``(commit,
    columns, None)`` for a block that passes its checks (its checksum where the run has them, its record batch as
    the line describes it, its copy of the line's episodes), with its ``names`` columns as numpy arrays that are
    views of a reused buffer, valid until the next block is asked for (copy what is kept); ``(commit, None,
    error)`` for one that does not, the error naming the segment file, the block's offset and its line."""
    pa = pyarrow()
    for segment, group in itertools.groupby(commits, key=lambda commit: commit["segment"]):
        blocks = list(group)
        path = os.path.join(run.directory, segment_name(segment))
        try:
            schema, columns = run_schema(run, segment)
            prefix = schema.serialize().to_pybytes()
            indices = [schema.get_field_index(n) for n in names]
            if min(indices, default=0) < 0:
                raise ValueError(f"{path}: lacks column(s) {[n for n, i in zip(names, indices, strict=True) if i < 0]}")
            fd = os.open(path, os.O_RDONLY)
        except (ValueError, OSError) as exc:
            for commit in blocks:
                yield commit, None, str(exc) if str(exc).startswith(path) else f"{path}: {exc}"
            continue
        options = pa.ipc.IpcReadOptions(included_fields=indices or None, use_threads=False)
        try:
            for commit, view, got in _read_ahead(fd, blocks, prefix):
                offset, length = commit["offset"], commit["length"]
                head = len(view) - length
                if got < length:
                    yield (
                        commit,
                        None,
                        f"{path}: holds {offset + got} bytes; the commit log says at least {offset + length}",
                    )
                    continue
                try:
                    if run.checksums:
                        check_checksum(crc32c(view[head:]), commit, path=path)
                    source = pa.BufferReader(pa.py_buffer(view))
                    batch, metadata = pa.ipc.open_stream(source, options=options).read_next_batch_with_custom_metadata()
                    check_batch(batch, source.tell() - head, commit)
                    if run.checksums:
                        where = block_where(path, commit)
                        check_block_episodes(commit, metadata or {}, run.groups["params"], where=where)
                    found = block_arrays(batch, names, schema, name=path)
                except (pa.ArrowException, StopIteration, EOFError, OSError, ValueError) as exc:
                    error = str(exc) if str(exc).startswith(path) else f"{block_where(path, commit)}: {exc}"
                    yield commit, None, error
                    continue
                yield commit, found, None
        finally:
            os.close(fd)


def run_schema(run: PackedRun, segment: int):
    """The schema of ``segment`` and its columns (:func:`blocks.segment_schema`); where its own is unreadable (its
    first block damaged), the first readable one of another segment of the run (all segments share one), so that
    the segment's later blocks are still read; where no segment's is (a crash lost every first block), the one
    run.json describes, as the recorder makes it."""
    try:
        return segment_schema(run.directory, segment)
    except ValueError:
        for other in sorted({c["segment"] for c in run.commits} - {segment}):
            try:
                return segment_schema(run.directory, other)
            except ValueError:
                continue
    spec = run.manifest["env_spec"]
    columns = run_columns(observation_layout(spec), spec["action_shape"][0], state=run.groups["state"])
    return arrow_schema(columns, stored_codecs(run.manifest, name=run.directory)), columns


#: Blocks asked of the disk ahead of the one being read (the device's queue stays full while a block is checked).
_AHEAD = 2


def _read_ahead(fd: int, blocks: list[dict], prefix: bytes) -> Iterator[tuple[dict, memoryview, int]]:
    """Each of ``blocks`` (commit lines of the segment open as ``fd``) read into one reused buffer, the next ones
    asked of the disk first (``POSIX_FADV_WILLNEED``: the kernel reads them while this one is checked; a second
    thread would need a free core and the GIL): ``(commit, view, bytes read)``, the view holding the segment's
    schema message ``prefix`` first for a block after the segment's first, and valid until the next block is
    asked for. A block that reaches past the segment's end is not read: its count is the bytes the segment holds
    from its offset, and its view is empty."""
    buffer = bytearray()
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    size = os.fstat(fd).st_size
    for k, commit in enumerate(blocks):
        head = len(prefix) if commit["offset"] else 0
        if commit["offset"] + commit["length"] > size:  # nothing allocated for bytes the segment does not hold
            yield commit, memoryview(b""), max(0, size - commit["offset"])
            continue
        if len(buffer) < head + commit["length"]:
            buffer = bytearray(head + commit["length"])  # a new one: views of the old one may still be held
        view = memoryview(buffer)[: head + commit["length"]]
        view[:head] = prefix[:head]
        for after in blocks[k + 1 : k + 1 + _AHEAD]:  # queued while this one is read and checked
            os.posix_fadvise(fd, after["offset"], after["length"], os.POSIX_FADV_WILLNEED)
        yield commit, view, _read_at(fd, view[head:], commit["offset"])


def _read_at(fd: int, view: memoryview, offset: int) -> int:
    """Read ``len(view)`` bytes of ``fd`` at ``offset`` into ``view`` (fewer at the end of the file): the count."""
    done = 0
    while done < len(view):
        count = os.preadv(fd, [view[done:]], offset + done)
        if count <= 0:
            break
        done += count
    return done


def verify_packed(reader) -> dict:
    """:meth:`PackedRunReader.verify`: the run read once, sequentially, block by block (:func:`scan_blocks`: every
    block's checksum, record batch and copy of its line's episodes), and its episodes checked whole-column as they
    complete (:func:`core.rules.check_frames` over the bookkeeping and transition columns; every raw float column
    of every block for finiteness), so memory holds about the rows one episode spans: the report
    ``formats.registry.VERIFY_KEYS`` name."""
    report = {"checksums": False, "blocks": 0, "episodes": 0, "bytes": 0, "dropped": 0}
    report.update(bad_blocks=[], bad_episodes=[], error=None)
    try:
        _verify(reader, report)
    except (ValueError, OSError) as exc:
        report["error"] = str(exc)
    return report


def _verify(reader, report: dict) -> None:
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
