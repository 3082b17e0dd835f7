"""Re-simulating one wave or batch of recorded episodes in a VectorEnv (``replay``'s inner loops), and the
host arena their new observations go to. Nothing loops over worlds per frame: each frame is one ``restore``
or ``step`` of all worlds and whole-array copies.

The simulation half of ``forge_gpu.recording`` (``_src/collect``: it drives the env, with Warp); the data half,
``_src/recording``, never imports Warp.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator

import numpy as np
import warp as wp

from forge_gpu._src.core.episode import Episode
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS


def frame_bytes(env) -> int:
    """Host bytes of one frame of one world: its observation and its state (read from the source)."""
    arrays = [*env.observation.values(), *env.state_fields.values()]
    return sum(int(np.prod(a.shape[1:])) * wp_numpy_dtype(a).itemsize for a in arrays)


def waves(episodes: Iterator[Episode], *, capacity: int, most: int) -> Iterator[list[Episode]]:
    """The episodes in waves of at most ``most`` episodes and ``capacity`` frames (at least one episode each)."""
    wave: list[Episode] = []
    frames = 0
    for episode in episodes:
        if wave and (len(wave) == most or frames + episode.steps + 1 > capacity):
            yield wave
            wave, frames = [], 0
        wave.append(episode)
        frames += episode.steps + 1
    if wave:
        yield wave


def batches(episodes: Iterator[Episode], size: int) -> Iterator[list[Episode]]:
    group: list[Episode] = []
    for episode in episodes:
        group.append(episode)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def _padded(group: list[Episode], n: int, arrays: Callable[[Episode], dict]) -> dict:
    """Each episode's ``arrays`` (name -> [frames, ...]) stacked as name -> [n, most frames, ...]: an episode's
    last frame repeats past its end and the last episode fills the worlds past the group's (once per batch)."""
    longest = max(len(next(iter(arrays(e).values()))) for e in group)
    index = np.minimum(np.arange(n), len(group) - 1)
    out = {}
    for name in arrays(group[0]):
        rows = [arrays(group[i])[name] for i in index]
        out[name] = np.stack([np.concatenate([r, np.repeat(r[-1:], longest - len(r), axis=0)]) for r in rows])
    return out


def _params(group: list[Episode], n: int, own) -> dict:
    """The env's own params (``own``: env.spec's; a trainer's recorded beside them are not restored) of each world."""
    index = np.minimum(np.arange(n), len(group) - 1)
    return {name: np.stack([np.asarray(group[i].params[name], np.float32) for i in index]) for name in own}


class _Frames:
    """The observations of a batch of episodes laid end to end: name -> [rows, ...] host arrays, filled frame by
    frame from the env's observation (world ``w``'s row ``rows[w]``; one fancy-indexed copy per field)."""

    def __init__(self, env, rows: int):
        self.env = env
        self.arrays = {
            name: np.empty((rows, *array.shape[1:]), wp_numpy_dtype(array)) for name, array in env.observation.items()
        }

    def put(self, rows: np.ndarray) -> None:
        for name, array in self.env.observation.items():
            self.arrays[name][rows] = array.numpy()

    def episodes(self, group: list[Episode], starts) -> list[Episode]:
        """The group's episodes (episode ``i``'s frames from row ``starts[i]``) with these observations, the
        bookkeeping fields and everything else as recorded."""
        out = []
        for episode, start in zip(group, starts, strict=True):
            steps = episode.steps
            obs = {name: array[start : start + steps + 1] for name, array in self.arrays.items()}
            for name in BOOKKEEPING_FIELDS:
                obs[name] = np.concatenate([episode.obs[name], episode.next[name][-1:]])
            out.append(
                dataclasses.replace(
                    episode, obs={k: v[:steps] for k, v in obs.items()}, next={k: v[1:] for k, v in obs.items()}
                )
            )
        return out


def wp_numpy_dtype(array) -> np.dtype:
    """The numpy dtype of a Warp array's elements."""
    return np.dtype(wp.dtype_to_numpy(array.dtype))


def _state_at(states: dict, t: np.ndarray) -> dict:
    """Frame ``t[i]`` of world ``i`` of the padded states: name -> [n, ...]."""
    worlds = np.arange(len(t))
    return {name: array[worlds, t] for name, array in states.items()}


