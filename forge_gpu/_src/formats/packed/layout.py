"""The packed run layout (schema 2, docs/FORMAT.md): frames in Arrow IPC stream segments, a commit log.

A run is a sequence of rows; each row is one observation frame plus the transition that led to it. An
episode of T transitions is the T + 1 rows ``first_row + j * stride`` (j = 0..T): the recorder appends
each step's batch of N env rows, so its episodes have stride N; a converted run lays episodes end to end
(stride 1). Rows go to append-only Arrow IPC stream files ("segments") that rotate by size; after each
record batch is written, one JSON line in ``commits.jsonl`` publishes it and the episodes that ended in
it. A reader trusts nothing past the last whole line.

numpy, pyarrow and the standard library; no Warp, Newton or torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from forge_gpu._src.core.fields import TRANSITIONS
from forge_gpu._src.formats.packed.identity import COMMIT_LOG, COMPRESSIONS, SEGMENT_NAME, SEGMENT_RE

#: The per-row transition columns (the core's transition fields).
TRANSITION_COLUMNS = TRANSITIONS
#: Keys of an episode entry in a commit line, each a list with one integer per episode.
EPISODE_KEYS = ("env_id", "episode_id", "steps", "first_row", "stride")
_COMMIT_KEYS = {"segment", "offset", "length", "first_row", "rows", "episodes"}


def _pa():
    import pyarrow as pa  # noqa: PLC0415 - the packed layout's one dependency, loaded where it is used

    return pa


def segment_name(index: int) -> str:
    return SEGMENT_NAME.format(index=index)


# -- the Arrow schema ---------------------------------------------------------------------------------


def run_columns(
    fields: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    action_dim: int,
    action_dtype: Any = np.float32,
    reward_dtype: Any = np.float32,
) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """column -> (per-row shape, dtype) of a run: ``obs/<field>`` per observation field, then the
    transition columns."""
    columns = {f"obs/{name}": (tuple(shape), np.dtype(dtype)) for name, (shape, dtype) in fields.items()}
    columns["action"] = ((action_dim,), np.dtype(action_dtype))
    columns["reward"] = ((), np.dtype(reward_dtype))
    columns["terminated"] = ((), np.dtype(np.bool_))
    columns["truncated"] = ((), np.dtype(np.bool_))
    return columns


def arrow_schema(columns: Mapping[str, tuple[tuple[int, ...], np.dtype]]):
    """The segments' schema of ``columns`` (:func:`run_columns`).

    A column of per-row shape ``()`` is a primitive column; any other shape is a fixed-size list of
    ``prod(shape)`` values (C order) whose field metadata ``shape`` holds the JSON list of the shape.
    """
    pa = _pa()
    out = []
    for name, (shape, dtype) in columns.items():
        kind = pa.from_numpy_dtype(dtype)
        if shape:
            kind = pa.list_(kind, int(np.prod(shape)))
        out.append(pa.field(name, kind, nullable=False, metadata={"shape": json.dumps(list(shape))}))
    return pa.schema(out)


def schema_columns(schema, *, name: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """column -> (per-row shape, numpy dtype) of a segment schema, checked; ValueError naming ``name``."""
    pa = _pa()
    columns = {}
    for field in schema:
        try:
            shape = tuple(json.loads((field.metadata or {}).get(b"shape", b"[]")))
            if not all(isinstance(s, int) and s >= 1 for s in shape):
                raise ValueError(f"bad shape {shape}")
            kind = field.type
            if shape:
                if not pa.types.is_fixed_size_list(kind) or kind.list_size != int(np.prod(shape)):
                    raise ValueError(f"type {kind} does not hold shape {list(shape)}")
                kind = kind.value_type
            dtype = np.dtype(kind.to_pandas_dtype())
        except (ValueError, TypeError, NotImplementedError, pa.ArrowException) as exc:
            raise ValueError(f"{name}: column {field.name!r}: {exc}") from exc
        if dtype.kind not in "biuf":
            raise ValueError(f"{name}: column {field.name!r} has non-numeric type {field.type}")
        columns[field.name] = (shape, dtype)
    return columns


def to_record_batch(schema, columns: Mapping[str, np.ndarray]):
    """A record batch of ``columns`` (name -> [R, ...] C-contiguous arrays), zero-copy but for the flags."""
    pa = _pa()
    arrays = []
    for field in schema:
        array = columns[field.name]
        if pa.types.is_fixed_size_list(field.type):
            flat = pa.array(array.reshape(-1), type=field.type.value_type)
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, field.type.list_size))
        else:
            arrays.append(pa.array(array, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def column_to_numpy(column, shape: tuple[int, ...], dtype: np.dtype, *, name: str) -> np.ndarray:
    """A record batch column as a [R, *shape] numpy array (a view where Arrow allows one)."""
    if column.null_count:
        raise ValueError(f"{name}: holds {column.null_count} nulls")
    if shape:
        column = column.flatten()
    array = column.to_numpy(zero_copy_only=False)
    if array.dtype != dtype:
        raise ValueError(f"{name}: holds {array.dtype}, expected {dtype}")
    return array.reshape(-1, *shape)


# -- writing ------------------------------------------------------------------------------------------


def ended_episodes(columns: Mapping[str, np.ndarray], first_row: int, stride: int) -> dict[str, np.ndarray]:
    """The episodes that end in a block of step-major rows (``stride`` rows per step) starting at run row
    ``first_row``: one entry per row whose transition terminated or truncated."""
    rows = np.flatnonzero(columns["terminated"] | columns["truncated"])
    steps = columns["obs/step_id"][rows].astype(np.int64)
    return {
        "env_id": columns["obs/env_id"][rows].astype(np.int64),
        "episode_id": columns["obs/episode_id"][rows].astype(np.int64),
        "steps": steps,
        "first_row": first_row + rows - steps * stride,
        "stride": np.full(rows.size, stride, np.int64),
    }


class PackedWriter:
    """Appends blocks of rows to rotating segments and publishes each with one commit line.

    Not thread-safe: one writer thread owns it. ``write`` returns the bytes it added to the segment.
    """

    def __init__(self, directory: str, schema, *, compression: str = "none", segment_bytes: int = 1 << 30):
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, got {compression!r}")
        pa = _pa()
        self._directory, self._schema = directory, schema
        self._options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
        self._segment_bytes = segment_bytes
        self._segment = -1
        self._sink = self._stream = None
        self._rows = 0  # run rows written so far
        self._log = os.open(os.path.join(directory, COMMIT_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    @property
    def rows(self) -> int:
        return self._rows

    def write(self, columns: Mapping[str, np.ndarray], episodes: Mapping[str, np.ndarray]) -> int:
        """Append a block of rows, then publish it and ``episodes`` (those whose last row is in it)."""
        pa = _pa()
        if self._stream is None:
            self._segment += 1
            self._sink = pa.OSFile(os.path.join(self._directory, segment_name(self._segment)), "wb")
            self._stream = pa.ipc.new_stream(self._sink, self._schema, options=self._options)
        batch = to_record_batch(self._schema, columns)
        offset = self._sink.tell()
        self._stream.write_batch(batch)
        length = self._sink.tell() - offset
        commit = {
            "segment": self._segment,
            "offset": offset,
            "length": length,
            "first_row": self._rows,
            "rows": batch.num_rows,
            "episodes": {key: np.asarray(episodes[key]).tolist() for key in EPISODE_KEYS},
        }
        line = (json.dumps(commit, separators=(",", ":")) + "\n").encode()
        view = memoryview(line)
        while view:  # the bytes before the newline are never a whole line: a torn write stays unpublished
            view = view[os.write(self._log, view) :]
        self._rows += batch.num_rows
        if offset + length >= self._segment_bytes:
            self._end_segment()
        return length

    def _end_segment(self) -> None:
        if self._stream is not None:
            stream, sink, self._stream, self._sink = self._stream, self._sink, None, None
            try:
                stream.close()
            finally:
                sink.close()

    def close(self) -> None:
        try:
            self._end_segment()
        finally:
            if self._log >= 0:
                os.close(self._log)
                self._log = -1


def stack_episodes(episodes: list) -> tuple[list[str], dict, dict]:
    """Episodes (reader ``Episode`` objects) laid end to end as rows, stride 1: (fields, columns, episodes).

    Each episode gives its T + 1 frames; its transitions go on rows 1..T and row 0 holds zeros."""
    fields = list(episodes[0].obs) if episodes else []
    columns = {
        f"obs/{f}": np.concatenate([part for ep in episodes for part in (ep.obs[f], ep.next[f][-1:])]) for f in fields
    }
    for name in TRANSITION_COLUMNS:
        columns[name] = np.concatenate(
            [part for ep in episodes for part in (np.zeros_like(getattr(ep, name)[:1]), getattr(ep, name))]
        )
    steps = np.array([ep.steps for ep in episodes], np.int64)
    table = {
        "env_id": np.array([ep.env_id for ep in episodes], np.int64),
        "episode_id": np.array([ep.episode_id for ep in episodes], np.int64),
        "steps": steps,
        "first_row": np.concatenate([[0], np.cumsum(steps + 1)[:-1]]).astype(np.int64),
        "stride": np.ones(len(episodes), np.int64),
    }
    return fields, columns, table


#: Bytes of episodes :func:`write_episodes` appends at once.
_WRITE_BLOCK_BYTES = 8 << 20


def write_episodes(directory: str, episodes, compression: str) -> int:
    """Write checked episodes (reader ``Episode`` objects, all of one run) into the empty ``directory`` as
    segments and a commit log, end to end (stride 1), a block of whole episodes at a time; return the count.
    The directory's run.json is the caller's (``convert_run``)."""
    writer = None
    block: list = []
    block_bytes = count = 0

    def write_block() -> int:
        _, columns, table = stack_episodes(block)
        table["first_row"] += writer.rows
        writer.write(columns, table)
        return len(block)

    try:
        for episode in episodes:
            if writer is None:
                fields = {f: (a.shape[1:], a.dtype) for f, a in episode.obs.items()}
                columns = run_columns(fields, episode.action.shape[1], episode.action.dtype, episode.reward.dtype)
                writer = PackedWriter(directory, arrow_schema(columns), compression=compression)
            block.append(episode)
            block_bytes += sum(a.nbytes for a in episode.obs.values()) + episode.action.nbytes
            if block_bytes >= _WRITE_BLOCK_BYTES:
                count += write_block()
                block, block_bytes = [], 0
        if block:
            count += write_block()
    finally:
        if writer is not None:
            writer.close()
    if writer is None:  # no episode: an empty commit log
        open(os.path.join(directory, COMMIT_LOG), "wb").close()
    return count


# -- reading ------------------------------------------------------------------------------------------


def read_commits(run_dir: str) -> tuple[list[dict], bool]:
    """The whole lines of the commit log, parsed and checked; and whether a torn last line was ignored."""
    path = os.path.join(run_dir, COMMIT_LOG)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the commit log: {exc}") from exc
    lines = data.split(b"\n")
    torn = lines.pop() != b""  # a last line without its newline was being written: not published
    commits, next_row = [], 0
    previous = (-1, 0)  # (segment, end offset) of the previous commit
    for number, line in enumerate(lines, 1):
        where = f"{path}:{number}"
        try:
            commit = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{where}: not a JSON commit line: {exc}") from exc
        if not isinstance(commit, dict) or commit.keys() != _COMMIT_KEYS:
            raise ValueError(f"{where}: a commit must be an object with keys {sorted(_COMMIT_KEYS)}")
        for key in ("segment", "offset", "length", "first_row", "rows"):
            value, least = commit[key], int(key in ("length", "rows"))
            if type(value) is not int or value < least:
                raise ValueError(f"{where}: {key} must be an integer >= {least}, got {value!r}")
        segment, offset = commit["segment"], commit["offset"]
        if (segment, offset) != previous and (segment, offset) != (previous[0] + 1, 0):
            raise ValueError(
                f"{where}: the block at segment {segment} offset {offset} does not follow the previous one "
                f"(segment {previous[0]} ending at {previous[1]})"
            )
        if commit["first_row"] != next_row:
            raise ValueError(f"{where}: first_row is {commit['first_row']}, expected {next_row}")
        commit["episodes"] = _episode_columns(commit["episodes"], where)
        last = commit["episodes"]["first_row"] + commit["episodes"]["steps"] * commit["episodes"]["stride"]
        if ((last < next_row) | (last >= next_row + commit["rows"])).any():
            raise ValueError(f"{where}: an episode's last row is outside the block's rows")
        previous = (segment, offset + commit["length"])
        next_row += commit["rows"]
        commits.append(commit)
    return commits, torn


# first_row + steps * stride stays below 2**63: int64 arithmetic on the commit log never overflows.
_EPISODE_LIMITS = {"first_row": 1 << 62}  # the other keys: below 2**31 (ids, lengths and strides are int32)


def _episode_columns(entry: Any, where: str) -> dict[str, np.ndarray]:
    if not isinstance(entry, dict) or entry.keys() != set(EPISODE_KEYS):
        raise ValueError(f"{where}: episodes must be an object with keys {list(EPISODE_KEYS)}")
    out = {}
    for key in EPISODE_KEYS:
        values, least, limit = entry[key], int(key in ("steps", "stride")), _EPISODE_LIMITS.get(key, 1 << 31)
        if not isinstance(values, list) or not all(type(v) is int and least <= v < limit for v in values):
            raise ValueError(f"{where}: episodes.{key} must be a list of integers in [{least}, {limit})")
        out[key] = np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64)
    if len({len(v) for v in out.values()}) > 1:
        raise ValueError(f"{where}: the lists under episodes differ in length")
    return out


def read_blocks(run_dir: str, commits: list[dict], names: list[str]):
    """Yield ``(commit, {column: [rows, ...] array})`` for every committed block, reading only ``names``.

    Each segment is read as an Arrow stream up to its last committed block; the stream's position after
    each block must match the commit log. Raises ValueError naming the segment on any disagreement.
    """
    pa = _pa()
    by_segment: dict[int, list[dict]] = {}
    for commit in commits:
        by_segment.setdefault(commit["segment"], []).append(commit)
    for segment, blocks in by_segment.items():
        path = os.path.join(run_dir, segment_name(segment))
        try:
            source = pa.memory_map(path)
        except (OSError, pa.ArrowException) as exc:
            raise ValueError(f"{path}: cannot open segment: {exc}") from exc
        with source:
            end = blocks[-1]["offset"] + blocks[-1]["length"]
            if source.size() < end:
                raise ValueError(f"{path}: holds {source.size()} bytes; the commit log says at least {end}")
            try:
                schema = pa.ipc.read_schema(source)
                columns = schema_columns(schema, name=path)
                indices = [schema.get_field_index(n) for n in names]
                missing = [n for n, i in zip(names, indices, strict=True) if i < 0]
                if missing:
                    raise ValueError(f"{path}: lacks column(s) {missing}")
                source.seek(0)
                options = pa.ipc.IpcReadOptions(included_fields=indices, use_threads=False)
                reader = pa.ipc.open_stream(source, options=options)
                for commit in blocks:
                    batch = reader.read_next_batch()
                    if source.tell() != commit["offset"] + commit["length"] or batch.num_rows != commit["rows"]:
                        raise ValueError(
                            f"block at offset {commit['offset']} has {batch.num_rows} rows ending at byte "
                            f"{source.tell()}; the commit log says {commit['rows']} rows ending at "
                            f"{commit['offset'] + commit['length']}"
                        )
                    batch.validate(full=True)
                    yield (
                        commit,
                        {n: column_to_numpy(batch.column(n), *columns[n], name=f"{path}: column {n!r}") for n in names},
                    )
            except (pa.ArrowException, StopIteration, OSError, EOFError) as exc:
                raise ValueError(f"{path}: cannot read segment: {type(exc).__name__}: {exc}") from exc
            except ValueError as exc:
                raise ValueError(str(exc) if str(exc).startswith(path) else f"{path}: {exc}") from exc


def segment_schema(run_dir: str, segment: int):
    """The Arrow schema of one segment, checked (ValueError naming the file)."""
    pa = _pa()
    path = os.path.join(run_dir, segment_name(segment))
    try:
        with pa.memory_map(path) as source:
            schema = pa.ipc.read_schema(source)
        return schema, schema_columns(schema, name=path)
    except (OSError, pa.ArrowException, EOFError, ValueError) as exc:  # ValueError: e.g. names that are not UTF-8
        message = str(exc) if str(exc).startswith(path) else f"{path}: cannot read the segment's schema: {exc}"
        raise ValueError(message) from exc


# -- runs and episodes --------------------------------------------------------------------------------

#: Columns the episode checks read whatever a projection asks for.
CHECK_COLUMNS = ("obs/env_id", "obs/episode_id", "obs/step_id", "obs/time", *TRANSITION_COLUMNS)


class PackedRun:
    """The committed episodes of one packed run, from its commit log; no segment is read until asked.

    ``episodes`` maps ``env_id``, ``episode_id``, ``steps``, ``first_row`` and ``stride`` to int64 arrays
    with one entry per episode, in commit order (the run's reading order).
    """

    def __init__(self, run_dir: str):
        self.directory = run_dir
        self.commits, self.torn = read_commits(run_dir)
        self.rows = sum(c["rows"] for c in self.commits)
        keys = EPISODE_KEYS
        self.episodes = {
            k: np.concatenate([c["episodes"][k] for c in self.commits]) if self.commits else np.zeros(0, np.int64)
            for k in keys
        }
        counts = [len(c["episodes"]["steps"]) for c in self.commits]
        self.episode_commit = np.repeat(np.arange(len(counts)), counts)  # the commit publishing each episode
        pairs = self.episodes["env_id"] * (1 << 32) + self.episodes["episode_id"]
        if np.unique(pairs).size != pairs.size:
            raise ValueError(f"{os.path.join(run_dir, COMMIT_LOG)}: an (env_id, episode_id) pair is committed twice")

    def __len__(self) -> int:
        return len(self.episodes["steps"])

    def columns(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """column -> (per-row shape, dtype) of the run's segments (all must agree); {} with no commit."""
        found = None
        for segment in sorted({c["segment"] for c in self.commits}):
            _, columns = segment_schema(self.directory, segment)
            if found is not None and columns != found:
                path = os.path.join(self.directory, segment_name(segment))
                raise ValueError(f"{path}: its columns differ from the run's first segment")
            found = columns
        return found or {}


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


def check_gathered(
    gathered: Mapping[str, np.ndarray], episodes: Mapping[str, np.ndarray], starts: np.ndarray, *, name: str
) -> None:
    """Check episodes laid end to end (episode ``k``'s rows are ``[starts[k], starts[k+1])`` of every
    column of ``gathered``, which holds CHECK_COLUMNS) against the schema-1 content rules, whole columns
    at once, and every float value for finiteness; a break raises ValueError naming ``name``, the rule
    and the episode."""
    total = int(starts[-1])
    counts = np.diff(starts)
    owner = np.repeat(np.arange(counts.size), counts)  # the episode of each row
    j = np.arange(total) - np.repeat(starts[:-1], counts)  # the frame index within its episode
    first = j == 0
    last = np.zeros(total, bool)
    last[starts[1:] - 1] = True

    def fail(bad: np.ndarray, rule: str) -> None:
        if bad.any():
            k = owner[np.argmax(bad)]
            raise ValueError(f"{name}: episode env {episodes['env_id'][k]} episode {episodes['episode_id'][k]}: {rule}")

    for column, values in gathered.items():
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            fail(~np.isfinite(values).reshape(total, -1).all(axis=1), f"{column} holds non-finite values")
    fail(gathered["obs/step_id"] != j, "obs/step_id must count 0, 1, ..., T along the episode")
    for key in ("env_id", "episode_id"):
        fail(gathered[f"obs/{key}"] != np.repeat(episodes[key], counts), f"obs/{key} must be constant")
    time = gathered["obs/time"]
    fail(~first & ~(time > np.roll(time, 1)), "obs/time must increase along the episode")
    terminated, truncated = gathered["terminated"], gathered["truncated"]
    fail(~first & terminated & truncated, "a transition is both terminated and truncated")
    fail(~first & ((terminated | truncated) != last), "terminated|truncated must be true at the last transition only")


def take_rows(
    pieces: list[tuple[int, dict]], rows: np.ndarray, starts: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Every column at the run rows ``rows`` (1-d, each held by one of the blocks), from the consecutive blocks
    ``pieces`` (``(first row, columns)``, ascending; ``starts``: their first rows as an array, if at hand),
    without joining the blocks: one copy, straight into the result, visiting only the blocks that hold rows."""
    if len(pieces) == 1:
        start, columns = pieces[0]
        return {name: values[rows - start] for name, values in columns.items()}
    if starts is None:
        starts = np.array([start for start, _ in pieces])
    which = np.searchsorted(starts, rows, side="right") - 1
    order = np.argsort(which, kind="stable")
    touched, lows = np.unique(which[order], return_index=True)
    highs = np.append(lows[1:], rows.size)
    out = {name: np.empty((rows.size, *v.shape[1:]), v.dtype) for name, v in pieces[0][1].items()}
    for b, low, high in zip(touched.tolist(), lows.tolist(), highs.tolist(), strict=True):
        at = order[low:high]
        local = rows[at] - starts[b]
        for name, values in pieces[b][1].items():
            out[name][at] = values[local]
    return out


def read_episode_tables(run: PackedRun, names: list[str], select: np.ndarray):
    """Yield the selected episodes (indices into ``run.episodes``, ascending) in groups, each as
    ``(episodes, gathered, starts)``: their entries, their rows of the ``names`` columns laid end to
    end (episode ``k``'s are ``[starts[k], starts[k+1])``), checked by :func:`check_gathered`.

    One pass over the blocks: a group is gathered as soon as the blocks holding its episodes' last rows
    are read, and blocks are let go once no later episode needs their rows, so memory holds about the
    rows one episode spans (an episode of T steps at stride N spans T * N rows), not the whole run.
    """
    if not select.size:
        return
    if (np.diff(select) < 0).any():
        raise ValueError("episodes must be read in ascending order")
    episodes = {key: values[select] for key, values in run.episodes.items()}
    commit = run.episode_commit[select]  # non-decreasing: the commit that publishes each episode
    first = episodes["first_row"]
    needed = np.minimum.accumulate(first[::-1])[::-1]  # the lowest row an episode from k on needs
    pieces: list[tuple[int, dict]] = []  # (first row, columns) of the blocks still needed
    done = 0
    for number, (block_commit, block) in enumerate(read_blocks(run.directory, run.commits[: commit[-1] + 1], names)):
        pieces.append((block_commit["first_row"], block))
        upto = int(np.searchsorted(commit, number, side="right"))  # episodes published by the blocks read
        if upto == done:
            continue
        group = {key: values[done:upto] for key, values in episodes.items()}
        rows, starts = episode_rows(group)
        if rows.min() < pieces[0][0]:
            raise ValueError(f"{run.directory}: an episode's first row precedes the rows the commit log allows")
        gathered = take_rows(pieces, rows)
        check_gathered(gathered, group, starts, name=run.directory)
        yield group, gathered, starts
        done = upto
        if done == select.size:
            return
        while len(pieces) > 1 and pieces[1][0] <= needed[done]:
            pieces.pop(0)


# -- repair -------------------------------------------------------------------------------------------

_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def repair_packed(run_dir: str, rows_per_step: int) -> dict:
    """Make a packed run left by a killed process whole again; return what was done.

    A torn last commit line is cut off. Blocks that were written whole after the last commit line (the
    process died between the block and its line) are published with the episodes that end in them,
    ``rows_per_step`` rows per step as the recorder writes them. Bytes after the last whole block (a
    torn block) are cut off and the stream is ended; segment files past it are removed. Published
    blocks and episodes are never changed. Running it again changes nothing.
    """
    pa = _pa()
    log = os.path.join(run_dir, COMMIT_LOG)
    with open(log, "rb") as f:
        data = f.read()
    whole = data[: data.rfind(b"\n") + 1]
    actions = []
    if len(whole) != len(data):
        os.truncate(log, len(whole))
        actions.append(f"cut a torn line of {len(data) - len(whole)} bytes off {COMMIT_LOG}")
    commits, _ = read_commits(run_dir)
    segments = sorted(int(m.group(1)) for m in map(SEGMENT_RE.match, os.listdir(run_dir)) if m)
    segment = commits[-1]["segment"] if commits else 0
    committed = [c for c in commits if c["segment"] == segment]
    next_row = sum(c["rows"] for c in commits)
    recovered = 0
    writer_log = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        while segment in segments:
            path = os.path.join(run_dir, segment_name(segment))
            blocks, end, clean = _whole_blocks(path, len(committed))
            for offset, length, columns in blocks:
                rows = len(columns["obs/step_id"])
                commit = {
                    "segment": segment,
                    "offset": offset,
                    "length": length,
                    "first_row": next_row,
                    "rows": rows,
                    "episodes": {k: v.tolist() for k, v in ended_episodes(columns, next_row, rows_per_step).items()},
                }
                os.write(writer_log, (json.dumps(commit, separators=(",", ":")) + "\n").encode())
                recovered += len(commit["episodes"]["steps"])
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
    return {"actions": actions, "recovered_episodes": recovered}


def _whole_blocks(path: str, skip: int) -> tuple[list[tuple[int, int, dict]], int, bool]:
    """The whole record batches of a segment after its first ``skip`` ones: ``(offset, length, columns)``
    each; the end of the last whole message; and whether the stream ended cleanly (no torn bytes)."""
    pa = _pa()
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
                batch = reader.read_next_batch()
                batch.validate(full=True)
            except StopIteration:
                return blocks, source.tell(), source.tell() == size
            except (pa.ArrowException, EOFError, ValueError, OSError):  # OSError: a message body cut short
                return blocks, end, False
            names = ["obs/env_id", "obs/episode_id", "obs/step_id", "terminated", "truncated"]
            found = {n: column_to_numpy(batch.column(n), *columns[n], name=path) for n in names}
            blocks.append((end, source.tell() - end, found))
            end = source.tell()
