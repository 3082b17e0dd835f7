"""evaluate: score a policy over exactly N episodes of a VectorEnv, each drawn from its own key whatever world runs it.

The protocol (docs/evaluation.md): episode ``j`` (0 .. N-1) starts from the reset, randomized values and policy
noise drawn from the keys ``(j, 0)`` (``kernels/rng.py``'s env and episode keys), whichever world runs it; worlds
take the next index as they reset (an atomic counter on the device, ``kernels/evaluate.py``), episodes with an index
of N or more are not counted, and the loop ends once every one of the N episodes has ended. A deterministic policy
therefore gets the same per-episode figures at any number of envs, and slow episodes count as much as fast ones.
Per-episode figures are written on the device, to row ``j``, and copied to the host once at the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from forge_gpu._src.collect.collector import collect
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.instructions import TEMPLATE_KEY, episode_instructions
from forge_gpu._src.evaluate.figures import Evaluation
from forge_gpu._src.evaluate.rows import EvaluationRows
from forge_gpu._src.formats.registry import RecordingOptions


def evaluate(
    env,
    policy: Callable,
    *,
    episodes: int,
    stop: threading.Event | None = None,
    progress: Callable[[dict], None] | None = None,
    progress_interval: float = 1.0,
    record: str | None = None,
    options: RecordingOptions | None = None,
    slots: int = 4,
) -> Evaluation:
    """Run ``policy`` in ``env`` until exactly ``episodes`` episodes, indexed 0 .. episodes - 1, have ended, and
    return their figures (:class:`Evaluation`). Nothing is written unless ``record`` names a new run directory.

    Episode ``j`` draws its reset, randomized values and random-policy noise from the keys ``(j, 0)`` of the env's
    seed, whichever world runs it, so a deterministic policy gets the same figures at any number of envs; worlds
    whose next index is ``episodes`` or more idle (they reset at every step) until the last counted episode ends.
    The env is reset first and given back with its plain step (its next ``reset`` starts afresh).

    Args:
        env: a :class:`forge_gpu.sim.VectorEnv`.
        policy: ``(observation) -> action`` on the env's device, called once per step (the first action is checked
            before the first step, not asked for twice), with or without ``record``. It is also called on each
            episode's terminal frame, whose action the auto-reset drops (see ``collect``).
        episodes: N >= 1.
        stop: when set, the evaluation ends at once and raises ``InterruptedError`` (a part of the N episodes would
            be a biased estimate: nothing is returned).
        progress: called about every ``progress_interval`` seconds and at the end with a dict: ``unit``
            (``"episodes"``), ``target``, ``episodes_ended``, ``steps``, ``env_steps_per_s``, ``seconds``.
        record: a new run directory: the N evaluated episodes recorded as a run, through ``collect``'s transport and
            recorder (``options``, ``slots``: as ``collect``'s), none cut and none extra: the idle worlds reset at
            every step and run no transition, so none of their episodes is published. ``Evaluation.worlds`` and
            ``episode_ids`` name episode j's ``(env_id, episode_id)`` in the run.
    """
    check_int("episodes", episodes, minimum=1)
    rows = EvaluationRows(env, episodes)
    env.extend_step(rows.launch, draw_env=rows.draw_env, draw_episode=rows.draw_episode, idle=rows.idle)
    try:
        if record is not None:
            return _recorded(env, policy, rows, record, options, slots, stop, progress, progress_interval)
        began = time.perf_counter()
        env.reset()
        action = policy(env.observation)
        env.check_action(action)
        start = time.perf_counter()
        warmup = start - began
        steps, ended, last = 0, 0, start
        while ended < episodes:
            env.step(action)
            steps += 1
            if steps % rows.CHECK_EVERY == 0:
                ended = rows.ended()
                if stop is not None and stop.is_set():
                    raise InterruptedError(f"{min(ended, episodes)} of the {episodes} episodes had ended")
                now = time.perf_counter()
                if progress is not None and now - last >= progress_interval:
                    progress(_counters(episodes, ended, steps, env.num_envs, now - start))
                    last = now
            if ended < episodes:
                action = policy(env.observation)
        seconds = time.perf_counter() - start
        if progress is not None:
            progress(_counters(episodes, ended, steps, env.num_envs, seconds))
        return _result(env, rows, steps, seconds, warmup)
    finally:
        env.extend_step()


def _recorded(env, policy, rows: EvaluationRows, record, options, slots, stop, progress, interval) -> Evaluation:
    """The evaluation stepped by ``collect``: it stops once N episodes have ended, and only counted episodes end."""
    summary = collect(env, policy, record, episodes=rows.episodes, slots=slots, options=options, stop=stop,
                      progress=progress, progress_interval=interval)  # fmt: skip
    if summary.status != "closed":
        ended = min(rows.ended(), rows.episodes)
        raise InterruptedError(f"{ended} of the {rows.episodes} episodes had ended; {record} holds those published")
    steps = summary.env_steps // env.num_envs
    result = _result(env, rows, steps, summary.seconds, summary.warmup_seconds)
    result.run = summary.directory
    return result


def _counters(target: int, ended: int, steps: int, num_envs: int, seconds: float) -> dict:
    rate = steps * num_envs / seconds if seconds > 0 else 0.0
    return {
        "unit": "episodes",
        "target": target,
        "episodes_ended": min(ended, target),
        "steps": steps,
        "env_steps_per_s": rate,
        "seconds": seconds,
        "stall_fraction": 0.0,  # nothing is written: the keys collect's progress line shows
        "backlog": 0,
        "bytes_written": 0,
    }


def _result(env, rows: EvaluationRows, steps: int, seconds: float, warmup: float) -> Evaluation:
    spec, n = env.spec, rows.episodes
    params = {
        name: rows.params[name].numpy().reshape((n, *env.randomizer.recorded[name].shape[1:])) for name in rows.params
    }
    if TEMPLATE_KEY in spec:
        instructions = list(episode_instructions(spec[TEMPLATE_KEY], params, count=n))
    else:
        instructions = [spec["instruction"]] * n
    return Evaluation(
        task=spec["task"],
        seed=int(env.seed),
        num_envs=env.num_envs,
        has_success=bool(spec["has_success"]),
        returns=rows.returns.numpy().astype(np.float64),
        max_rewards=rows.max_rewards.numpy().astype(np.float64),
        lengths=rows.lengths.numpy().astype(np.int64),
        success_once=rows.success_once.numpy().astype(bool),
        success_at_end=rows.success_at_end.numpy().astype(bool),
        params=params,
        instructions=instructions,
        worlds=rows.worlds.numpy().astype(np.int64),
        episode_ids=rows.episode_ids.numpy().astype(np.int64),
        env_steps=steps * env.num_envs,
        seconds=seconds,
        warmup_seconds=warmup,
        step_mode=env.step_mode,
    )


__all__ = ["evaluate"]
