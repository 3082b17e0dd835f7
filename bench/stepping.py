"""Env-steps per second against num_envs, per task, stepping only (no transport, no recording).

python bench/stepping.py                 # 64 .. 4096 envs on the CPU, up to 16384 on CUDA
python bench/stepping.py --smoke         # seconds-long check that every figure is produced
python bench/stepping.py --tasks reach --set params.render=false   # config overrides (TOML values)
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from common import add_set_option, machine, save, table, timed


def measure(task: str, num_envs: int, device: str, seconds: float, policy_name: str, overrides=None) -> dict:
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


def main(argv=None) -> int:
    import warp as wp

    import forge_gpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=sorted(forge_gpu.TASKS))
    parser.add_argument("--device", default=None)
    parser.add_argument("--envs", nargs="+", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--policy", default="random", choices=["random", "expert"])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    add_set_option(parser, "config override passed to forge_gpu.make, e.g. params.render=false (repeatable)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    device = args.device or forge_gpu.default_device()
    if args.smoke:
        envs, args.seconds = args.envs or [4, 16], 0.2
    elif args.envs:
        envs = args.envs
    else:
        envs = [64, 256, 1024, 4096] + ([16384] if device.startswith("cuda") else [])
    overrides = dict(args.overrides)
    rows = [measure(t, n, device, args.seconds, args.policy, overrides) for t in args.tasks for n in envs]
    md = "## Stepping only\n\n" + table(rows, ["task", "device", "num_envs", "median_step_ms", "env_steps_per_s"])
    path = save("stepping", {"machine": machine(), "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
