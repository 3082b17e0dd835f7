"""Export figures: export rates, sizes on disk, and what the normalization statistics cost.

python bench/export.py                   # CPU sizes, a few minutes on 2 cores
python bench/export.py --smoke           # seconds-long check that every figure is produced

  rate_TASK_CODEC_P   a run of TASK recorded with ``collect`` (random policy, packed, uncompressed; cartpole
                      256 envs, reach 64 envs at 64x64 RGB-D), exported to LeRobot v3.0 with CODEC (h264:
                      libx264 CRF 23; av1: SVT-AV1 CRF 35 preset 8; both GOP 2, yuv420p) by P processes; frames/s =
                      LeRobot frames (transitions) / the export's wall time, start to the published directory
                      (includes reading and checking the run and, for P > 1, starting the processes).
                      cartpole has no camera: its export writes no video, so its codec rows differ by noise
                      only. image_mae: mean absolute error of every decoded frame against the recorded one,
                      in levels of 0..255 (reach only). rate_TASK_robomimic: the robomimic export, 1 process.
  size_*              one 256-env reach run at 64x64 RGB-D (expert policy, max_steps 50): bytes on disk of
                      its published episodes as a packed run uncompressed (raw) and ZSTD-compressed (both
                      written by ``convert_run`` from the recording, so both hold exactly the published
                      episodes), of the LeRobot exports (h264, av1; depth left out) and of the robomimic file
                      (RGB-D, obs and next_obs, gzip 4). vs_raw: bytes / raw bytes.
  stats_TASK          pipeline efficiency (``collect`` env-steps/s recording packed / ``collect`` without
                      recording, whole call, same steps) with statistics (the default) and without
                      (RecordingOptions(statistics=False)), alternated in ``rounds`` rounds; the medians.
                      cartpole 1024 envs random (~25-step episodes); reach 64 envs at 64x64 RGB-D.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
from common import fs_type, lerobot_video_frames, machine, save, section_args, table, tree_bytes  # noqa: E402

import forge_gpu  # noqa: E402
from forge_gpu.curation import convert_run  # noqa: E402
from forge_gpu.export import export_lerobot, export_robomimic  # noqa: E402
from forge_gpu.reading import read_episodes  # noqa: E402

FULL = {
    "rate": {"cartpole": (256, 400, None), "reach": (64, 160, 64), "processes": [1, 2]},
    "size": {"num_envs": 256, "steps": 110, "image_size": 64},
    "stats": {"cartpole": (1024, 300), "reach": (64, 60), "rounds": 3},
    "max_steps": 50,
}
SMOKE = {
    "rate": {"cartpole": (16, 30, None), "reach": (4, 24, 32), "processes": [1, 2]},
    "size": {"num_envs": 4, "steps": 24, "image_size": 32},
    "stats": {"cartpole": (16, 20), "reach": (4, 6), "rounds": 1},
    "max_steps": 8,
}
MAX_STEPS = FULL["max_steps"]  # set from the sizes in main


def make_env(task: str, num_envs: int, image_size: int | None):
    params = {} if image_size is None else {"params.image_size": image_size}
    return forge_gpu.sim.make(task, num_envs=num_envs, device="cpu", seed=0, max_steps=MAX_STEPS, **params)


def record(task: str, num_envs: int, steps: int, image_size: int | None, out: str, policy: str = "random") -> str:
    env = make_env(task, num_envs, image_size)
    forge_gpu.recording.collect(env, forge_gpu.sim.make_policy(policy, env), out, steps=steps)
    return out


def image_mae(root: str, run: str) -> float:
    """Mean absolute error of every decoded frame of a LeRobot export against the run's frames."""
    episodes = list(read_episodes(run, options=forge_gpu.reading.EpisodeReadOptions(observation_keys=["rgb"])))
    frames = lerobot_video_frames(root, [e.steps for e in episodes])
    errors = [np.abs(f.astype(np.float64) - e.obs["rgb"]).mean() for f, e in zip(frames, episodes, strict=True)]
    return float(np.mean(errors))


def rate(sizes: dict, parent: str) -> list[dict]:
    rows = []
    for task in ("cartpole", "reach"):
        num_envs, steps, image_size = sizes[task]
        run = record(task, num_envs, steps, image_size, os.path.join(parent, f"rate-{task}"))
        for codec in ("h264", "av1"):
            for processes in sizes["processes"]:
                out = os.path.join(parent, f"rate-{task}-{codec}-{processes}")
                report = export_lerobot(run, out, codec=codec, workers=processes)
                row = {
                    "figure": f"rate_{task}_{codec}_{processes}",
                    "frames": report["frames"],
                    "episodes": report["episodes"],
                    "seconds": report["seconds"],
                    "frames_per_s": report["frames_per_s"],
                    "mb": report["bytes"] / 1e6,
                }
                if image_size is not None:
                    row["image_mae"] = image_mae(out, run)
                rows.append(row)
                print(table([row], list(row)), flush=True)
                shutil.rmtree(out)
        out = os.path.join(parent, f"rate-{task}.hdf5")
        report = export_robomimic(run, out)
        row = {
            "figure": f"rate_{task}_robomimic",
            "frames": report["frames"],
            "episodes": report["episodes"],
            "seconds": report["seconds"],
            "frames_per_s": report["frames_per_s"],
            "mb": report["bytes"] / 1e6,
        }
        rows.append(row)
        print(table([row], list(row)), flush=True)
        os.remove(out)
        shutil.rmtree(run)
    return rows