def from_state(env, wave: list[Episode], stop: threading.Event, count: Callable) -> list[Episode]:
    """Restore every frame of the wave's episodes, ``num_envs`` worlds at a time, and observe each; a world that
    finishes an episode takes the wave's next one at the next frame, so no world re-observes a finished episode
    while others run. Each frame is one ``restore`` of all worlds and whole-array copies. A ``stop`` lets the
    worlds finish the episodes they hold and takes no new one; the finished episodes are returned."""
    n = env.num_envs
    lengths = np.array([e.steps + 1 for e in wave])
    starts = np.concatenate([[0], np.cumsum(lengths)])  # the frames of episode i: rows starts[i] .. starts[i + 1]
    scratch = int(starts[-1])  # the row idle worlds write to
    states = {name: np.concatenate([e.state[name] for e in wave]) for name in wave[0].state}
    own = env.spec.get("params") or {}  # a trainer's params recorded beside the env's are not restored
    params = {name: np.stack([np.asarray(e.params[name], np.float32) for e in wave]) for name in own}
    frames = _Frames(env, scratch + 1)
    held = np.full(n, -1)  # the episode each world holds (-1: none)
    t = np.zeros(n, np.int64)  # the frame it is at
    finished = np.zeros(len(wave), bool)
    taken = 0
    while True:
        free = (held < 0) | (t >= lengths[held])
        finished[held[free & (held >= 0)]] = True
        if (free & (held >= 0)).any():
            count(int((free & (held >= 0)).sum()), int(lengths[held[free & (held >= 0)]].sum()))
        held[free] = -1
        worlds = np.flatnonzero(free)[: 0 if stop.is_set() else len(wave) - taken]
        held[worlds], t[worlds] = np.arange(taken, taken + len(worlds)), 0
        taken += len(worlds)
        if (held < 0).all():
            break
        rows = np.where(held >= 0, starts[np.maximum(held, 0)] + t, scratch)
        state = {name: array[np.minimum(rows, scratch - 1)] for name, array in states.items()}
        new = np.zeros(n, bool)
        new[worlds] = True
        drawn = {name: array[np.maximum(held, 0)] for name, array in params.items()} if new.any() else None
        env.restore(state, drawn, worlds=new)
        frames.put(rows)
        t += 1
    done = [i for i in range(len(wave)) if finished[i]]
    return frames.episodes([wave[i] for i in done], starts[done])


def from_actions(env, group: list[Episode], tolerance: float) -> tuple[list[Episode], list[dict]]:
    n, size = env.num_envs, len(group)
    states = _padded(group, n, lambda e: e.state)
    actions = _padded(group, n, lambda e: {"action": e.action})["action"]
    steps = np.array([e.steps for e in group])
    first_step = np.full(size, -1, np.int64)
    max_error = np.zeros(size, np.float64)
    env.restore(_state_at(states, np.zeros(n, np.int64)), _params(group, n, env.spec.get("params") or {}))
    starts = np.concatenate([[0], np.cumsum(steps + 1)])
    frames = _Frames(env, int(starts[-1]) + 1)  # the last row: where worlds past their episode's end write
    world_starts = np.concatenate([starts[:size], np.full(n - size, starts[-1])])
    world_steps = np.concatenate([steps, np.full(n - size, -1)])

    def rows(t: int) -> np.ndarray:
        return np.where(t <= world_steps, world_starts + t, starts[-1])

    frames.put(rows(0))
    for t in range(1, int(steps.max()) + 1):
        result = env.step(np.ascontiguousarray(actions[:, t - 1]))
        recorded = _state_at(states, np.full(n, t))
        error = np.zeros(size)
        for name, array in result.state.items():
            diff = np.abs(array.numpy()[:size].astype(np.float64) - recorded[name][:size])
            error = np.maximum(error, diff.reshape(size, -1).max(axis=1))
        live = t <= steps
        error = np.where(live, error, 0.0)
        max_error = np.maximum(max_error, error)
        first_step = np.where((first_step < 0) & live & (error > tolerance), t, first_step)
        frames.put(rows(t))
    divergence = [
        {
            "env_id": e.env_id,
            "episode_id": e.episode_id,
            "first_step": None if first_step[i] < 0 else int(first_step[i]),
            "max_error": float(max_error[i]),
        }
        for i, e in enumerate(group)
    ]
    replayed = frames.episodes(group, starts[:-1])
    return [replayed[i] for i in range(size) if first_step[i] < 0], divergence
