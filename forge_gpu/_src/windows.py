"""Training windows with random access: every window of a run or dataset by index, many at once.

The selected episodes are read and checked once, into one frame table: each observation column with
one row per frame, and the transition columns on the frame each transition leads to (a packed run's
own layout, docs/FORMAT.md; schema-1 runs are laid out the same way in memory). A window is then a
pair (episode, t), and a batch of windows is a few fancy-indexing operations per column.

numpy and the standard library (pyarrow for packed runs).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from forge_gpu._src.packed import TRANSITION_COLUMNS, stack_episodes
from forge_gpu._src.reader import EpisodeReadOptions, check_window, episode_index


class Windows:
    """Every training window of one shard of a run directory or a dataset root, by index.

    Window ``i`` is ``(episode, t)``: the observation frames ``t-history+1 .. t`` and the actions
    ``t .. t+horizon-1`` of the episode, in episode order and then by ``t``. Without ``pad``, ``t``
    runs over ``[history-1, T-horizon]`` as in :func:`action_windows` (same windows, same order);
    with ``pad``, over every transition ``[0, T-1]``, and frames before the episode's first or actions
    after its last repeat the edge one, flagged in ``obs_is_pad`` ``[history]`` and
    ``action_is_pad`` ``[horizon]`` (LeRobot's ``*_is_pad`` convention).

    ``windows[i]`` gives one window; ``windows.batch(indices)`` (or ``windows[indices]``) gives many at
    once: ``obs/<F>`` ``[B, history, ...]``, ``action`` ``[B, horizon, A]``, ``env_id``, ``episode_id``,
    ``t`` ``[B]`` int64, ``instruction`` (a list of B strings), and the pad masks with ``pad``.

    Memory: the selected observation fields and the actions of every episode of the shard are held in
    memory (pick fields with ``observation_keys``).
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
    ):
        check_window(history, horizon)
        if not isinstance(pad, bool):
            raise ValueError(f"pad must be True or False, got {pad!r}")
        options = EpisodeReadOptions(observation_keys=observation_keys, shard_index=shard_index, num_shards=num_shards)
        self.history, self.horizon, self.pad = history, horizon, pad
        self.fields, self._columns, episodes, self.instructions = _frame_table(episode_index(directory), options)
        self._first_row, self._stride, self._steps = episodes["first_row"], episodes["stride"], episodes["steps"]
        self._env_id, self._episode_id, self._instruction = episodes["env_id"], episodes["episode_id"], episodes["run"]
        if pad:
            counts, first_t = self._steps, np.zeros_like(self._steps)
        else:
            counts = np.maximum(self._steps - horizon - history + 2, 0)
            first_t = np.full_like(self._steps, history - 1)
        starts = np.concatenate([[0], np.cumsum(counts)])
        self._window_episode = np.repeat(np.arange(counts.size), counts)
        self._window_t = np.arange(starts[-1]) - np.repeat(starts[:-1] - first_t, counts)

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
            one = self.batch(np.array([index]))
            return {k: (v[0] if k == "instruction" else v[0] if v.ndim > 1 else v[0].item()) for k, v in one.items()}
        return self.batch(index)

    def batch(self, indices: Sequence[int] | np.ndarray) -> dict[str, Any]:
        """Many windows at once (see the class doc); ``indices`` may repeat and come in any order."""
        indices = np.asarray(indices)
        if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
            raise ValueError(f"indices must be a 1-d sequence of integers, got shape {indices.shape} {indices.dtype}")
        if indices.size and (indices.min() < -len(self) or indices.max() >= len(self)):
            raise IndexError(f"window indices must lie in [-{len(self)}, {len(self) - 1}]")
        e = self._window_episode[indices]
        t = self._window_t[indices]
        first, stride, last = self._first_row[e, None], self._stride[e, None], self._steps[e, None] - 1
        frame = t[:, None] + np.arange(1 - self.history, 1)  # [B, history]: t-h+1 .. t
        step = t[:, None] + np.arange(self.horizon)  # [B, horizon]: t .. t+H-1
        obs_rows = first + np.maximum(frame, 0) * stride
        action_rows = first + (np.minimum(step, last) + 1) * stride  # transition k is stored on frame k+1
        out: dict[str, Any] = {f"obs/{f}": self._columns[f"obs/{f}"][obs_rows] for f in self.fields}
        out["action"] = self._columns["action"][action_rows]
        if self.pad:
            out["obs_is_pad"] = frame < 0
            out["action_is_pad"] = step > last
        out["env_id"] = self._env_id[e]
        out["episode_id"] = self._episode_id[e]
        out["t"] = t.astype(np.int64)
        out["instruction"] = [self.instructions[r] for r in self._instruction[e].tolist()]
        return out


def _frame_table(index: list, options: EpisodeReadOptions) -> tuple[list[str], dict, dict, list[str]]:
    """The shard's episodes, checked, as one frame table: (fields, columns, episodes, instructions)."""
    index = index[options.shard_index :: options.num_shards]
    parts, episode_parts, instructions, fields, offset = [], [], [], None, 0
    for number, (run, group) in enumerate(itertools.groupby(index, key=lambda entry: entry[0])):
        ks = [k for _, k in group]
        if hasattr(run, "tables"):  # packed: the episodes' rows, gathered and checked group by group
            run_fields, groups = run.tables(ks, options)
            run_fields, columns, episodes = _joined(run_fields, list(groups))
        else:
            run_fields, columns, episodes = stack_episodes(list(run.read(ks, options)))
        if fields is None:
            fields = run_fields
        elif run_fields != fields:
            raise ValueError(f"{run.directory}: observation fields {run_fields} differ from the first run's {fields}")
        episodes = dict(episodes, first_row=episodes["first_row"] + offset, run=np.full(len(ks), number))
        offset += len(columns["action"])
        parts.append(columns)
        episode_parts.append(episodes)
        instructions.append(run.manifest["env_spec"]["instruction"])
    if not parts:
        empty = np.zeros(0, np.int64)
        keys = ("env_id", "episode_id", "steps", "first_row", "stride", "run")
        return (
            list(options.observation_keys or []),
            {"action": np.zeros((0, 1), np.float32)},
            dict.fromkeys(keys, empty),
            [],
        )
    columns = {}
    for name in parts[0]:
        try:
            columns[name] = parts[0][name] if len(parts) == 1 else np.concatenate([p[name] for p in parts])
        except ValueError as exc:
            raise ValueError(f"the runs' {name} columns differ in shape or type: {exc}") from exc
    episodes = {key: np.concatenate([p[key] for p in episode_parts]).astype(np.int64) for key in episode_parts[0]}
    return fields, columns, episodes, instructions


def _joined(fields: list[str], groups: list[tuple[dict, dict, np.ndarray]]) -> tuple[list[str], dict, dict]:
    """Groups of gathered episodes (``read_episode_tables``) as one table laid end to end (stride 1)."""
    names = [f"obs/{f}" for f in fields] + list(TRANSITION_COLUMNS)
    columns = {n: np.concatenate([g[n] for _, g, _ in groups]) for n in names}
    offsets = np.cumsum([0] + [int(s[-1]) for _, _, s in groups[:-1]])
    episodes = {key: np.concatenate([e[key] for e, _, _ in groups]) for key in ("env_id", "episode_id", "steps")}
    episodes["first_row"] = np.concatenate([s[:-1] + o for (_, _, s), o in zip(groups, offsets, strict=True)])
    episodes["stride"] = np.ones(episodes["steps"].size, np.int64)
    return fields, columns, episodes
