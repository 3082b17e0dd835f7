"""The generation engine: one env stepping blocks of keyed attempts (:class:`Generation`) and the runs they are
written as.

Attempt ``j`` is episode ``j`` of an evaluation (``evaluate/rows.py``): its reset and randomized values drawn from
the keys ``(seed, j)``, its segment choices and action noise from ``j`` (``kernels/generate.py``), whichever world
runs it. A block of attempts ``first .. first + count - 1`` is recorded into a scratch run, stopping (with a target)
once the first N successes among them are known; its successes (or failures) are then written into a new run in
attempt order, each with its trace as per-episode params. ``run.py`` and ``distributed.py`` drive it.
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
from dataclasses import dataclass, field

import numpy as np
import warp as wp

from forge_gpu._src.collect.collector import collect
from forge_gpu._src.collect.replay import _check_compatible, _config, _open, _task_of
from forge_gpu._src.collect.rollouts import PARAM_SOURCES_KEY, param_sources
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.episode import Episode, EpisodeReadOptions
from forge_gpu._src.core.fields import ID_FIELDS
from forge_gpu._src.core.files import new_partial, publish, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST, initial_manifest
from forge_gpu._src.evaluate.rows import EvaluationRows
from forge_gpu._src.formats.registry import FORMATS, RecordingOptions, format_of, read_manifest
from forge_gpu._src.generate.follower import SELECTIONS, Follower, Motion, lead_chain, task_arm
from forge_gpu._src.generate.sources import Sources, cut_sources
from forge_gpu._src.recording.stats import StatsAccumulator, new_statistics
from forge_gpu._src.sim.run_description import describe_run
from forge_gpu._src.tasks.catalog import TASKS, is_task_file, resolve_task
from forge_gpu._src.tasks.make import make
from forge_gpu._src.tasks.taskfile import stored
from forge_gpu._src.tasks.taskfile.task import FileTask, file_task_class

TRACE = ("generate_attempt", "generate_source", "generate_frames", "generate_transform", "generate_hold")
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
            out.append(f"  subtask {name}: reached {reached} ({share:.1%}), failed in it {failed}")
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


@dataclass(frozen=True, kw_only=True)
class Settings:
    """A generation's settings but its target and output (``generate``'s arguments of the same names)."""

    task: str | None = None
    overrides: dict = field(default_factory=dict)
    num_envs: int | None = None
    seed: int = 0
    device: str | None = None
    select: str = "nearest"
    interpolation_steps: int = 5
    action_noise: float = 0.0
    source_episodes: list | None = None
    motion: Motion | None = None
    trust_code: bool = False
    options: RecordingOptions | None = None

    def check(self) -> None:
        """ValueError (one line) naming the first bad setting."""
        check_int("seed", self.seed, minimum=0)
        check_int("interpolation_steps", self.interpolation_steps, minimum=0)
        if self.num_envs is not None:
            check_int("num_envs", self.num_envs, minimum=1)
        if self.select not in SELECTIONS:
            raise ValueError(f"select = {self.select!r}: expected one of {', '.join(SELECTIONS)}")
        noise = self.action_noise
        if isinstance(noise, bool) or not isinstance(noise, int | float) or not math.isfinite(noise) or noise < 0:
            raise ValueError(f"action_noise = {noise!r}: expected a number >= 0 [m]")
        (self.motion or Motion()).check()
        for key in self.overrides:
            if key.split(".")[0] in ("num_envs", "seed"):
                raise ValueError(f"--set {key}: give --envs or --seed")

    def recorded(self, follow: str) -> dict:
        """What run.json's ``generated_from`` records of them (``follow``: the follower used)."""
        return {"select": self.select, "interpolation_steps": self.interpolation_steps,
                "action_noise": float(self.action_noise), "seed": self.seed,
                "follow": follow, "gain": (self.motion or Motion()).pose_gain}  # fmt: skip


