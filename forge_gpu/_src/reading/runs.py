"""Read a run directory or a dataset of runs: the manifest and checked episodes (training windows: :mod:`windows`).

A run is of any registered format (:mod:`formats.registry`): schema 1 (docs/FORMAT-v1.md: one ``.npz`` per
episode, read by :mod:`formats.npz.read`) or packed (schema 2, docs/FORMAT.md, read by
:mod:`formats.packed.read`); all read
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
    return read_index(shard_episodes(directory, options), options)


def read_index(index: list[tuple[Any, int]], options: EpisodeReadOptions) -> Iterator[Episode]:
    """The episodes of an index (``(run, k)`` pairs from :func:`episode_index`), in its order."""
    for run, group in itertools.groupby(index, key=lambda entry: entry[0]):
        yield from run.read([k for _, k in group], options)


def shard_episodes(directory: str | os.PathLike, options: EpisodeReadOptions) -> list[tuple[Any, int]]:
    """The :func:`episode_index` of ``options``' shard: every ``num_shards``-th entry from ``shard_index``."""
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
