"""The host snapshot's source: every array of a step result in one contiguous device buffer, so that
publishing a step to the host is one copy."""

from __future__ import annotations

import numpy as np
import warp as wp

from forge_gpu._src.sim.step_result import StepResult

#: Byte alignment of each field in ``VectorEnv.packed_result``.
PACK_ALIGNMENT = 64


def packed_result(result: StepResult, device) -> tuple[wp.array, list[tuple], list[tuple]]:
    """One contiguous byte buffer for every array of ``result``, so that a publish is one copy.

    Returns the buffer (uint8), its layout (``(name, offset, shape, numpy dtype)`` per array of
    ``result.arrays()``, offsets aligned to PACK_ALIGNMENT bytes) and ``(typed view, source)`` pairs.
    """
    layout, offset = [], 0
    for name, array in result.arrays().items():
        offset = -(-offset // PACK_ALIGNMENT) * PACK_ALIGNMENT
        layout.append((name, offset, tuple(array.shape), np.dtype(wp.dtype_to_numpy(array.dtype))))
        offset += array.capacity
    packed = wp.zeros(max(offset, 1), dtype=wp.uint8, device=device)
    pairs = [
        (wp.array(ptr=packed.ptr + at, dtype=a.dtype, shape=a.shape, capacity=a.capacity, device=device), a)
        for (_, at, _, _), a in zip(layout, result.arrays().values(), strict=True)
    ]
    return packed, layout, pairs
