"""replay: re-simulate a recorded run's episodes in batches of worlds, one episode per world.

``from_="state"`` restores every recorded frame's state and the episode's drawn values and observes again,
under the recorded config changed by ``overrides`` (another image size, camera pose, rendering switched on):
the new run has the same episode ids, actions, rewards, flags, state and values, and the new observations.
``from_="actions"`` restores each episode's first frame and values, applies the recorded actions, and
compares every frame's state with the recorded one; episodes that replay within ``tolerance`` are written
with their re-simulated observations, the others are listed in the report.

Per batch of ``B`` episodes, each frame is one ``VectorEnv.restore`` (``state``) or one ``step``
(``actions``) of all ``B`` worlds and whole-array copies; nothing loops over envs per frame.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np

from forge_gpu._src.core.episode import Episode, EpisodeReadOptions
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS
from forge_gpu._src.core.files import new_partial, publish, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST, describe_run, initial_manifest
from forge_gpu._src.formats.registry import FORMATS, format_of, read_manifest
from forge_gpu._src.sim.make import make
from forge_gpu._src.sim.tasks.registry import TASKS

SOURCES = ("state", "actions")
#: The config keys replay never takes from the recorded run: the batch of worlds is replay's own.
_NOT_REPLAYED = ("num_envs", "device")


def replay(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    from_: str = "state",
    overrides: dict | None = None,
    episodes: list[tuple[int, int]] | None = None,
    successful: bool = False,
    limit: int | None = None,
    batch: int = 1024,
    device: str | None = None,
    tolerance: float = 1e-5,
    task: str | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """Re-simulate the episodes of the closed run ``run_dir`` into the new packed run ``out``; return the report.

    Args:
        from_: ``"state"`` (restore every frame, observe again) or ``"actions"`` (restore the first frame, apply
            the recorded actions, compare the states).
        overrides: config changes (dotted keys, as ``--set``), e.g. ``{"params.image_size": 128}``.
        episodes: only these ``(env_id, episode_id)`` pairs; ``successful``: only episodes that ended in success
            (tasks with success); ``limit``: at most this many (after the other filters).
        batch: worlds per batch (episodes re-simulated at once).
        tolerance: ``actions``: the largest absolute state difference that still counts as equal.
        task: when given, the run must be of this task.
        stop: set it to stop after the current batch; the output run holds the episodes done.
        progress: called after each batch with ``{"episodes", "total", "frames", "seconds"}``.

    The report: ``episodes`` written, ``frames``, ``seconds``, ``frames_per_second``, ``interrupted`` and, for
    ``actions``, ``divergence`` (one entry per replayed episode: env_id, episode_id, first_step (None when
    none differs), max_error) and ``diverged`` (how many). ValueError (one line, nothing written) for another
    task, an incompatible config, a run without state, or bad arguments.
    """
    if from_ not in SOURCES:
        raise ValueError(f"from_ must be one of {list(SOURCES)}, got {from_!r}")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    run_dir, out = os.fspath(run_dir), os.fspath(out)
    manifest = read_manifest(run_dir)
    reader = _open(run_dir, manifest, task)
    selected = _select(reader, episodes, limit if not successful else None)
    env = _make_env(manifest, overrides or {}, min(batch, max(len(selected), 1)), device)
    _check_compatible(manifest, env, run_dir)
    stop = stop or threading.Event()
    report = {"episodes": 0, "frames": 0, "seconds": 0.0, "interrupted": False, "divergence": []}
    has_success = bool(manifest["env_spec"].get("has_success"))
    if successful and not has_success:
        raise ValueError(f"{run_dir}: task {manifest['task']!r} defines no success; drop --successful")
    options = EpisodeReadOptions(state=True)
    began = time.perf_counter()

    def chosen() -> Iterator[Episode]:
        count = 0
        for episode in reader.read(selected, options):
            if successful and not (episode.terminated[-1] and has_success):
                continue
            yield episode
            count += 1
            if limit is not None and count >= limit:
                return

    def replayed() -> Iterator[Episode]:
        for group in _batches(chosen(), env.num_envs):
            if stop.is_set():
                report["interrupted"] = True
                return
            if from_ == "state":
                done = _from_state(env, group)
            else:
                done, divergence = _from_actions(env, group, tolerance)
                report["divergence"] += divergence
            report["episodes"] += len(done)
            report["frames"] += sum(e.steps + 1 for e in group)
            report["seconds"] = time.perf_counter() - began
            if progress is not None:
                progress({"episodes": report["episodes"], "total": len(selected), **_rates(report)})
            yield from done

    work = new_partial(out)
    try:
        count, keys = FORMATS["packed"].write(work, replayed(), "none")
        report["seconds"] = time.perf_counter() - began
        report.update(_rates(report), episodes=count)
        if from_ == "actions":
            report["diverged"] = sum(d["first_step"] is not None for d in report["divergence"])
        written = _manifest(manifest, env, keys, count, run_dir, from_, report)
        write_json_atomic(os.path.join(work, RUN_MANIFEST), written)
        publish(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if from_ == "state":
        report.pop("divergence")
    return report


def _rates(report: dict) -> dict:
    frames, seconds = report["frames"], report["seconds"]
    return {"frames": frames, "seconds": seconds, "frames_per_second": frames / seconds if seconds else 0.0}


def _open(run_dir: str, manifest: dict, task: str | None):
    """The run's reader, after the checks replay needs of the run itself."""
    if task is not None and manifest["task"] != task:
        raise ValueError(f"{run_dir}: the run is of task {manifest['task']!r}, not {task!r}")
    if manifest["task"] not in TASKS:
        raise ValueError(f"{run_dir}: task {manifest['task']!r} is not a task of this forge_gpu ({', '.join(TASKS)})")
    if manifest["status"] == "recording":
        raise ValueError(f"{run_dir}: the run is still recording (or was killed: run forge-gpu repair {run_dir})")
    if not manifest["env_spec"].get("state"):
        raise ValueError(
            f"{run_dir}: the run records no simulator state (record_state = false, an older forge_gpu, or schema 1); "
            "replay needs its state/ columns"
        )
    return format_of(manifest).open(run_dir, manifest)


