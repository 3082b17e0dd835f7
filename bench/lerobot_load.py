"""LeRobot's own loading of a LeRobot v3.0 dataset, timed: run by bench/frames.py in the interpreter where LeRobot is
installed (a separate virtual environment; this file imports nothing of forge_gpu).

python bench/lerobot_load.py ROOT --history 2 --horizon 4 --batch 256 --batches 3 --seed 0

Shuffled windows as a training loop asks for them: ``LeRobotDataset(root=ROOT, delta_timestamps=...)`` with the
camera at ``history`` frames (t-(history-1)/fps .. t) and the action at ``horizon`` frames (t .. t+(horizon-1)/fps),
``batch`` random indices per batch, each ``dataset[i]`` (what a DataLoader without workers does), after one warm-up
batch. Prints one JSON line: windows, seconds, windows_per_s, the image batch's shape, lerobot's version.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--history", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=4)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default=None, help="LeRobot's video_backend (default: its own choice)")
    args = parser.parse_args()
    import lerobot
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata("local/forge", root=args.root)
    dt = 1.0 / meta.fps
    cameras = list(meta.camera_keys)
    delta = {key: [-k * dt for k in range(args.history - 1, -1, -1)] for key in cameras}
    delta["action"] = [k * dt for k in range(args.horizon)]
    dataset = LeRobotDataset("local/forge", root=args.root, delta_timestamps=delta, video_backend=args.backend)
    rng = np.random.default_rng(args.seed)

    def batch() -> dict:
        items = [dataset[int(i)] for i in rng.integers(0, len(dataset), args.batch)]
        return {key: torch.stack([item[key] for item in items]) for key in (*cameras, "action")}

    warm = batch()
    start = time.perf_counter()
    for _ in range(args.batches):
        batch()
    seconds = time.perf_counter() - start
    windows = args.batches * args.batch
    print(
        json.dumps(
            {
                "windows": windows,
                "seconds": seconds,
                "windows_per_s": windows / seconds,
                "image_shape": list(warm[cameras[0]].shape) if cameras else None,
                "frames": len(dataset),
                "video_backend": backend(dataset),
                "lerobot": lerobot.__version__,
            }
        )
    )


def backend(dataset) -> str | None:
    """The video backend the dataset decodes with: its ``video_backend`` attribute up to LeRobot 0.5, kept private
    (``_video_backend``) from 0.6."""
    for name in ("video_backend", "_video_backend"):
        if isinstance(getattr(dataset, name, None), str):
            return getattr(dataset, name)
    return None


if __name__ == "__main__":
    main()
