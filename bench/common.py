"""Shared helpers of the bench scripts (each imports them from here, none from another script): argument defaults,
timing, JSON and table output, the machine and its file system, sizes on disk, image error, one stepping rate."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def machine(*, gpu: bool = True) -> dict:
    """What the figures were measured on (``gpu``: and the GPU, asked of Warp; data-only benches skip it)."""
    info = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version()}
    if hasattr(os, "getloadavg"):
        info["load_average_1m"] = os.getloadavg()[0]  # other processes on a shared machine skew the figures
    if not gpu:
        return info
    import warp as wp

    if wp.get_cuda_device_count() > 0:
        info["gpu"] = wp.get_device("cuda:0").name
    return info


def timed(fn, *, min_seconds: float, min_reps: int = 3) -> list[float]:
    """Call ``fn()`` repeatedly for at least ``min_seconds`` and ``min_reps``; per-call seconds."""
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def summary_ms(times) -> dict:
    """Median, 95th percentile and mean of per-call ``times`` [s], in milliseconds."""

    t = np.asarray(times, dtype=np.float64) * 1e3
    return {"median_ms": float(np.median(t)), "p95_ms": float(np.percentile(t, 95)), "mean_ms": float(t.mean())}


def table(rows: list[dict], columns: list[str]) -> str:
    """A markdown table of ``rows`` (floats shown with 4 significant digits)."""

    def cell(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def save(name: str, payload: dict, markdown: str, out_dir: Path | None = None) -> Path:
    """Write ``<name>.json`` and ``<name>.md`` under ``bench/results`` (or ``out_dir``)."""
    out = Path(out_dir or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
    (out / f"{name}.md").write_text(markdown + "\n")
    return out / f"{name}.json"


def plot(rows: list[dict], *, x: str, y: str, series: str, panels: str, path: Path, ylabel: str, title: str) -> Path:
    """One log-log panel per value of ``rows[panels]``, one line per value of ``rows[series]``; a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panel_values = list(dict.fromkeys(r[panels] for r in rows))
    fig, axes = plt.subplots(1, len(panel_values), figsize=(5 * len(panel_values), 4), squeeze=False)
    for ax, panel in zip(axes[0], panel_values, strict=True):
        mine = [r for r in rows if r[panels] == panel]
        for name in dict.fromkeys(r[series] for r in mine):
            line = [r for r in mine if r[series] == name and r[y] > 0]
            if line:
                ax.plot([r[x] for r in line], [r[y] for r in line], marker="o", label=str(name))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.set_title(str(panel))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def parse_override(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` with VALUE a TOML value (``false``, ``128``, ``[1.0, 2.0]``) or else a plain string."""
    import tomllib

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected KEY=VALUE, e.g. params.render=false")
    try:
        return key, tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value


def add_set_option(parser: argparse.ArgumentParser, help: str) -> None:
    """The ``--set KEY=VALUE`` option (repeatable) of the bench scripts that make envs: ``args.overrides``, a list of
    (key, value) pairs."""
    parser.add_argument(
        "--set", dest="overrides", action="append", type=parse_override, default=[], metavar="KEY=VALUE", help=help
    )


def fs_type(path: str) -> str:
    """The file system type of ``path`` (from /proc/mounts; the longest matching mount point)."""
    path, best = os.path.realpath(path), ("", "unknown")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            mount, kind = line.split()[1], line.split()[2]
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best[0]):
                best = (mount, kind)
    except OSError:
        pass
    return best[1]


def tree_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def psnr(decoded: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per-frame PSNR [dB] of uint8 frames (peak 255); inf where a frame is exact."""
    error = (decoded.astype(np.float64) - reference.astype(np.float64)).reshape(len(reference), -1)
    mse = (error**2).mean(axis=1)
    with np.errstate(divide="ignore"):
        return 10 * np.log10(255.0**2 / mse)


def lerobot_video_frames(root: str, steps: list[int]) -> list[np.ndarray]:
    """The camera frames of each episode of the LeRobot export ``root`` (``steps``: each episode's frames, in the
    export's order), decoded with PyAV: one uint8 [T, H, W, 3] array per episode."""
    import av
    import pyarrow.parquet as pq

    meta = pq.read_table(os.path.join(root, "meta/episodes/chunk-000/file-000.parquet")).to_pylist()
    key = "observation.images.rgb"
    fps = json.loads(Path(root, "meta/info.json").read_text())["fps"]
    decoded, out = {}, []
    for m, count in zip(meta, steps, strict=True):
        path = os.path.join(
            root,
            f"videos/{key}/chunk-{m[f'videos/{key}/chunk_index']:03d}/file-{m[f'videos/{key}/file_index']:03d}.mp4",
        )
        if path not in decoded:
            with av.open(path) as container:
                decoded[path] = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        first = round(m[f"videos/{key}/from_timestamp"] * fps)
        out.append(decoded[path][first : first + count])
    return out


def measure_stepping(task: str, num_envs: int, device: str, seconds: float, policy_name: str, overrides=None) -> dict:
    """Median step time and env-steps/s of ``task`` at ``num_envs`` under ``policy_name`` (after 3 warm-up steps:
    compile, and on CUDA capture), for at least ``seconds``."""
    import warp as wp

    import forge_gpu

    env = forge_gpu.make(task, num_envs=num_envs, device=device, **(overrides or {}))
    policy = forge_gpu.make_policy(policy_name, env)
    env.reset()

    def one_step():
        env.step(policy(env.observation))
        wp.synchronize_device(env.device)

    for _ in range(3):  # compile and, on CUDA, capture the graph
        one_step()
    times = np.array(timed(one_step, min_seconds=seconds))
    return {
        "task": task,
        "num_envs": num_envs,
        "device": str(env.device),
        "policy": policy_name,
        "overrides": dict(overrides or {}),
        "steps": len(times),
        "median_step_ms": float(np.median(times) * 1e3),
        "env_steps_per_s": float(num_envs / np.median(times)),
    }