def _select(reader, episodes: list[tuple[int, int]] | None, limit: int | None) -> list[int]:
    """The reader's indices of the episodes asked for, in reading order."""
    ids = [reader.ids(k)[:2] for k in range(len(reader))]
    if episodes is None:
        chosen = list(range(len(ids)))
    else:
        index = {pair: k for k, pair in enumerate(ids)}
        missing = [pair for pair in episodes if tuple(pair) not in index]
        if missing:
            env_id, episode_id = missing[0]
            raise ValueError(f"{reader.directory}: holds no episode env {env_id} episode {episode_id}")
        chosen = sorted({index[tuple(pair)] for pair in episodes})
    return chosen if limit is None else chosen[:limit]


def _make_env(manifest: dict, overrides: dict, num_envs: int, device: str | None):
    """An env of the run's task with the recorded config, changed by ``overrides``, of ``num_envs`` worlds."""
    config = {k: v for k, v in manifest["config"].items() if k not in (*_NOT_REPLAYED, "task", "seed")}
    for key in overrides:
        if key.split(".")[0] in ("num_envs", "seed", "task", "randomize"):
            raise ValueError(
                f"--set {key}: replay keeps the run's {key.split('.')[0]} (it restores the recorded episodes)"
            )
    merged = {**_flatten(config), **overrides}
    return make(manifest["task"], num_envs=num_envs, device=device, seed=int(manifest["seed"]), **merged)


def _flatten(table: dict, prefix: str = "") -> dict:
    """Nested tables as dotted keys (``{"params": {"a": 1}}`` -> ``{"params.a": 1}``); randomize stays a table."""
    out = {}
    for key, value in table.items():
        if isinstance(value, dict) and key != "randomize" and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check_compatible(manifest: dict, env, run_dir: str) -> None:
    """ValueError naming the first difference that keeps the run's episodes from being restored in ``env``."""
    recorded, spec = manifest["env_spec"], env.spec
    for key in ("state", "params"):
        want, have = recorded.get(key) or {}, spec.get(key) or {}
        for name in sorted(set(want) | set(have)):
            if want.get(name) != have.get(name):
                raise ValueError(
                    f"{run_dir}: incompatible config: {key} {name!r} is {want.get(name)} in the run and "
                    f"{have.get(name)} with this config"
                )
    if recorded.get("action_shape") != spec["action_shape"]:
        raise ValueError(
            f"{run_dir}: incompatible config: the action is {recorded.get('action_shape')} in the run and "
            f"{spec['action_shape']} with this config"
        )


