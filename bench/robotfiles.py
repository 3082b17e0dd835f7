"""Robot files cost nothing per step: env-steps/s of the shipped tasks on robot files (configs/quadruped.toml on
configs/robots/quadruped.toml, configs/humanoid.toml on configs/robots/humanoid.toml) against the same tasks as
one file (their single files as they were, kept as the bit-for-bit references of tests/sim/test_robot_files.py),
at 64 and 1024 envs, random policy. Both are built side by side and stepped in alternation (a step of one, a step
of the other, for the whole window), so that a shared machine's load falls on both alike; each rate is from its
median step time. ratio = split / single (target >= 0.9). Both build the same generated kernel:
the split is read once, when the task is made.

python bench/robotfiles.py            # 64 and 1024 envs (CPU)
python bench/robotfiles.py --smoke    # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
from common import machine, save, step_in_alternation, table  # noqa: E402

CONFIGS = ROOT.parent / "configs"
SINGLE = ROOT.parent / "tests" / "sim" / "robot_files"
TASKS = ("quadruped", "humanoid")


def interleaved(paths: dict, num_envs: int, device: str, seconds: float) -> dict:
    """Both tasks built side by side and stepped in alternation, one step each in turn, for at least ``seconds``
    in all (after 3 warm-up steps each): a shared machine's load falls on both alike. Median step time of each."""
    import forge_gpu

    envs = {kind: forge_gpu.sim.make(path, num_envs=num_envs, device=device) for kind, path in paths.items()}
    policies = {kind: forge_gpu.sim.make_policy("random", env) for kind, env in envs.items()}
    for env in envs.values():
        env.reset()
    result = step_in_alternation(envs, policies, seconds)
    return result["median"] | {"steps": result["steps"]}


def main(argv=None) -> int:
    import warp as wp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=20.0, help="time per size, both tasks together")
    parser.add_argument("--envs", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    if args.smoke:
        args.seconds, args.envs = 0.2, [4]
    rows = []
    for task in TASKS:
        files = {"split": str(CONFIGS / f"{task}.toml"), "single": str(SINGLE / f"{task}_single.toml")}
        for n in args.envs:
            median = interleaved(files, n, args.device, args.seconds)
            split, single = n / median["split"], n / median["single"]
            rows.append({"task": task, "num_envs": n, "steps": median["steps"], "split_env_steps_per_s": split,
                         "single_env_steps_per_s": single, "ratio": split / single, "target": 0.9})  # fmt: skip
            print(rows[-1], flush=True)
    md = "## Robot + task files against one file: env-steps/s (random policy, stepped in alternation)\n\n" + table(
        rows, ["task", "num_envs", "steps", "split_env_steps_per_s", "single_env_steps_per_s", "ratio", "target"]
    )
    path = save("robotfiles", {"machine": machine(), "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
