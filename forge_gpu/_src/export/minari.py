"""Export a closed run (or a dataset root of runs) as a Minari dataset (Farama's offline-RL datasets, D4RL's
successor), written with ``minari`` itself (the ``export`` extra) in its HDF5 storage, images unencoded.

Each forge_gpu episode of ``T`` transitions is one Minari episode, in reading order (``episode_N``):

- ``observations``: a dict of the observation fields (``proprio``, the task's fields, images; not ``env_id``,
  ``episode_id``, ``step_id`` and ``time``), ``T + 1`` frames: the frame before each transition, then the last
  transition's next frame (the final observation);
- ``actions`` ``[T, A]`` (the executed actions), ``rewards`` ``[T]``, ``terminations`` and ``truncations``
  ``[T]`` bool;
- ``infos``, ``T + 1`` rows each (Minari's infos include the reset's): ``instruction`` (bytes), ``params/<name>``
  (the values the episode was randomized with, constant over it), ``env_id`` and ``episode_id``.

The dataset's ``env_spec`` is none: a forge_gpu task is no registered gymnasium id, so ``recover_environment``
cannot make it. The metadata's ``forge_gpu`` entry holds what does: the task, the run's config (``config``), its
env_spec and seed; ``forge_gpu.sim.make(task, **config)`` (docs/rl.md), or ``forge-gpu replay`` on the run itself.

``out`` is the new dataset's directory; its name (``NAME-vN``, Minari's id rules) under the namespace folder
``forge-gpu`` makes the id ``forge-gpu/NAME-vN``: under ``$MINARI_DATASETS_PATH/forge-gpu/`` (or
``~/.minari/datasets/forge-gpu/``) ``minari.load_dataset("forge-gpu/NAME-vN")`` reads it; anywhere,
``minari.MinariDataset(out + "/data")`` does. Written under a temporary name beside ``out`` and renamed when whole.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

import numpy as np

from forge_gpu._src.core.episode import EpisodeReadOptions
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS, observation_layout
from forge_gpu._src.core.files import partial_path, publish
from forge_gpu._src.export.common import closed_runs, export_report
from forge_gpu._src.reading.runs import episode_index, read_index

NAMESPACE = "forge-gpu"
"""The Minari namespace of an exported dataset's id."""
SKIPPED_FIELDS = BOOKKEEPING_FIELDS
"""Observation fields not exported as observations (the ids are in the infos; time follows from the index)."""


def _require_minari():
    try:
        import gymnasium
        import minari
    except ImportError as exc:
        raise ImportError(
            f'exporting to Minari needs minari ({exc}): pip install "forge-gpu[export]" (or pip install minari)'
        ) from exc
    return minari, gymnasium


def _space(gymnasium, shape, dtype: np.dtype):
    """A ``Box`` of ``shape`` bounded by what ``dtype`` holds (floats unbounded)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        low, high = 0, 1
    elif np.issubdtype(dtype, np.integer):
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    else:
        low, high = -np.inf, np.inf
    return gymnasium.spaces.Box(low=low, high=high, shape=tuple(shape), dtype=dtype)


def dataset_id(out: str | os.PathLike) -> str:
    """The Minari id of the dataset written at ``out``: ``forge-gpu/<out's name>``; ValueError in one line when the
    name is not ``NAME-vN`` (Minari's ids)."""
    name = os.path.basename(os.path.normpath(os.fspath(out)))
    base, sep, version = name.rpartition("-v")
    if not sep or not base or not version.isdigit() or "/" in base:
        raise ValueError(
            f"{os.fspath(out)}: a Minari dataset's directory is named NAME-vN (its id is {NAMESPACE}/NAME-vN), "
            f"e.g. cartpole-expert-v0; got {name!r}"
        )
    return f"{NAMESPACE}/{name}"


def export_minari(
    source: str | os.PathLike,
    out: str | os.PathLike,
    *,
    progress: Callable[[int, int], None] | None = None,
    author: str | None = None,
    description: str | None = None,
) -> dict:
    """Write the episodes of ``source`` (a closed run directory or a dataset root) as the Minari dataset ``out``
    (a new directory named ``NAME-vN``). Returns a report: episodes, frames, bytes, seconds, frames_per_s,
    dataset_id.

    Raises ValueError for a run that is not closed, runs of different tasks or a bad directory name,
    FileExistsError when ``out`` exists, ImportError without minari.
    """
    minari, gymnasium = _require_minari()
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    source, out = os.fspath(source), os.fspath(out)
    ident = dataset_id(out)
    runs = closed_runs(source)
    if os.path.lexists(out):
        raise FileExistsError(f"{out} already exists; give a new directory")
    manifest = runs[0].manifest
    spec = manifest["env_spec"]
    layout = observation_layout(spec)
    fields = [f for f in layout if f not in SKIPPED_FIELDS]
    observation_space = gymnasium.spaces.Dict({f: _space(gymnasium, *layout[f]) for f in fields})
    low = np.asarray(spec["action_low"], dtype=np.float32)
    high = np.asarray(spec["action_high"], dtype=np.float32)
    action_space = gymnasium.spaces.Box(low=low, high=high, dtype=np.float32)
    index = episode_index(source)
    if not index:
        raise ValueError(f"{source}: no published episode to export")
    total = sum(run.ids(k)[2] for run, k in index)
    start = time.perf_counter()
    partial = partial_path(out)
    os.makedirs(partial)
    done = episodes = 0
    try:
        storage = MinariStorage.new(
            os.path.join(partial, "data"),
            observation_space=observation_space,
            action_space=action_space,
            env_spec=None,
            data_format="hdf5",
            jpeg_encoding=False,  # the frames as recorded, bit for bit
        )
        storage.update_metadata(
            {
                "dataset_id": ident,
                "minari_version": minari.__version__,
                "algorithm_name": manifest.get("policy") or "forge_gpu collect",
                **({"author": {author}} if author else {}),
                "description": description or f"forge_gpu task {manifest['task']!r}: {spec['instruction']}",
                "forge_gpu": {
                    "task": manifest["task"],
                    "config": manifest.get("config"),
                    "env_spec": spec,
                    "seed": manifest.get("seed"),
                    "source": os.path.abspath(source),
                },
            }
        )
        for episode in read_index(index, EpisodeReadOptions()):
            steps = episode.steps
            rows = steps + 1
            observations = {f: np.concatenate([episode.obs[f], episode.next[f][-1:]]) for f in fields}
            infos = {
                "instruction": np.full(
                    rows, episode.instruction.encode(), dtype=f"S{max(len(episode.instruction.encode()), 1)}"
                ),
                "env_id": np.full(rows, episode.env_id, dtype=np.int32),
                "episode_id": np.full(rows, episode.episode_id, dtype=np.int32),
                "params": {k: np.repeat(np.asarray(v)[None], rows, axis=0) for k, v in episode.params.items()},
            }
            if not infos["params"]:
                del infos["params"]
            buffer = EpisodeBuffer(
                id=episodes,
                observations=observations,
                actions=np.asarray(episode.action, dtype=np.float32),
                rewards=np.asarray(episode.reward),
                terminations=np.asarray(episode.terminated, dtype=bool),
                truncations=np.asarray(episode.truncated, dtype=bool),
                infos=infos,
            )
            storage.update_episodes([buffer])
            episodes += 1
            done += steps
            if progress is not None:
                progress(done, total)
        publish(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    nbytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(out) for f in files)
    report = export_report(out, "minari", episodes, total, nbytes, start, computed=False)
    return {**report, "dataset_id": ident, "statistics": "not written (Minari holds none)"}
