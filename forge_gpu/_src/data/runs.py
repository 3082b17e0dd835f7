"""Read a run directory or a dataset of runs: the manifest, checked episodes, training windows.

A run is of any registered format (:mod:`formats`): schema 1 (FORMAT.md: one ``.npz`` per episode,
read by :mod:`npz_reader`) or packed (schema 2, docs/FORMAT.md, read by :mod:`packed_reader`); all read
back as the same :class:`Episode` objects. A dataset root is a directory holding ``dataset.json``
(written by the distributed collector) and its run directories. Over a dataset, episodes are counted in
the order of the runs in ``dataset.json``, then in each run's order (schema 1: file names; packed: the
commit log); sharding applies to that whole sequence.

numpy and the standard library (pyarrow for packed runs).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from forge_gpu._src.core.manifest import RUN_MANIFEST, load_json, read_manifest
from forge_gpu._src.formats.npz.layout import MAX_MEMBER_BYTES
from forge_gpu._src.formats.options import check_int
from forge_gpu._src.formats.registry import RunReader, format_of

DATASET_MANIFEST = "dataset.json"
DATASET_KIND = "forge_gpu.dataset"
#: The version of dataset.json's own schema (not a run's).
DATASET_SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Episode:
    """One checked episode of ``steps`` (T) transitions.

    ``obs[F]`` and ``next[F]`` are ``[T, ...]`` arrays of observation field ``F`` before and after each
    transition; ``action`` is ``[T, A]``, ``reward``, ``terminated`` and ``truncated`` are ``[T]``.
    """

    env_id: int
    episode_id: int
    steps: int
    obs: dict[str, np.ndarray]
    next: dict[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    path: str


def is_dataset(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a dataset root (holds ``dataset.json``) rather than a run directory."""
    return os.path.isfile(os.path.join(os.fspath(path), DATASET_MANIFEST))


def read_dataset_manifest(root: str | os.PathLike) -> dict:
    """Load and check ``dataset.json`` of a dataset root."""
    root = os.fspath(root)
    path = os.path.join(root, DATASET_MANIFEST)
    manifest = load_json(path)
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: must hold a JSON object")
    if manifest.get("schema_version") != DATASET_SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema_version is {manifest.get('schema_version')!r}; this reader reads {DATASET_SCHEMA_VERSION}"
        )
    if manifest.get("kind") != DATASET_KIND:
        raise ValueError(f"{path}: kind is {manifest.get('kind')!r}, expected {DATASET_KIND!r}")
    runs = manifest.get("runs")
    if not isinstance(runs, list):
        raise ValueError(f"{path}: runs must be a list")
    for entry in runs:
        name = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name in ("", ".", "..") or os.path.basename(name) != name:
            raise ValueError(f"{path}: each run needs a path naming a directory beside dataset.json, got {entry!r}")
    if os.path.isfile(os.path.join(root, RUN_MANIFEST)):
        raise ValueError(f"{root}: holds both {RUN_MANIFEST} and {DATASET_MANIFEST}; it must be one or the other")
    return manifest


def run_directories(path: str | os.PathLike) -> list[str]:
    """The run directories of a dataset root in ``dataset.json`` order, or ``[path]`` for a run directory."""
    path = os.fspath(path)
    if not is_dataset(path):
        return [path]
    return [os.path.join(path, entry["path"]) for entry in read_dataset_manifest(path)["runs"]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EpisodeReadOptions:
    """What :func:`read_episodes` and :func:`action_windows` read, and which partition."""

    observation_keys: Sequence[str] | None = None
    """Observation fields to load and value-check; ``None`` loads all. The full member schema, the
    required fields and the transition members are checked either way."""
    shard_index: int = 0
    """This reader's partition: the ``k``-th counted episode belongs to shard ``k % num_shards``."""
    num_shards: int = 1
    """Number of partitions."""
    max_member_bytes: int = MAX_MEMBER_BYTES
    """A member whose header claims more bytes is refused before anything is allocated."""

    def __post_init__(self):
        check_int("num_shards", self.num_shards, minimum=1)
        index = self.shard_index
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < self.num_shards:
            raise ValueError(f"shard_index must be an integer in [0, {self.num_shards - 1}], got {index!r}")
        keys = self.observation_keys
        if keys is not None:
            if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
                raise ValueError(f"observation_keys must be a sequence of field names, got {keys!r}")
            object.__setattr__(self, "observation_keys", tuple(keys))
        if not isinstance(self.max_member_bytes, int) or self.max_member_bytes < 1:
            raise ValueError(f"max_member_bytes must be a positive integer, got {self.max_member_bytes!r}")


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


def open_run(run_dir: str | os.PathLike) -> RunReader:
    """The published episodes of one run directory, of any registered format (:mod:`formats`; manifest, and
    markers or commit log, read and checked; no episode data)."""
    run_dir = os.fspath(run_dir)
    manifest = read_manifest(run_dir)
    return format_of(manifest).open(run_dir, manifest)


def action_windows(
    directory: str | os.PathLike,
    history: int = 1,
    horizon: int = 1,
    *,
    options: EpisodeReadOptions | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield training windows (FORMAT.md "Training windows") of the episodes of one shard.

    ``directory`` is a run directory or a dataset root; episodes and shards are as in :func:`read_episodes`.
    For an episode of T transitions there is one window per ``t`` in ``[history-1, T-horizon]``, a dict
    with ``obs/<F>`` = ``obs[F][t-history+1 : t+1]`` (``[history, ...]``), ``action`` =
    ``action[t : t+horizon]`` (``[horizon, A]``), the ``instruction`` of the episode's run and the ints
    ``env_id``, ``episode_id`` and ``t``. The arrays are views of the episode's arrays.
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
        instruction = run.manifest["env_spec"]["instruction"]
        for episode in run.read([k for _, k in group], options):
            for t in range(history - 1, episode.steps - horizon + 1):
                window: dict[str, Any] = {f"obs/{f}": a[t - history + 1 : t + 1] for f, a in episode.obs.items()}
                window["action"] = episode.action[t : t + horizon]
                window["instruction"] = instruction
                window["env_id"] = episode.env_id
                window["episode_id"] = episode.episode_id
                window["t"] = t
                yield window
