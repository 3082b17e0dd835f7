"""Read a run directory or a dataset of runs: the manifest, checked episodes, training windows.

A run is of any registered format (:mod:`formats.registry`): schema 1 (docs/FORMAT-v1.md: one ``.npz`` per
episode, read by :mod:`formats.npz.reader`) or packed (schema 2, docs/FORMAT.md, read by
:mod:`formats.packed.reader`); all read
back as the same :class:`Episode` objects. A dataset root is a directory holding ``dataset.json``
(written by the distributed collector) and its run directories. Over a dataset, episodes are counted in
the order of the runs in ``dataset.json``, then in each run's order (schema 1: file names; packed: the
commit log); sharding applies to that whole sequence.

numpy and the standard library (pyarrow for packed runs).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.dataset import run_directories
from forge_gpu._src.core.episode import Episode, EpisodeReadOptions
from forge_gpu._src.formats.registry import RunReader, check_published, format_of, read_manifest


def read_episodes(directory: str | os.PathLike, *, options: EpisodeReadOptions | None = None) -> Iterator[Episode]:
    """Yield the checked episodes of one shard of a run directory or a dataset root.

    Episodes come in each run's order (schema 1: sorted file names; packed: the commit log), run by run
    over a dataset in ``dataset.json`` order. Only published episodes count (schema 1: those with a
    valid completion marker; packed: those in the commit log); the ``k``-th of them belongs to shard
    ``k % num_shards``, decided before any episode data is opened. A file that breaks the format raises
    ValueError naming it. The manifests, markers and commit logs are checked at the call; episode data
    when it is reached (a packed run's blocks are read once, in order, and its episodes checked in
    groups, whole columns at a time).
    """
    options = options or EpisodeReadOptions()
    return read_index(_shard(directory, options), options)


def read_index(index: list[tuple[Any, int]], options: EpisodeReadOptions) -> Iterator[Episode]:
    """The episodes of an index (``(run, k)`` pairs from :func:`episode_index`), in its order."""
    for run, group in itertools.groupby(index, key=lambda entry: entry[0]):
        yield from run.read([k for _, k in group], options)


def _shard(directory: str | os.PathLike, options: EpisodeReadOptions) -> list[tuple[Any, int]]:
    return episode_index(directory)[options.shard_index :: options.num_shards]


def episode_index(path: str | os.PathLike) -> list[tuple[Any, int]]:
    """``(run, k)`` for every published episode, in reading order: the ``k``-th episode of ``run`` (an
    opened run, :func:`open_run`). Manifests, markers and commit logs are read; no episode data."""
    index = []
    for run_dir in run_directories(path):
        run = open_run(run_dir)
        index += [(run, k) for k in range(len(run))]
    return index


def index_instructions(index: list[tuple[Any, int]]) -> list[str]:
    """The instruction of every episode of an index (:func:`episode_index`), in its order, from the runs' indexes
    alone (``RunReader.instructions``)."""
    out: list[str] = []
    for run, group in itertools.groupby(index, key=lambda entry: entry[0]):
        texts = run.instructions()
        out += [texts[k] for _, k in group]
    return out


def open_run(run_dir: str | os.PathLike) -> RunReader:
    """The published episodes of one run directory, of any registered format (:mod:`formats`; manifest, and
    markers or commit log, read and checked; no episode data). A closed run that holds fewer episodes than its
    run.json says were published is refused as damaged (:func:`formats.registry.check_published`)."""
    run_dir = os.fspath(run_dir)
    manifest = read_manifest(run_dir)
    fmt = format_of(manifest)
    reader = fmt.open(run_dir, manifest)
    check_published(run_dir, manifest, len(reader), fmt)
    return reader


def action_windows(
    directory: str | os.PathLike,
    history: int = 1,
    horizon: int = 1,
    *,
    options: EpisodeReadOptions | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield training windows (docs/FORMAT-v1.md, "Training windows") of the episodes of one shard.

    ``directory`` is a run directory or a dataset root; episodes and shards are as in :func:`read_episodes`.
    For an episode of T transitions there is one window per ``t`` in ``[history-1, T-horizon]``, a dict
    with ``obs/<F>`` = ``obs[F][t-history+1 : t+1]`` (``[history, ...]``; ``state/<S>`` alike, where
    ``options.state`` asks for it), ``action`` =
    ``action[t : t+horizon]`` (``[horizon, A]``), the episode's ``instruction`` (``Episode.instruction``) and the ints
    ``env_id``, ``episode_id`` and ``t``. The arrays are read-only views of the episode's arrays (windows overlap:
    copy one to change it).
    """
    check_window(history, horizon)
    options = options or EpisodeReadOptions()
    return episode_windows(_shard(directory, options), options, history, horizon)


def check_window(history: int, horizon: int) -> None:
    for name, value in (("history", history), ("horizon", horizon)):
        check_int(name, value, minimum=1)


def episode_windows(
    index: list[tuple[Any, int]], options: EpisodeReadOptions, history: int, horizon: int
) -> Iterator[dict]:
    """The windows of the indexed episodes, in index order."""
    for run, group in itertools.groupby(index, key=lambda entry: entry[0]):
        for episode in run.read([k for _, k in group], options):
            count = episode.steps - horizon - history + 2  # windows t = history-1 .. T-horizon
            if count <= 0:
                continue
            keys = [f"obs/{f}" for f in episode.obs] + [f"state/{n}" for n in episode.state] + ["action"]
            arrays = [*episode.obs.values(), *episode.state.values()]
            views = [_sliding(a, count, history) for a in arrays] + [
                _sliding(episode.action[history - 1 :], count, horizon)
            ]
            # Each window a copy of one dict in the windows' key order, its arrays and t then set (0.44 us a window
            # against 0.50 built from the keys; its views cost about as much again).
            base: dict[str, Any] = dict.fromkeys(keys)
            base.update(instruction=episode.instruction, env_id=episode.env_id, episode_id=episode.episode_id, t=0)
            for t, values in zip(range(history - 1, history - 1 + count), zip(*views, strict=True), strict=True):
                window = base.copy()
                window.update(zip(keys, values, strict=True))
                window["t"] = t
                yield window


def _sliding(values: np.ndarray, count: int, size: int) -> list[np.ndarray]:
    """The ``count`` read-only views ``values[k : k + size]``, k = 0, 1, ...: made at once (one strided view), not
    sliced one by one."""
    step = values.strides[0]
    view = np.lib.stride_tricks.as_strided(
        values, (count, size, *values.shape[1:]), (step, step, *values.strides[1:]), writeable=False
    )
    return list(view)
