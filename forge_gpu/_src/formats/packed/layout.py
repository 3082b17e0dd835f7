"""The packed layout (schema 2, docs/FORMAT.md): its Arrow schema, the conversion of a block of rows to and from a
record batch, an encoded column decoded on access, and the blocks' checksum.

The blocks' checksum, CRC32C (docs/FORMAT.md "Checksums"), computed by the ``crc32c`` package's C function.

The package's ``__init__`` also loads its command line (argparse) and ``importlib.metadata`` for its version, about
13 ms on a first read; its C module is loaded here on its own when it can be (the same function), and through the
package otherwise.

The packed layout's Arrow schema (schema 2, docs/FORMAT.md "Segments"): the columns of a run, their Arrow
types, and the conversion of a block of rows to and from a record batch.

numpy, pyarrow and the standard library; no Warp, Newton or torch.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from forge_gpu._src.core.codecs import CodecSpec, EncodedFrames, decode_frames
from forge_gpu._src.core.fields import (
    FLOATS,
    REQUIRED_LAYOUT,
    SPEC_GROUPS,
    TRANSITION_LAYOUT,
    TRANSITIONS,
    group_layout,
)
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.formats.packed.identity import layout_version


def _c_function():
    """``crc32c._crc32c.crc32c``, without running the package's ``__init__`` when the module is found."""
    loaded = sys.modules.get("crc32c._crc32c")
    if loaded is None:
        spec = importlib.machinery.PathFinder.find_spec("crc32c")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        found = [
            os.path.join(folder, "_crc32c" + suffix)
            for folder in folders
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
            if os.path.isfile(os.path.join(folder, "_crc32c" + suffix))
        ]
        if not found:
            import crc32c  # the package's own way when its C module is not a file beside it

            return crc32c.crc32c
        loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", found[0])
        module_spec = importlib.machinery.ModuleSpec("crc32c._crc32c", loader, origin=found[0])
        loaded = loader.create_module(module_spec)
        loader.exec_module(loaded)
        sys.modules["crc32c._crc32c"] = loaded  # the package, if imported later, uses this one
    return loaded.crc32c


#: CRC32C of a bytes-like object (any buffer: bytes, memoryview, a pyarrow Buffer), as an int; lets go of the GIL.
crc32c = _c_function()


#: The per-row transition columns (the core's transition fields).
TRANSITION_COLUMNS = TRANSITIONS
#: The per-row layout every packed run's columns keep (:func:`core.fields.check_layout`): the required fields'
#: ``obs/`` columns, ``time`` a float, and the transitions; other ``obs/`` columns are the run's own fields.
PACKED_LAYOUT = {
    **{f"obs/{f}": layout for f, layout in REQUIRED_LAYOUT.items()},
    "obs/time": ((), FLOATS),
    **TRANSITION_LAYOUT,
}


def pyarrow():
    """pyarrow, the packed layout's one dependency, imported where it is used."""
    import pyarrow as pa

    return pa


def run_groups(run_dir: str, manifest: Mapping) -> dict[str, dict[str, tuple[tuple[int, ...], np.dtype]]]:
    """``state`` (the ``state/<S>`` columns) and ``params`` (in the commit lines) of a packed run, name -> (shape,
    dtype) each, as its run.json describes them; none in a run of layout_version 1, whose recorder stored neither
    whatever its env_spec said. ValueError naming run.json for a layout_version this reader does not read."""
    name = os.path.join(run_dir, RUN_MANIFEST)
    stored = layout_version(manifest, name=name) >= 2
    spec = manifest["env_spec"]
    return {group: group_layout(spec, group, name=f"{name}: env_spec") if stored else {} for group in SPEC_GROUPS}


def run_columns(
    fields: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    action_dim: int,
    action_dtype: Any = np.float32,
    reward_dtype: Any = np.float32,
    *,
    state: Mapping[str, tuple[tuple[int, ...], np.dtype]] | None = None,
) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """column -> (per-row shape, dtype) of a run: ``obs/<field>`` per observation field, ``state/<name>`` per
    entry of the simulator ``state``, then the transition columns."""
    columns = {
        f"{group}/{name}": (tuple(shape), np.dtype(dtype))
        for group, layout in (("obs", fields), ("state", state or {}))
        for name, (shape, dtype) in layout.items()
    }
    columns["action"] = ((action_dim,), np.dtype(action_dtype))
    columns["reward"] = ((), np.dtype(reward_dtype))
    columns["terminated"] = ((), np.dtype(np.bool_))
    columns["truncated"] = ((), np.dtype(np.bool_))
    return columns


#: The field metadata keys of an encoded column (layout 5): its codec (``CodecSpec.to_json``) and its frames' dtype.
CODEC_KEY, DTYPE_KEY = b"codec", b"dtype"


