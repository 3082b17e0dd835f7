"""collect: step a VectorEnv with a policy and record every episode through the host snapshot.

Threads: the caller's thread steps the env and publishes each step into the transport; one
recorder thread takes the host batches, appends them to the run format's :class:`Recorder` and releases
the slots; the recorder's writer threads publish episodes. Backpressure chain: slow writers ->
``append`` waits for room in its buffers -> the recorder thread holds its slot -> ``publish``
waits for a free slot -> stepping stops. Exceptions in any thread reach the caller.

The simulation half of ``forge_gpu.recording`` (``_src/collect``: it drives the env, with Warp); the data half,
``_src/recording``, never imports Warp.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from forge_gpu._src.collect.encode import run_encoder
from forge_gpu._src.collect.transport import HostSnapshotTransport, Transport, TransportClosed
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.manifest import RunDescription, check_description
from forge_gpu._src.formats.registry import FORMATS, RecordingOptions, recording_options
from forge_gpu._src.recording.base import Recorder
from forge_gpu._src.sim.run_description import describe_run
from forge_gpu._src.sim.solver import OverflowTally, overflow_lines, warn_dropped
from forge_gpu._src.tasks.taskfile import stored


@dataclass
class CollectionSummary:
    """What a collection did."""

    directory: str
    status: str
    """``closed``, ``interrupted`` or ``failed``."""
    episodes: int
    """Episodes published."""
    env_steps: int
    """Env steps taken (num_envs per call, reset calls excluded)."""
    seconds: float
    stall_seconds: float
    """Time the stepping loop waited on the transport (all slots held) [s]."""
    bytes_written: int
    episodes_ended: int = 0
    """Episodes that ended in the stepped batches; all of them are published unless the run failed."""
    incomplete_episodes: list = field(default_factory=list)
    step_mode: str = ""
    """``graph`` (each step one captured graph) or ``eager: <why>`` (see ``VectorEnv.step_mode``)."""
    warmup_seconds: float = 0.0
    """Before the first step, not in ``seconds``: reset, kernel compilation on first use, graph capture [s]."""
    solver_overflow: dict = field(default_factory=dict)
    """MuJoCo-Warp's overflows over the collection (``sim/solver.py``'s ``OverflowTally.report``, also run.json's
    ``solver_overflow``); empty for the other solvers."""

    @property
    def solver_warnings(self) -> list[str]:
        """What ``solver_overflow`` means, one line per kind that occurred (dropped contacts, iteration limits)."""
        return overflow_lines(self.solver_overflow)

    @property
    def env_steps_per_second(self) -> float:
        return self.env_steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def stall_fraction(self) -> float:
        return self.stall_seconds / self.seconds if self.seconds > 0 else 0.0


class _Consumer(threading.Thread):
    """The recorder thread: host batches -> recorder.append -> release."""

    def __init__(self, transport: Transport, recorder: Recorder | None, overflow: OverflowTally | None = None):
        super().__init__(name="forge-recorder", daemon=True)
        self.transport, self.recorder, self.overflow = transport, recorder, overflow
        self.ended = 0
        """Episodes that ended (terminated or truncated) in the batches seen so far."""
        self.steps = 0
        """Batches seen so far (the reset batch is batch 0)."""
        self.error: BaseException | None = None

    def append(self, batch) -> None:
        """Give one checked batch to the recorder (a subclass may add to it first)."""
        self.recorder.append(batch.observation, batch.result)

    def run(self) -> None:
        try:
            while (batch := self.transport.get()) is not None:
                result = batch.result
                bad = np.flatnonzero(result.info["action_nonfinite"])
                if bad.size:  # flagged on the device (CUDA does not wait to check each action)
                    raise ValueError(
                        f"the policy gave non-finite actions (NaN or inf) at step {self.steps} for env rows "
                        f"{bad[:10].tolist()}; every value must be finite"
                    )
                self.steps += 1
                if self.recorder is not None:
                    self.append(batch)
                ended = result.terminated | result.truncated
                if self.overflow is not None:
                    obs = batch.observation
                    self.overflow.add(result.info["solver_overflow"], result.info["active"], ended, obs["env_id"],
                                      obs["episode_id"])  # fmt: skip
                self.ended += int(np.count_nonzero(ended))
                self.transport.release(batch)
        except BaseException as exc:  # surfaces in the stepping thread at its next publish
            self.error = exc
            self.transport.fail(exc)


class _Loop:
    """collect's stepping loop: publish each step until the target or ``stop``; the progress counters."""

    def __init__(self, env, policy, transport: Transport, consumer: _Consumer, recorder, episodes, steps):
        self.env, self.policy, self.transport = env, policy, transport
        self.consumer, self.recorder = consumer, recorder
        self.episodes, self.steps = episodes, steps
        self.calls = 0
        """``step`` calls so far."""
        self.start = time.perf_counter()

    def run(self, first, action, stop: threading.Event, progress, progress_interval: float) -> str:
        """Publish ``first`` (the reset batch), then step until done or stopped, ``action`` (the policy's, already
        checked, on the first observation) first: ``closed`` or ``interrupted``. The policy is called once before
        each step and never after the last."""
        env, last_report = self.env, time.perf_counter()
        self.transport.publish(first)
        while not stop.is_set():
            if self.episodes is not None and self.consumer.ended >= self.episodes:
                break
            if self.steps is not None and self.calls >= self.steps:
                break
            if action is None:
                action = self.policy(env.observation)
            self.transport.publish(env.step(action))
            action = None
            self.calls += 1
            if progress is not None and time.perf_counter() - last_report >= progress_interval:
                last_report = time.perf_counter()
                progress(self.counters())
        return "interrupted" if stop.is_set() else "closed"

    def summary(self, directory: str | None, status: str, warmup_seconds: float) -> CollectionSummary:
        """What the loop did, before the recorder's figures (``_close_recorder``) are added."""
        return CollectionSummary(
            directory=str(directory) if directory is not None else "",
            status=status,
            episodes=self.consumer.ended,
            env_steps=self.calls * self.env.num_envs,
            seconds=time.perf_counter() - self.start,
            stall_seconds=self.transport.stall_seconds,
            bytes_written=0,
            episodes_ended=self.consumer.ended,
            step_mode=self.env.step_mode,
            warmup_seconds=warmup_seconds,
        )

    def counters(self, elapsed: float | None = None) -> dict:
        """The progress dict ``collect`` reports (``recording.progress.aggregate`` sums the workers'); ``elapsed``: the
        seconds of the loop, default until now (the last report gives the summary's, so that its rate is the
        summary's)."""
        elapsed = time.perf_counter() - self.start if elapsed is None else elapsed
        consumer, recorder, env_steps = self.consumer, self.recorder, self.calls * self.env.num_envs
        return {
            "episodes_ended": consumer.ended,
            "episodes_published": recorder.completed_episodes if recorder else consumer.ended,
            "target": self.episodes if self.episodes is not None else self.steps,
            "unit": "episodes" if self.episodes is not None else "steps",
            "steps": self.calls,
            "env_steps": env_steps,
            "seconds": elapsed,
            "env_steps_per_s": env_steps / elapsed if elapsed > 0 else 0.0,
            "stall_fraction": self.transport.stall_seconds / elapsed if elapsed > 0 else 0.0,
            "backlog": recorder.backlog if recorder else 0,
            "bytes_written": recorder.bytes_written if recorder else 0,
        }


