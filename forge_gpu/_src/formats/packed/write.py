"""Writing a packed run (schema 2, docs/FORMAT.md): blocks of rows appended to rotating Arrow IPC segments, each
published by one commit line (:class:`PackedWriter`); the episodes that end in a block (:func:`ended_episodes`); and
checked episodes written end to end (:func:`write_episodes`: ``convert --to packed``, and any writer of a run from
:class:`Episode` objects). The recorder that streams batches into a run is :mod:`formats.packed.recorder`.

numpy, pyarrow and the standard library; no Warp, Newton or torch.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from collections.abc import Iterable, Mapping

import numpy as np

from forge_gpu._src.core.codecs import CodecSpec, EncodedFrames, decode_frames, encode_frames, field_codecs
from forge_gpu._src.core.files import sync_directory
from forge_gpu._src.core.frames import stack_episodes
from forge_gpu._src.formats.packed.commits import (
    EPISODES,
    PARAMS_PREFIX,
    append_commit,
    encode_episodes,
    open_commit_log,
)
from forge_gpu._src.formats.packed.identity import COMMIT_LOG, COMPRESSIONS, segment_name
from forge_gpu._src.formats.packed.layout import (
    EncodedColumn,
    arrow_schema,
    crc32c,
    pyarrow,
    run_columns,
    to_record_batch,
)


def ended_episodes(columns: Mapping[str, np.ndarray], first_row: int, stride: int) -> dict[str, np.ndarray]:
    """The episodes that end in a block of step-major rows (``stride`` rows per step) starting at run row
    ``first_row``: one entry per row whose transition terminated or truncated, with its ``params/<name>`` where
    the columns hold them per row (the recorder's ring; the last row of an episode holds its params)."""
    rows = np.flatnonzero(columns["terminated"] | columns["truncated"])
    steps = columns["obs/step_id"][rows].astype(np.int64)
    return {
        "env_id": columns["obs/env_id"][rows].astype(np.int64),
        "episode_id": columns["obs/episode_id"][rows].astype(np.int64),
        "steps": steps,
        "first_row": first_row + rows - steps * stride,
        "stride": np.full(rows.size, stride, np.int64),
        **{name: values[rows] for name, values in columns.items() if name.startswith(PARAMS_PREFIX)},
    }


class PackedWriter:
    """Appends blocks of rows to rotating segments and publishes each with one commit line, which holds the block's
    CRC32C (read back from the just-written bytes, :meth:`_checksum`).

    Not thread-safe: one writer thread owns it. ``write`` returns the bytes it added to the segment.
    """

    def __init__(
        self,
        directory: str,
        schema,
        *,
        compression: str = "none",
        segment_bytes: int = 1 << 30,
        durability: str = "process",
    ):
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, got {compression!r}")
        pa = pyarrow()
        self._directory, self._schema = directory, schema
        self._options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
        self._segment_bytes = segment_bytes
        self._segment = -1
        self._sink = self._stream = None
        self._readback = -1  # the current segment, opened for reading back what was written (and for its syncs)
        self._buffer = bytearray()
        self._rows = 0  # run rows written so far
        self._log = open_commit_log(directory, create=True)
        self._durable = durability == "machine"
        """Sync each block's data before its commit line and the log after it (docs/FORMAT.md "Durability")."""
        if self._durable:
            sync_directory(directory)  # the commit log's name

    @property
    def rows(self) -> int:
        return self._rows

    def write(self, columns: Mapping[str, np.ndarray], episodes: Mapping[str, np.ndarray]) -> int:
        """Append a block of rows, then publish it and ``episodes`` (those whose last row is in it), with the block's
        checksum. The episodes (params included) go into the commit line and, as the copy a reader checks the line
        against and repair publishes a block from (a kill between the two writes), into the record batch's custom
        metadata."""
        pa = pyarrow()
        new_segment = self._stream is None
        if new_segment:
            self._segment += 1
            path = os.path.join(self._directory, segment_name(self._segment))
            self._sink = pa.OSFile(path, "wb")
            self._readback = os.open(path, os.O_RDONLY)
            self._stream = pa.ipc.new_stream(self._sink, self._schema, options=self._options)
        batch = to_record_batch(self._schema, columns)
        offset = self._sink.tell()
        entry = encode_episodes(episodes)
        self._stream.write_batch(batch, {EPISODES: entry})
        length = self._sink.tell() - offset
        if self._durable:  # the block's bytes (and a new segment's name) before the line that publishes them
            os.fdatasync(self._readback)
            if new_segment:
                sync_directory(self._directory)
        append_commit(
            self._log,
            segment=self._segment,
            offset=offset,
            length=length,
            first_row=self._rows,
            rows=batch.num_rows,
            episodes=entry,
            crc32c=self._checksum(offset, length),
        )
        if self._durable:  # one sync pair per block: group commit of every episode that ends in it
            os.fdatasync(self._log)
        self._rows += batch.num_rows
        if offset + length >= self._segment_bytes:
            self._end_segment()
        return length

    def _checksum(self, offset: int, length: int) -> int:
        """The CRC32C of the current segment's bytes ``[offset, offset + length)``, read back (from the page cache)
        into a reused buffer: exactly the bytes the block's line publishes."""
        if len(self._buffer) < length:
            self._buffer = bytearray(length)
        view = memoryview(self._buffer)[:length]
        done = 0
        while done < length:
            count = os.preadv(self._readback, [view[done:]], offset + done)
            if count <= 0:
                raise OSError(f"segment {segment_name(self._segment)}: read back {done} of the {length} bytes written")
            done += count
        return crc32c(view)

    def _end_segment(self) -> None:
        if self._readback >= 0:
            os.close(self._readback)
            self._readback = -1
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


#: Bytes of episodes :func:`write_episodes` appends at once.
_WRITE_BLOCK_BYTES = 8 << 20


def write_episodes(
    directory: str, episodes: Iterable, compression: str, codecs: Mapping[str, CodecSpec] | None = None
) -> tuple[int, dict]:
    """Write checked episodes (reader ``Episode`` objects, all of one run, with the same fields, state and params)
    into the empty ``directory`` as segments and a commit log, end to end (stride 1), a block of whole episodes at
    a time: each episode's ``state`` as ``state/<name>`` columns, its ``params`` and ``instruction`` in the commit
    line; return the count. The directory's run.json is the caller's (``convert_run``, replay): its env_spec
    describes the state and params, and its layout_version is :data:`identity.LAYOUT_VERSION`. ``codecs``: field ->
    codec as the recorder takes them (:func:`core.codecs.field_codecs`; none: the default codecs); returns the
    count and run.json's ``codecs`` (column -> codec) of what was written. An episode's field given as its stored
    payloads (an ``EncodedColumn``: ``PackedRunReader.read``'s ``encoded``) is written as those payloads where its
    codec is the field's here, not decoded, and decoded where it is not."""
    writer = None
    encoded: dict[str, CodecSpec] = {}
    fields: dict = {}
    pool = concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="forge-gpu-encode")
    block: list = []
    block_bytes = count = 0

    def write_block() -> int:
        stored = {f for f, values in block[0].obs.items() if isinstance(values, EncodedColumn)}
        rows = [dataclasses.replace(ep, obs=_without(ep.obs, stored), next=_without(ep.next, stored)) for ep in block]
        _, columns, table = stack_episodes(rows)
        for f in stored:  # each episode's frames as read, then its last next frame: the payloads as stored
            frames = EncodedFrames.concatenate(
                [part for ep in block for part in (ep.obs[f].frames, ep.next[f].frames.take([len(ep.next[f]) - 1]))]
            )
            spec, (shape, dtype) = encoded.get(f"obs/{f}"), fields[f]
            same = spec is not None and frames.spec == spec
            columns[f"obs/{f}"] = frames if same else decode_frames(frames.spec, frames, shape, dtype, pool=pool)
        for column, spec in encoded.items():
            if not isinstance(columns[column], EncodedFrames):
                columns[column] = encode_frames(spec, columns[column], pool=pool)
        table["first_row"] += writer.rows
        writer.write(columns, table)
        return len(block)

    try:
        for episode in episodes:
            if writer is None:
                fields, state = (
                    {k: (a.shape[1:], a.dtype) for k, a in d.items()} for d in (episode.obs, episode.state)
                )
                action, reward = episode.action, episode.reward
                columns = run_columns(fields, action.shape[1], action.dtype, reward.dtype, state=state)
                encoded = {f"obs/{f}": spec for f, spec in field_codecs(fields, codecs or {}).items()}
                writer = PackedWriter(directory, arrow_schema(columns, encoded), compression=compression)
            block.append(episode)
            arrays = (*episode.obs.values(), *episode.state.values(), episode.action)
            block_bytes += sum(a.nbytes for a in arrays)
            if block_bytes >= _WRITE_BLOCK_BYTES:
                count += write_block()
                block, block_bytes = [], 0
        if block:
            count += write_block()
    finally:
        pool.shutdown()
        if writer is not None:
            writer.close()
    if writer is None:  # no episode: an empty commit log
        open(os.path.join(directory, COMMIT_LOG), "wb").close()
    return count, {column: spec.to_json() for column, spec in encoded.items()}


def _without(frames: Mapping, names: set[str]) -> dict:
    return {k: v for k, v in frames.items() if k not in names}
