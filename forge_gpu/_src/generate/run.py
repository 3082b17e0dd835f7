"""generate: many demonstrations from a few, by moving the source demonstrations' subtask segments into the frames of
the objects where they are in new scenes (docs/generate.md).

The source run's episodes are cut into the task's ``[[subtasks]]`` (``sources.py``); attempt ``j`` (0, 1, ...) is
episode ``j`` of an evaluation (``evaluate/rows.py``): its reset and randomized values drawn from the keys
``(j, 0)``, its segment choices and action noise from ``j`` (``kernels/generate.py``), whichever world runs it. Every
attempt is recorded into a scratch run beside the output; once the first ``N`` successful attempts by index are
known (every attempt before the N-th success has ended), stepping stops and the output run is written with those
``N`` episodes in attempt order, each with its trace as per-episode params; the failures before it go to
``keep_failures`` where given, and the scratch run is removed. The run therefore does not depend on the number of
envs or workers.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from forge_gpu._src.collect.collector import collect
from forge_gpu._src.collect.replay import _check_compatible, _config, _open, _task_of
from forge_gpu._src.collect.rollouts import PARAM_SOURCES_KEY, param_sources
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.episode import Episode, EpisodeReadOptions
from forge_gpu._src.core.fields import ID_FIELDS
from forge_gpu._src.core.files import new_partial, partial_path, publish, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST, initial_manifest
from forge_gpu._src.evaluate.rows import EvaluationRows
from forge_gpu._src.formats.registry import FORMATS, RecordingOptions, format_of, read_manifest
from forge_gpu._src.generate.follower import SELECTIONS, Follower, Motion, task_arm
from forge_gpu._src.generate.sources import Sources, cut_sources
from forge_gpu._src.sim.run_description import describe_run
from forge_gpu._src.tasks.catalog import TASKS, is_task_file, resolve_task
from forge_gpu._src.tasks.make import make
from forge_gpu._src.tasks.taskfile import stored
from forge_gpu._src.tasks.taskfile.task import FileTask, file_task_class

TRACE = ("generate_attempt", "generate_source", "generate_frames", "generate_transform")
"""The per-episode params of a generated episode: its attempt index; per subtask the source episode's (env_id,
episode_id), the segment's first and last frame in it, and the transform [x, y, z, qx, qy, qz, qw] its tcp poses
were moved by."""
SOURCE = "generate"
"""run.json's ``env_spec.param_sources`` value of the trace params (never restored by ``replay``)."""


@dataclass
class GenerationSummary:
    """What a generation did."""

    directory: str
    episodes: int
    """Generated episodes written (the first ``episodes`` successful attempts, or fewer: ``complete``)."""
    attempts: int
    """Attempts counted: those up to the last one written (all of them ended)."""
    successes: int
    subtasks: list[str]
    reached: list[int]
    """Per subtask: counted attempts whose subtask conditions held, in order, up to and including it."""
    failed_in: list[int]
    """Per subtask: failed attempts that did not get past it."""
    sources: int
    """Source episodes used (cut into every subtask)."""
    skipped: list[str]
    """One line per source episode skipped (it does not cut into every subtask)."""
    env_steps: int
    seconds: float
    complete: bool
    """Whether ``episodes`` successful attempts were found within ``max_attempts``."""
    failures: str = ""
    """The run of the failed attempts (``keep_failures``), or empty."""
    warmup_seconds: float = 0.0

    @property
    def yield_(self) -> float:
        return self.successes / self.attempts if self.attempts else 0.0

    @property
    def attempts_per_s(self) -> float:
        return self.attempts / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        """The summary ``forge-gpu generate`` prints."""
        out = [
            f"{'episodes':<22}{self.episodes}",
            f"{'attempts':<22}{self.attempts}",
            f"{'successes':<22}{self.successes} (yield {self.yield_:.1%})",
        ]
        for name, reached, failed in zip(self.subtasks, self.reached, self.failed_in, strict=True):
            share = reached / self.attempts if self.attempts else 0.0
            out.append(f"{'  subtask ' + name:<22}reached {reached} ({share:.1%}); failed in it {failed}")
        out += [
            f"{'sources':<22}{self.sources} used, {len(self.skipped)} skipped",
            *[f"  {line}" for line in self.skipped],
            f"{'env-steps':<22}{self.env_steps:,}",
            f"{'attempts/s':<22}{self.attempts_per_s:,.1f}",
            f"{'seconds':<22}{self.seconds:.1f}",
        ]
        if self.failures:
            out.append(f"{'failures':<22}{self.failures}")
        return out


@dataclass
class _Progress:
    """Where the attempts stand: the first ``cutoff`` attempts hold the first N successes (0: not yet)."""

    cutoff: int = 0
    ended: int = 0
    successes: int = 0
    extra: dict = field(default_factory=dict)