def make_recorder(directory: str, run: RunDescription, options: RecordingOptions | None = None) -> Recorder:
    """The recorder of ``options.format`` (a registered :class:`RunFormat`; default ``RecordingOptions()``) for a
    new run directory, recording ``run`` (``forge_gpu.sim.describe_run(env)`` describes an env)."""
    options = recording_options(options)
    return FORMATS[options.format].recorder(directory, check_description(run), options)


def collect(
    env,
    policy: Callable,
    directory: str | None,
    *,
    episodes: int | None = None,
    steps: int | None = None,
    slots: int = 4,
    options: RecordingOptions | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[dict], None] | None = None,
    progress_interval: float = 0.5,
    transport: Callable[..., Transport] | None = None,
) -> CollectionSummary:
    """Run ``policy`` in ``env`` and record into the new run directory ``directory``.

    Args:
        env: A :class:`VectorEnv`.
        policy: ``(observation) -> action`` on the env's device, called once before each step (the first action
            is checked and executed: the first observation is not asked twice). With next-step auto-reset it is
            also called on each episode's terminal frame; that action is dropped (the next step resets the env),
            and the next call sees the new episode's first frame (``step_id == 0``), where a
            :class:`~forge_gpu.sim.TorchPolicy`'s history and chunks start again.
        directory: New run directory; ``None`` steps and transports without recording.
        episodes: Stop once at least this many episodes have ended (all of them are published).
        steps: Or stop after this many ``step`` calls. Exactly one of the two is given.
        slots: Transport slots K.
        options: How the run is recorded (:class:`RecordingOptions`: format, compression, writers, memory
            budget, statistics, codecs, durability); default ``RecordingOptions()``, a packed run. It is the one
            way to set them: ``RecordingOptions(compression="lz4")``, or ``options.replace(...)`` of another.
        stop: Set it (e.g. from a signal handler) to stop stepping and close cleanly.
        progress: Called about every ``progress_interval`` seconds with a dict of counters.
        transport: A factory ``(env, slots=K) -> Transport`` (default :class:`HostSnapshotTransport`, given on
            CUDA an encoder of the packed run's JPEG fields: ``collect/encode.run_encoder``); the transport's
            ``name`` goes to run.json.
    """
    if (episodes is None) == (steps is None):
        raise ValueError(f"give exactly one of episodes={episodes!r} and steps={steps!r}")
    target = episodes if episodes is not None else steps
    check_int("episodes" if episodes is not None else "steps", target, minimum=1)
    options = recording_options(options)
    began = time.perf_counter()
    first = env.reset()  # compiles the step's kernels on first use and captures the step graph
    action = policy(env.observation)  # the first step's: called once, a stateful policy advances once
    env.check_action(action)  # refuse a broken policy before anything is created
    if transport is None:  # on CUDA, JPEG fields encoded before the host copy (collect/encode.py)
        encoder = run_encoder(env, options, recording=directory is not None)
        transport = functools.partial(HostSnapshotTransport, encoder=encoder)
    transport = transport(env, slots=slots)
    recorder = None
    if directory is not None:
        recorder = make_recorder(directory, describe_run(env, transport=transport.name), options)
        _store_task(env, recorder)
        if episodes is not None:  # its success rate counts published episodes only: inspect and report say so
            recorder.note("episodes_target", episodes)
    overflow = env.solver_overflow
    tally = OverflowTally(env.num_envs, overflow.limits) if overflow.limits else None
    consumer = _Consumer(transport, recorder, tally)
    consumer.start()
    loop = _Loop(env, policy, transport, consumer, recorder, episodes, steps)
    warmup_seconds = loop.start - began
    status, error = "closed", None
    try:
        status = loop.run(first, action, stop or threading.Event(), progress, progress_interval)
    except TransportClosed:
        status = "failed"
    except BaseException as exc:
        status, error = "failed", exc
    finally:
        transport.close()
        consumer.join()
    error = error or consumer.error
    summary = loop.summary(directory, status, warmup_seconds)
    summary.solver_overflow = tally.report() if tally is not None else {}
    warn_dropped(summary.solver_overflow)
    if recorder is not None:
        if tally is not None:
            recorder.note("solver_overflow", summary.solver_overflow)
        error = _close_recorder(recorder, summary, error)
    if progress is not None:
        progress(loop.counters(summary.seconds))  # the loop's time, as the summary's: not the close's
    if error is not None:
        raise error
    return summary


def _store_task(env, recorder: Recorder) -> None:
    """Write the task's files (a task file's: ``tasks/taskfile/stored.py``) into the new run's ``task/`` folder, which
    run.json's ``scene_spec.stored`` lists; a failure closes the run as failed and is raised."""
    files = getattr(env.task, "stored_files", None)
    if files:
        try:
            stored.write(recorder.directory, files)
        except OSError as exc:
            recorder.close(error=exc)
            raise


def _close_recorder(recorder: Recorder, summary: CollectionSummary, error: BaseException | None):
    """Close the run (``error``: why it failed, if it did) and put what it published into ``summary``; return
    the first error, the recorder's own if there was none before."""
    try:
        recorder.close(error=error)
    except BaseException as exc:
        error = error or exc
        summary.status = "failed"
    summary.episodes = recorder.completed_episodes
    summary.bytes_written = recorder.bytes_written
    summary.incomplete_episodes = recorder.incomplete_episodes
    return error
