"""evaluate: score a policy over exactly N episodes of a VectorEnv, each drawn from its own key whatever world runs it.

The protocol (docs/evaluation.md): episode ``j`` (0 .. N-1) starts from the reset, randomized values and policy
noise drawn from the keys ``(j, 0)`` (``kernels/rng.py``'s env and episode keys), whichever world runs it; worlds
take the next index as they reset (an atomic counter on the device, ``kernels/evaluate.py``), episodes with an index
of N or more are not counted, and the loop ends once every one of the N episodes has ended. A deterministic policy
therefore gets the same per-episode figures at any number of envs, and slow episodes count as much as fast ones.
Per-episode figures are written on the device, to row ``j``, and copied to the host once at the end.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from forge_gpu._src.collect.collector import collect
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.instructions import TEMPLATE_KEY, episode_instructions
from forge_gpu._src.evaluate.rows import EvaluationRows
from forge_gpu._src.formats.registry import RecordingOptions

Z95 = 1.959963984540054
"""The normal quantile of a two-sided 95% interval."""
BINS = 4
"""A randomized parameter's episodes are broken down by the quartiles of its drawn values."""


@dataclass
class Evaluation:
    """What :func:`evaluate` measured: one row per episode index ``j`` (0 .. N-1), and the run's figures."""

    task: str
    seed: int
    num_envs: int
    has_success: bool
    returns: np.ndarray
    """Sum of the episode's rewards, float64 [N]."""
    max_rewards: np.ndarray
    """The episode's largest reward, float64 [N]."""
    lengths: np.ndarray
    """Transitions of the episode, int64 [N]."""
    success_once: np.ndarray
    """The episode reached success at some step, bool [N] (all false for a task without success)."""
    success_at_end: np.ndarray
    """The episode's last frame was a success, bool [N]. Both come from the task's success flag of each frame
    (``Task.success_flags``): where success ends the episode (reach, push) the two are equal; a task whose failures
    also terminate, or whose success does not end the episode, tells them apart."""
    params: dict[str, np.ndarray]
    """Each randomized parameter's drawn value of the episode: name -> [N, ...]."""
    instructions: list[str]
    """The episode's instruction (its params through the task's template, or the task's one instruction)."""
    worlds: np.ndarray
    """The world that ran the episode, int64 [N] (depends on the number of envs and on timing; the figures do not)."""
    episode_ids: np.ndarray
    """The episode's ``episode_id`` in its world, int64 [N]: with ``worlds``, its ``(env_id, episode_id)``."""
    env_steps: int = 0
    """Env steps taken (num_envs per step, idle worlds included)."""
    seconds: float = 0.0
    warmup_seconds: float = 0.0
    """Before the first step, not in ``seconds``: reset, kernel compilation on first use, graph capture [s]."""
    step_mode: str = ""
    run: str | None = None
    """The run directory the episodes were recorded into (``record``), or None."""

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @property
    def env_steps_per_second(self) -> float:
        return self.env_steps / self.seconds if self.seconds > 0 else 0.0

    def metrics(self) -> dict:
        """The figures with 95% intervals (Wilson for the rates, normal with the sample standard deviation for the
        means), broken down by instruction and by each randomized parameter's quartile bins, and lerobot-eval's keys
        (``pc_success``, ``avg_sum_reward``, ``avg_max_reward``, ``n_episodes``)."""
        out = {
            "task": self.task,
            "seed": self.seed,
            "num_envs": self.num_envs,
            "n_episodes": self.episodes,
            "pc_success": 100.0 * float(self.success_at_end.mean()) if self.has_success else None,
            "avg_sum_reward": float(self.returns.mean()),
            "avg_max_reward": float(self.max_rewards.mean()),
            **_figures(self, np.ones(self.episodes, bool)),
            "by_instruction": {},
            "by_param": {},
        }
        if len(set(self.instructions)) > 1:
            names = np.array(self.instructions, dtype=object)
            for text in sorted(set(self.instructions)):
                out["by_instruction"][text] = _figures(self, names == text)
        for name, values in self.params.items():
            for component, column in _components(name, values):
                out["by_param"][component] = [
                    {"low": low, "high": high, **_figures(self, rows)} for low, high, rows in _bins(column)
                ]
        out["env_steps"] = self.env_steps
        out["seconds"] = self.seconds
        out["env_steps_per_s"] = self.env_steps_per_second
        return out

    def episode_rows(self) -> dict:
        """The per-episode arrays as lists (the JSON's ``per_episode``)."""
        rows = {
            "return": self.returns.tolist(),
            "max_reward": self.max_rewards.tolist(),
            "length": self.lengths.tolist(),
            "success_once": self.success_once.tolist(),
            "success_at_end": self.success_at_end.tolist(),
            "instruction": list(self.instructions),
            "world": self.worlds.tolist(),
            "episode_id": self.episode_ids.tolist(),
        }
        rows.update({f"params.{name}": values.tolist() for name, values in self.params.items()})
        return rows


def wilson(successes: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate (``(0, 1)`` when n is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: np.ndarray) -> dict:
    """The mean, the sample standard deviation and the normal 95% interval of the mean."""
    n = len(values)
    mean = float(values.mean()) if n else math.nan
    std = float(values.std(ddof=1)) if n > 1 else 0.0
    half = Z95 * std / math.sqrt(n) if n else math.nan
    return {"mean": mean, "std": std, "low": mean - half, "high": mean + half}


def _rate(flags: np.ndarray) -> dict:
    k, n = int(np.count_nonzero(flags)), len(flags)
    low, high = wilson(k, n)
    return {"rate": k / n if n else math.nan, "count": k, "low": low, "high": high}


def _figures(ev: Evaluation, rows: np.ndarray) -> dict:
    """The figures of the episodes in ``rows`` (bool [N])."""
    out = {"episodes": int(np.count_nonzero(rows))}
    if ev.has_success:
        out["success_once"] = _rate(ev.success_once[rows])
        out["success_at_end"] = _rate(ev.success_at_end[rows])
    out["return"] = mean_interval(ev.returns[rows])
    out["length"] = mean_interval(ev.lengths[rows].astype(np.float64))
    return out


def _components(name: str, values: np.ndarray):
    """``(label, column)`` for each scalar component of a parameter's drawn values [N, ...]."""
    flat = values.reshape(len(values), -1)
    if flat.shape[1] == 1:
        yield name, flat[:, 0]
        return
    for k in range(flat.shape[1]):
        yield f"{name}[{k}]", flat[:, k]


def _bins(column: np.ndarray):
    """``(low, high, rows)`` per bin of the drawn values: quartiles, fewer where values repeat (a palette index)."""
    edges = np.unique(np.quantile(column, np.linspace(0.0, 1.0, BINS + 1)))
    if len(edges) < 2:
        yield float(column.min()), float(column.max()), np.ones(len(column), bool)
        return
    index = np.clip(np.searchsorted(edges, column, side="right") - 1, 0, len(edges) - 2)
    for b in range(len(edges) - 1):
        rows = index == b
        if rows.any():
            yield float(edges[b]), float(edges[b + 1]), rows


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


__all__ = ["Evaluation", "evaluate", "mean_interval", "wilson"]
