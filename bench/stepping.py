"""Env-steps per second against num_envs, per task, stepping only (no transport, no recording).

python bench/stepping.py                 # 64 .. 4096 envs on the CPU, up to 16384 on CUDA
python bench/stepping.py --smoke         # seconds-long check that every figure is produced
python bench/stepping.py --tasks reach --set params.render=false   # config overrides (TOML values)
"""

from __future__ import annotations

import argparse
import sys

from common import add_set_option, machine, measure_stepping, save, table


def main(argv=None) -> int:
    import warp as wp

    import forge_gpu
    from forge_gpu._src.tasks.catalog import SHIPPED

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(SHIPPED))
    parser.add_argument("--device", default=None)
    parser.add_argument("--envs", nargs="+", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--policy", default="random", choices=["random", "expert"])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    add_set_option(parser, "config override passed to forge_gpu.sim.make, e.g. params.render=false (repeatable)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    device = args.device or forge_gpu.sim.default_device()
    if args.smoke:
        envs, args.seconds = args.envs or [4, 16], 0.2
    elif args.envs:
        envs = args.envs
    else:
        envs = [64, 256, 1024, 4096] + ([16384] if device.startswith("cuda") else [])
    overrides = dict(args.overrides)
    rows = [measure_stepping(t, n, device, args.seconds, args.policy, overrides) for t in args.tasks for n in envs]
    md = "## Stepping only\n\n" + table(rows, ["task", "device", "num_envs", "median_step_ms", "env_steps_per_s"])
    path = save("stepping", {"machine": machine(), "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
