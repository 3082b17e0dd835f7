"""Training windows: every window of a run or dataset by index, many at once (:class:`Windows`), or one after
another (iterating a :class:`Windows`, as :func:`action_windows` does).

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


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """What a training window is: the arguments :class:`Windows`, :func:`action_windows` and the torch datasets
    (``WindowDataset``, ``WindowMapDataset``) share, checked once, as the spec is made (ValueError naming the field).

    Every one of them takes these as keywords, as torch and LeRobot datasets take theirs (``Windows(run, 2, 8,
    pad=True)``, ``WindowMapDataset(run, history=2, horizon=8)``): the keywords are built into a spec, the one place
    they are checked. ``spec=`` gives a spec made once instead, to describe the same windows to several readers (the
    ``Windows`` an evaluation indexes and the dataset a DataLoader trains on) or to keep beside a trained policy;
    keywords given with it replace its fields (``WindowMapDataset(run, spec=spec, mmap=True)``). A spec is frozen,
    hashable and picklable (a DataLoader worker gets a copy)."""

    history: int = 1
    """Observation frames per window: ``t-history+1 .. t``."""
    horizon: int = 1
    """Actions per window: ``t .. t+horizon-1``."""
    _: dataclasses.KW_ONLY
    observation_keys: Sequence[str] | None = None
    """Observation fields to read (``None``: all), kept as a tuple."""
    pad: bool = False
    """Also the windows at episode edges, the frames and actions past an edge repeating it, with ``*_is_pad``."""
    mmap: bool = False
    """Leave the frames in the runs' files (uncompressed packed runs) instead of loading them."""
    state: bool | Sequence[str] = False
    """``state/<S>`` at the observation's frames: none, every entry (``True``) or the named ones (a tuple)."""
    params: bool = False
    """``params/<P>``: each window's episode's params."""
    verify: bool = True
    """Check every block's checksum once, as the table is made (:class:`EpisodeReadOptions`)."""
    target: str = ACTION_TARGET
    """What ``action`` holds: ``"action"`` (the recorded actions) or a label field of the runs (whether the runs
    have it is checked where a reader opens them)."""

    def __post_init__(self):
        check_int("history", self.history, minimum=1)
        check_int("horizon", self.horizon, minimum=1)
        for name in ("pad", "mmap", "params"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not isinstance(self.target, str):
            raise ValueError(f"target must be 'action' or the name of a label field, got {self.target!r}")
        read = self.read_options()  # checks observation_keys, state and verify, and makes the sequences tuples
        object.__setattr__(self, "observation_keys", read.observation_keys)
        object.__setattr__(self, "state", read.state)

    def read_options(self, options: EpisodeReadOptions | None = None, **shard: int) -> EpisodeReadOptions:
        """``options`` (default: the defaults) reading what the spec reads, of the ``shard`` (``shard_index``,
        ``num_shards``) where given."""
        read = {"observation_keys": self.observation_keys, "state": self.state, "verify": self.verify}
        return dataclasses.replace(options or EpisodeReadOptions(), **read, **shard)


def window_spec(spec: WindowSpec | None, args: tuple, keywords: dict) -> WindowSpec:
    """The spec a reader was given: ``WindowSpec(*args, **keywords)``, or ``spec`` with ``keywords`` replacing its
    fields."""
    if spec is None:
        return WindowSpec(*args, **keywords)
    if not isinstance(spec, WindowSpec):
        raise TypeError(f"spec must be a WindowSpec, got {spec!r}")
    if args:
        raise TypeError("history and horizon go in the spec, or as keywords beside it, not positionally")
    return dataclasses.replace(spec, **keywords) if keywords else spec


def window_counts(steps: np.ndarray, spec: WindowSpec) -> tuple[np.ndarray, np.ndarray]:
    """The windows of ``spec`` in episodes of ``steps`` steps: each episode's count and its first window's frame
    ``t``. With ``pad`` one window per step, from ``t`` = 0; without, only the windows whose history and horizon lie
    inside the episode, from ``t`` = history - 1."""
    if spec.pad:
        return steps, np.zeros_like(steps)
    return np.maximum(steps - spec.horizon - spec.history + 2, 0), np.full_like(steps, spec.history - 1)


def count_windows(index: list, spec: WindowSpec) -> int:
    """``len(Windows(directory, spec=spec))`` of the directory's ``index`` (:func:`runs.episode_index`), from the
    runs' indexes alone: no frame is read."""
    steps = np.array([run.ids(k)[2] for run, k in index], np.int64)
    return int(window_counts(steps, spec)[0].sum())


class Windows:
    """Every training window of one shard of a run directory or a dataset root, by index.

    The windows are those of a :class:`WindowSpec`: its fields as keywords (``history`` and ``horizon`` also
    positionally: ``Windows(run, 2, 8, pad=True)``), or ``spec=``; ``shard_index`` and ``num_shards`` choose the
    shard (as :class:`EpisodeReadOptions`'s do).

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
    memory, decoded (pick fields with ``observation_keys``). With ``mmap=True`` (uncompressed packed runs only) they
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

    Encoded image fields (packed layout 5) are decoded once as the table is loaded in memory; with ``mmap`` they are
    decoded as a batch gathers them, on the CPU over the reader's thread pool, and ``batch(indices, encoded=True)``
    leaves them encoded (an ``EncodedFrames`` of the batch's ``B x history``
    frames, window by window), for a decoder elsewhere: ``forge_gpu.reading.device_batch`` decodes them on a CUDA
    device.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *args: Any,
        spec: WindowSpec | None = None,
        shard_index: int = 0,
        num_shards: int = 1,
        **window: Any,
    ):
        spec = window_spec(spec, args, window)
        options = spec.read_options(shard_index=shard_index, num_shards=num_shards)
        index = episode_index(directory)
        check_target(index, spec.target)  # every run of the directory, whichever shard holds its episodes
        self._load(index[options.shard_index :: options.num_shards], spec, options)

    @classmethod
    def _of_index(cls, index: list, spec: WindowSpec, options: EpisodeReadOptions) -> Windows:
        """The windows of the episodes of ``index`` (``(run, k)`` pairs, :func:`runs.episode_index`), read with
        ``options`` (its shard fields aside: ``index`` is the shard)."""
        windows = cls.__new__(cls)
        windows._load(index, spec, options)
        return windows

    def _load(self, index: list, spec: WindowSpec, options: EpisodeReadOptions) -> None:
        history, horizon, pad, mmap, target = spec.history, spec.horizon, spec.pad, spec.mmap, spec.target
        self.spec = spec
        """The :class:`WindowSpec` of the windows."""
        self.history, self.horizon, self.pad, self.mmap = history, horizon, pad, mmap
        self.target = target
        """What ``action`` holds: ``"action"`` (the recorded actions) or a label field (see the class doc)."""
        column, options, hidden = _target_reading(target, options)
        self.fields, blocks, episodes = _frame_table(index, options, mmap, spec.params)
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
        counts, first_t = window_counts(self._steps, spec)
        starts = np.concatenate([[0], np.cumsum(counts)])
        self._episode_windows = starts  # episode e's windows: starts[e] .. starts[e+1]-1
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

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every window in index order, one dict each: ``windows[i]``'s keys and values, its arrays read-only views
        (copy one to change it). Where :meth:`batch` adds fixed offsets to each window's row of one block (in
        memory, no padding, one stride), an episode's windows are made at once as strided views of that block, no
        gather; otherwise batches of :data:`CHUNK` windows are gathered and split."""
        table = self._one_block()
        if table is None:
            for low in range(0, len(self), CHUNK):
                batch = self.batch(np.arange(low, min(low + CHUNK, len(self))))
                for values in batch.values():
                    if isinstance(values, np.ndarray):
                        values.flags.writeable = False
                for i in range(len(batch["t"])):
                    yield one_window(batch, i)
            return
        start, columns = table
        for e in range(self.episodes):
            low, high = int(self._episode_windows[e]), int(self._episode_windows[e + 1])
            if low == high:
                continue
            count, step = high - low, int(self._stride[e])
            row = int(self._window_row[low]) - start  # the first window's frame t
            keys, views = list(columns), []
            for offsets, names in ((self._offsets[0], keys[:-1]), (self._offsets[1], keys[-1:])):
                for name in names:  # window k's rows: row + offsets + k * step, as ``batch`` gathers them
                    values = columns[name][row + int(offsets[0]) :]
                    shape = (count, offsets.size, *values.shape[1:])
                    strides = (step * values.strides[0], step * values.strides[0], *values.strides[1:])
                    views.append(np.lib.stride_tricks.as_strided(values, shape, strides, writeable=False))
            # Each window a copy of one dict in batch's key order, its arrays and t then set.
            base: dict[str, Any] = dict.fromkeys(keys)
            base.update({name: _episode_value(values, e) for name, values in self._params.items()})
            base.update(env_id=int(self._env_id[e]), episode_id=int(self._episode_id[e]), t=0)
            base["instruction"] = self.instructions[self._instruction[e]]
            first_t = int(self._window_t[low])
            for t, values in zip(range(first_t, first_t + count), zip(*views, strict=True), strict=True):
                window = base.copy()
                window.update(zip(keys, values, strict=True))
                window["t"] = t
                yield window

    def _one_block(self) -> tuple[int, dict[str, np.ndarray]] | None:
        """The table as one block's first row and columns (observation columns in the batches' order, then
        ``action``), where windows can be views of it: one block of plain arrays, no padding, one stride; else
        None."""
        if self._offsets is None or len(self._obs) != 1 or self.encoded_fields:
            return None
        start, observation = self._obs[0]
        columns = {**observation, "action": self._action[0][1]["action"]}
        if not all(type(values) is np.ndarray for values in columns.values()):
            return None
        return start, columns

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
    *args: Any,
    spec: WindowSpec | None = None,
    options: EpisodeReadOptions | None = None,
    **window: Any,
) -> Iterator[dict[str, Any]]:
    """Yield the training windows (docs/FORMAT-v1.md, "Training windows") of the episodes of one shard, one dict each:
    the windows of :class:`Windows` of the same spec (:class:`WindowSpec`: ``history``, ``horizon`` and the other
    keywords, or ``spec=``), in its order, a run at a time (iterating each run's :class:`Windows`).

    ``directory`` is a run directory or a dataset root; episodes and shards are as in :func:`runs.read_episodes`.
    For an episode of T transitions there is one window per ``t`` in ``[history-1, T-horizon]`` (without ``pad``), a
    dict with ``obs/<F>`` = ``obs[F][t-history+1 : t+1]`` (``[history, ...]``; ``state/<S>`` alike, where ``state``
    asks for it), ``action`` = ``action[t : t+horizon]`` (``[horizon, A]``), the episode's ``instruction``
    (``Episode.instruction``) and the ints ``env_id``, ``episode_id`` and ``t``. The arrays are read-only views of the
    frames in memory, or of a batch of windows (copy one to change it). Memory holds the selected fields of one
    run's episodes of the shard at a time. The manifests and indexes are read and checked at the call.

    ``options`` (:class:`EpisodeReadOptions`) gives the shard (and ``max_member_bytes``); its ``observation_keys``,
    ``state`` and ``verify`` are the spec's where the spec leaves them unset (ValueError where both set one,
    differently).
    """
    spec = window_spec(spec, args, window)
    if options is not None:
        spec = _with_reading(spec, options)
    options = spec.read_options(options)
    index = episode_index(directory)
    check_target(index, spec.target)
    return _each_window(index[options.shard_index :: options.num_shards], spec, options)


