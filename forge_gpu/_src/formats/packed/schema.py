"""The packed layout's Arrow schema (schema 2, docs/FORMAT.md "Segments"): the columns of a run, their Arrow
types, and the conversion of a block of rows to and from a record batch.

numpy, pyarrow and the standard library; no Warp, Newton or torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

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
    import pyarrow as pa  # noqa: PLC0415 - loaded where it is used

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


def arrow_schema(columns: Mapping[str, tuple[tuple[int, ...], np.dtype]]):
    """The segments' schema of ``columns`` (:func:`run_columns`).

    A column of per-row shape ``()`` is a primitive column; any other shape is a fixed-size list of
    ``prod(shape)`` values (C order) whose field metadata ``shape`` holds the JSON list of the shape.
    """
    pa = pyarrow()
    out = []
    for name, (shape, dtype) in columns.items():
        kind = pa.from_numpy_dtype(dtype)
        if shape:
            kind = pa.list_(kind, int(np.prod(shape)))
        out.append(pa.field(name, kind, nullable=False, metadata={"shape": json.dumps(list(shape))}))
    return pa.schema(out)


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
    pa = pyarrow()
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