def arrow_schema(
    columns: Mapping[str, tuple[tuple[int, ...], np.dtype]], codecs: Mapping[str, CodecSpec] | None = None
):
    """The segments' schema of ``columns`` (:func:`run_columns`), the columns ``codecs`` names encoded.

    A column of per-row shape ``()`` is a primitive column; any other shape is a fixed-size list of
    ``prod(shape)`` values (C order) whose field metadata ``shape`` holds the JSON list of the shape. An encoded
    column (layout 5) is a binary column, one payload per row, its metadata ``shape``, ``dtype`` (the frames') and
    ``codec`` (the JSON of its :class:`CodecSpec`).
    """
    pa = pyarrow()
    codecs = codecs or {}
    out = []
    for name, (shape, dtype) in columns.items():
        metadata = {"shape": json.dumps(list(shape))}
        if name in codecs:
            kind = pa.binary()
            metadata.update({"codec": json.dumps(codecs[name].to_json()), "dtype": np.dtype(dtype).name})
        else:
            kind = pa.from_numpy_dtype(dtype)
            if shape:
                kind = pa.list_(kind, int(np.prod(shape)))
        out.append(pa.field(name, kind, nullable=False, metadata=metadata))
    return pa.schema(out)


#: run.json's key of the encoded columns: column -> ``CodecSpec.to_json()`` (layout 5; none before).
CODECS = "codecs"


def stored_codecs(manifest: Mapping, *, name: str) -> dict[str, CodecSpec]:
    """column -> codec of the encoded columns run.json's ``codecs`` names (none in a run of layout 1-4);
    ValueError naming ``name``."""
    entry = manifest.get(CODECS, {})
    if not isinstance(entry, Mapping):
        raise ValueError(f"{name}: run.json's {CODECS} must be a dict of column -> codec, got {entry!r}")
    return {c: CodecSpec.from_json(spec, name=f"{name}: run.json's {CODECS}[{c!r}]") for c, spec in entry.items()}


def schema_codecs(schema, *, name: str) -> dict[str, CodecSpec]:
    """column -> codec of a segment schema's encoded columns (binary, layout 5); ValueError naming ``name``."""
    pa = pyarrow()
    out = {}
    for field in schema:
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):
            entry = (field.metadata or {}).get(CODEC_KEY)
            try:
                out[field.name] = CodecSpec.from_json(json.loads(entry), name=f"{name}: column {field.name!r}")
            except (TypeError, ValueError) as exc:  # no or bad metadata
                raise ValueError(f"{name}: column {field.name!r} is binary without a valid codec: {exc}") from exc
    return out


def schema_columns(schema, *, name: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """column -> (per-row shape, numpy dtype) of a segment schema, checked; ValueError naming ``name``."""
    pa = pyarrow()
    columns = {}
    for field in schema:
        try:
            shape = tuple(json.loads((field.metadata or {}).get(b"shape", b"[]")))
            if not all(isinstance(s, int) and s >= 1 for s in shape):
                raise ValueError(f"bad shape {shape}")
            kind = field.type
            if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):  # an encoded column: the frames' dtype
                kind = pa.from_numpy_dtype(np.dtype((field.metadata or {}).get(DTYPE_KEY, b"").decode()))
            elif shape:
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
    """A record batch of ``columns`` (name -> [R, ...] C-contiguous arrays), zero-copy but for the flags (packed to
    bits): each column made from its buffer (no per-column conversion of numpy values)."""
    pa = pyarrow()
    arrays = []
    for field in schema:
        array = columns[field.name]
        if isinstance(array, EncodedFrames):
            arrays.append(binary_array(array))
        elif pa.types.is_fixed_size_list(field.type):
            flat = _primitive_array(pa, array.reshape(-1), field.type.value_type)
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, field.type.list_size))
        else:
            arrays.append(_primitive_array(pa, array, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _primitive_array(pa, values: np.ndarray, kind):
    """A non-null Arrow array of ``kind`` over the 1-d ``values`` (of kind's numpy dtype): their buffer as it is, or
    for booleans, the bits packed (LSB first, Arrow's order)."""
    if pa.types.is_boolean(kind):
        data = np.packbits(values.view(np.uint8), bitorder="little")
    else:
        data = np.ascontiguousarray(values, dtype=kind.to_pandas_dtype())
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(data)])


def block_arrays(batch, names, schema, *, name: str, layout: tuple[dict, dict] | None = None) -> dict:
    """The ``names`` columns of a record batch of ``schema`` as numpy arrays (views where Arrow allows), each
    encoded one as an :class:`EncodedColumn` (decoded on access); ValueError naming ``name``. ``layout``: the
    schema's ``(schema_columns, schema_codecs)`` where the caller has them (a segment's blocks share one)."""
    columns, codecs = layout or (schema_columns(schema, name=name), schema_codecs(schema, name=name))
    return {
        n: column_to_numpy(batch.column(n), *columns[n], name=f"{name}: column {n!r}", codec=codecs.get(n))
        for n in names
    }


