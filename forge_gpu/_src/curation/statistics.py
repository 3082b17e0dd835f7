"""Statistics over the published episodes of runs: ``compute_statistics`` (what ``forge-gpu stats`` runs),
``run_statistics`` for training code. Their readable lines are :func:`reading.inspection.format_statistics` (``inspect``
prints them too); the accumulator itself, which reads no run, is :mod:`recording.stats`."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from forge_gpu._src.core.dataset import run_directories
from forge_gpu._src.core.episode import EpisodeReadOptions
from forge_gpu._src.core.fields import observation_layout
from forge_gpu._src.curation.writing import open_closed_run
from forge_gpu._src.recording.stats import StatsAccumulator, load_statistics


def run_statistics(path: str | os.PathLike) -> dict[str, dict[str, np.ndarray]]:
    """Normalization statistics of a run directory or a dataset root, for training code.

    Returns key -> {``count``, ``mean``, ``std``, ``min``, ``max``, ``q01``, ``q99``} with keys
    ``obs/<field>`` (``proprio``, and ``rgb``/``depth`` where the task has a camera; per channel),
    ``action`` [A] and ``reward`` [1]. Percentiles: see this module's docstring for their accuracy.
    Raises LookupError when a run has none stored (``forge-gpu stats RUN`` computes them).
    """
    return load_statistics(path).summary()


def compute_statistics(path: str | os.PathLike, *, write: bool = True) -> StatsAccumulator:
    """Compute the statistics of a closed run from its published episodes (one read of the run) and,
    with ``write``, store them as its ``stats.json``. A dataset root: each run in turn; the merged
    statistics are returned."""

    merged = None
    for run_dir in run_directories(path):
        run = open_closed_run(run_dir)
        stats = new_statistics(run.manifest["env_spec"])
        for episode in run.read(list(range(len(run))), EpisodeReadOptions()):
            stats.update_episode(episode)
        if write:
            stats.write(run_dir, "computed from the published episodes")
        if merged is None:
            merged = stats
        else:
            merged.merge(stats)
    return merged


def new_statistics(spec: Mapping) -> StatsAccumulator:
    """An empty accumulator of the statistics of runs of the env_spec ``spec``."""
    return StatsAccumulator(observation_layout(spec), int(spec["action_shape"][0]))
