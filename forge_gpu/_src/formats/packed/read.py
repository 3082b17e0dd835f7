"""Reading a packed run (schema 2, docs/FORMAT.md): its committed blocks, the run as its commit log describes it,
its episodes gathered and checked, each block read on its own for verify and repair, and the reader.

Reading a packed run's blocks (schema 2, docs/FORMAT.md): the committed record batches of its segments, the
run as its commit log describes it (:class:`PackedRun`), and its episodes gathered from the blocks in one
streaming pass, checked whole-column.

numpy, pyarrow and the standard library; no Warp, Newton or torch.

Reading a packed run's committed blocks one by one, each on its own (docs/FORMAT.md "Checksums"): ``verify``
(:func:`verify_packed`, the packed reader's ``verify``) and ``repair`` find every block that fails its checks, not
only the first, and read at the disk's sequential rate, from one reused buffer, with the next block read ahead.

numpy, pyarrow, crc32c (its C function, formats/packed/layout.py) and the standard library.

Reading a packed run (schema 2, docs/FORMAT.md) as the reader's Episodes: the commit log's episodes (and their
params), gathered from the blocks (their observation, transition and asked-for state columns) and checked
whole-column, and, for random access, the blocks memory-mapped.
numpy, pyarrow and the standard library.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from forge_gpu._src.core.codecs import EncodedFrames, is_image
from forge_gpu._src.core.episode import Episode, EpisodeReadOptions, chosen, episode_stem
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS, check_layout, check_spec_layout, observation_layout
from forge_gpu._src.core.frames import take_rows
from forge_gpu._src.core.instructions import INSTRUCTION
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.core.rules import check_frames
from forge_gpu._src.formats.packed.commits import (
    CHECKSUM,
    DROPPED,
    EPISODE_KEYS,
    PARAMS_PREFIX,
    check_block_episodes,
    read_commits,
)
from forge_gpu._src.formats.packed.identity import (
    CHECKSUMS_VERSION,
    COMMIT_LOG,
    INSTRUCTIONS_VERSION,
    layout_version,
    segment_name,
)
from forge_gpu._src.formats.packed.layout import (
    CODECS,
    PACKED_LAYOUT,
    TRANSITION_COLUMNS,
    EncodedColumn,
    arrow_schema,
    block_arrays,
    crc32c,
    pyarrow,
    run_columns,
    run_groups,
    schema_codecs,
    schema_columns,
    stored_codecs,
)


def read_blocks(run: PackedRun, commits: list[dict], names: list[str], *, verify: bool = True):
    """Yield ``(commit, {column: [rows, ...] array})`` for every committed block of ``run``, reading only ``names``.

    Each segment is memory-mapped and read as an Arrow stream up to its last committed block; the stream's position
    after each block must match the commit log. With ``verify`` (and a run whose blocks carry checksums) each block's
    bytes are checked against its line's checksum before anything is read from them (the next block's checksum is
    computed on a second thread while the caller works on this one), and its line's episodes against the block's
    copy (:func:`commits.check_block_episodes`). Raises ValueError naming the segment on any disagreement.
    """
    pa = pyarrow()
    verify = verify and run.checksums
    by_segment: dict[int, list[dict]] = {}
    for commit in commits:
        by_segment.setdefault(commit["segment"], []).append(commit)
    for segment, blocks in by_segment.items():
        path = os.path.join(run.directory, segment_name(segment))
        try:
            source = pa.memory_map(path)
        except (OSError, pa.ArrowException) as exc:
            raise ValueError(f"{path}: cannot open segment: {exc}") from exc
        with source:
            end = blocks[-1]["offset"] + blocks[-1]["length"]
            if source.size() < end:
                raise ValueError(f"{path}: holds {source.size()} bytes; the commit log says at least {end}")
            try:
                whole = source.read_buffer(end) if verify else None  # zero-copy: the mapped bytes
                checksums = _checksums_ahead(whole, blocks) if verify else None
                if verify:  # the first block holds the schema message: nothing of it is read unchecked
                    check_checksum(next(checksums), blocks[0], path=path)
                source.seek(0)
                schema = pa.ipc.read_schema(source)
                layout = schema_columns(schema, name=path), schema_codecs(schema, name=path)  # checked first
                indices = [schema.get_field_index(n) for n in names]
                missing = [n for n, i in zip(names, indices, strict=True) if i < 0]
                if missing:
                    raise ValueError(f"{path}: lacks column(s) {missing}")
                source.seek(0)
                options = pa.ipc.IpcReadOptions(included_fields=indices, use_threads=False)
                reader = pa.ipc.open_stream(source, options=options)
                for k, commit in enumerate(blocks):
                    if verify and k:
                        check_checksum(next(checksums), commit, path=path)
                    batch, metadata = reader.read_next_batch_with_custom_metadata()
                    check_batch(batch, source.tell() - commit["offset"], commit)
                    if verify:
                        check_block_episodes(
                            commit, metadata or {}, run.groups["params"], where=block_where(path, commit)
                        )
                    yield commit, block_arrays(batch, names, schema, name=path, layout=layout)
            except (pa.ArrowException, StopIteration, OSError, EOFError) as exc:
                raise ValueError(f"{path}: cannot read segment: {type(exc).__name__}: {exc}") from exc
            except ValueError as exc:
                raise ValueError(str(exc) if str(exc).startswith(path) else f"{path}: {exc}") from exc


def block_where(path: str, commit: dict) -> str:
    """A block in messages: its segment file, its offset and the commit line that publishes it."""
    return f"{path}: the block at offset {commit['offset']} (commit line {commit['line']})"


#: Blocks of at least this many bytes have their checksum computed ahead, on a second thread; for smaller ones handing
#: the work over costs more than it saves (bench/packed.py's reader figures).
_AHEAD_BYTES = 1 << 20


def _checksums_ahead(whole, blocks: list[dict]) -> Iterator[int]:
    """The CRC32C of each of ``blocks`` (commit lines of one segment) in ``whole`` (the segment's mapped bytes); a
    large one's computed on a second thread while the previous block is being read (crc32c lets go of the GIL)."""
    if all(commit["length"] < _AHEAD_BYTES for commit in blocks[1:]):  # no thread (nor its module) for small ones
        yield from (crc32c(whole.slice(commit["offset"], commit["length"])) for commit in blocks)
        return
    import concurrent.futures  # 3 ms of a first read, needed only for large blocks

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forge-gpu-crc32c") as pool:
        ahead = None
        for k, commit in enumerate(blocks):
            found = ahead.result() if ahead else crc32c(whole.slice(commit["offset"], commit["length"]))
            after = blocks[k + 1] if k + 1 < len(blocks) else None
            big = after is not None and after["length"] >= _AHEAD_BYTES
            ahead = pool.submit(crc32c, whole.slice(after["offset"], after["length"])) if big else None
            yield found


def check_checksum(found: int, commit: dict, *, path: str) -> None:
    """``found``, the CRC32C of the block's bytes, must be the one its commit line holds: ValueError naming the
    segment file, the block's offset and the line otherwise."""
    if found != commit[CHECKSUM]:
        raise ValueError(
            f"{block_where(path, commit)} fails its checksum: its bytes have CRC32C {found}, the line says "
            f"{commit[CHECKSUM]}"
        )


def check_batch(batch, length: int, commit: dict) -> None:
    """A block's record batch, read from ``length`` bytes, must be the one its commit line describes, and valid."""
    if length != commit["length"] or batch.num_rows != commit["rows"]:
        raise ValueError(
            f"block at offset {commit['offset']} has {batch.num_rows} rows ending at byte "
            f"{commit['offset'] + length}; the commit log says {commit['rows']} rows ending at "
            f"{commit['offset'] + commit['length']}"
        )
    batch.validate(full=True)


def segment_schema(run_dir: str, segment: int):
    """The Arrow schema of one segment, checked (ValueError naming the file)."""
    pa = pyarrow()
    path = os.path.join(run_dir, segment_name(segment))
    try:
        with pa.memory_map(path) as source:
            schema = pa.ipc.read_schema(source)
        return schema, schema_columns(schema, name=path)
    except (OSError, pa.ArrowException, EOFError, ValueError) as exc:  # ValueError: e.g. names that are not UTF-8
        message = str(exc) if str(exc).startswith(path) else f"{path}: cannot read the segment's schema: {exc}"
        raise ValueError(message) from exc


#: Columns the episode checks (:func:`core.rules.check_frames`) read whatever a projection asks for.
CHECK_COLUMNS = (*(f"obs/{f}" for f in BOOKKEEPING_FIELDS), *TRANSITION_COLUMNS)


class PackedRun:
    """The committed episodes of one packed run, from its commit log (checked against its run.json, ``manifest``);
    no segment is read until asked.

    ``episodes`` maps ``env_id``, ``episode_id``, ``steps``, ``first_row`` and ``stride`` to int64 arrays
    with one entry per episode, in commit order (the run's reading order), and ``params/<name>`` to the
    episodes' params (one row each) where the run has them, and ``instruction`` to each one's instruction (an object
    array of strings: the commit lines' from layout 4 on, the run's ``env_spec.instruction`` before). ``groups`` is
    :func:`layout.run_groups`'s; ``version`` the run's layout_version; ``checksums`` whether its blocks carry
    checksums (layout 3 on), ``instructions`` whether its lines hold instructions (layout 4 on).
    """

    def __init__(self, run_dir: str, manifest: dict):
        self.directory = run_dir
        self.manifest = manifest
        self.groups = run_groups(run_dir, manifest)
        self.version = layout_version(manifest, name=os.path.join(run_dir, RUN_MANIFEST))
        self.checksums = self.version >= CHECKSUMS_VERSION  # older runs are read unverified
        self.codecs = stored_codecs(manifest, name=os.path.join(run_dir, RUN_MANIFEST))  # column -> CodecSpec
        self.instructions = self.version >= INSTRUCTIONS_VERSION
        self.commits, self.torn = read_commits(
            run_dir, self.groups["params"], checksums=self.checksums, instructions=self.instructions
        )
        self.rows = sum(c["rows"] for c in self.commits)
        params = self.groups["params"]
        empty = {k: np.zeros(0, np.int64) for k in EPISODE_KEYS}
        empty.update({INSTRUCTION: np.zeros(0, object)} if self.instructions else {})
        empty.update({PARAMS_PREFIX + n: np.zeros((0, *shape), dtype) for n, (shape, dtype) in params.items()})
        self.episodes = {
            k: np.concatenate([c["episodes"][k] for c in self.commits]) if self.commits else values
            for k, values in empty.items()
        }
        if not self.instructions:  # an older run: every episode has the run's instruction
            instruction = manifest["env_spec"].get("instruction", "")
            self.episodes[INSTRUCTION] = np.full(len(self.episodes["steps"]), instruction, dtype=object)
        counts = [len(c["episodes"]["steps"]) for c in self.commits]
        self.episode_commit = np.repeat(np.arange(len(counts)), counts)  # the commit publishing each episode
        pairs = self.episodes["env_id"] * (1 << 32) + self.episodes["episode_id"]
        ordered = np.sort(pairs)  # not np.unique, which loads numpy.ma (6 ms of a first read)
        if (ordered[1:] == ordered[:-1]).any():
            raise ValueError(f"{os.path.join(run_dir, COMMIT_LOG)}: an (env_id, episode_id) pair is committed twice")

    def __len__(self) -> int:
        return len(self.episodes["steps"])

    def columns(self, *, verify: bool = True) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """column -> (per-row shape, dtype) of the run's segments (all must agree); {} with no commit. With
        ``verify`` (and checksums), each segment's first block, which holds its schema, is checked first."""
        found = None
        firsts = {c["segment"]: c for c in reversed(self.commits)}  # each segment's first block
        for segment in sorted(firsts):
            if verify and self.checksums:
                _check_first_block(self.directory, firsts[segment])
            schema, columns = segment_schema(self.directory, segment)
            path = os.path.join(self.directory, segment_name(segment))
            if schema_codecs(schema, name=path) != self.codecs:
                raise ValueError(f"{path}: its encoded columns differ from run.json's {CODECS}")
            for column, spec in self.codecs.items():  # an encoded column is an image its codec takes
                if not is_image(*columns[column]):
                    shape, dtype = columns[column]
                    raise ValueError(f"{path}: column {column!r} is encoded but {dtype}{list(shape)} is not an image")
                try:
                    spec.check(*columns[column], field=column)
                except ValueError as exc:
                    raise ValueError(f"{path}: {exc}") from exc
            if found is not None and columns != found:
                path = os.path.join(self.directory, segment_name(segment))
                raise ValueError(f"{path}: its columns differ from the run's first segment")
            found = columns
        return found or {}


def _check_first_block(run_dir: str, commit: dict) -> None:
    """The checksum of a segment's first block (``commit``), read from the file; ValueError naming it otherwise."""
    path, length = os.path.join(run_dir, segment_name(commit["segment"])), commit["length"]
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size  # the length is bounded by the file before anything is read
            if not 0 <= length <= size:
                raise ValueError(f"{path}: holds {size} bytes; the commit log says at least {length}")
            data = f.read(length)
    except OSError as exc:
        raise ValueError(f"{path}: cannot open segment: {exc}") from exc
    if len(data) < length:
        raise ValueError(f"{path}: holds {len(data)} bytes; the commit log says at least {length}")
    check_checksum(crc32c(data), commit, path=path)


def episode_rows(episodes: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the given episodes (entries as in the commit log, one per episode), concatenated, and
    the start of each episode's rows in them, the total appended: episode ``k``'s rows are
    ``rows[starts[k]:starts[k+1]]``."""
    counts = episodes["steps"] + 1
    starts = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    j = np.arange(starts[-1], dtype=np.int64) - np.repeat(starts[:-1], counts)
    rows = np.repeat(episodes["first_row"], counts) + j * np.repeat(episodes["stride"], counts)
    return rows, starts


def read_episode_tables(
    run: PackedRun, names: list[str], select: np.ndarray, *, verify: bool = True, encoded: tuple[str, ...] = ()
):
    """Yield the selected episodes (indices into ``run.episodes``, ascending) in groups, each as
    ``(episodes, gathered, starts)``: their entries, their rows of the ``names`` columns laid end to
    end (episode ``k``'s are ``[starts[k], starts[k+1])``), checked by :func:`core.rules.check_frames`, from
    blocks read by :func:`read_blocks` (``verify``: their checksums checked first).

    One pass over the blocks: a group is gathered as soon as the blocks holding its episodes' last rows
    are read, and blocks are let go once no later episode needs their rows, so memory holds about the
    rows one episode spans (an episode of T steps at stride N spans T * N rows), not the whole run.
    ``encoded``: encoded columns gathered as their payloads (:func:`gather_episodes`), which are not decoded, so
    not checked (a block's checksum covers its payloads' bytes).
    """
    if not select.size:
        return
    blocks = read_blocks(run, run.commits[: int(run.episode_commit[select[-1]]) + 1], names, verify=verify)
    for group, gathered, starts, _ in gather_episodes(run, blocks, select, encoded=encoded):
        check_frames({n: c for n, c in gathered.items() if n not in encoded}, group, starts, name=run.directory)
        yield group, gathered, starts


def gather_episodes(
    run: PackedRun, blocks: Iterable[tuple[dict, dict | None]], select: np.ndarray, *, encoded: tuple[str, ...] = ()
) -> Iterator:
    """The selected episodes (indices into ``run.episodes``, ascending) gathered, unchecked, from ``blocks`` (the
    run's committed blocks in order, from the first, as :func:`read_blocks` yields them: ``(commit, columns)``, the
    columns ``None`` for a block that could not be read) in groups: ``(episodes, gathered, starts, lost)``, as
    :func:`read_episode_tables`' groups, and ``lost``, the entries of the group's episodes that have a row in a
    block given as ``None`` (left out of the rest). Memory as :func:`read_episode_tables` says. The ``encoded``
    columns are gathered as their payloads, not decoded: an :class:`EncodedColumn` each."""
    if not select.size:
        return
    if (np.diff(select) < 0).any():
        raise ValueError("episodes must be read in ascending order")
    episodes = {key: values[select] for key, values in run.episodes.items()}
    commit = run.episode_commit[select]  # non-decreasing: the commit that publishes each episode
    first = episodes["first_row"]
    needed = np.minimum.accumulate(first[::-1])[::-1]  # the lowest row an episode from k on needs
    pieces: list[tuple[int, dict]] = []  # (first row, columns) of the blocks still needed
    unread: list[tuple[int, int]] = []  # rows [start, end) of the blocks that could not be read
    done = 0
    for number, (block_commit, block) in enumerate(blocks):
        if block is None:
            unread.append((block_commit["first_row"], block_commit["first_row"] + block_commit["rows"]))
        else:
            pieces.append((block_commit["first_row"], block))
        upto = int(np.searchsorted(commit, number, side="right"))  # episodes published by the blocks read
        if upto == done:
            continue
        group = {key: values[done:upto] for key, values in episodes.items()}
        missing = in_rows(group, unread)  # before any row is listed: a lost episode's steps are unchecked
        lost = {key: values[missing] for key, values in group.items()}
        if missing.any():
            group = {key: values[~missing] for key, values in group.items()}
        rows, starts = episode_rows(group)
        if rows.size and (not pieces or rows.min() < pieces[0][0]):
            raise ValueError(f"{run.directory}: an episode's first row precedes the rows the commit log allows")
        gathered = {}
        if rows.size:
            gathered = take_rows([(at, {n: c for n, c in cs.items() if n not in encoded}) for at, cs in pieces], rows)
            gathered.update({n: _take_payloads(pieces, rows, n) for n in encoded})
        yield group, gathered, starts, lost
        done = upto
        if done == select.size:
            return
        while len(pieces) > 1 and pieces[1][0] <= needed[done]:
            pieces.pop(0)
        unread = [(start, end) for start, end in unread if end > needed[done]]


def _take_payloads(pieces: list[tuple[int, dict]], rows: np.ndarray, name: str) -> EncodedColumn:
    """The payloads of encoded column ``name`` at the run rows ``rows``, from the blocks ``pieces`` (as
    :func:`core.frames.take_rows` takes them), in the order of ``rows``: an :class:`EncodedColumn`, nothing decoded."""
    which = np.searchsorted(np.array([at for at, _ in pieces], np.int64), rows, side="right") - 1
    parts, order = [], []
    for k in np.unique(which).tolist():
        at, columns = pieces[k]
        picked = np.flatnonzero(which == k)
        parts.append(columns[name].frames.take(rows[picked] - at))
        order.append(picked)
    column = pieces[int(which[0])][1][name]
    frames = EncodedFrames.concatenate(parts).take(np.argsort(np.concatenate(order), kind="stable"))
    return EncodedColumn(frames, column.frame_shape, column.dtype)


def in_rows(episodes: Mapping[str, np.ndarray], spans: list[tuple[int, int]]) -> np.ndarray:
    """Which of ``episodes`` (entries as in the commit log) have a row in one of ``spans`` (rows ``[start, end)``),
    found from their first row, steps and stride alone (no list of their rows is made)."""
    first, steps, stride = episodes["first_row"], episodes["steps"], episodes["stride"]
    hit = np.zeros(first.size, bool)
    for start, end in spans:
        j = np.maximum(0, -((first - start) // stride))  # the first step at or after ``start``
        hit |= (j <= steps) & (first + j * stride < end)
    return hit


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
    """The schema of ``segment`` and its columns (:func:`segment_schema`); where its own is unreadable (its
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
            if after["offset"] + after["length"] <= size:  # only bytes the segment holds
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


class PackedRunReader:
    """A packed run: its committed episodes in commit-log order."""

    def __init__(self, run_dir: str, manifest: dict):
        self.directory, self.manifest = run_dir, manifest
        self.run = PackedRun(run_dir, manifest)
        self.state = self.run.groups["state"]  # the state/<S> columns

    def __len__(self) -> int:
        return len(self.run)

    def ids(self, k: int) -> tuple[int, int, int]:
        """``(env_id, episode_id, steps)`` of the ``k``-th episode."""
        episodes = self.run.episodes
        return int(episodes["env_id"][k]), int(episodes["episode_id"][k]), int(episodes["steps"][k])

    def instructions(self) -> list[str]:
        """Every episode's instruction, in reading order (from the commit log)."""
        return self.run.episodes[INSTRUCTION].tolist()

    def groups(
        self, ks: list[int], options: EpisodeReadOptions, *, encoded: tuple[str, ...] = ()
    ) -> tuple[list[str], list[str], Iterator]:
        """The observation fields and state entries to read, and the selected episodes (``ks`` ascending) in checked
        groups: ``(episodes, gathered, starts)`` of :func:`read_episode_tables`."""
        fields, state = self._chosen(options)
        names = list(dict.fromkeys(_names(fields, state) + list(CHECK_COLUMNS)))
        select = np.asarray(ks, dtype=np.int64)
        columns = tuple(f"obs/{f}" for f in encoded)
        return fields, state, read_episode_tables(self.run, names, select, verify=options.verify, encoded=columns)

    def frame_table(
        self, ks: list[int], options: EpisodeReadOptions, *, mmap: bool = False
    ) -> tuple[list[str], list[tuple[int, dict]], dict]:
        """The episodes ``ks`` (ascending), checked, as a frame table (``RunReader.frame_table``).

        In memory: the episodes' rows gathered group by group and joined end to end (stride 1), one block.
        With ``mmap``: every committed block as ``(first row, {"obs/<F>", "state/<S>" asked for and "action":
        [rows, ...] array})``, the arrays read-only views of the memory-mapped segments, and the episodes' own
        entries; the blocks are mapped (and, with ``options.verify``, their checksums checked) once, and the
        episodes checked from them as :meth:`read` checks them. An encoded column is an ``EncodedColumn`` over the
        mapped payloads: a batch decodes only the frames it gathers. An uncompressed run only: compressed buffers
        cannot be mapped (ValueError naming the convert command that writes an uncompressed copy)."""
        if not mmap:
            fields, state, groups = self.groups(ks, options)
            rows = int((self.run.episodes["steps"][np.asarray(ks, np.int64)] + 1).sum())
            return (fields, *_joined(_names(fields, state) + list(TRANSITION_COLUMNS), groups, rows))
        self._check_mappable()
        fields, state = self._chosen(options)
        names = _names(fields, state) + ["action"]
        mapped = list(
            read_blocks(
                self.run, self.run.commits, list(dict.fromkeys(names + list(CHECK_COLUMNS))), verify=options.verify
            )
        )
        select = np.asarray(ks, dtype=np.int64)
        checked = [(commit, {n: columns[n] for n in CHECK_COLUMNS}) for commit, columns in mapped]  # no frame decoded
        for group, gathered, starts, _ in gather_episodes(self.run, checked, select):  # checked, then let go
            check_frames(gathered, group, starts, name=self.directory)
        blocks = [(commit["first_row"], {n: columns[n] for n in names}) for commit, columns in mapped]
        episodes = {key: values[select] for key, values in self.run.episodes.items()}
        return fields, blocks, episodes

    def read(self, ks: list[int], options: EpisodeReadOptions, *, encoded: tuple[str, ...] = ()) -> Iterator[Episode]:
        """The checked episodes ``ks`` (``RunReader.read``). ``encoded``: encoded observation fields to give as
        their stored payloads, an :class:`EncodedColumn` each (``obs`` and ``next`` alike), not decoded: a writer of
        the same codec copies them (``convert``); they are the payloads the run's checksums cover."""
        fields, state, groups = self.groups(ks, options, encoded=tuple(encoded))
        params = [k for k in self.run.episodes if k.startswith(PARAMS_PREFIX)]
        for episodes, gathered, starts in groups:
            for values in gathered.values():  # the episodes are views of one gather: an episode's obs and next share
                values.flags.writeable = False  # rows, so writing one would change the other (and its neighbours)
            for i in range(len(starts) - 1):
                s, e = int(starts[i]), int(starts[i + 1])
                env_id, episode_id = int(episodes["env_id"][i]), int(episodes["episode_id"][i])
                yield Episode(
                    env_id=env_id,
                    episode_id=episode_id,
                    steps=e - s - 1,
                    obs={f: _rows(gathered[f"obs/{f}"], s, e - 1) for f in fields},
                    next={f: _rows(gathered[f"obs/{f}"], s + 1, e) for f in fields},
                    action=gathered["action"][s + 1 : e],
                    reward=gathered["reward"][s + 1 : e],
                    terminated=gathered["terminated"][s + 1 : e],
                    truncated=gathered["truncated"][s + 1 : e],
                    path=os.path.join(self.directory, episode_stem(env_id, episode_id)),
                    state={n: gathered[f"state/{n}"][s:e] for n in state},
                    params={k[len(PARAMS_PREFIX) :]: episodes[k][i, ...] for k in params},
                    instruction=episodes[INSTRUCTION][i],
                )

    def verify(self) -> dict:
        """Every block and every episode checked (``RunReader.verify``): :func:`verify_packed`."""
        return verify_packed(self)

    def check_read(self, options: EpisodeReadOptions, *, mmap: bool = False) -> None:
        """What :meth:`frame_table` refuses of ``options`` before it reads a frame (``RunReader.check_read``)."""
        self._chosen(options)
        if mmap:
            self._check_mappable()

    def _check_mappable(self) -> None:
        compression = self.manifest.get("recorder", {}).get("compression", "none")
        if compression != "none":
            raise ValueError(
                f"{self.directory}: its segments are {compression}-compressed and cannot be memory-mapped; "
                f"write an uncompressed copy: forge-gpu convert {self.directory} OUT --to packed"
            )

    def _chosen(self, options: EpisodeReadOptions) -> tuple[list[str], list[str]]:
        """The observation fields and state entries to read, after checking the segments' columns against
        run.json."""
        columns = self.run.columns(verify=options.verify)
        spec = self.manifest["env_spec"]
        state = {f"state/{n}": layout for n, layout in self.state.items()}
        described = spec.get("observation") if isinstance(spec.get("observation"), dict) else {}
        present = sorted(c[4:] for c in columns if c.startswith("obs/")) if columns else sorted(described)
        if columns:
            check_layout(
                columns,
                PACKED_LAYOUT,
                name=self.directory,
                what="column",
                source="the packed layout",
                extra=("obs/", "state/"),
            )
            check_spec_layout(columns, spec, name=self.directory, what="column", action_dtype=np.float32)
            found = {k: v for k, v in columns.items() if k.startswith("state/")}
            check_layout(found, state, name=self.directory, what="column", source="run.json's env_spec.state")
        fields = chosen(options.observation_keys, present, what="field", name=self.directory)
        return fields, chosen(options.state, list(self.state), what="state entry", name=self.directory)


def _rows(column, start: int, stop: int):
    """Rows ``[start, stop)`` of a gathered column: a view of an array, or an encoded column's payloads."""
    if isinstance(column, EncodedColumn):
        return EncodedColumn(column.frames.take(np.arange(start, stop)), column.frame_shape, column.dtype)
    return column[start:stop]


def _names(fields: list[str], state: list[str]) -> list[str]:
    """The columns of the observation ``fields`` and the ``state`` entries."""
    return [f"obs/{f}" for f in fields] + [f"state/{n}" for n in state]


def _joined(names: list[str], groups: Iterator[tuple[dict, dict, np.ndarray]], rows: int) -> tuple[list, dict]:
    """The ``names`` columns of groups of gathered episodes (:func:`read_episode_tables`, ``rows`` rows in all) as
    one block of a frame table laid end to end (stride 1), and the episodes' entries in it (their params included).
    Each group is copied into the block as it comes and let go, so memory holds the block and one group, not every
    group beside their join."""
    columns: dict[str, np.ndarray] = {}
    entries, firsts, row = [], [], 0
    for group, gathered, starts in groups:
        if not columns:
            columns = {n: np.empty((rows, *gathered[n].shape[1:]), gathered[n].dtype) for n in names}
        count = int(starts[-1])
        for n in names:
            columns[n][row : row + count] = gathered[n]
        entries.append(group)
        firsts.append(starts[:-1] + row)
        row += count
    if row != rows:
        raise ValueError(f"gathered {row} rows of episodes whose index counts {rows}")
    keys = [k for k in entries[0] if k not in ("first_row", "stride")]
    episodes = {key: np.concatenate([e[key] for e in entries]) for key in keys}
    episodes["first_row"] = np.concatenate(firsts)
    episodes["stride"] = np.ones(episodes["steps"].size, np.int64)
    return [(0, columns)], episodes