def _with_reading(spec: WindowSpec, options: EpisodeReadOptions) -> WindowSpec:
    """``spec`` reading what ``options`` reads (its ``observation_keys``, ``state`` and ``verify``), where the spec
    leaves that at its default; ValueError where both set one, differently."""
    unset, unread = WindowSpec(), EpisodeReadOptions()
    names = ("observation_keys", "state", "verify")
    read = {n: getattr(options, n) for n in names if getattr(options, n) != getattr(unread, n)}
    clash = [n for n, v in read.items() if getattr(spec, n) not in (v, getattr(unset, n))]
    if clash:
        raise ValueError(f"{', '.join(clash)} set both in the window spec and in options, differently")
    return dataclasses.replace(spec, **read)


def _each_window(index: list, spec: WindowSpec, options: EpisodeReadOptions) -> Iterator[dict[str, Any]]:
    for _, group in itertools.groupby(index, key=lambda entry: entry[0]):
        yield from Windows._of_index(list(group), spec, options)


def _episode_value(values: np.ndarray, e: int) -> Any:
    """Episode ``e``'s entry of a per-episode array, as :func:`one_window` gives a window's: a read-only row, or a
    Python scalar where the entry is one value."""
    if values.ndim == 1:
        return values[e].item()
    row = values[e]
    row.flags.writeable = False
    return row


