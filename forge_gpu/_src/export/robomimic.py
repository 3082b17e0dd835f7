"""Export a closed run (or a dataset root of runs) as one robomimic HDF5 file.

Written with h5py (the ``export`` extra). robomimic's layout:

    data                      attrs: total (transitions), env_args (JSON: env_name, type, env_kwargs)
    data/demo_N               attrs: num_samples (T), ep_meta (JSON: {"lang": the episode's instruction}, as
                              robocasa's robomimic files hold it), forge_gpu_env_id, forge_gpu_episode_id, and
                              params/<name>: the values the episode was randomized with (where it was)
      obs/<field>             [T, ...] observation before each transition (proprio, rgb, depth; a named camera's
                              NAME_rgb and NAME_depth under their field names, core/cameras.py)
      next_obs/<field>        [T, ...] observation after it
      actions [T, A] float32, rewards [T] float32, dones [T] uint8 (1 on the last transition); with ``target``
                              a label field (``collect --label expert``'s ``expert_action``), ``actions`` is that
                              label at each transition's first frame, and ``data`` has the attr forge_gpu_target
    mask/train, mask/valid    demo names (bytes): a seeded 90/10 split
    mask/successful           demos that ended in success (tasks with success only)
    forge_gpu/stats/<key>/<figure>   the normalization statistics (forge_gpu/_src/recording/stats.py)

``demo_N`` is the N-th episode in reading order. The simulator state (``state/``) is not exported. Every
dataset is chunked along time and compressed with gzip (level 4) after byte shuffling. ``env_args["type"]`` is
2 (robomimic's gym type) with ``env_name`` ``forge_gpu/<task>``: robomimic cannot create forge_gpu envs
itself, so rollouts during training need an env wrapper of the user's; training from the file does not. The
file is written under a temporary name beside ``out`` and renamed when complete.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import numpy as np

from forge_gpu._src.core.episode import EpisodeReadOptions, episode_succeeded
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS, observation_layout
from forge_gpu._src.core.files import partial_path, publish, remove_quietly
from forge_gpu._src.core.labels import ACTION_TARGET, target_column
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.export.common import closed_runs, export_report, source_statistics
from forge_gpu._src.reading.runs import episode_index, read_index
from forge_gpu._src.recording.stats import StatsAccumulator

#: Observation fields exported (ids and time are in the demo's attributes or implied by the index).
SKIPPED_FIELDS = BOOKKEEPING_FIELDS
VALID_FRACTION = 0.1
COMPRESSION = {"compression": "gzip", "compression_opts": 4, "shuffle": True}
ROBOMIMIC_GYM_TYPE = 2


def _require_h5py():
    try:
        import h5py
    except ImportError as exc:
        raise ImportError(
            'exporting to robomimic needs h5py: pip install "forge-gpu[export]" (or pip install h5py)'
        ) from exc
    return h5py


def export_robomimic(
    source: str | os.PathLike,
    out: str | os.PathLike,
    *,
    progress: Callable[[int, int], None] | None = None,
    seed: int = 0,
    target: str = ACTION_TARGET,
) -> dict:
    """Write the episodes of ``source`` (a closed run directory or a dataset root) as the robomimic HDF5
    file ``out`` (a new file). Returns a report: episodes, frames, bytes, seconds, frames_per_s.

    ``seed`` chooses the 10% of demos in ``mask/valid``. ``target``: what ``actions`` holds, ``"action"`` (the
    executed actions) or a label field of the run (e.g. ``"expert_action"``). Raises ValueError for a run that is
    not closed, runs of different tasks or a target that is not a label field, FileExistsError when ``out`` exists,
    ImportError without h5py.
    """
    h5py = _require_h5py()
    source, out = os.fspath(source), os.fspath(out)
    runs = closed_runs(source)
    if os.path.lexists(out):
        raise FileExistsError(f"{out} already exists; give a new file name")
    manifest = runs[0].manifest
    spec = manifest["env_spec"]
    target_column(spec, target, name=os.path.join(runs[0].directory, RUN_MANIFEST))
    layout = observation_layout(spec)
    fields = [f for f in layout if f not in SKIPPED_FIELDS]
    stats = source_statistics(source)
    computed = stats is None
    if computed:
        stats = StatsAccumulator(layout, int(spec["action_shape"][0]))
    index = episode_index(source)
    if not index:
        raise ValueError(f"{source}: no published episode to export")
    total = sum(run.ids(k)[2] for run, k in index)
    start = time.perf_counter()
    partial = partial_path(out)
    names, successful = [], []
    done = 0
    try:
        with h5py.File(partial, "w") as f:
            data = f.create_group("data")
            for number, episode in enumerate(read_index(index, EpisodeReadOptions())):
                name = f"demo_{number}"
                demo = data.create_group(name)
                steps = episode.steps
                demo.attrs["num_samples"] = steps
                demo.attrs["ep_meta"] = json.dumps({"lang": episode.instruction})
                demo.attrs["forge_gpu_env_id"] = episode.env_id
                demo.attrs["forge_gpu_episode_id"] = episode.episode_id
                for key, value in episode.params.items():
                    demo.attrs[f"params/{key}"] = value
                for group, frames in (("obs", episode.obs), ("next_obs", episode.next)):
                    for field in fields:
                        _dataset(demo, f"{group}/{field}", frames[field])
                _dataset(demo, "actions", episode.action if target == ACTION_TARGET else episode.obs[target])
                _dataset(demo, "rewards", episode.reward)
                _dataset(demo, "dones", (episode.terminated | episode.truncated).astype(np.uint8))
                names.append(name)
                if episode_succeeded(episode, spec):
                    successful.append(name)
                if computed:
                    stats.update_episode(episode)
                done += steps
                if progress is not None:
                    progress(done, total)
            data.attrs["total"] = total
            if target != ACTION_TARGET:
                data.attrs["forge_gpu_target"] = target
            data.attrs["env_args"] = json.dumps(
                {
                    "env_name": f"forge_gpu/{manifest['task']}",
                    "type": ROBOMIMIC_GYM_TYPE,
                    "env_kwargs": {
                        "config": manifest.get("config"),
                        "control_dt": spec.get("control_dt"),
                        "instruction": spec["instruction"],
                        "seed": manifest.get("seed"),
                    },
                }
            )
            rng = np.random.default_rng(seed)
            valid_count = int(round(VALID_FRACTION * len(names))) if len(names) > 1 else 0
            valid = set(rng.choice(len(names), size=valid_count, replace=False).tolist())
            mask = f.create_group("mask")
            mask.create_dataset("train", data=np.array([n for i, n in enumerate(names) if i not in valid], "S"))
            mask.create_dataset("valid", data=np.array([n for i, n in enumerate(names) if i in valid], "S"))
            if spec.get("has_success"):
                mask.create_dataset("successful", data=np.array(successful, "S"))
            group = f.create_group("forge_gpu/stats")
            group.attrs["source"] = "computed while exporting" if computed else "stored with the run"
            for key, figures in stats.summary().items():
                for figure, value in figures.items():
                    group.create_dataset(f"{key.replace('/', '.')}/{figure}", data=np.asarray(value))
        publish(partial, out)
    except BaseException:
        remove_quietly(partial)
        raise
    report = export_report(out, "robomimic", len(names), total, os.path.getsize(out), start, computed=computed)
    return {**report, "target": target}


def _dataset(group, name: str, values: np.ndarray) -> None:
    """A chunked, compressed dataset: chunks of up to 64 steps (whole frames)."""
    chunks = (min(len(values), 64), *values.shape[1:]) if values.ndim else None
    group.create_dataset(name, data=values, chunks=chunks, **COMPRESSION)
