"""Report figures: how long ``forge_gpu.reading.report`` takes on a large run and how large its page
is; and the screenshot of a real run's report that docs/ shows.

python bench/report.py                    # a >= 1 GB camera run and a many-episode run; several minutes on 2 cores
python bench/report.py --smoke            # seconds-long check that every figure is produced
python bench/report.py --screenshot reach # docs/report-reach.png from a small real run collected on this machine
                                          # (also push, lift, stack and place: SCREENSHOT_RUNS)

  camera     a packed run written by PackedRecorder from synthetic batches with reach's layout (64x64 RGB-D,
             proprio [14], action [4], state body_q [5, 7], params mass_scale and target_color, has_success), 64 envs,
             ~50-step episodes, uncompressed, >= 1 GB. The images are a drawn scene (a gradient and a moving square),
             not noise, so that the gallery's WebP sizes are those of real frames.
  episodes   a packed run of many short episodes: cartpole's layout (proprio [4], action [1]), 4096 envs, ~25-step
             episodes: what the per-episode part of the report costs.
  Each: report_s (wall time of forge_gpu.reading.report, warm page cache, the median of ``repeats``), cold_report_s (the
  same after the run's files are dropped from the page cache with POSIX_FADV_DONTNEED), html_kb (the page),
  run_mb, episodes, gallery (episodes drawn), episodes_per_s = episodes / report_s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
from common import fs_type, save, table, tool  # noqa: E402

import forge_gpu  # noqa: E402
from forge_gpu.recording import PackedRecorder  # noqa: E402
from forge_gpu.testing import synthetic_description  # noqa: E402

FULL = {
    "camera": {"num_envs": 64, "target_bytes": 1 << 30, "image": 64, "end_prob": 0.02, "max_steps": 100},
    "episodes": {"num_envs": 4096, "target_bytes": 400 << 20, "image": None, "end_prob": 0.04, "max_steps": 200},
    "repeats": 3,
}
SMOKE = {
    "camera": {"num_envs": 8, "target_bytes": 4 << 20, "image": 16, "end_prob": 0.05, "max_steps": 40},
    "episodes": {"num_envs": 64, "target_bytes": 1 << 20, "image": None, "end_prob": 0.04, "max_steps": 60},
    "repeats": 1,
}


def layout(num_envs: int, image: int | None, max_steps: int):
    """The RunDescription of a synthetic run: reach's layout with a camera of ``image`` pixels, else cartpole's."""
    camera = image is not None
    env = synthetic_description(num_envs=num_envs, max_steps=max_steps, proprio_dim=14 if camera else 4,
                   action_dim=4 if camera else 1, images=camera, params=camera)  # fmt: skip
    spec = env.spec
    if camera:
        spec["observation"]["rgb"]["shape"] = [image, image, 3]
        spec["observation"]["depth"]["shape"] = [image, image]
        spec["state"] = {"body_q": {"shape": [5, 7], "dtype": "float32"}}
        spec["has_success"] = True
        spec["instruction"] = "move the gripper to the red target"
    return env


def scene(step: np.ndarray, env_ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """RGB-D frames [N, size, size] of a drawn scene: a gradient, and a red square moving with the step."""
    n = step.size
    axis = np.arange(size, dtype=np.float32)
    rgb = np.empty((n, size, size, 3), np.uint8)
    rgb[..., 0] = (axis[None, :, None] * 160 / size + 40).astype(np.uint8)
    rgb[..., 1] = (axis[None, None, :] * 120 / size + 60).astype(np.uint8)
    rgb[..., 2] = 150
    cx = ((env_ids * 7 + step * 2) % (size - 8)).astype(np.int64)
    cy = ((env_ids * 3 + step) % (size - 8)).astype(np.int64)
    rows = np.abs(axis[None, :, None] - cy[:, None, None] - 4) < 4
    inside = rows & (np.abs(axis[None, None, :] - cx[:, None, None] - 4) < 4)
    rgb[inside] = (220, 30, 30)
    depth = np.broadcast_to((1.5 - axis[None, :, None] / size), (n, size, size)).astype(np.float32).copy()
    depth[inside] = 0.6
    return rgb, depth


def write_run(directory: str, sizes: dict, seed: int = 0) -> dict:
    """Record a synthetic run of at least ``target_bytes`` (whole-array batches with the env's step semantics)."""
    rng = np.random.default_rng(seed)
    n, image = sizes["num_envs"], sizes["image"]
    env = layout(n, image, sizes["max_steps"])
    recorder = PackedRecorder(directory, env)
    episode, step = np.zeros(n, np.int32), np.zeros(n, np.int32)
    ended = np.ones(n, bool)
    mass = np.ones(n, np.float32)
    color = np.ones((n, 3), np.float32)
    k = 0
    while recorder.bytes_written < sizes["target_bytes"] or k < 2:
        active = ~ended if k else np.zeros(n, bool)
        fresh = ~active
        episode[ended & (k > 0)] += 1
        step[:] = np.where(active, step + 1, 0)
        mass[fresh] = rng.uniform(0.5, 2.0, int(fresh.sum()))
        color[fresh] = rng.uniform(0.5, 1.0, (int(fresh.sum()), 3))
        # Success is likelier with a light arm: the binned success rate has something to show.
        terminated = active & (rng.random(n) < sizes["end_prob"] * (2.5 - mass))
        truncated = active & ~terminated & (step == sizes["max_steps"])
        obs = {
            "env_id": np.arange(n, dtype=np.int32),
            "episode_id": episode.copy(),
            "step_id": step.copy(),
            "time": (step * np.float32(0.02)).astype(np.float32),
            "proprio": rng.normal(size=(n, env.spec["observation"]["proprio"]["shape"][0])).astype(np.float32),
        }
        action = np.where(active[:, None], rng.uniform(-1, 1, (n, env.spec["action_shape"][0])), 0).astype(np.float32)
        reward = np.where(active, rng.normal(-0.1, 0.3, n) + terminated, 0).astype(np.float32)
        result = types.SimpleNamespace(reward=reward, terminated=terminated, truncated=truncated)
        result.info = {"active": active, "executed_action": action}
        if image is not None:
            obs["rgb"], obs["depth"] = scene(step, obs["env_id"], image)
            result.state = {"body_q": rng.normal(size=(n, 5, 7)).astype(np.float32)}
            result.params = {"mass_scale": mass.copy(), "target_color": color.copy()}
        recorder.append(obs, result)
        ended = terminated | truncated
        k += 1
    recorder.close()
    return {"episodes": recorder.completed_episodes, "steps": k}


def uncache(paths: list[str]) -> None:
    """Drop ``paths`` from the page cache: each synced (its own pages only: a global sync would wait for every other
    process's writes), then POSIX_FADV_DONTNEED."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def figure(name: str, sizes: dict, parent: str, repeats: int) -> dict:
    directory = os.path.join(parent, name)
    made = write_run(directory, sizes)
    paths = sorted(str(p) for p in Path(directory).iterdir())
    row = {"run": name, "run_mb": sum(os.path.getsize(p) for p in paths) / 1e6, "episodes": made["episodes"]}
    out = os.path.join(parent, f"{name}.html")
    times = []
    for _ in range(repeats):
        result = forge_gpu.reading.report(directory, out)
        times.append(result["seconds"])
    uncache(paths)
    cold = forge_gpu.reading.report(directory, out)
    row.update(report_s=float(np.median(times)), cold_report_s=cold["seconds"], html_kb=result["bytes"] / 1e3)
    row.update(gallery=result["gallery"], episodes_per_s=made["episodes"] / row["report_s"])
    shutil.rmtree(directory)
    os.remove(out)
    return row


def screenshot(task: str, out_dir: Path, run_spec: dict, envs: int, episodes: int) -> Path:
    """Collect a small real run of ``task`` on this machine's default device, report it, and keep the browser's
    screenshot as ``out_dir/report-<task>.png`` (1200 pixels wide): the top of the page, or with ``run_spec["view"]``
    "gallery" its title and gallery alone (the page's other sections hidden by a style added to a copy of it), the
    white below the last card cut off."""
    browser = tool("browser")  # tools/browser.py: headless Chromium
    from PIL import Image

    work = tempfile.mkdtemp(prefix=f"report-{task}-")
    try:
        env = forge_gpu.sim.make(task, num_envs=envs, seed=0, **run_spec["overrides"])
        run = f"{work}/{task}-demo"
        policy = forge_gpu.sim.make_policy(run_spec["policy"], env)
        forge_gpu.recording.collect(env, policy, run, episodes=episodes)
        side = {"side": run_spec["side"]} if "side" in run_spec else {}  # else the report's default
        result = forge_gpu.reading.report(run, f"{work}/report.html", **side)
        shown, size = f"{work}/report.html", (1200, 3400)
        if run_spec.get("view") == "gallery":
            text = Path(shown).read_text().replace("</style>", "section:not(#gallery){display:none}</style>", 1)
            shown, size = f"{work}/gallery.html", (1200, 2400)
            Path(shown).write_text(text)
        page = browser.load(shown, screenshot=f"{work}/shot.png", size=size)
        if not page.checked or page.errors or page.console or set(page.images.values()) - {"yes"}:
            raise RuntimeError(f"the page did not render cleanly: {page.errors} {page.console} {page.images}")
        target = out_dir / f"report-{task}.png"
        with Image.open(f"{work}/shot.png") as shot:  # 256 colours: a third of the bytes, as readable
            shot = shot.convert("RGB")
            if run_spec.get("view") == "gallery":
                ink = np.flatnonzero((np.asarray(shot.convert("L")) < 250).any(axis=1))
                shot = shot.crop((0, 0, shot.width, min(shot.height, int(ink[-1]) + 16)))
            shot.quantize(256, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)
        print(f"{task}: {result['episodes']} episodes, page {result['bytes']:,} bytes, screenshot {target}")
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: The small real runs the screenshots are made of, per task: config overrides, policy, envs and episodes; optionally
#: the gallery frames' side (``forge_gpu.reading.report``'s ``side``) and ``view = "gallery"`` (the shot shows the
#: page's gallery). reach and push are randomized (so that the page's randomization section has values to bin;
#: reach's max_steps short enough that some expert episodes fail). The grasping tasks (lift, stack, place: their
#: default configs, which draw the objects per episode) record both RGB-D cameras at 128 px, shown at 128 px in the
#: gallery, and their shots show the gallery: each animation opens on its episode's frame of highest reward (lift's
#: cube held up; stack's and place's cube set down on its place, still in the gripper).
GRASP = {
    "overrides": {"params.image_size": 128},
    "policy": "expert",
    "envs": 4,
    "episodes": 8,
    "side": 128,
    "view": "gallery",
}
SCREENSHOT_RUNS = {
    "reach": {
        "overrides": {"max_steps": 40, "randomize.mass_scale": [0.5, 2.0],
                      "randomize.target_color": {"low": [0.6, 0.0, 0.0], "high": [1.0, 0.3, 0.3]}},
        "policy": "expert", "envs": 8, "episodes": 16,
    },
    "push": {"overrides": {}, "policy": "expert", "envs": 8, "episodes": 16},
    "lift": GRASP,
    "stack": GRASP,
    "place": GRASP,
}  # fmt: skip
DEFAULT_RUN = {"overrides": {}, "policy": "expert", "envs": 8, "episodes": 16}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that every figure is produced")
    parser.add_argument("--record-dir", default=str(HERE / "results" / "tmp"), help="where runs are written")
    parser.add_argument("--out", default=None, help="output folder (default bench/results)")
    parser.add_argument("--screenshot", metavar="TASK", help="write docs/report-TASK.png from a small real run")
    parser.add_argument("--envs", type=int, default=None, help="--screenshot: envs of the run (default: the task's)")
    parser.add_argument("--episodes", type=int, default=None, help="--screenshot: episodes (default: the task's)")
    args = parser.parse_args(argv)
    if args.screenshot:
        run = SCREENSHOT_RUNS.get(args.screenshot, DEFAULT_RUN)
        envs = args.envs if args.envs is not None else run["envs"]
        episodes = args.episodes if args.episodes is not None else run["episodes"]
        out_dir = Path(args.out) if args.out else HERE.parent / "docs"
        screenshot(args.screenshot, out_dir, run, envs, episodes)
        return 0
    sizes = SMOKE if args.smoke else FULL
    os.makedirs(args.record_dir, exist_ok=True)
    parent = tempfile.mkdtemp(prefix="report-", dir=args.record_dir)
    rows = []
    try:
        for name in ("camera", "episodes"):
            row = figure(name, sizes[name], parent, sizes["repeats"])
            print(table([row], list(row)), flush=True)
            rows.append(row)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    heading = f"report figures, runs on {fs_type(args.record_dir)} ({args.record_dir}), load {os.getloadavg()[0]:.2f}"
    markdown = heading + "\n\n" + table(rows, list(rows[0]))
    machine = {"cpu_count": os.cpu_count(), "load_average_1m": os.getloadavg()[0]}
    payload = {"machine": machine, "smoke": args.smoke, "rows": rows, "when": time.strftime("%Y-%m-%d %H:%M")}
    save("report", payload, markdown, Path(args.out) if args.out else None)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
