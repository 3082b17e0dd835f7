"""The frame table: episodes laid end to end as rows, one per observation frame (its observation fields and
simulator state), each transition's values on the frame it leads to (an episode's first row holds zeros there),
and one entry per episode (its ids, rows, instruction and params). It is a packed run's row layout (docs/FORMAT.md
"Rows") and what every reader gives :class:`Windows` (``RunReader.frame_table``); :func:`take_rows` gathers
rows from a table held in several blocks. numpy and the standard library.
"""

from __future__ import annotations

import numpy as np

from forge_gpu._src.core.fields import TRANSITIONS
from forge_gpu._src.core.instructions import INSTRUCTION


def stack_episodes(episodes: list) -> tuple[list[str], dict, dict]:
    """Episodes (reader ``Episode`` objects, all with the first one's fields, state and params) laid end to end as
    rows, stride 1: (fields, columns, episodes).

    Each episode gives its T + 1 frames (``obs/<F>``, and ``state/<S>`` where it has state); its transitions go on
    rows 1..T and row 0 holds zeros. Its entry holds its ``instruction`` (an object array of strings) and its
    ``params/<P>`` where it has params."""
    fields = list(episodes[0].obs) if episodes else []
    columns = {
        f"obs/{f}": np.concatenate([part for ep in episodes for part in (ep.obs[f], ep.next[f][-1:])]) for f in fields
    }
    for name in episodes[0].state if episodes else []:
        columns[f"state/{name}"] = np.concatenate([ep.state[name] for ep in episodes])
    for name in TRANSITIONS:
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
        INSTRUCTION: np.array([ep.instruction for ep in episodes], dtype=object).reshape(-1),
    }
    for name in episodes[0].params if episodes else []:
        table[f"params/{name}"] = np.stack([ep.params[name] for ep in episodes])
    return fields, columns, table


def take_rows(
    pieces: list[tuple[int, dict]], rows: np.ndarray, starts: np.ndarray | None = None, *, empty=None
) -> dict[str, np.ndarray]:
    """Every column at the run rows ``rows`` (1-d, each held by one of the blocks), from the consecutive blocks
    ``pieces`` (``(first row, columns)``, ascending; ``starts``: their first rows as an array, if at hand),
    visiting only the blocks that hold rows: one copy straight into the result, or, where the rows are at least
    half the blocks' and a column of the blocks is at most :data:`_JOIN_BYTES`, the blocks' column joined first and
    gathered from (two copies, but sequential and one gather: faster than scattering block by block).
    ``empty(shape, dtype)`` makes the result's arrays where given (e.g. in a shared buffer), else they are new."""
    if len(pieces) == 1:
        start, columns = pieces[0]
        if empty is None:
            local = rows - start if start else rows
            return {
                name: np.take(values, local, axis=0) if type(values) is np.ndarray else values[local]
                for name, values in columns.items()
            }
        out = {}
        for name, values in columns.items():
            out[name] = target = empty((rows.size, *values.shape[1:]), values.dtype)
            if hasattr(values, "take_into"):  # an encoded column: decoded straight into the result
                values.take_into(rows - start, target)
            else:  # in range by construction: "wrap" takes straight into ``target`` ("raise" buffers)
                np.take(values, rows - start, axis=0, out=target, mode="wrap")
        return out
    if _joined_first(pieces, rows):  # the blocks joined per column, then one gather: 2.4x the scatter below
        local, out = rows - pieces[0][0], {}
        for name, v in pieces[0][1].items():
            joined = np.concatenate([columns[name] for _, columns in pieces])
            target = None if empty is None else empty((rows.size, *v.shape[1:]), v.dtype)
            out[name] = np.take(joined, local, axis=0, out=target)
            del joined  # one column's copy at a time
        return out
    empty = empty or np.empty
    if starts is None:
        starts = np.array([start for start, _ in pieces])
    which = np.searchsorted(starts, rows, side="right") - 1
    order = np.argsort(which, kind="stable")
    touched, lows = np.unique(which[order], return_index=True)
    highs = np.append(lows[1:], rows.size)
    out = {name: empty((rows.size, *v.shape[1:]), v.dtype) for name, v in pieces[0][1].items()}
    for b, low, high in zip(touched.tolist(), lows.tolist(), highs.tolist(), strict=True):
        at = order[low:high]
        local = rows[at] - starts[b]
        for name, values in pieces[b][1].items():
            out[name][at] = values[local]
    return out


#: :func:`take_rows` joins its blocks' columns first when one column of them is at most this big (a copy of one column
#: at a time, let go before the next).
_JOIN_BYTES = 256 << 20


def _joined_first(pieces: list[tuple[int, dict]], rows: np.ndarray) -> bool:
    """Whether :func:`take_rows` gathers ``rows`` from the ``pieces`` joined: numpy columns of blocks that follow one
    another, at least half of whose rows are taken, no column of them over :data:`_JOIN_BYTES`."""
    if not pieces[0][1] or not all(type(v) is np.ndarray for _, columns in pieces for v in columns.values()):
        return False
    ends = pieces[0][0] + np.cumsum([len(next(iter(columns.values()))) for _, columns in pieces])
    if any(start != end for (start, _), end in zip(pieces[1:], ends[:-1], strict=True)):
        return False
    held = int(ends[-1]) - pieces[0][0]
    row_bytes = max(v.dtype.itemsize * int(np.prod(v.shape[1:])) for v in pieces[0][1].values())
    return 2 * rows.size >= held and row_bytes * held <= _JOIN_BYTES