def size(sizes: dict, parent: str) -> list[dict]:
    recorded = record(
        "reach", sizes["num_envs"], sizes["steps"], sizes["image_size"], os.path.join(parent, "size-rec"), "expert"
    )
    outputs = {
        "size_forge_gpu_raw": lambda out: convert_run(recorded, out, to="packed", compression="none"),
        "size_forge_gpu_zstd": lambda out: convert_run(recorded, out, to="packed", compression="zstd"),
        "size_lerobot_h264": lambda out: export_lerobot(recorded, out, codec="h264"),
        "size_lerobot_av1": lambda out: export_lerobot(recorded, out, codec="av1"),
        "size_robomimic": lambda out: export_robomimic(recorded, out + ".hdf5"),
    }
    episodes = sum(
        1 for _ in read_episodes(recorded, options=forge_gpu.reading.EpisodeReadOptions(observation_keys=[]))
    )
    rows, raw = [], None
    for name, write in outputs.items():
        out = os.path.join(parent, name)
        write(out)
        path = out + ".hdf5" if name == "size_robomimic" else out
        nbytes = tree_bytes(path)
        raw = raw or nbytes
        rows.append({"figure": name, "episodes": episodes, "mb": nbytes / 1e6, "vs_raw": nbytes / raw})
        print(table([rows[-1]], list(rows[-1])), flush=True)
        (os.remove if os.path.isfile(path) else shutil.rmtree)(path)
    shutil.rmtree(recorded)
    return rows


def stats_cost(sizes: dict, parent: str) -> list[dict]:
    """Pipeline efficiency with and without statistics (``RecordingOptions.statistics``)."""
    rows = []
    for task, image_size in (("cartpole", None), ("reach", 64 if sizes["reach"][0] > 8 else 32)):
        num_envs, steps = sizes[task]
        env = make_env(task, num_envs, image_size)
        policy = forge_gpu.sim.make_policy("random", env)
        forge_gpu.recording.collect(env, policy, None, steps=3)  # compile and warm up
        figures = {"with": [], "without": []}
        for k in range(sizes["rounds"]):
            for mode in ("with", "without"):
                bare = forge_gpu.recording.collect(env, policy, None, steps=steps)
                os.sync()
                out = os.path.join(parent, f"stats-{task}-{mode}-{k}")
                options = forge_gpu.recording.RecordingOptions(statistics=mode == "with")
                recorded = forge_gpu.recording.collect(env, policy, out, steps=steps, options=options)
                figures[mode].append(recorded.env_steps_per_second / bare.env_steps_per_second)
                shutil.rmtree(out)
        row = {
            "figure": f"stats_{task}",
            "num_envs": num_envs,
            "steps": steps,
            "efficiency_with_stats": float(np.median(figures["with"])),
            "efficiency_without_stats": float(np.median(figures["without"])),
            "with_runs": " ".join(f"{v:.3f}" for v in figures["with"]),
            "without_runs": " ".join(f"{v:.3f}" for v in figures["without"]),
        }
        rows.append(row)
        print(table([row], list(row)), flush=True)
    return rows


SECTIONS = {"rate": rate, "size": size, "stats": stats_cost}


def main(argv=None) -> int:
    args = section_args(__doc__, SECTIONS, argv)
    import av

    encoders = [c for c in ("libaom-av1", "libsvtav1", "librav1e") if c in av.codecs_available]
    os.makedirs(args.record_dir, exist_ok=True)
    parent = tempfile.mkdtemp(prefix="export-", dir=args.record_dir)
    sizes = SMOKE if args.smoke else FULL
    global MAX_STEPS
    MAX_STEPS = sizes["max_steps"]
    import warp as wp

    wp.config.quiet = True
    rows = []
    start = time.perf_counter()
    try:
        for name in args.only or list(SECTIONS):
            rows += SECTIONS[name](sizes[name], parent)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    heading = (
        f"export figures, runs on {fs_type(args.record_dir)} ({args.record_dir}); PyAV {av.__version__}, "
        f"AV1 encoders in this build: {', '.join(encoders) or 'none'}; {time.perf_counter() - start:.0f} s"
    )
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    markdown = heading + "\n\n" + "\n\n".join(table(group, list(columns)) for columns, group in groups.items())
    payload = {
        "machine": machine(),
        "file_system": fs_type(args.record_dir),
        "av1_encoders": encoders,
        "smoke": args.smoke,
        "rows": rows,
    }
    save("export", payload, markdown, Path(args.out) if args.out else None)
    print(markdown)
    print(json.dumps(payload["machine"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