def _batches(episodes: Iterator[Episode], size: int) -> Iterator[list[Episode]]:
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


def _params(group: list[Episode], n: int) -> dict:
    index = np.minimum(np.arange(n), len(group) - 1)
    return {name: np.stack([np.asarray(group[i].params[name], np.float32) for i in index]) for name in group[0].params}


def _observed(frames: list[dict], group: list[Episode]) -> list[Episode]:
    """The group's episodes with the observation fields of ``frames`` (one host copy of the env's observation per
    frame), the bookkeeping fields and everything else as recorded."""
    stacked = {name: np.stack([f[name] for f in frames], axis=1) for name in frames[0]}  # [n, frames, ...]
    out = []
    for i, episode in enumerate(group):
        steps = episode.steps
        obs = {name: array[i, : steps + 1] for name, array in stacked.items()}
        for name in BOOKKEEPING_FIELDS:
            obs[name] = np.concatenate([episode.obs[name], episode.next[name][-1:]])
        out.append(
            dataclasses.replace(
                episode, obs={k: v[:steps] for k, v in obs.items()}, next={k: v[1:] for k, v in obs.items()}
            )
        )
    return out


def _host_observation(env) -> dict:
    return {name: array.numpy().copy() for name, array in env.observation.items()}


def _state_at(states: dict, t: np.ndarray) -> dict:
    """Frame ``t[i]`` of world ``i`` of the padded states: name -> [n, ...]."""
    worlds = np.arange(len(t))
    return {name: array[worlds, t] for name, array in states.items()}


def _from_state(env, group: list[Episode]) -> list[Episode]:
    n = env.num_envs
    states = _padded(group, n, lambda e: e.state)
    frames = []
    for t in range(max(e.steps for e in group) + 1):
        env.restore(_state_at(states, np.full(n, t)), _params(group, n) if t == 0 else None)
        frames.append(_host_observation(env))
    return _observed(frames, group)


def _from_actions(env, group: list[Episode], tolerance: float) -> tuple[list[Episode], list[dict]]:
    n, size = env.num_envs, len(group)
    states = _padded(group, n, lambda e: e.state)
    actions = _padded(group, n, lambda e: {"action": e.action})["action"]
    steps = np.array([e.steps for e in group])
    first_step = np.full(size, -1, np.int64)
    max_error = np.zeros(size, np.float64)
    env.restore(_state_at(states, np.zeros(n, np.int64)), _params(group, n))
    frames = [_host_observation(env)]
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
        frames.append(_host_observation(env))
    divergence = [
        {
            "env_id": e.env_id,
            "episode_id": e.episode_id,
            "first_step": None if first_step[i] < 0 else int(first_step[i]),
            "max_error": float(max_error[i]),
        }
        for i, e in enumerate(group)
    ]
    replayed = _observed(frames, group)
    return [replayed[i] for i in range(size) if first_step[i] < 0], divergence


def _manifest(source: dict, env, keys: dict, count: int, run_dir: str, from_: str, report: dict) -> dict:
    """run.json of the output: the replaying env's description (config, spec, calibration, packages) with the
    source's episode layout (num_envs, max_steps), and where it came from."""
    run = describe_run(env, transport="replay")
    manifest = initial_manifest(run, 0, FORMATS["packed"].identity)
    manifest["config"] = {**manifest["config"], "num_envs": source["config"]["num_envs"]}
    manifest.update(
        keys,
        run_id=uuid.uuid4().hex,
        status="closed",
        completed_episodes=count,
        replayed_from={
            "run_id": source["run_id"],
            "path": os.path.abspath(run_dir),
            "from": from_,
            "batch": env.num_envs,
            "interrupted": report["interrupted"],
            "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            **({"diverged": report["diverged"]} if from_ == "actions" else {}),
        },
    )
    return manifest