def generate(
    source: str | os.PathLike,
    out: str | os.PathLike,
    *,
    episodes: int,
    task: str | None = None,
    overrides: dict | None = None,
    num_envs: int | None = None,
    seed: int = 0,
    device: str | None = None,
    select: str = "random",
    interpolation_steps: int = 5,
    action_noise: float = 0.0,
    source_episodes: list[int] | None = None,
    keep_failures: str | os.PathLike | None = None,
    max_attempts: int | None = None,
    motion: Motion | None = None,
    trust_code: bool = False,
    options: RecordingOptions | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[dict], None] | None = None,
    progress_interval: float = 1.0,
) -> GenerationSummary:
    """Generate ``episodes`` successful demonstrations from the closed run ``source`` (with state) into the new run
    ``out``; return the :class:`GenerationSummary`.

    Args:
        task: a task id or task file; the source run must be of it (default: the source run's own task).
        overrides: config changes (dotted keys, as ``--set``); num_envs and seed are arguments of their own.
        num_envs: worlds stepped at once (default: the source run's).
        seed: attempt ``j`` draws from the keys ``(seed, j)``.
        select: ``random`` (each subtask's source segment drawn uniformly) or ``nearest`` (the segment whose
            object pose at its start is nearest the object's pose now).
        interpolation_steps: steps from the tcp's pose to a segment's transformed first pose (>= 0).
        action_noise: uniform noise on each step's tcp position change, +- this [m] (>= 0).
        source_episodes: the source run's episodes to use (indices in its reading order; default all).
        keep_failures: a new run directory for the failed attempts before the last one written.
        max_attempts: give up after this many attempts (default ``20 * episodes + num_envs``).
        motion: how the tcp follows the segments (:class:`Motion`).
        options: how the scratch run of every attempt is written (``collect``'s); the output run is packed.

    ValueError (one line, nothing written) for a bad argument, a source run of another task, a task without
    ``[[subtasks]]``, a run without state, or a source in which no episode cuts into every subtask.
    """
    check_int("episodes", episodes, minimum=1)
    check_int("seed", seed, minimum=0)
    check_int("interpolation_steps", interpolation_steps, minimum=0)
    if num_envs is not None:
        check_int("num_envs", num_envs, minimum=1)
    if select not in SELECTIONS:
        raise ValueError(f"select = {select!r}: expected one of {', '.join(SELECTIONS)}")
    if isinstance(action_noise, bool) or not isinstance(action_noise, int | float) or not math.isfinite(
        action_noise
    ) or action_noise < 0:  # fmt: skip
        raise ValueError(f"action_noise = {action_noise!r}: expected a number >= 0 [m]")
    source, out = os.fspath(source), os.fspath(out)
    if os.path.exists(out):
        raise ValueError(f"{out}: already exists; generate writes a new run")
    if keep_failures is not None:
        keep_failures = os.fspath(keep_failures)
        if os.path.exists(keep_failures) or os.path.abspath(keep_failures) == os.path.abspath(out):
            raise ValueError(f"keep_failures = {keep_failures}: already exists or is the output; name a new run")
    manifest = read_manifest(source)
    if task is None:
        built, _ = _task_of(source, manifest, overrides or {}, trust_code)
    else:  # the task as this forge_gpu (or the file) has it now, not the copy the run stored
        built = file_task_class(task) if is_task_file(str(task)) else TASKS[resolve_task(task)]
        named = getattr(built, "task_id", None) or task
        if manifest["task"] != named:
            raise ValueError(f"{source}: the run is of task {manifest['task']!r}, not {named!r}")
    for key in overrides or {}:
        if key.split(".")[0] in ("num_envs", "seed"):
            raise ValueError(f"--set {key}: give --envs or --seed")
    reader = _open(source, manifest, built)
    config = _config(built, _without_subtasks(manifest), dict(overrides or {}), device)
    n = num_envs or int(manifest["config"].get("num_envs", 1))
    settings = {k: v for k, v in config.to_overrides().items() if k not in ("task", "num_envs", "seed")}
    env = make(built, **settings, num_envs=n, seed=seed)
    if not isinstance(env.task, FileTask) or not env.task.plan.subtasks:
        raise ValueError(f"task {manifest['task']!r} has no [[subtasks]]; generation cuts demonstrations by them "
                         "(docs/generate.md)")  # fmt: skip
    _check_compatible(manifest, env, source)
    arm = task_arm(env.task)
    count = len(reader)
    selected = list(range(count)) if source_episodes is None else sorted(set(source_episodes))
    for k in selected:
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < count:
            raise ValueError(f"source episode {k!r}: the run {source} holds episodes 0..{count - 1}")
    attempts = max_attempts if max_attempts is not None else 20 * episodes + n
    check_int("max_attempts", attempts, minimum=episodes)
    sources = cut_sources(env, reader, source, selected, arm.gripper_column, (arm.point_body, arm.offset))
    follower = Follower(env, sources, arm, attempts=attempts, select=select,
                        interpolation_steps=interpolation_steps, action_noise=float(action_noise),
                        motion=motion)  # fmt: skip
    rows = EvaluationRows(env, attempts)
    stop = stop or threading.Event()
    done = threading.Event()
    state = _Progress()
    began = time.perf_counter()
    last = [began]

    def check() -> None:
        lengths = rows.lengths.numpy()
        success = rows.success_once.numpy().astype(bool)
        ended = lengths > 0
        state.ended = int(ended.sum())
        state.cutoff = _cutoff(ended, success, episodes)
        state.successes = int((success & ended).sum())
        if state.cutoff or state.ended >= attempts:
            done.set()

    calls = [0]

    def policy(observation):
        calls[0] += 1
        if calls[0] % EvaluationRows.CHECK_EVERY == 0:
            check()
            now = time.perf_counter()
            if progress is not None and now - last[0] >= progress_interval:
                last[0] = now
                progress(_counters(state, episodes, calls[0] * n, now - began))
        return follower(observation)

    both = _Either(stop, done)
    scratch = partial_path(out + ".attempts")
    env.extend_step(rows.launch, draw_env=rows.draw_env, draw_episode=rows.draw_episode, idle=rows.idle)
    try:
        summary = collect(env, policy, scratch, episodes=attempts, stop=both, options=options)
        if summary.status == "failed":
            raise RuntimeError(f"{scratch}: the recording of the attempts failed")
        if stop.is_set() and not done.is_set():
            raise InterruptedError(f"stopped after {state.ended} attempts; nothing written")
        check()
        cutoff = state.cutoff or attempts
        figures = _figures(rows, follower, cutoff, len(env.task.plan.subtasks))
        written = _write(env, manifest, source, scratch, out, figures, sources, cutoff, success=True,
                         settings=dict(select=select, interpolation_steps=interpolation_steps,
                                       action_noise=float(action_noise), seed=seed))  # fmt: skip
        failures = ""
        if keep_failures is not None:
            _write(env, manifest, source, scratch, keep_failures, figures, sources, cutoff, success=False,
                   settings=dict(select=select, interpolation_steps=interpolation_steps,
                                 action_noise=float(action_noise), seed=seed))  # fmt: skip
            failures = keep_failures
    finally:
        env.extend_step()
        shutil.rmtree(scratch, ignore_errors=True)
    result = GenerationSummary(
        directory=out,
        episodes=written,
        attempts=cutoff,
        successes=int(figures["success"].sum()),
        subtasks=[s.name for s in env.task.plan.subtasks],
        reached=figures["reached_counts"],
        failed_in=figures["failed_in"],
        sources=len(sources.indices),
        skipped=[s.line(source) for s in sources.skipped],
        env_steps=summary.env_steps,
        seconds=summary.seconds,
        complete=written == episodes,
        failures=failures,
        warmup_seconds=summary.warmup_seconds,
    )
    if progress is not None:
        progress(_counters(state, episodes, summary.env_steps, summary.seconds))
    return result


