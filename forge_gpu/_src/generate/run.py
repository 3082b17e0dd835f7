"""generate: many demonstrations from a few, by moving the source demonstrations' subtask segments into the frames of
the objects where they are in new scenes (docs/generate.md).

The source run's episodes are cut into the task's ``[[subtasks]]`` (``sources.py``); attempt ``j`` (0, 1, ...) is
episode ``j`` of an evaluation (``evaluate/rows.py``): its reset and randomized values drawn from the keys
``(seed, j)``, its segment choices and action noise from ``j`` (``kernels/generate.py``), whichever world runs it
(``generation.py``). Every attempt is recorded into a scratch run beside the output; once the first ``N`` successful
attempts by index are known (every attempt before the N-th success has ended), stepping stops and the output run is
written with those ``N`` episodes in attempt order, each with its trace as per-episode params; the failures before
it go to ``keep_failures`` where given, and the scratch run is removed. The run therefore does not depend on the
number of envs or workers (``distributed.py``: the same on K Ray actors).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.files import partial_path
from forge_gpu._src.formats.registry import RecordingOptions
from forge_gpu._src.generate.follower import Motion
from forge_gpu._src.generate.generation import Generation, GenerationSummary, Settings, counters, summarize


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
    select: str = "nearest",
    interpolation_steps: int = 5,
    action_noise: float = 0.0,
    source_episodes: list[int] | None = None,
    keep_failures: str | os.PathLike | None = None,
    max_attempts: int | None = None,
    motion: Motion | None = None,
    workers: int | None = None,
    chunk: int | None = None,
    ray_address: str | None = None,
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
        select: ``nearest`` (each subtask's source segment the one whose object pose at its start is nearest the
            object's pose now) or ``random`` (drawn uniformly).
        interpolation_steps: steps from the tcp's pose to a segment's transformed first pose (>= 0).
        action_noise: uniform noise on each step's tcp position change, +- this [m] (>= 0).
        source_episodes: the source run's episodes to use (indices in its reading order; default all).
        keep_failures: a new run directory for the failed attempts before the last one written.
        max_attempts: give up after this many attempts (default ``20 * episodes + num_envs``).
        motion: how the tcp follows the segments (:class:`Motion`).
        workers: K Ray actors, each with its own env (``generate/distributed.py``): blocks of ``chunk`` attempts
            (default ``max(16, 4 * num_envs)``) handed out in index order, merged into the one run; the same seed
            gives the same run whatever K. None: this process alone.
        ray_address: the Ray cluster to join (default: a local one).
        options: how the scratch run of every attempt is written (``collect``'s); the output run is packed.

    ValueError (one line, nothing written) for a bad argument, a source run of another task, a task without
    ``[[subtasks]]``, a run without state, or a source in which no episode cuts into every subtask.
    """
    check_int("episodes", episodes, minimum=1)
    settings = Settings(task=task, overrides=dict(overrides or {}), num_envs=num_envs, seed=seed, device=device,
                        select=select, interpolation_steps=interpolation_steps, action_noise=action_noise,
                        source_episodes=source_episodes, motion=motion, trust_code=trust_code,
                        options=options)  # fmt: skip
    settings.check()
    source, out = os.fspath(source), os.fspath(out)
    if os.path.exists(out):
        raise ValueError(f"{out}: already exists; generate writes a new run")
    if keep_failures is not None:
        keep_failures = os.fspath(keep_failures)
        if os.path.exists(keep_failures) or os.path.abspath(keep_failures) == os.path.abspath(out):
            raise ValueError(f"keep_failures = {keep_failures}: already exists or is the output; name a new run")
    if workers is not None:
        check_int("workers", workers, minimum=1)
        from forge_gpu._src.generate.distributed import generate_distributed

        return generate_distributed(source, out, settings, episodes=episodes, workers=workers, chunk=chunk,
                                    keep_failures=keep_failures, max_attempts=max_attempts, address=ray_address,
                                    stop=stop, progress=progress, progress_interval=progress_interval)  # fmt: skip
    generation = Generation(source, settings)
    n = generation.env.num_envs
    attempts = max_attempts if max_attempts is not None else 20 * episodes + n
    check_int("max_attempts", attempts, minimum=episodes)
    scratch = partial_path(out + ".attempts")
    try:
        figures, summary = generation.block(0, attempts, scratch, target=episodes, stop=stop, progress=progress,
                                            progress_interval=progress_interval)  # fmt: skip
        written = generation.write(scratch, out, figures, success=True)
        failures = ""
        if keep_failures is not None:
            generation.write(scratch, keep_failures, figures, success=False)
            failures = keep_failures
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    used, skipped = len(generation.sources.indices), [s.line(source) for s in generation.sources.skipped]
    result = summarize(figures, generation.subtasks, out, written, episodes, summary.env_steps, summary.seconds,
                       used, skipped, failures)  # fmt: skip
    result.warmup_seconds = summary.warmup_seconds
    if progress is not None:
        progress(counters(figures["attempts"], int(figures["success"].sum()), episodes, summary.env_steps,
                           summary.seconds))  # fmt: skip
    return result


__all__ = ["GenerationSummary", "generate"]