def one_window(batch: dict[str, Any], i: int) -> dict[str, Any]:
    """Window ``i`` of a batch (:meth:`Windows.batch`): its arrays' rows, and its ids and ``t`` as ints."""
    return {k: v[i] if k == "instruction" or v.ndim > 1 else v[i].item() for k, v in batch.items()}


def check_target(index: list, target: str) -> None:
    """ValueError (one line, naming the run, its label and observation fields) unless ``target`` is ``"action"`` or
    a label field of every run of ``index`` (``(run, k)`` pairs, :func:`runs.episode_index`)."""
    if target == ACTION_TARGET:
        return
    for run in dict.fromkeys(run for run, _ in index):
        target_column(run.manifest["env_spec"], target, name=run.directory)


def check_reading(index: list, spec: WindowSpec) -> None:
    """ValueError (one line) for what loading ``spec``'s windows of ``index`` would refuse before any frame is read:
    a ``target`` that is not every run's label (:func:`check_target`), fields or state entries a run lacks, a mapping
    a run cannot take (``RunReader.check_read``). Reads manifests and segment schemas, no episode data."""
    check_target(index, spec.target)
    _, options, _ = _target_reading(spec.target, spec.read_options())
    for run in dict.fromkeys(run for run, _ in index):
        run.check_read(options, mmap=spec.mmap)


def _target_reading(target: str, options: EpisodeReadOptions) -> tuple[str, EpisodeReadOptions, str | None]:
    """The column ``target`` reads, the read options that read it, and the column read only for it (left out of the
    batches' observation) or None."""
    if target == ACTION_TARGET:
        return "action", options, None
    keys = options.observation_keys
    if keys is None or target in keys:
        return f"obs/{target}", options, None
    return f"obs/{target}", dataclasses.replace(options, observation_keys=[*keys, target]), f"obs/{target}"


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