class Generation:
    """One env generating attempts from the source run: built once (the env, the cut sources, the follower), then
    stepped over blocks of attempt indices (:meth:`block`), whose attempts are written as runs (:meth:`write`)."""

    def __init__(self, source: str, settings: Settings):
        self.source, self.settings = source, settings
        manifest = self.manifest = read_manifest(source)
        task, overrides = settings.task, settings.overrides
        if task is None:
            built, _ = _task_of(source, manifest, overrides, settings.trust_code)
        else:  # the task as this forge_gpu (or the file) has it now, not the copy the run stored
            built = file_task_class(task) if is_task_file(str(task)) else TASKS[resolve_task(task)]
            named = getattr(built, "task_id", None) or task
            if manifest["task"] != named:
                raise ValueError(f"{source}: the run is of task {manifest['task']!r}, not {named!r}")
        reader = _open(source, manifest, built)
        config = _config(built, _without_subtasks(manifest), dict(overrides), settings.device)
        n = settings.num_envs or int(manifest["config"].get("num_envs", 1))
        given = {k: v for k, v in config.to_overrides().items() if k not in ("task", "num_envs", "seed")}
        env = self.env = make(built, **given, num_envs=n, seed=settings.seed)
        if not isinstance(env.task, FileTask) or not env.task.plan.subtasks:
            raise ValueError(f"task {manifest['task']!r} has no [[subtasks]]; generation cuts demonstrations by "
                             "them (docs/generate.md)")  # fmt: skip
        _check_compatible(manifest, env, source)
        arm = task_arm(env.task)
        count = len(reader)
        chosen = settings.source_episodes
        selected = list(range(count)) if chosen is None else sorted(set(chosen))
        for k in selected:
            if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < count:
                raise ValueError(f"source episode {k!r}: the run {source} holds episodes 0..{count - 1}")
        self.sources = cut_sources(env, reader, source, selected, arm.gripper_column, (arm.point_body, arm.offset),
                                   lead_chain(env, arm))  # fmt: skip
        self.subtasks = [s.name for s in env.task.plan.subtasks]
        self.follower = Follower(env, self.sources, arm, attempts=1, select=settings.select,
                                 interpolation_steps=settings.interpolation_steps,
                                 action_noise=float(settings.action_noise), motion=settings.motion)  # fmt: skip

    def block(self, first: int, count: int, scratch: str, *, target: int | None = None, stop=None, progress=None,
              progress_interval: float = 1.0):  # fmt: skip
        """Step the attempts ``first .. first + count - 1``, each recorded into the new scratch run ``scratch``;
        with ``target``, stop once the first ``target`` successes among them are known. Returns the figures of the
        attempts counted (all ``count``, or those up to the target-th success: ``figures["attempts"]``) and
        ``collect``'s summary. InterruptedError when ``stop`` is set before that."""
        from forge_gpu.kernels import generate as kernels

        env, follower = self.env, self.follower
        n = env.num_envs
        rows = EvaluationRows(env, count)
        keys = wp.array(np.arange(n, dtype=np.int32) + first, dtype=wp.int32, device=env.device)
        follower.block(first, count)

        def launch() -> None:
            rows.launch()
            wp.launch(kernels.attempt_keys_kernel, dim=n, inputs=[first, rows.draw_env], outputs=[keys],
                      device=env.device)  # fmt: skip

        stop = stop or threading.Event()
        done = threading.Event()
        state = {"ended": 0, "successes": 0, "cutoff": 0}
        began = time.perf_counter()
        last = [began]
        calls = [0]

        def check() -> None:
            ended = rows.lengths.numpy() > 0
            success = rows.success_once.numpy().astype(bool) & ended
            state["ended"], state["successes"] = int(ended.sum()), int(success.sum())
            state["cutoff"] = _cutoff(ended, success, target) if target is not None else 0
            if state["cutoff"] or state["ended"] >= count:
                done.set()

        def policy(observation):
            calls[0] += 1
            if calls[0] % EvaluationRows.CHECK_EVERY == 0:
                check()
                now = time.perf_counter()
                if progress is not None and now - last[0] >= progress_interval:
                    last[0] = now
                    progress(counters(state["ended"], state["successes"], target or count, calls[0] * n,
                                       now - began))  # fmt: skip
            return follower(observation)

        env.extend_step(launch, draw_env=keys, draw_episode=rows.draw_episode, idle=rows.idle)
        try:
            summary = collect(env, policy, scratch, episodes=count, stop=_Either(stop, done),
                              options=self.settings.options)  # fmt: skip
        finally:
            env.extend_step()
        if summary.status == "failed":
            raise RuntimeError(f"{scratch}: the recording of the attempts failed")
        check()
        if stop.is_set() and not done.is_set():
            raise InterruptedError(f"stopped after {state['ended']} attempts; nothing written")
        return _figures(rows, follower, state["cutoff"] or count, len(self.subtasks), first), summary

    def write(self, scratch: str, out: str, figures: dict, *, success: bool) -> int:
        """The successful (or failed) attempts of ``figures`` from the scratch run into the new run ``out``."""
        return _write(self.env, self.manifest, self.source, scratch, out, figures, self.sources, success=success,
                      settings=self.settings.recorded(self.follower.follow))  # fmt: skip


def summarize(figures: dict, subtasks: list[str], out: str, written: int, episodes: int, env_steps: int,
              seconds: float, used: int, skipped: list[str], failures: str) -> GenerationSummary:  # fmt: skip
    """The :class:`GenerationSummary` of the attempts in ``figures``."""
    count = len(subtasks)
    success, reached = figures["success"], figures["reached"]
    return GenerationSummary(
        directory=out,
        episodes=written,
        attempts=int(figures["attempts"]),
        successes=int(success.sum()),
        subtasks=subtasks,
        reached=[int((reached > s).sum()) for s in range(count)],
        failed_in=[int(((reached == s) & ~success).sum()) for s in range(count)],
        sources=used,
        skipped=skipped,
        env_steps=env_steps,
        seconds=seconds,
        complete=written == episodes,
        failures=failures,
    )


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


