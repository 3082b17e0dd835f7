"""An evaluation's figures: :class:`Evaluation` (one row per episode index, the run's figures), success rates with
95% Wilson intervals, means with normal intervals, breakdowns by instruction and by each randomized parameter's
quartile bins, and the summary ``forge-gpu evaluate`` prints. numpy alone."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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


def summary_lines(metrics: dict, result: Evaluation, make_seconds: float = 0.0) -> list[str]:
    """What ``forge-gpu evaluate`` prints: the figures with their 95% intervals, then each breakdown, one row per
    group; ``make_seconds``: building the env and the policy, counted in the warm-up."""

    def interval(figure: dict, scale: float = 1.0, unit: str = "") -> str:
        value = figure["rate"] if "rate" in figure else figure["mean"]
        return f"{value * scale:.1f}{unit}  [{figure['low'] * scale:.1f}, {figure['high'] * scale:.1f}]"

    def figures(entry: dict) -> str:
        parts = []
        if "success_at_end" in entry:
            parts.append(f"success {interval(entry['success_at_end'], 100.0, '%')}")
        parts.append(f"return {interval(entry['return'])}")
        parts.append(f"length {interval(entry['length'])}")
        return "  ".join(parts)

    rows = [("episodes", str(metrics["n_episodes"]))]
    if result.has_success:
        rows.append(("success once", interval(metrics["success_once"], 100.0, "%")))
        rows.append(("success at end", interval(metrics["success_at_end"], 100.0, "%")))
    rows += [
        ("return", interval(metrics["return"])),
        ("max reward", f"{metrics['avg_max_reward']:.3f}"),
        ("length", interval(metrics["length"])),
        ("env steps", str(result.env_steps)),
        ("env-steps/s", f"{result.env_steps_per_second:,.0f}"),
        ("step", result.step_mode),
        ("seconds", f"{result.seconds:.1f}"),
        ("warm-up seconds", f"{make_seconds + result.warmup_seconds:.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{key:<{width}}  {value}" for key, value in rows]
    lines.append("(95% intervals: Wilson for the rates, normal for the means)")
    for text, entry in metrics["by_instruction"].items():
        lines.append(f"instruction {text!r} ({entry['episodes']}): {figures(entry)}")
    for name, bins in metrics["by_param"].items():
        for b in bins:
            lines.append(f"{name} in [{b['low']:.4g}, {b['high']:.4g}] ({b['episodes']}): {figures(b)}")
    return lines
