"""Robot files cost nothing per step: env-steps/s of the shipped tasks on robot files (configs/quadruped.toml on
configs/robots/quadruped.toml, configs/humanoid.toml on configs/robots/humanoid.toml) against the same tasks as
one file (their single files as they were, kept as the bit-for-bit references of tests/sim/test_robot_files.py),
at 64 and 1024 envs, random policy, measured in turns (split, single, split, single; the best of each) so that a
shared machine's load falls on both. ratio = split / single (target >= 0.9). Both build the same generated kernel:
the split is read once, when the task is made.

python bench/robotfiles.py            # 64 and 1024 envs (CPU)
python bench/robotfiles.py --smoke    # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
from common import machine, measure_stepping, save, table  # noqa: E402

CONFIGS = ROOT.parent / "configs"
SINGLE = ROOT.parent / "tests" / "sim" / "robot_files"
TASKS = ("quadruped", "humanoid")


def main(argv=None) -> int:
    import warp as wp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--envs", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--turns", type=int, default=2, help="measurements of each, in turns")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    if args.smoke:
        args.seconds, args.envs, args.turns = 0.2, [4], 1
    rows = []
    for task in TASKS:
        files = {"split": str(CONFIGS / f"{task}.toml"), "single": str(SINGLE / f"{task}_single.toml")}
        for n in args.envs:
            best = {"split": 0.0, "single": 0.0}
            for _ in range(args.turns):
                for kind, path in files.items():
                    rate = measure_stepping(path, n, args.device, args.seconds, "random")["env_steps_per_s"]
                    best[kind] = max(best[kind], rate)
            rows.append({"task": task, "num_envs": n, "split_env_steps_per_s": best["split"],
                         "single_env_steps_per_s": best["single"], "ratio": best["split"] / best["single"],
                         "target": 0.9})  # fmt: skip
    md = "## Robot + task files against one file: env-steps/s (random policy)\n\n" + table(
        rows, ["task", "num_envs", "split_env_steps_per_s", "single_env_steps_per_s", "ratio", "target"]
    )
    path = save("robotfiles", {"machine": machine(), "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