def counters(ended: int, successes: int, target: int, env_steps: int, seconds: float) -> dict:
    return {
        "unit": "generated episodes",
        "target": target,
        "attempts": ended,
        "successes": successes,
        "yield": successes / ended if ended else 0.0,
        "env_steps": env_steps,
        "seconds": seconds,
        "env_steps_per_s": env_steps / seconds if seconds > 0 else 0.0,
    }


def _figures(rows: EvaluationRows, follower: Follower, cutoff: int, count: int, first: int) -> dict:
    """The outcomes and traces of the first ``cutoff`` attempts of a block starting at attempt ``first``: host
    arrays, row ``k`` attempt ``first + k``."""
    success = rows.success_once.numpy()[:cutoff].astype(bool)
    reached = follower.row_reached.numpy()[:cutoff]
    return {
        "first": first,
        "attempts": cutoff,
        "success": success,
        "ended": rows.lengths.numpy()[:cutoff] > 0,
        "reached": np.where(success, count, np.minimum(reached, count)),
        "worlds": rows.worlds.numpy()[:cutoff],
        "episode_ids": rows.episode_ids.numpy()[:cutoff],
        "choice": follower.row_choice.numpy()[:cutoff],
        "transform": follower.row_transform.numpy()[:cutoff].reshape(cutoff, count, 7),
        "hold": follower.row_hold.numpy()[:cutoff].reshape(cutoff, count, 3),
    }


STATS_SOURCE = "counted from the generated episodes as they were written"
"""stats.json's ``source`` of a generated run."""


def counted(episodes, stats: StatsAccumulator):
    """``episodes`` passed on, each counted into ``stats`` (the run's stats.json, as a recorder counts its own)."""
    for episode in episodes:
        stats.update_episode(episode)
        yield episode


def _traced(episode: Episode, k: int, figures: dict, sources: Sources) -> Episode:
    """The episode of row ``k`` (attempt ``j = first + k``) as the output run holds it: env 0, episode ``j``, its
    trace in its params."""
    j = figures["first"] + k
    choice = figures["choice"][k]
    cuts = sources.cuts[choice]
    count = len(choice)
    trace = {
        "generate_attempt": np.float32(j),
        "generate_source": sources.ids[choice].astype(np.float32),
        "generate_frames": np.stack([cuts[np.arange(count), np.arange(count)],
                                     cuts[np.arange(count), np.arange(count) + 1]], -1).astype(np.float32),
        "generate_transform": figures["transform"][k].astype(np.float32),
        "generate_hold": figures["hold"][k].astype(np.float32),
    }  # fmt: skip
    ids = {"env_id": 0, "episode_id": j}
    obs, nxt = dict(episode.obs), dict(episode.next)
    for name, value in ids.items():
        if name in ID_FIELDS:
            obs[name] = np.full_like(obs[name], value)
            nxt[name] = np.full_like(nxt[name], value)
    return dataclasses.replace(episode, env_id=0, episode_id=j, obs=obs, next=nxt,
                               params={**episode.params, **trace})  # fmt: skip


def _write(env, source_manifest: dict, source: str, scratch: str, out: str, figures: dict, sources: Sources, *,
           success: bool, settings: dict) -> int:  # fmt: skip
    """Write the successful (or failed) attempts of ``figures`` from the scratch run into the new run ``out``, in
    attempt order; the count written."""
    manifest = read_manifest(scratch)
    reader = format_of(manifest).open(scratch, manifest)
    index = {tuple(reader.ids(k)[:2]): k for k in range(len(reader))}
    cutoff = figures["attempts"]
    chosen = [k for k in range(cutoff) if figures["ended"][k] and bool(figures["success"][k]) == success]
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
    run = describe_run(env, transport="generate")
    trace_spec = {"generate_attempt": [], "generate_source": [count_s, 2], "generate_frames": [count_s, 2],
                  "generate_transform": [count_s, 7], "generate_hold": [count_s, 3]}  # fmt: skip
    spec = run.spec
    params = {**(spec.get("params") or {}),
              **{k: {"shape": shape, "dtype": "float32"} for k, shape in trace_spec.items()}}  # fmt: skip
    spec = {**spec, "params": params, PARAM_SOURCES_KEY: {**param_sources(spec), **dict.fromkeys(TRACE, SOURCE)}}
    stats = new_statistics(spec)
    work = new_partial(out)
    try:
        count, format_keys = FORMATS["packed"].write(work, counted(episodes(), stats), "none")
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
                "first_attempt": figures["first"],
                "attempts": cutoff,
                "successes": int(figures["success"].sum()),
                "outcome": "success" if success else "failure",
                **settings,
                "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            },
        )
        stored.write(work, getattr(env.task, "stored_files", None) or {})
        if count:
            stats.write(work, STATS_SOURCE)
        write_json_atomic(os.path.join(work, RUN_MANIFEST), written)
        publish(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return count
