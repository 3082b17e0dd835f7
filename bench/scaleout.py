"""Scale-out: env-steps per second of a recorded collection with 1, 2 and 4 Ray workers on one machine.

Each worker runs the whole single-device pipeline (step, host snapshot, recorder, writers) into its own
run directory. The rate of K workers is all their env steps over the wall time from the first worker's
start of collection to the last one's end (Ray and actor start-up excluded); the scaling efficiency is
rate_K / (K * rate_1). On the CPU every worker steps on the same cores, so efficiency above
cores / K is not possible; on a multi-GPU node each worker gets its own GPU.

python bench/scaleout.py                 # 1, 2, 4 workers x 256 envs, 200 steps each, on the CPU
python bench/scaleout.py --smoke         # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from common import machine, save, table


def measure(task: str, workers: int, num_envs: int, steps: int, device: str, max_steps: int) -> dict:
    from forge_gpu.recording import collect_distributed

    with tempfile.TemporaryDirectory(prefix="forge-scaleout-") as tmp:
        summary = collect_distributed(
            task,
            Path(tmp) / "data",
            workers=workers,
            num_envs=num_envs,
            steps=steps,
            device=device,
            overrides={"max_steps": max_steps},
        )
    failed = [r["error"] for r in summary.failed]
    if failed:
        raise RuntimeError(f"{workers} workers: {failed}")
    return {
        "task": task,
        "device": device,
        "workers": workers,
        "num_envs": num_envs,
        "steps": steps,
        "env_steps": summary.env_steps,
        "episodes": summary.episodes,
        "seconds": summary.seconds,
        "env_steps_per_s": summary.env_steps / summary.seconds,  # over the wall time: how the workers overlap
        "per_worker_env_steps_per_s": [r["env_steps"] / r["seconds"] for r in summary.runs],
        "stall_fraction": summary.stall_fraction,
    }


def main(argv=None) -> int:
    import os

    import ray
    import warp as wp

    wp.config.quiet = True
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="cartpole")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda to give each worker a GPU")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--envs", type=int, default=256, help="envs per worker")
    parser.add_argument("--steps", type=int, default=200, help="step calls per worker")
    parser.add_argument("--max-steps", type=int, default=50, help="episode length cap")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.workers, args.envs, args.steps, args.max_steps = [1, 2], 4, 20, 10
    device = None if args.device == "cuda" else args.device
    # One local Ray for every measurement; each gets fresh actors.
    import logging

    ray.init(
        num_cpus=max(max(args.workers), os.cpu_count() or 1),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    try:
        measure(args.task, 1, 4, 5, device, args.max_steps)  # warm the kernel cache
        rows = [measure(args.task, k, args.envs, args.steps, device, args.max_steps) for k in args.workers]
    finally:
        ray.shutdown()
    base = next((r["env_steps_per_s"] for r in rows if r["workers"] == 1), None)
    for r in rows:
        r["efficiency"] = r["env_steps_per_s"] / (r["workers"] * base) if base else None
    md = "## Scale-out (Ray workers on one machine)\n\n" + table(
        rows, ["task", "device", "workers", "num_envs", "env_steps", "seconds", "env_steps_per_s", "efficiency"]
    )
    md += f"\n\n{os.cpu_count()} CPU cores; num_envs and steps are per worker."
    path = save("scaleout", {"machine": machine(), "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
