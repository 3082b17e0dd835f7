"""How often the push expert and the random policy succeed: each env's first episodes, a fixed number per env.

python bench/push_expert.py                       # 1,000 episodes per policy (200 envs x 5), default config
python bench/push_expert.py --smoke               # seconds-long check that every figure is produced
python bench/push_expert.py --set max_steps=300   # config overrides (TOML values)

Every env runs exactly --episodes-per-env episodes (the ones after are not counted), so that short (successful)
episodes are not over-counted. Rendering is off (the physics and the policies do not read the images).
Figures per policy: episodes, successes (terminated: the cube's centre within tolerance of the goal),
success_rate, mean_steps (of all counted episodes), mean_success_steps (of the successful ones), and the final
cube-to-goal distance of the failed ones (median, metres).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from common import add_set_option, machine, save, table


def run(policy_name: str, num_envs: int, per_env: int, device: str, overrides: dict) -> dict:
    import forge_gpu

    env = forge_gpu.sim.make("push", num_envs=num_envs, device=device, **({"params.render": False} | overrides))
    policy = forge_gpu.sim.make_policy(policy_name, env)
    env.reset()
    ended = np.zeros(num_envs, np.int64)
    steps, success, misses = [], [], []
    t0 = time.perf_counter()
    while (ended < per_env).any():
        r = env.step(policy(env.observation)).numpy()
        done = r.info["active"] & (r.terminated | r.truncated) & (ended < per_env)
        steps += r.observation["step_id"][done].tolist()  # the ending frame's step count
        success += r.terminated[done].tolist()
        obs = r.observation
        gap = np.linalg.norm(obs["cube_pose"][:, :2] - obs["goal_position"][:, :2], axis=1)
        misses += gap[done & ~r.terminated].tolist()
        ended += done
    seconds = time.perf_counter() - t0
    steps, success = np.asarray(steps), np.asarray(success, bool)
    return {
        "policy": policy_name,
        "num_envs": num_envs,
        "episodes": int(len(success)),
        "successes": int(success.sum()),
        "success_rate": float(success.mean()),
        "mean_steps": float(steps.mean()),
        "mean_success_steps": float(steps[success].mean()) if success.any() else 0.0,
        "median_miss_m": float(np.median(misses)) if misses else 0.0,
        "max_steps": env.config.max_steps,
        "seconds": seconds,
    }


def main(argv=None) -> int:
    import warp as wp

    import forge_gpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=200)
    parser.add_argument("--episodes-per-env", type=int, default=5)
    parser.add_argument("--policies", nargs="+", default=["expert", "random"], choices=["expert", "random"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    add_set_option(parser, "config override, e.g. max_steps=300 (repeatable)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    device = args.device or forge_gpu.sim.default_device()
    overrides = dict(args.overrides)
    if args.smoke:
        args.envs, args.episodes_per_env = 4, 1
        overrides.setdefault("max_steps", 20)
    rows = [run(name, args.envs, args.episodes_per_env, device, overrides) for name in args.policies]
    columns = ["policy", "num_envs", "episodes", "successes", "success_rate", "mean_steps", "mean_success_steps"]
    columns += ["median_miss_m", "max_steps", "seconds"]
    md = f"## push: success over each env's first episodes ({device})\n\n" + table(rows, columns)
    path = save(
        "push_expert", {"machine": machine(), "device": device, "overrides": overrides, "rows": rows}, md, args.out
    )
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
