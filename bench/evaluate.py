"""The evaluation's env-steps/s against plain stepping at the same size, in one run.

Plain: ``env.step(policy(observation))`` for as many steps as the evaluation took, then one wait for the device.
Three rounds of each, alternated; the best of each is kept.
Evaluation: ``forge_gpu.recording.evaluate`` (the keys, the per-episode rows and a read of the device's counter
every 16 steps in the step). ``useful`` counts the counted episodes' transitions only (worlds idle at the end
step too).

python bench/evaluate.py                            # reach and push, 256 envs, 2 episodes per env, on the CPU
python bench/evaluate.py --smoke                    # seconds-long check that every figure is produced
python bench/evaluate.py --tasks push --envs 4096 --device cuda:0
"""

from __future__ import annotations

import argparse
import sys
import time

from common import add_set_option, machine, save, table

ROUNDS = 3


def measure(task: str, num_envs: int, episodes: int, device: str, overrides: dict) -> dict:
    import warp as wp

    import forge_gpu

    env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, **overrides)
    policy = forge_gpu.sim.make_policy("expert", env)
    forge_gpu.recording.evaluate(env, policy, episodes=num_envs)  # compile and capture, both loops
    plain, evaluated = 0.0, None
    for _ in range(ROUNDS):  # alternated, the best of each: a shared machine's load falls on both
        result = forge_gpu.recording.evaluate(env, policy, episodes=episodes)
        if evaluated is None or result.env_steps_per_second > evaluated.env_steps_per_second:
            evaluated = result
        steps = result.env_steps // num_envs
        env.reset()
        for _ in range(3):
            env.step(policy(env.observation))
        wp.synchronize_device(env.device)
        began = time.perf_counter()
        for _ in range(steps):
            env.step(policy(env.observation))
        wp.synchronize_device(env.device)
        plain = max(plain, steps * num_envs / (time.perf_counter() - began))
    result = evaluated
    return {
        "task": task,
        "device": str(env.device),
        "num_envs": num_envs,
        "episodes": episodes,
        "steps": steps,
        "plain_env_steps_per_s": plain,
        "evaluate_env_steps_per_s": result.env_steps_per_second,
        "ratio": result.env_steps_per_second / plain,
        "useful_share": float(result.lengths.sum()) / result.env_steps,
    }


def main(argv=None) -> int:
    import warp as wp

    import forge_gpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["reach", "push"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--episodes-per-env", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    add_set_option(parser, "config override passed to forge_gpu.sim.make (default params.render=false)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    device = args.device or forge_gpu.sim.default_device()
    if args.smoke:
        args.envs, args.episodes_per_env = 8, 1
    overrides = dict(args.overrides) or {"params.render": False}
    rows = [measure(t, args.envs, args.envs * args.episodes_per_env, device, overrides) for t in args.tasks]
    columns = ["task", "device", "num_envs", "episodes", "steps", "plain_env_steps_per_s", "evaluate_env_steps_per_s",
               "ratio", "useful_share"]  # fmt: skip
    md = "## Evaluation against plain stepping\n\n" + table(rows, columns)
    path = save("evaluate", {"machine": machine(), "overrides": overrides, "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
