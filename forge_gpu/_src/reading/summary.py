"""What a report says of a run or a dataset, gathered in one read: each run's identity (from its run.json and its
files), every episode's length, return, success, instruction and params (from the episodes' transition columns
alone: no image is decoded), and a bounded gallery of episodes read whole. Used by :mod:`report` and
:mod:`view`; numpy and the reader.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from forge_gpu._src.core.dataset import is_dataset, run_directories
from forge_gpu._src.core.episode import EpisodeReadOptions
from forge_gpu._src.core.frames import take_rows
from forge_gpu._src.core.rules import episode_success
from forge_gpu._src.formats.registry import format_of
from forge_gpu._src.reading.inspection import _checksums, _statistics, success_scope
from forge_gpu._src.reading.runs import open_run

#: The gallery's kinds, in the order they are drawn, and how many of each by default.
GALLERY_KINDS = ("best", "worst", "failed", "random")
GALLERY_EACH = 2


def run_identity(run) -> dict:
    """What a report says a run is: task, config, seed, device, packages, status, format and size on disk."""
    manifest = run.manifest
    config = manifest.get("config", {})
    files = [f for f in Path(run.directory).iterdir() if f.is_file()]
    fmt = format_of(manifest)
    return {
        "directory": run.directory,
        "task": manifest["task"],
        "run_id": manifest["run_id"],
        "status": manifest["status"],
        "format": fmt.name,
        "layout_version": manifest.get("layout_version"),
        "seed": manifest["seed"],
        "device": config.get("device"),
        "num_envs": config.get("num_envs"),
        "max_steps": config.get("max_steps"),
        "step_mode": manifest.get("step_mode"),
        "transport": manifest.get("transport"),
        "recorder": manifest.get("recorder", {}),
        "python": manifest.get("python"),
        "packages": manifest.get("packages", {}),
        "config": config,
        "scene": manifest.get("scene"),
        "checksums": _checksums(fmt.name, manifest),
        "files": len(files),
        "bytes_on_disk": sum(f.stat().st_size for f in files),
        "episodes": len(run),
        "incomplete_episodes": len(manifest.get("incomplete_episodes", [])),
        "success_scope": success_scope(manifest, len(run)),
        "bytes_written": manifest.get("bytes_written"),
        "stall_seconds": manifest.get("stall_seconds"),
        "progress": manifest.get("progress"),
        "has_success": bool(manifest["env_spec"].get("has_success")),
        "control_dt": manifest["env_spec"].get("control_dt"),
        "params": manifest["env_spec"].get("params", {}),
    }


def gather(path: str | os.PathLike) -> dict:
    """Every run of ``path`` (a run directory or a dataset root): ``runs`` (their :func:`run_identity`), ``readers``
    (each opened run), ``statistics`` (stored, merged over a dataset; None where a run has none) and ``episodes``: per
    published episode, in reading order, ``run`` (its run's index), ``k`` (its index in its run), ``env_id``,
    ``episode_id``, ``steps``, ``return``, ``success`` (:func:`episode_figures`), ``instruction`` (a list of str) and
    ``params`` (name -> [episodes, ...], the names every run has); and ``has_success`` (any run's task has success).
    One read of the runs' bookkeeping and transition columns; ValueError for a damaged run."""
    path = os.fspath(path)
    runs, readers, columns = [], [], {k: [] for k in ("run", "k", "env_id", "episode_id", "steps", "return", "success")}
    instructions: list[str] = []
    drawn_by_run: list[dict[str, np.ndarray]] = []
    for index, run_dir in enumerate(run_directories(path)):
        run = open_run(run_dir)
        identity = run_identity(run)
        figures = episode_figures(run)
        identity["transitions"] = int(figures["steps"].sum())
        runs.append(identity)
        readers.append(run)
        n = figures["steps"].size
        columns["run"].append(np.full(n, index))
        columns["k"].append(np.arange(n))
        for key in ("env_id", "episode_id", "steps", "return", "success"):
            columns[key].append(figures[key])
        instructions += run.instructions()  # each episode's, in reading order, from the index
        if n:
            drawn_by_run.append(figures["params"])
    episodes = {key: np.concatenate(parts) if parts else np.zeros(0) for key, parts in columns.items()}
    episodes["instruction"] = instructions
    # Across a dataset, the params every run with episodes has (each run's drawn values, in reading order).
    common = set.intersection(*(set(d) for d in drawn_by_run)) if drawn_by_run else set()
    episodes["params"] = {name: np.concatenate([d[name] for d in drawn_by_run]) for name in sorted(common)}
    episodes["has_success"] = any(r["has_success"] for r in runs)
    return {
        "path": path,
        "kind": "dataset" if is_dataset(path) else "run",
        "runs": runs,
        "readers": readers,
        "episodes": episodes,
        "statistics": _statistics(path),
    }


def episode_figures(run) -> dict:
    """Per episode of ``run`` (a reader), in reading order: ``env_id``, ``episode_id``, ``steps``, ``return`` (the
    float64 sum of its rewards), ``success`` (:func:`core.rules.episode_success`; False for a task without success)
    and ``params`` (name -> [episodes, ...] float64). Whole-column, from the run's frame table without observation
    fields: its bookkeeping and transition columns are read (and checked) once, nothing is done per episode."""
    n = len(run)
    empty = np.zeros(0, np.int64)
    if not n:
        return {
            "env_id": empty,
            "episode_id": empty,
            "steps": empty,
            "return": np.zeros(0),
            "success": empty > 0,
            "params": {},
        }
    _, blocks, entries = run.frame_table(list(range(n)), EpisodeReadOptions(observation_keys=[]))
    steps, first, stride = entries["steps"], entries["first_row"], entries["stride"]
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(steps, out=starts[1:])
    j = np.arange(starts[-1], dtype=np.int64) - np.repeat(starts[:-1], steps) + 1  # transitions 1..T
    rows = np.repeat(first, steps) + j * np.repeat(stride, steps)
    transitions = [(start, {"reward": c["reward"], "terminated": c["terminated"]}) for start, c in blocks]
    reward = take_rows(transitions, rows)["reward"].astype(np.float64)
    success = episode_success(run.manifest["env_spec"], take_rows(transitions, first + steps * stride)["terminated"])
    return {
        "env_id": entries["env_id"],
        "episode_id": entries["episode_id"],
        "steps": steps,
        "return": np.add.reduceat(reward, starts[:-1]),
        "success": np.zeros(n, bool) if success is None else success,
        "params": {k[len("params/") :]: v.astype(np.float64) for k, v in entries.items() if k.startswith("params/")},
    }


def pick_gallery(episodes: dict, *, each: int = GALLERY_EACH, seed: int = 0) -> list[tuple[str, int]]:
    """Which episodes a gallery draws: ``(kind, index into episodes)``, up to ``each`` of every kind of
    :data:`GALLERY_KINDS` (best and worst by return, failed: of a task with success, episodes that did not succeed,
    chosen at random; random: of the others), no episode twice."""
    returns = episodes["return"]
    n = returns.size
    rng = np.random.default_rng(seed)
    chosen: list[tuple[str, int]] = []
    taken: set[int] = set()

    def take(kind: str, candidates) -> None:
        for i in candidates:
            if sum(k == kind for k, _ in chosen) >= each:
                return
            if int(i) not in taken:
                taken.add(int(i))
                chosen.append((kind, int(i)))

    order = np.argsort(-returns, kind="stable")
    take("best", order)
    take("worst", order[::-1])
    if episodes["has_success"]:
        take("failed", rng.permutation(np.flatnonzero(~episodes["success"])))
    take("random", rng.permutation(n))
    return chosen


def read_gallery(facts: dict, chosen: list[tuple[str, int]]) -> list[dict]:
    """The chosen episodes (of :func:`gather`'s ``facts``) read whole (every observation field), each ``{"kind",
    "index", "episode", "run"}`` (``run``: its run's identity); one pass over each run's blocks, in reading order."""
    episodes = facts["episodes"]
    out = []
    by_run: dict[int, list[tuple[str, int]]] = {}
    for kind, i in chosen:
        by_run.setdefault(int(episodes["run"][i]), []).append((kind, i))
    for r, picks in sorted(by_run.items()):
        picks.sort(key=lambda pick: int(episodes["k"][pick[1]]))
        ks = [int(episodes["k"][i]) for _, i in picks]
        for (kind, i), episode in zip(picks, facts["readers"][r].read(ks, EpisodeReadOptions()), strict=True):
            out.append({"kind": kind, "index": i, "episode": episode, "run": facts["runs"][r]})
    order = {pick: n for n, pick in enumerate(chosen)}
    return sorted(out, key=lambda g: order[(g["kind"], g["index"])])
