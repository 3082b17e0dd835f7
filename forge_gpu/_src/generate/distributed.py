"""Generation on K Ray actors (``generate(..., workers=K)``, ``forge-gpu generate --workers K``).

Each actor builds the generation once (its env, the cut sources, the follower: ``run.Generation``) and then steps
blocks of ``chunk`` attempt indices that the driver hands out in index order (``first = 0, chunk, 2 chunk, ...``):
each block is every one of its attempts, keyed by its index as in one process, written as two small runs (its
successes and, with ``keep_failures``, its failures) under ``OUT.blocks``. As blocks come back the driver counts the
successes of the blocks done from index 0 on; once the first N are known it hands out no more, waits for the blocks
running, and merges the blocks' episodes of attempts below the N-th success's into the one run ``OUT`` in attempt
order. Which worker ran a block changes nothing: the same seed gives the same run whatever K, and the same as one
process (whose attempts are the same indices).

Actors take one CPU each (``num_cpus=1``); on a cluster with GPUs give each its device with ``--device``. Actors
ignore SIGINT; the driver stops by not handing out blocks and killing the actors.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np

from forge_gpu._src.collect.distributed import import_ray, start_ray
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.episode import Episode, EpisodeReadOptions
from forge_gpu._src.core.files import new_partial, partial_path, publish, write_json_atomic
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.formats.registry import FORMATS, format_of, read_manifest
from forge_gpu._src.generate.generation import (
    STATS_SOURCE,
    GenerationSummary,
    Settings,
    counted,
    counters,
    summarize,
)
from forge_gpu._src.recording.stats import new_statistics
from forge_gpu._src.tasks.taskfile import stored

_POLL = 0.2
"""Seconds between two looks at the blocks running (and at ``stop``)."""


def block_name(first: int, success: bool) -> str:
    """The run of a block's successes (``block-000000016``) or failures (``...-failures``) under ``OUT.blocks``."""
    return f"block-{first:09d}" + ("" if success else "-failures")