def _without_subtasks(manifest: dict) -> dict:
    """``manifest`` without the subtasks its config recorded: they are the task file's (``--task``'s, or the copy
    the run stored), so that a run recorded before its task had subtasks, or with others, is cut by these."""
    config = manifest["config"]
    params = config.get("params")
    if not isinstance(params, dict) or "subtasks" not in params:
        return manifest
    return {**manifest, "config": {**config, "params": {k: v for k, v in params.items() if k != "subtasks"}}}


class _Either:
    """An event set when either of two is (``collect`` polls ``is_set``)."""

    def __init__(self, a: threading.Event, b: threading.Event):
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()


def _cutoff(ended: np.ndarray, success: np.ndarray, episodes: int) -> int:
    """The number of leading attempts that hold the first ``episodes`` successes, all of them ended; 0 if not
    known yet."""
    hits = np.flatnonzero(ended & success)
    if hits.size < episodes:
        return 0
    last = int(hits[episodes - 1])
    return last + 1 if ended[: last + 1].all() else 0


def _counters(state: _Progress, target: int, env_steps: int, seconds: float) -> dict:
    ended = state.ended
    return {
        "unit": "generated episodes",
        "target": target,
        "attempts": ended,
        "successes": state.successes,
        "yield": state.successes / ended if ended else 0.0,
        "env_steps": env_steps,
        "seconds": seconds,
        "env_steps_per_s": env_steps / seconds if seconds > 0 else 0.0,
    }


