"""Reading a packed run's committed blocks one by one, each on its own (docs/FORMAT.md "Checksums"): ``verify``
and ``repair`` find every block that fails its checks, not only the first, and read at the disk's sequential
rate, from one reused buffer, with the next block read ahead.

numpy, pyarrow, crc32c (its C function, formats/packed/checksum.py) and the standard library.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

from forge_gpu._src.core.fields import observation_layout
from forge_gpu._src.formats.packed.blocks import PackedRun, block_where, check_batch, check_checksum, segment_schema
from forge_gpu._src.formats.packed.checksum import crc32c
from forge_gpu._src.formats.packed.commits import check_block_episodes
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
