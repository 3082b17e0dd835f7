"""Reading a packed run's blocks (schema 2, docs/FORMAT.md): the committed record batches of its segments, the
run as its commit log describes it (:class:`PackedRun`), and its episodes gathered from the blocks in one
streaming pass, checked whole-column.

numpy, pyarrow and the standard library; no Warp, Newton or torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from forge_gpu._src.core.codecs import is_image
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS
from forge_gpu._src.core.frames import take_rows
from forge_gpu._src.core.instructions import INSTRUCTION
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.core.rules import check_frames
from forge_gpu._src.formats.packed.checksum import crc32c
from forge_gpu._src.formats.packed.commits import (
    CHECKSUM,
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
from forge_gpu._src.formats.packed.schema import (
    CODECS,
    TRANSITION_COLUMNS,
    block_arrays,
    pyarrow,
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
    :func:`schema.run_groups`'s; ``version`` the run's layout_version; ``checksums`` whether its blocks carry
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
    path = os.path.join(run_dir, segment_name(commit["segment"]))
    try:
        with open(path, "rb") as f:
            data = f.read(commit["length"])
    except OSError as exc:
        raise ValueError(f"{path}: cannot open segment: {exc}") from exc
    if len(data) < commit["length"]:
        raise ValueError(f"{path}: holds {len(data)} bytes; the commit log says at least {commit['length']}")
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


def read_episode_tables(run: PackedRun, names: list[str], select: np.ndarray, *, verify: bool = True):
    """Yield the selected episodes (indices into ``run.episodes``, ascending) in groups, each as
    ``(episodes, gathered, starts)``: their entries, their rows of the ``names`` columns laid end to
    end (episode ``k``'s are ``[starts[k], starts[k+1])``), checked by :func:`core.rules.check_frames`, from
    blocks read by :func:`read_blocks` (``verify``: their checksums checked first).

    One pass over the blocks: a group is gathered as soon as the blocks holding its episodes' last rows
    are read, and blocks are let go once no later episode needs their rows, so memory holds about the
    rows one episode spans (an episode of T steps at stride N spans T * N rows), not the whole run.
    """
    if not select.size:
        return
    blocks = read_blocks(run, run.commits[: int(run.episode_commit[select[-1]]) + 1], names, verify=verify)
    for group, gathered, starts, _ in gather_episodes(run, blocks, select):
        check_frames(gathered, group, starts, name=run.directory)
        yield group, gathered, starts


def gather_episodes(run: PackedRun, blocks: Iterable[tuple[dict, dict | None]], select: np.ndarray) -> Iterator:
    """The selected episodes (indices into ``run.episodes``, ascending) gathered, unchecked, from ``blocks`` (the
    run's committed blocks in order, from the first, as :func:`read_blocks` yields them: ``(commit, columns)``, the
    columns ``None`` for a block that could not be read) in groups: ``(episodes, gathered, starts, lost)``, as
    :func:`read_episode_tables`' groups, and ``lost``, the entries of the group's episodes that have a row in a
    block given as ``None`` (left out of the rest). Memory as :func:`read_episode_tables` says."""
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
        yield group, take_rows(pieces, rows) if rows.size else {}, starts, lost
        done = upto
        if done == select.size:
            return
        while len(pieces) > 1 and pieces[1][0] <= needed[done]:
            pieces.pop(0)
        unread = [(start, end) for start, end in unread if end > needed[done]]


def in_rows(episodes: Mapping[str, np.ndarray], spans: list[tuple[int, int]]) -> np.ndarray:
    """Which of ``episodes`` (entries as in the commit log) have a row in one of ``spans`` (rows ``[start, end)``),
    found from their first row, steps and stride alone (no list of their rows is made)."""
    first, steps, stride = episodes["first_row"], episodes["steps"], episodes["stride"]
    hit = np.zeros(first.size, bool)
    for start, end in spans:
        j = np.maximum(0, -((first - start) // stride))  # the first step at or after ``start``
        hit |= (j <= steps) & (first + j * stride < end)
    return hit