class _Worker:
    """A Ray actor: one generation (its env and sources), stepping the blocks the driver hands it."""

    def __init__(self, source: str, settings: Settings):
        self.source, self.settings = source, settings
        self.generation = None

    def prepare(self) -> dict:
        """Build the generation (the env, the cut sources): what the summary needs of it."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver stops the actors
        from forge_gpu._src.generate.generation import Generation

        g = self.generation = Generation(self.source, self.settings)
        return {
            "subtasks": g.subtasks,
            "sources": len(g.sources.indices),
            "skipped": [s.line(self.source) for s in g.sources.skipped],
            "num_envs": g.env.num_envs,
        }

    def block(self, first: int, count: int, root: str, keep_failures: bool) -> dict:
        """Step the attempts ``first .. first + count - 1`` and write their runs under ``root``."""
        g = self.generation
        scratch = partial_path(os.path.join(root, f"attempts-{first:09d}"))
        try:
            figures, summary = g.block(first, count, scratch)
            g.write(scratch, os.path.join(root, block_name(first, True)), figures, success=True)
            if keep_failures:
                g.write(scratch, os.path.join(root, block_name(first, False)), figures, success=False)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        kept = ("first", "attempts", "success", "ended", "reached")
        return {"figures": {k: figures[k] for k in kept}, "env_steps": summary.env_steps}


def generate_distributed(
    source: str,
    out: str,
    settings: Settings,
    *,
    episodes: int,
    workers: int,
    chunk: int | None,
    keep_failures: str | None,
    max_attempts: int | None,
    address: str | None,
    stop: threading.Event | None,
    progress: Callable[[dict], None] | None,
    progress_interval: float,
) -> GenerationSummary:
    """``generate`` on ``workers`` Ray actors (its arguments, checked there)."""
    manifest = read_manifest(source)
    n = settings.num_envs or int(manifest["config"].get("num_envs", 1))
    chunk = chunk if chunk is not None else max(16, 4 * n)
    check_int("chunk", chunk, minimum=1)
    attempts = max_attempts if max_attempts is not None else 20 * episodes + n
    check_int("max_attempts", attempts, minimum=episodes)
    ray = import_ray()
    started = start_ray(workers, address)
    root = new_partial(out + ".blocks")
    began = time.perf_counter()
    try:
        actor_class = ray.remote(_Worker).options(num_cpus=1)
        actors = [actor_class.remote(source, settings) for _ in range(workers)]
        try:
            info = [_result(ray, ref) for ref in [actor.prepare.remote() for actor in actors]][0]
        except ValueError:
            for actor in actors:
                ray.kill(actor)
            raise
        done: dict[int, dict] = {}
        pending: dict = {}
        next_first, cutoff, last = 0, 0, began

        def hand(actor) -> None:
            nonlocal next_first
            if cutoff or next_first >= attempts:
                return
            count = min(chunk, attempts - next_first)
            ref = actor.block.remote(next_first, count, root, keep_failures is not None)
            pending[ref] = (next_first, actor)
            next_first += count

        for actor in actors:
            hand(actor)
        while pending:
            if stop is not None and stop.is_set():
                for actor in actors:
                    ray.kill(actor)
                raise InterruptedError(f"stopped after {_ended(done)} attempts; nothing written")
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL)
            for ref in ready:
                first, actor = pending.pop(ref)
                done[first] = _result(ray, ref)
                cutoff = _global_cutoff(done, episodes)
                hand(actor)
            now = time.perf_counter()
            if progress is not None and now - last >= progress_interval:
                last = now
                progress(_counters(done, episodes, now - began))
        for actor in actors:
            ray.kill(actor)
        figures = _merged_figures(done, cutoff or attempts)
        facts = {"attempts": figures["attempts"], "successes": int(figures["success"].sum()), "workers": workers,
                 "chunk": chunk}  # fmt: skip
        written = _merge(root, out, done, facts, success=True)
        failures = ""
        if keep_failures is not None:
            _merge(root, keep_failures, done, facts, success=False)
            failures = keep_failures
        seconds = time.perf_counter() - began
        env_steps = sum(r["env_steps"] for r in done.values())
        result = summarize(figures, info["subtasks"], out, written, episodes, env_steps, seconds, info["sources"],
                           info["skipped"], failures)  # fmt: skip
        if progress is not None:
            progress(_counters(done, episodes, seconds))
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if started:
            ray.shutdown()


def _result(ray, ref):
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else None
        if isinstance(cause, ValueError):
            raise ValueError(str(cause)) from None
        raise


def _in_order(done: dict) -> Iterator[dict]:
    """The blocks done from attempt 0 on without a gap."""
    at = 0
    while at in done:
        yield done[at]
        at += int(len(done[at]["figures"]["success"]))


def _global_cutoff(done: dict, episodes: int) -> int:
    """The number of leading attempts that hold the first ``episodes`` successes, once the blocks done from 0 on
    hold them; else 0."""
    blocks = list(_in_order(done))
    if not blocks:
        return 0
    success = np.concatenate([b["figures"]["success"] & b["figures"]["ended"] for b in blocks])
    hits = np.flatnonzero(success)
    return int(hits[episodes - 1]) + 1 if hits.size >= episodes else 0


def _ended(done: dict) -> int:
    return int(sum(int(b["figures"]["ended"].sum()) for b in done.values()))


def _counters(done: dict, target: int, seconds: float) -> dict:
    successes = int(sum(int((b["figures"]["success"] & b["figures"]["ended"]).sum()) for b in done.values()))
    return counters(_ended(done), successes, target, sum(b["env_steps"] for b in done.values()), seconds)


def _merged_figures(done: dict, cutoff: int) -> dict:
    """The outcomes of attempts ``0 .. cutoff - 1`` over the blocks done in order."""
    blocks = list(_in_order(done))
    merged = {key: np.concatenate([b["figures"][key] for b in blocks])[:cutoff] for key in ("success", "reached")}
    return {"first": 0, "attempts": min(cutoff, len(merged["success"])), **merged}


def _merge(root: str, out: str, done: dict, facts: dict, *, success: bool) -> int:
    """The blocks' runs of successes (or failures) with attempts below ``facts["attempts"]`` as the one new run
    ``out``; ``facts`` go to run.json's ``generated_from``."""
    cutoff = facts["attempts"]
    firsts = sorted(first for first in done if first < cutoff)
    runs = [os.path.join(root, block_name(first, success)) for first in firsts]
    options = EpisodeReadOptions(state=True)

    def episodes() -> Iterator[Episode]:
        for run in runs:
            manifest = read_manifest(run)
            reader = format_of(manifest).open(run, manifest)
            for episode in reader.read(list(range(len(reader))), options):
                if int(episode.params["generate_attempt"]) < cutoff:
                    yield episode

    written = read_manifest(runs[0])
    stats = new_statistics(written["env_spec"])
    work = new_partial(out)
    try:
        count, keys = FORMATS["packed"].write(work, counted(episodes(), stats), "none")
        written.update(keys, run_id=uuid.uuid4().hex, completed_episodes=count)
        written["generated_from"] = {**written["generated_from"], "first_attempt": 0, **facts}
        folder = os.path.join(runs[0], stored.FOLDER)
        if os.path.isdir(folder):
            shutil.copytree(folder, os.path.join(work, stored.FOLDER))
        if count:
            stats.write(work, STATS_SOURCE)
        write_json_atomic(os.path.join(work, RUN_MANIFEST), written)
        publish(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return count