def _figures(rows: EvaluationRows, follower: Follower, cutoff: int, count: int) -> dict:
    """The first ``cutoff`` attempts' outcomes and traces, host arrays."""
    success = rows.success_once.numpy()[:cutoff].astype(bool)
    reached = follower.row_reached.numpy()[:cutoff]
    reached = np.where(success, count, np.minimum(reached, count))
    return {
        "success": success,
        "ended": rows.lengths.numpy()[:cutoff] > 0,
        "worlds": rows.worlds.numpy()[:cutoff],
        "episode_ids": rows.episode_ids.numpy()[:cutoff],
        "choice": follower.row_choice.numpy()[:cutoff],
        "transform": follower.row_transform.numpy()[:cutoff].reshape(cutoff, count, 7),
        "reached_counts": [int((reached > s).sum()) for s in range(count)],
        "failed_in": [int(((reached == s) & ~success).sum()) for s in range(count)],
    }


def _traced(episode: Episode, j: int, figures: dict, sources: Sources) -> Episode:
    """The episode of attempt ``j`` as the output run holds it: env 0, episode ``j``, its trace in its params."""
    choice = figures["choice"][j]
    cuts = sources.cuts[choice]
    count = len(choice)
    trace = {
        "generate_attempt": np.float32(j),
        "generate_source": sources.ids[choice].astype(np.float32),
        "generate_frames": np.stack([cuts[np.arange(count), np.arange(count)],
                                     cuts[np.arange(count), np.arange(count) + 1]], -1).astype(np.float32),
        "generate_transform": figures["transform"][j].astype(np.float32),
    }  # fmt: skip
    ids = {"env_id": 0, "episode_id": j}
    obs, nxt = dict(episode.obs), dict(episode.next)
    for name, value in ids.items():
        if name in ID_FIELDS:
            obs[name] = np.full_like(obs[name], value)
            nxt[name] = np.full_like(nxt[name], value)
    return dataclasses.replace(episode, env_id=0, episode_id=j, obs=obs, next=nxt,
                               params={**episode.params, **trace})  # fmt: skip


def _write(env, source_manifest: dict, source: str, scratch: str, out: str, figures: dict, sources: Sources,
           cutoff: int, *, success: bool, settings: dict) -> int:  # fmt: skip
    """Write the successful (or failed) attempts below ``cutoff`` of the scratch run into the new run ``out``, in
    attempt order; the count written."""
    manifest = read_manifest(scratch)
    reader = format_of(manifest).open(scratch, manifest)
    index = {tuple(reader.ids(k)[:2]): k for k in range(len(reader))}
    chosen = [j for j in range(cutoff) if figures["ended"][j] and bool(figures["success"][j]) == success]
    keys = [index[(int(figures["worlds"][j]), int(figures["episode_ids"][j]))] for j in chosen]
    options = EpisodeReadOptions(state=True)
    by_key = dict(zip(keys, chosen, strict=True))

    def episodes():
        order = sorted(keys)  # read in the run's order, written in attempt order
        got = {}
        for k, episode in zip(order, reader.read(order, options), strict=True):
            got[by_key[k]] = episode
        for j in chosen:
            yield _traced(got.pop(j), j, figures, sources)

    count_s = len(env.task.plan.subtasks)
    work = new_partial(out)
    try:
        count, format_keys = FORMATS["packed"].write(work, episodes(), "none")
        run = describe_run(env, transport="generate")
        trace_spec = {"generate_attempt": [], "generate_source": [count_s, 2], "generate_frames": [count_s, 2],
                      "generate_transform": [count_s, 7]}  # fmt: skip
        spec = run.spec
        params = {**(spec.get("params") or {}),
                  **{k: {"shape": shape, "dtype": "float32"} for k, shape in trace_spec.items()}}  # fmt: skip
        spec = {**spec, "params": params, PARAM_SOURCES_KEY: {**param_sources(spec), **dict.fromkeys(TRACE, SOURCE)}}
        written = initial_manifest(dataclasses.replace(run, spec=spec), 0, FORMATS["packed"].identity)
        written.update(
            format_keys,
            run_id=uuid.uuid4().hex,
            status="closed",
            completed_episodes=count,
            generated_from={
                "run_id": source_manifest["run_id"],
                "path": os.path.abspath(source),
                "source_episodes": sources.indices,
                "skipped": [s.line(source) for s in sources.skipped],
                "subtasks": [s.name for s in env.task.plan.subtasks],
                "attempts": cutoff,
                "successes": int(figures["success"].sum()),
                "outcome": "success" if success else "failure",
                **settings,
                "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            },
        )
        stored.write(work, getattr(env.task, "stored_files", None) or {})
        write_json_atomic(os.path.join(work, RUN_MANIFEST), written)
        publish(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return count


__all__ = ["GenerationSummary", "generate"]