def empty_arrays(schema, rows: int) -> dict:
    """``rows`` zero rows of every column of ``schema``, an encoded column's as empty payloads (repair's emptied
    blocks, whose rows no published episode reads)."""
    codecs = schema_codecs(schema, name="the run's schema")
    out = {}
    for n, (shape, dtype) in schema_columns(schema, name="the run's schema").items():
        if n in codecs:
            out[n] = EncodedFrames(codecs[n], np.zeros(0, np.uint8), np.zeros(rows + 1, np.int64))
        else:
            out[n] = np.zeros((rows, *shape), dtype)
    return out


def binary_array(encoded: EncodedFrames):
    """An Arrow binary array of ``encoded``'s payloads, one per row (its buffers: int32 offsets, the payload)."""
    pa = pyarrow()
    if encoded.nbytes >= 1 << 31:
        raise ValueError(f"a block's encoded frames hold {encoded.nbytes} bytes; a binary column holds < 2 GiB")
    offsets = pa.py_buffer(encoded.offsets.astype(np.int32))
    return pa.Array.from_buffers(pa.binary(), len(encoded), [None, offsets, pa.py_buffer(encoded.payload)])


def binary_frames(column, spec: CodecSpec) -> EncodedFrames:
    """An Arrow binary (or large_binary) column's payloads as :class:`EncodedFrames` (views of its buffers)."""
    pa = pyarrow()
    _, offsets, data = column.buffers()
    kind = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    offsets = np.frombuffer(offsets, kind)[column.offset : column.offset + len(column) + 1].astype(np.int64)
    payload = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return EncodedFrames(spec, payload[offsets[0] : offsets[-1]], offsets - offsets[0])


class EncodedColumn:
    """An encoded column of one block, decoded on access: ``column[rows]`` (an int array, or a slice) is the
    decoded ``[len(rows), *shape]`` frames, decoded over the module's reader pool (:func:`reader_pool`); ``shape``
    and ``dtype`` are a decoded array's, so :func:`core.frames.take_rows` and :class:`Windows` index it as they
    index a raw column."""

    def __init__(self, frames: EncodedFrames, shape: tuple[int, ...], dtype: np.dtype):
        self.frames, self.dtype = frames, np.dtype(dtype)
        self.frame_shape = tuple(shape)
        self.shape = (len(frames), *self.frame_shape)
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        """The payloads' bytes."""
        return self.frames.nbytes

    @property
    def flags(self):
        """The payload's flags: a mapped run's are a read-only view of its segment file."""
        return self.frames.payload.flags

    def __getitem__(self, rows) -> np.ndarray:
        if isinstance(rows, slice):
            rows = np.arange(len(self))[rows]
        rows = np.asarray(rows)
        if rows.dtype == np.bool_:
            rows = np.flatnonzero(rows)
        flat = rows.reshape(-1).astype(np.int64)
        flat = np.where(flat < 0, flat + len(self), flat)
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"row index out of range for an encoded column of {len(self)} rows")
        out = decode_frames(self.frames.spec, self.frames.take(flat), self.frame_shape, self.dtype, pool=reader_pool())
        return out.reshape(*rows.shape, *self.frame_shape)

    def take_into(self, rows: np.ndarray, out: np.ndarray) -> None:
        """The frames at ``rows`` (1-d, in range) decoded straight into ``out`` (``[len(rows), *shape]``)."""
        frames = self.frames.take(np.asarray(rows, np.int64))
        decode_frames(self.frames.spec, frames, self.frame_shape, self.dtype, pool=reader_pool(), out=out)

    def __array__(self, dtype=None, copy=None):
        out = self[np.arange(len(self))]
        return out if dtype is None else out.astype(dtype)


_POOL: tuple[int, Any] | None = None  # (the process id that made it, the pool)


def reader_pool():
    """The thread pool the reader decodes frames in (one per process, ``os.cpu_count()`` threads, made on first
    use; the image and compression libraries let go of the GIL while they decode). A forked process (a DataLoader
    worker) makes its own: a pool's threads do not survive a fork."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        import concurrent.futures

        pool = concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="forge-gpu-decode")
        _POOL = (os.getpid(), pool)
    return _POOL[1]


def column_to_numpy(column, shape: tuple[int, ...], dtype: np.dtype, *, name: str, codec: CodecSpec | None = None):
    """A record batch column as a [R, *shape] numpy array (a view where Arrow allows one); an encoded column
    (``codec``) as an :class:`EncodedColumn`, decoded on access."""
    if column.null_count:
        raise ValueError(f"{name}: holds {column.null_count} nulls")
    if codec is not None:
        return EncodedColumn(binary_frames(column, codec), shape, dtype)
    if shape:  # the list's values, sliced as the column is (``flatten`` would load pyarrow.compute: ~0.1 s)
        size = column.type.list_size
        column = column.values.slice(column.offset * size, len(column) * size)
    array = column.to_numpy(zero_copy_only=False)
    if array.dtype != dtype:
        raise ValueError(f"{name}: holds {array.dtype}, expected {dtype}")
    return array.reshape(-1, *shape)
