"""Training windows: every window of a run or dataset by index, many at once (:class:`Windows`), or one after
another (:func:`action_windows`, which walks a :class:`Windows`).

The selected episodes are read and checked once, into a frame table (:mod:`core.frames`): each observation
column with one row per frame, and the actions on the frame each transition leads to, as every run's reader
gives it (``RunReader.frame_table``). A window is then a pair (episode, t), and a batch of windows is a few
fancy-indexing operations per column. The table is held in memory, or, with ``mmap``, left in the runs'
files where their format can map them (uncompressed packed runs: every block a read-only view of its
memory-mapped segment), so the shard may be larger than memory.

numpy and the standard library (pyarrow for packed runs).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.episode import EpisodeReadOptions
from forge_gpu._src.core.frames import take_rows
from forge_gpu._src.core.instructions import INSTRUCTION, factorize
from forge_gpu._src.core.labels import ACTION_TARGET, target_column
from forge_gpu._src.reading.runs import episode_index

#: Windows gathered at once where they are handed out one by one (one vectorized batch call).
CHUNK = 256


class Windows:
    """Every training window of one shard of a run directory or a dataset root, by index.

    Window ``i`` is ``(episode, t)``: the observation frames ``t-history+1 .. t`` and the actions
    ``t .. t+horizon-1`` of the episode, in episode order and then by ``t``. Without ``pad``, ``t`` runs over
    ``[history-1, T-horizon]``; with ``pad``, over every transition ``[0, T-1]``, and frames before the episode's
    first or actions after its last repeat the edge one, flagged in ``obs_is_pad`` ``[history]`` and
    ``action_is_pad`` ``[horizon]`` (LeRobot's ``*_is_pad`` convention).

    ``windows[i]`` gives one window; ``windows.batch(indices)`` (or ``windows[indices]``) gives many at
    once: ``obs/<F>`` ``[B, history, ...]``, ``action`` ``[B, horizon, A]``, ``env_id``, ``episode_id``,
    ``t`` ``[B]`` int64, ``instruction`` (a list of B strings: each window's episode's ``Episode.instruction``),
    and the pad masks with ``pad``. With ``state`` (``True``: every entry the runs have; or a list of names) also
    ``state/<S>`` ``[B, history, ...]``, the simulator state at the same frames as the observation; with
    ``params``, ``params/<P>`` ``[B, ...]``, the params of each window's episode. ``instructions`` lists the
    distinct instructions of the shard's episodes.

    Memory: the selected observation fields and the actions of every episode of the shard are held in
    memory (pick fields with ``observation_keys``). With ``mmap=True`` (uncompressed packed runs only) they
    stay in the files: the operating system pages in what batches touch and can drop it again, so memory
    holds the episode index and the blocks' views, whatever the shard's size; a batch then gathers from
    each block its rows fall in (several per batch of a step-major run) and may wait on the disk.

    Every block's checksum is verified once, as the table is made (mapped or loaded); ``verify=False`` skips it
    (:class:`EpisodeReadOptions`'s ``verify``).

    ``target`` chooses what ``action`` holds: ``"action"`` (default), the recorded (executed) actions ``t ..
    t+horizon-1``; or the name of a label field of the runs (run.json's ``env_spec.labels``, e.g. ``"expert_action"``
    of ``collect --label expert``): the label of the frames ``t .. t+horizon-1``, the expert's actions for the states
    the transitions ``t .. t+horizon-1`` started from, under the same padding rules and ``action_is_pad``. The label
    is read whether or not ``observation_keys`` names it (``obs/<label>`` is in the batch only where it does).

    Encoded image fields (packed layout 5) are decoded as a batch gathers them, on the CPU over the reader's thread
    pool; ``batch(indices, encoded=True)`` leaves them encoded (an ``EncodedFrames`` of the batch's ``B x history``
    frames, window by window), for a decoder elsewhere: ``forge_gpu.reading.device_batch`` decodes them on a CUDA
    device.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        history: int = 1,
        horizon: int = 1,
        *,
        observation_keys: Sequence[str] | None = None,
        pad: bool = False,
        shard_index: int = 0,
        num_shards: int = 1,
        mmap: bool = False,
        state: bool | Sequence[str] = False,
        params: bool = False,
        verify: bool = True,
        target: str = ACTION_TARGET,
    ):
        check_flags(pad=pad, mmap=mmap, params=params, verify=verify)
        options = EpisodeReadOptions(
            observation_keys=observation_keys,
            shard_index=shard_index,
            num_shards=num_shards,
            state=state,
            verify=verify,
        )
        index = episode_index(directory)
        check_target(index, target)  # every run of the directory, whichever shard holds its episodes
        index = index[options.shard_index :: options.num_shards]
        self._load(index, history, horizon, options, pad=pad, mmap=mmap, params=params, target=target)

    @classmethod
    def _of_index(
        cls, index: list, history: int, horizon: int, options: EpisodeReadOptions, target: str = ACTION_TARGET
    ) -> Windows:
        """The unpadded windows of the episodes of ``index`` (``(run, k)`` pairs, :func:`runs.episode_index`), read
        with ``options`` (its shard fields aside: ``index`` is the shard)."""
        windows = cls.__new__(cls)
        windows._load(index, history, horizon, options, pad=False, mmap=False, params=False, target=target)
        return windows

    def _load(
        self, index: list, history: int, horizon: int, options: EpisodeReadOptions, *, target: str, **flags: bool
    ) -> None:
        check_window(history, horizon)
        pad, mmap = flags["pad"], flags["mmap"]
        self.history, self.horizon, self.pad, self.mmap = history, horizon, pad, mmap
        self.target = target
        """What ``action`` holds: ``"action"`` (the recorded actions) or a label field (see the class doc)."""
        column, options, hidden = _target_reading(target, options)
        self.fields, blocks, episodes = _frame_table(index, options, mmap, flags["params"])
        self.fields = [f for f in self.fields if f"obs/{f}" != hidden]
        # The table as blocks (first row, columns), split by the rows they are gathered at: frames, actions (or the
        # target label's rows: transition k's action is stored on frame k+1, the label of its state on frame k).
        self._starts = np.array([start for start, _ in blocks], np.int64)
        self._obs = [
            (start, {n: c for n, c in columns.items() if n not in ("action", hidden)}) for start, columns in blocks
        ]
        # Encoded columns (packed layout 5: ``EncodedColumn``, its payloads in ``frames``), which ``batch`` can leave
        # encoded, and the table without them.
        self.encoded_fields = {n: (c.frame_shape, c.dtype) for n, c in self._obs[0][1].items() if hasattr(c, "frames")}
        """``obs/<F>`` -> (frame shape, dtype) of the fields stored encoded (decoded unless ``batch(encoded=True)``)."""
        self._unencoded = [
            (a, {n: c for n, c in cols.items() if n not in self.encoded_fields}) for a, cols in self._obs
        ]
        self._action = [(start, {"action": c[column]}) for start, c in blocks]
        self._shift = 1 if column == "action" else 0  # the row of transition k: frame k+1 (action) or k (a label)
        self._params = {k: v for k, v in episodes.items() if k.startswith("params/")}
        self._first_row, self._stride, self._steps = episodes["first_row"], episodes["stride"], episodes["steps"]
        self._env_id, self._episode_id = episodes["env_id"], episodes["episode_id"]
        self.instructions, self._instruction = factorize(episodes[INSTRUCTION])  # each episode's, as a code
        """The distinct instructions of the windows' episodes, in order of first appearance."""
        self._texts = np.array(self.instructions, dtype=object)
        if pad:
            counts, first_t = self._steps, np.zeros_like(self._steps)
        else:
            counts = np.maximum(self._steps - horizon - history + 2, 0)
            first_t = np.full_like(self._steps, history - 1)
        starts = np.concatenate([[0], np.cumsum(counts)])
        self._window_episode = np.repeat(np.arange(counts.size), counts)
        self._window_t = np.arange(starts[-1]) - np.repeat(starts[:-1] - first_t, counts)
        # Without padding and with one stride (a table in memory), a window's rows are its frame t's row plus fixed
        # offsets: precomputed, ``batch`` adds them (no per-batch clipping, no per-episode lookups).
        self._window_row, self._offsets = None, None
        if not pad and self._stride.size and self._stride.min() == self._stride.max():
            e, stride = self._window_episode, int(self._stride[0])
            self._window_row = self._first_row[e] + self._window_t * stride
            self._offsets = (np.arange(1 - history, 1) * stride, (np.arange(horizon) + self._shift) * stride)

    def __len__(self) -> int:
        return int(self._window_t.size)

    @property
    def episodes(self) -> int:
        """Episodes the windows come from."""
        return int(self._steps.size)

    def __getitem__(self, index: Any) -> dict[str, Any]:
        if isinstance(index, int | np.integer):
            if not -len(self) <= index < len(self):
                raise IndexError(f"window {index} out of range for {len(self)} windows")
            return one_window(self.batch(np.array([index])), 0)
        return self.batch(index)

    def batch(self, indices: Sequence[int] | np.ndarray, *, encoded: bool = False, empty=None) -> dict[str, Any]:
        """Many windows at once (see the class doc); ``indices`` may repeat and come in any order. With ``encoded``,
        the fields of :attr:`encoded_fields` are left encoded: each an ``EncodedFrames`` of ``B x history`` frames.
        ``empty(shape, dtype)`` makes the arrays the frames and actions are gathered (and decoded) into, where given
        (a DataLoader worker's shared buffer); else they are new arrays."""
        indices = np.asarray(indices)
        if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
            raise ValueError(f"indices must be a 1-d sequence of integers, got shape {indices.shape} {indices.dtype}")
        if indices.size and (indices.min() < -len(self) or indices.max() >= len(self)):
            raise IndexError(f"window indices must lie in [-{len(self)}, {len(self) - 1}]")
        e = self._window_episode[indices]
        t = self._window_t[indices]
        if self._offsets is not None:  # the same rows as below, where no frame nor step is clipped
            row = self._window_row[indices][:, None]
            obs_rows, action_rows = row + self._offsets[0], row + self._offsets[1]
        else:
            first, stride, last = self._first_row[e, None], self._stride[e, None], self._steps[e, None] - 1
            frame = t[:, None] + np.arange(1 - self.history, 1)  # [B, history]: t-h+1 .. t
            step = t[:, None] + np.arange(self.horizon)  # [B, horizon]: t .. t+H-1
            obs_rows = first + np.maximum(frame, 0) * stride
            action_rows = first + (np.minimum(step, last) + self._shift) * stride  # transition k: frame k+1 (or k)
        gathered = take_rows(self._unencoded, obs_rows.ravel(), self._starts, empty=empty)
        if self.encoded_fields:
            rows = obs_rows.ravel()
            gathered.update(self._payloads(rows) if encoded else self._decoded(rows, empty))
        out: dict[str, Any] = {name: gathered[name] for name in self._obs[0][1]}  # the table's column order
        for name, values in out.items():
            if isinstance(values, np.ndarray):
                out[name] = values.reshape(*obs_rows.shape, *values.shape[1:])
        action = take_rows(self._action, action_rows.ravel(), self._starts, empty=empty)["action"]
        out["action"] = action.reshape(*action_rows.shape, *action.shape[1:])
        if self.pad:
            out["obs_is_pad"] = frame < 0
            out["action_is_pad"] = step > last
        out.update({name: values[e] for name, values in self._params.items()})
        out["env_id"] = self._env_id[e]
        out["episode_id"] = self._episode_id[e]
        out["t"] = t.astype(np.int64)
        one = len(self.instructions) == 1  # the common case: no gather of object references
        out["instruction"] = self.instructions * len(e) if one else self._texts[self._instruction[e]].tolist()
        return out

    def _decoded(self, rows: np.ndarray, empty=None) -> dict[str, np.ndarray]:
        """The encoded fields' frames at ``rows`` (1-d), decoded into new arrays (``empty``'s, where given): each
        distinct row once, from its payload where the block holds it (a view of the mapped segment, no copy), straight
        into the first place it takes in the result, over the reader's thread pool; the places that repeat it (the
        windows of a batch share frames: a window's history overlaps its neighbours') are copied from there."""
        from forge_gpu._src.core.codecs import decode_all
        from forge_gpu._src.formats.packed.layout import reader_pool

        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        new = np.empty(rows.size, bool)
        new[:1] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        unique, first = ordered[new], order[new]  # each distinct row, ascending, and the first place it takes
        source = np.empty_like(order)
        source[order] = first[np.cumsum(new) - 1]  # the place each row's frame is decoded into
        repeats = np.flatnonzero(source != np.arange(rows.size))
        which = np.searchsorted(self._starts, unique, side="right") - 1
        local = unique - self._starts[which]
        blocks = np.flatnonzero(np.diff(which, prepend=-1, append=len(self._starts) + 1))  # the runs of one block
        out, jobs = {}, []
        for name, (shape, dtype) in self.encoded_fields.items():
            out[name] = (empty or np.empty)((rows.size, *shape), dtype)
            by_codec: dict = {}  # the runs of a dataset may store a field with different codecs
            for low, high in zip(blocks[:-1].tolist(), blocks[1:].tolist(), strict=True):
                frames = self._obs[int(which[low])][1][name].frames
                view, at = memoryview(frames.payload), local[low:high]
                starts, ends = frames.offsets[at].tolist(), frames.offsets[at + 1].tolist()
                payloads, places = by_codec.setdefault(frames.spec, ([], []))
                payloads += [view[a:b] for a, b in zip(starts, ends, strict=True)]
                places.append(first[low:high])
            jobs += [(spec, got, out[name], np.concatenate(at)) for spec, (got, at) in by_codec.items()]
        decode_all(jobs, pool=reader_pool())  # every field's frames in one pass over the pool
        if repeats.size:
            for target in out.values():
                target[repeats] = target[source[repeats]]
        return out

    def _payloads(self, rows: np.ndarray) -> dict[str, Any]:
        """The encoded fields' payloads of the frames at ``rows``, in that order, gathered from the blocks that hold
        them (one take per block and field)."""
        from forge_gpu._src.core.codecs import EncodedFrames

        which = np.searchsorted(self._starts, rows, side="right") - 1
        order = np.argsort(which, kind="stable")
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        touched = np.unique(which).tolist()
        out = {}
        for name in self.encoded_fields:
            parts = [self._obs[b][1][name].frames.take(rows[which == b] - self._starts[b]) for b in touched or [0]]
            out[name] = EncodedFrames.concatenate(parts).take(inverse)  # back in the order of ``rows``
        return out


def action_windows(
    directory: str | os.PathLike,
    history: int = 1,
    horizon: int = 1,
    *,
    options: EpisodeReadOptions | None = None,
    target: str = ACTION_TARGET,
) -> Iterator[dict[str, Any]]:
    """Yield the training windows (docs/FORMAT-v1.md, "Training windows") of the episodes of one shard, one dict each:
    the windows of :class:`Windows` (unpadded), in its order, a run at a time.

    ``directory`` is a run directory or a dataset root; episodes and shards are as in :func:`runs.read_episodes`.
    For an episode of T transitions there is one window per ``t`` in ``[history-1, T-horizon]``, a dict
    with ``obs/<F>`` = ``obs[F][t-history+1 : t+1]`` (``[history, ...]``; ``state/<S>`` alike, where
    ``options.state`` asks for it), ``action`` = ``action[t : t+horizon]`` (``[horizon, A]``), the episode's
    ``instruction`` (``Episode.instruction``) and the ints ``env_id``, ``episode_id`` and ``t``. The arrays are
    read-only views of a batch of windows (copy one to change it). Memory holds the selected fields of one run's
    episodes of the shard at a time. The manifests and indexes are read and checked at the call. ``target``: what
    ``action`` holds, ``"action"`` or a label field (:class:`Windows`).
    """
    check_window(history, horizon)
    options = options or EpisodeReadOptions()
    index = episode_index(directory)
    check_target(index, target)
    return _each_window(index[options.shard_index :: options.num_shards], history, horizon, options, target)


def _each_window(
    index: list, history: int, horizon: int, options: EpisodeReadOptions, target: str
) -> Iterator[dict[str, Any]]:
    for _, group in itertools.groupby(index, key=lambda entry: entry[0]):
        windows = Windows._of_index(list(group), history, horizon, options, target)
        for start in range(0, len(windows), CHUNK):
            batch = windows.batch(np.arange(start, min(start + CHUNK, len(windows))))
            for values in batch.values():
                if isinstance(values, np.ndarray):
                    values.flags.writeable = False
            for i in range(len(batch["t"])):
                yield one_window(batch, i)


def one_window(batch: dict[str, Any], i: int) -> dict[str, Any]:
    """Window ``i`` of a batch (:meth:`Windows.batch`): its arrays' rows, and its ids and ``t`` as ints."""
    return {k: v[i] if k == "instruction" or v.ndim > 1 else v[i].item() for k, v in batch.items()}


def check_window(history: int, horizon: int) -> None:
    for name, value in (("history", history), ("horizon", horizon)):
        check_int(name, value, minimum=1)


def check_target(index: list, target: Any) -> None:
    """ValueError (one line, naming the run, its label and observation fields) unless ``target`` is ``"action"`` or
    a label field of every run of ``index`` (``(run, k)`` pairs, :func:`runs.episode_index`)."""
    if target == ACTION_TARGET:
        return
    if not isinstance(target, str):
        raise ValueError(f"target must be 'action' or the name of a label field, got {target!r}")
    for run in dict.fromkeys(run for run, _ in index):
        target_column(run.manifest["env_spec"], target, name=run.directory)


def _target_reading(target: str, options: EpisodeReadOptions) -> tuple[str, EpisodeReadOptions, str | None]:
    """The column ``target`` reads, the read options that read it, and the column read only for it (left out of the
    batches' observation) or None."""
    if target == ACTION_TARGET:
        return "action", options, None
    keys = options.observation_keys
    if keys is None or target in keys:
        return f"obs/{target}", options, None
    return f"obs/{target}", dataclasses.replace(options, observation_keys=[*keys, target]), f"obs/{target}"


def check_flags(**flags: Any) -> None:
    """Each keyword must be True or False (ValueError naming it)."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")


def _frame_table(index: list, options: EpisodeReadOptions, mmap: bool, params: bool) -> tuple[list[str], list, dict]:
    """The shard's episodes (``index``), checked, as one frame table: (fields, blocks, episodes: their entries, each
    one's ``instruction`` included), each run's table from its reader (``RunReader.frame_table``), the next run's
    rows after its last block. In memory the runs' blocks are joined into one; with ``mmap`` they stay views of the
    runs' files. The blocks hold the ``obs/`` columns, the ``state/`` ones asked for and ``action``; the episodes
    their ``params/`` with ``params``."""
    blocks, episode_parts, fields, offset = [], [], None, 0
    for run, group in itertools.groupby(index, key=lambda entry: entry[0]):
        ks = [k for _, k in group]
        run_fields, run_blocks, episodes = run.frame_table(ks, options, mmap=mmap)
        if fields is None:
            fields = run_fields
        elif run_fields != fields:
            raise ValueError(f"{run.directory}: observation fields {run_fields} differ from the first run's {fields}")
        run_blocks = [
            (start, {n: c for n, c in columns.items() if n.startswith(("obs/", "state/")) or n == "action"})
            for start, columns in run_blocks
        ]
        if blocks and run_blocks:
            layout = {n: (c.shape[1:], c.dtype) for n, c in run_blocks[0][1].items()}
            first = {n: (c.shape[1:], c.dtype) for n, c in blocks[0][1].items()}
            if layout != first:
                raise ValueError(f"{run.directory}: its columns {layout} differ from the first run's {first}")
        blocks += [(start + offset, columns) for start, columns in run_blocks]
        episodes = {k: v for k, v in episodes.items() if params or not k.startswith("params/")}
        if episode_parts and episodes.keys() != episode_parts[0].keys():
            raise ValueError(f"{run.directory}: its params {sorted(episodes)} differ from the first run's")
        episode_parts.append(dict(episodes, first_row=episodes["first_row"] + offset))
        if run_blocks:  # the next run's rows follow this one's last block
            offset = blocks[-1][0] + len(blocks[-1][1]["action"])
    if not episode_parts:
        empty = np.zeros(0, np.int64)
        keys = ("env_id", "episode_id", "steps", "first_row", "stride")
        return (
            list(options.observation_keys or []),
            [(0, {"action": np.zeros((0, 1), np.float32)})],
            {**dict.fromkeys(keys, empty), INSTRUCTION: np.zeros(0, object)},
        )
    if not mmap and len(blocks) > 1:  # blocks in memory follow one another from row 0: one block gathers faster
        blocks = [(0, {name: np.concatenate([c[name] for _, c in blocks]) for name in blocks[0][1]})]
    joined = {key: np.concatenate([p[key] for p in episode_parts]) for key in episode_parts[0]}
    kept = (INSTRUCTION, "params/")  # the others are ids and rows
    episodes = {k: v if k.startswith(kept) else v.astype(np.int64) for k, v in joined.items()}
    return fields, blocks, episodes
