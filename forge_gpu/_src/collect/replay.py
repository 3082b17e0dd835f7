"""replay: re-simulate a recorded run's episodes in batches of worlds, one episode per world.

``from_="state"`` restores every recorded frame's state and the episode's drawn values and observes again,
under the recorded config changed by ``overrides`` (another image size, camera pose, rendering switched on):
the new run has the same episode ids, actions, rewards, flags, state and values, and the new observations.
``from_="actions"`` restores each episode's first frame and values, applies the recorded actions, and
compares every frame's state with the recorded one; episodes that replay within ``tolerance`` are written
with their re-simulated observations, the others are listed in the report.

Per batch of ``B`` episodes, each frame is one ``VectorEnv.restore`` (``state``) or one ``step``
(``actions``) of all ``B`` worlds and whole-array copies; nothing loops over envs per frame.

The simulation half of ``forge_gpu.recording`` (``_src/collect``: it drives the env, with Warp); the data half,
``_src/recording``, never imports Warp.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import shutil
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Full, Queue

import numpy as np

from forge_gpu._src.collect.replay_waves import batches, frame_bytes, from_actions, from_state, waves
from forge_gpu._src.collect.rollouts import PARAM_SOURCES_KEY, param_sources
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.episode import Episode, EpisodeReadOptions, episode_succeeded
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS
from forge_gpu._src.core.files import new_partial, publish, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST, initial_manifest
from forge_gpu._src.formats.registry import FORMATS, format_of, read_manifest
from forge_gpu._src.sim.config import as_overrides
from forge_gpu._src.sim.device import default_device
from forge_gpu._src.sim.run_description import describe_run
from forge_gpu._src.tasks.catalog import TASKS, is_task_file
from forge_gpu._src.tasks.make import make, task_class, task_config
from forge_gpu._src.tasks.taskfile import stored
from forge_gpu._src.tasks.taskfile.stored import stored_task_file
from forge_gpu._src.tasks.taskfile.task import FileTask, file_task_class
from forge_gpu._src.tasks.taskfile.trust import check_run_code, named_code, run_code

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
    max_batch_bytes: int = 1 << 30,
    device: str | None = None,
    tolerance: float = 1e-5,
    task: str | None = None,
    trust_code: bool = False,
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
        batch: worlds (episodes re-simulated at once). ``state``: a world that finishes an episode takes the next,
            in waves whose observations fit in ``max_batch_bytes``; ``actions``: the episodes of a batch start
            together, and a batch is at most as many whole episodes as fit in ``max_batch_bytes``. About three
            waves or batches are in memory at once (one read, one re-simulated, one written).
        tolerance: ``actions``: the largest absolute state difference that still counts as equal.
        task: when given, the run must be of this task.
        trust_code: import the code the run's task names outside forge_gpu (its term module, model builder, expert
            factory); without it such a run is refused in one line naming that code (``tasks/taskfile/trust.py``).
        stop: set it to stop after the current batch; the output run holds the episodes done.
        progress: called after each batch with ``{"episodes", "total", "frames", "seconds"}``.

    The report: ``episodes`` written, ``frames``, ``seconds``, ``frames_per_second``, ``interrupted`` and, for
    ``actions``, ``divergence`` (one entry per replayed episode: env_id, episode_id, first_step (None when
    none differs), max_error) and ``diverged`` (how many). ValueError (one line, nothing written) for another
    task, an incompatible config, a run without state, bad arguments, a stored task file changed after the run
    (its sha256) or, without ``trust_code``, code outside forge_gpu that the run's task names.

    A run of a task file carries its task (``task/``, run.json's ``scene_spec.stored``): replay builds it from there,
    unless this process already has that very task file loaded (a task the caller made or collected here). The
    run written carries the same files.
    """
    if from_ not in SOURCES:
        raise ValueError(f"from_ must be one of {list(SOURCES)}, got {from_!r}")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    run_dir, out = os.fspath(run_dir), os.fspath(out)
    manifest = read_manifest(run_dir)
    if task is not None and manifest["task"] != task:
        raise ValueError(f"{run_dir}: the run is of task {manifest['task']!r}, not {task!r}")
    built, own = _task_of(run_dir, manifest, overrides or {}, trust_code)
    with run_code(run_dir, trusted=trust_code or own):  # its code imported only as the caller allows
        reader = _open(run_dir, manifest, built)
        selected = _select(reader, episodes, limit if not successful else None)
        check_int("max_batch_bytes", max_batch_bytes, minimum=1)
        config = _config(built, manifest, overrides or {}, device)
        worlds = min(batch, max(len(selected), 1))
        if from_ == "actions":  # a batch holds one whole episode per world
            worlds = min(worlds, max(1, max_batch_bytes // _episode_bytes(built, config)))
        settings = {k: v for k, v in config.to_overrides().items() if k != "task"}
        env = make(built, **{**settings, "num_envs": worlds})
    if not own:
        _check_same_files(manifest, env, run_dir)
    _check_compatible(manifest, env, run_dir)
    stop = stop or threading.Event()
    report = {"episodes": 0, "frames": 0, "seconds": 0.0, "interrupted": False, "divergence": []}
    has_success = bool(manifest["env_spec"].get("has_success"))
    if successful and not has_success:
        raise ValueError(f"{run_dir}: task {manifest['task']!r} defines no success; drop --successful")
    # The source's observations are observed again: read only the bookkeeping fields, the state and the rest.
    options = EpisodeReadOptions(observation_keys=list(BOOKKEEPING_FIELDS), state=True)
    began = time.perf_counter()

    def chosen() -> Iterator[Episode]:
        count = 0
        for episode in reader.read(selected, options):
            if successful and not episode_succeeded(episode, manifest["env_spec"]):
                continue
            yield episode
            count += 1
            if limit is not None and count >= limit:
                return

    last_report = [-1.0]
    total = len(selected) if limit is None else min(limit, len(selected))  # --successful cuts after the read

    def count(episodes: int, frames: int, *, final: bool = False) -> None:
        """Count what a batch finished; report progress every half second and at the end of a batch."""
        report["episodes"] += episodes
        report["frames"] += frames
        report["seconds"] = time.perf_counter() - began
        if progress is not None and (final or report["seconds"] - last_report[0] >= 0.5):
            last_report[0] = report["seconds"]
            progress({"episodes": report["episodes"], "total": total, **_rates(report)})

    def replayed() -> Iterator[list[Episode]]:
        source = _background(chosen(), depth=env.num_envs)
        if from_ == "state":  # waves of many episodes per world, bounded by the observations they hold
            groups = waves(source, capacity=max(1, max_batch_bytes // frame_bytes(env)), most=8 * env.num_envs)
        else:  # one episode per world, all starting together
            groups = batches(source, env.num_envs)
        for group in groups:
            if stop.is_set():
                report["interrupted"] = True
                return
            if from_ == "state":
                done = from_state(env, group, stop, count)
                count(0, 0, final=True)  # the wave's end shown, so the last line counts every episode replayed
                report["interrupted"] = len(done) < len(group)
            else:
                done, divergence = from_actions(env, group, tolerance)
                report["divergence"] += divergence
                count(len(done), sum(e.steps + 1 for e in group), final=True)
            yield done

    work = new_partial(out)
    try:
        # Three stages at once: reading the source, re-simulating a batch, writing the previous one.
        produced = _background(replayed(), depth=1)
        count, keys = FORMATS["packed"].write(work, (e for done in produced for e in done), "none")
        report["seconds"] = time.perf_counter() - began
        report.update(_rates(report), episodes=count)
        if from_ == "actions":
            report["diverged"] = sum(d["first_step"] is not None for d in report["divergence"])
        written = _manifest(manifest, env, keys, count, run_dir, from_, report)
        stored.write(work, getattr(env.task, "stored_files", None) or {})  # the run written carries its task too
        write_json_atomic(os.path.join(work, RUN_MANIFEST), written)
        publish(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if from_ == "state":
        report.pop("divergence")
    return report


def _background(items: Iterator, *, depth: int) -> Iterator:
    """``items``, produced by a thread of their own at most ``depth`` ahead of the consumer; the producer's
    exception is raised here, and a consumer that stops early stops the producer."""
    queue: Queue = Queue(maxsize=depth)
    done, gone = object(), threading.Event()

    def put(entry) -> bool:
        """Queue ``entry`` unless the consumer is gone; whether it was queued."""
        while not gone.is_set():
            try:
                queue.put(entry, timeout=0.1)
                return True
            except Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((done, None))
        except BaseException as exc:  # reaches the consumer
            put((done, exc))

    thread = threading.Thread(target=produce, name="forge-gpu-replay", daemon=True)
    thread.start()
    try:
        while True:
            item, error = queue.get()
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        gone.set()
        thread.join()


def _rates(report: dict) -> dict:
    frames, seconds = report["frames"], report["seconds"]
    return {"frames": frames, "seconds": seconds, "frames_per_second": frames / seconds if seconds else 0.0}


def _open(run_dir: str, manifest: dict, task: str | type):
    """The run's reader, after the checks replay needs of the run itself (``task``: what :func:`_task_of` chose)."""
    if isinstance(task, str) and task not in TASKS:
        raise ValueError(f"{run_dir}: task {task!r} is not a task of this forge_gpu ({', '.join(TASKS)})")
    if manifest["status"] == "recording":
        raise ValueError(f"{run_dir}: the run is still recording (or was killed: run forge-gpu repair {run_dir})")
    if not manifest["env_spec"].get("state"):
        raise ValueError(
            f"{run_dir}: the run records no simulator state (record_state = false, an older forge_gpu, or schema 1); "
            "replay needs its state/ columns"
        )
    return format_of(manifest).open(run_dir, manifest)


def _task_of(run_dir: str, manifest: dict, overrides: dict, trust_code: bool) -> tuple[str | type, bool]:
    """What replay builds, and whether it is this process's own: ``(the task id, True)`` for a task with its own code
    or a task file this process already loaded from the file the run recorded, unchanged since; else the task class
    of the run's stored task file (``task/``, its sha256 checked), or, for a run recorded before runs stored their
    task, of the file its ``config.params.file`` names, ``False``. Their code outside forge_gpu needs ``trust_code``
    (UntrustedCode naming it)."""
    task_id = manifest["task"]
    params = manifest.get("config", {}).get("params")
    params = params if isinstance(params, dict) else {}
    recorded = params.get("file") if isinstance(params.get("file"), str) else None
    scene = manifest.get("scene_spec")
    listed = scene.get("stored") if isinstance(scene, dict) else None
    registered = TASKS.get(task_id)
    if registered is not None and not issubclass(registered, FileTask):
        return task_id, True
    if registered is not None and recorded is not None and _loaded_unchanged(registered.path, recorded, listed):
        return task_id, True
    if listed and not os.path.isdir(os.path.join(run_dir, stored.FOLDER)) and _matches(recorded, listed):
        path = Path(recorded)  # a curated copy (no task/ of its own) whose source's task file is still there
    elif listed:
        path = stored_task_file(run_dir, listed)
    elif recorded is not None and is_task_file(recorded) and os.path.isfile(recorded):
        path = Path(recorded)
    elif registered is not None or recorded is None:
        return task_id, registered is not None  # _open names an unknown task
    else:
        raise ValueError(f"task {task_id!r}: its task file {recorded} is not there any more")
    try:
        sections = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: the run's task file cannot be read ({e})") from e
    given = {k[len("params.") :]: v for k, v in as_overrides(overrides).items() if k.startswith("params.")}
    names = named_code(sections, path) + named_code(params, path) + named_code(_nested(given), path)
    check_run_code(run_dir, names, trusted=trust_code)
    with run_code(run_dir, trusted=trust_code):
        return file_task_class(path), False


def _loaded_unchanged(loaded: str, recorded: str, listed) -> bool:
    """Whether the task file this process loaded is the one the run recorded, with the bytes the run stored."""
    if Path(loaded) != Path(recorded).resolve():
        return False
    return _matches(loaded, listed) if listed else os.path.isfile(loaded)


def _matches(path: str | None, listed) -> bool:
    """Whether the file ``path`` is there with the sha256 ``listed`` (``scene_spec.stored``) gives the task file."""
    if path is None or not os.path.isfile(path) or not isinstance(listed, dict):
        return False
    entry = listed.get("files", {}).get(listed.get("task_file")) if isinstance(listed.get("files"), dict) else None
    return isinstance(entry, dict) and entry.get("sha256") == hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _nested(flat: dict) -> dict:
    """Dotted keys (``model.builder``) as nested tables."""
    nested: dict = {}
    for key, value in flat.items():
        *heads, last = key.split(".")
        table = nested
        for head in heads:
            table = table.setdefault(head, {}) if isinstance(table.get(head, {}), dict) else {}
        table[last] = value
    return nested


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


def _config(task: str | type, manifest: dict, overrides: dict, device: str | None):
    """The run's recorded config changed by ``overrides`` (and the device), checked, for ``task`` (an id or the
    class of the run's stored task file)."""
    config = {k: v for k, v in manifest["config"].items() if k not in (*_NOT_REPLAYED, "task")}
    for key in overrides:
        if key.split(".")[0] in ("num_envs", "seed", "task", "randomize"):
            raise ValueError(
                f"--set {key}: replay keeps the run's {key.split('.')[0]} (it restores the recorded episodes)"
            )
    return task_config(task, **{**as_overrides(config), **overrides, "device": device or default_device()})


def _episode_bytes(built: str | type, config) -> int:
    """Host bytes of one world's observations over a longest episode (max_steps + 1 frames) under ``config``."""
    task = task_class(built)(config)
    fields = task.observation_fields()
    frame = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in fields.values())
    frame += 4 * (4 + task.spec.proprio_dim)  # the ids, time and proprio
    return frame * (config.max_steps + 1)


def _check_same_files(manifest: dict, env, run_dir: str) -> None:
    """ValueError where the task built from the run's files read other files than the run stored (a task file or
    model naming its files by absolute paths: those are read where they are, not from the run)."""
    listed = (manifest.get("scene_spec") or {}).get("stored")
    read = getattr(env.task.scene, "stored", None)
    if not isinstance(listed, dict) or not isinstance(read, dict):
        return
    want = {v.get("sha256") for v in listed.get("files", {}).values() if isinstance(v, dict)}
    other = sorted(name for name, v in read.get("files", {}).items() if v["sha256"] not in want)
    if other:
        raise ValueError(
            f"{run_dir}: the task built from the run's stored files read other files than it stored ({other[0]} is "
            "none of them; a task file or model that names its files by absolute paths reads them there)"
        )


def _check_compatible(manifest: dict, env, run_dir: str) -> None:
    """ValueError naming the first difference that keeps the run's episodes from being restored in ``env``."""
    recorded, spec = manifest["env_spec"], env.spec
    carried = param_sources(recorded)  # a trainer's params (policy_version): carried as recorded, never restored
    for key in ("state", "params"):
        want, have = recorded.get(key) or {}, spec.get(key) or {}
        if key == "params":
            want = {name: value for name, value in want.items() if name not in carried}
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


def _manifest(source: dict, env, keys: dict, count: int, run_dir: str, from_: str, report: dict) -> dict:
    """run.json of the output: the replaying env's description (config, spec, calibration, packages) with the
    source's episode layout (num_envs, max_steps), and where it came from."""
    run = describe_run(env, transport="replay")
    if carried := param_sources(source["env_spec"]):  # the source's trainer params travel with its episodes
        spec = run.spec
        params = {**(spec.get("params") or {}), **{name: source["env_spec"]["params"][name] for name in carried}}
        run = dataclasses.replace(run, spec={**spec, "params": params, PARAM_SOURCES_KEY: carried})
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
