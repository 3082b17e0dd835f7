"""The shipped task files' speed, and what the shipped robots' policies earn.

- env-steps/s of every shipped task file (ant, cartpole, quadruped, humanoid: one generated observe kernel each) at
  64 and 1024 envs, random policy;
- the file-based ant's and cartpole's own kernels per step (action, reset, observe hooks launched alone, best of
  7 x 50), which a loaded machine disturbs far less than whole steps;
- each robot's policies on its own reward, same seed and envs: the random policy, the config's expert (quadruped:
  a sinusoid trot whose amplitude follows the commanded vx; humanoid: PD holding the start pose) and, for the
  quadruped, hold_pose (stand): mean return and length of the episodes that ended, mean reward per active step,
  and each reward term's mean per active step (which term pays).

python bench/taskfile.py              # task files at 64 and 1024 envs; their kernels; policies (CPU)
python bench/taskfile.py --smoke      # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
from common import machine, measure_stepping, save, table  # noqa: E402

TASKS = ("ant", "cartpole", "quadruped", "humanoid")
HOOKED = ("ant", "cartpole")
"""The tasks whose hooks are timed alone."""


def hook_times(task: str, num_envs: int, device: str) -> dict:
    """Microseconds per call of the task's apply_action, reset_worlds and observe hooks (best of 7 x 50 calls)."""
    import time

    import warp as wp

    import forge_gpu

    env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, seed=0)
    env.reset()
    row = {"task": task, "num_envs": num_envs}
    for hook in ("apply_action", "reset_worlds", "observe"):
        call = getattr(env.task, hook)
        call(env.world)
        wp.synchronize_device(env.device)
        best = float("inf")
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(50):
                call(env.world)
            wp.synchronize_device(env.device)
            best = min(best, (time.perf_counter() - start) / 50)
        row[f"{hook}_us"] = best * 1e6
    row["total_us"] = row["apply_action_us"] + row["reset_worlds_us"] + row["observe_us"]
    return row


def policy_row(task: str, name: str, num_envs: int, steps: int) -> dict:
    """Run ``name`` (random, expert, hold_pose) for ``steps`` steps from seed 0: the episodes' returns and the
    reward terms' means per active step."""
    import forge_gpu
    from forge_gpu._src.tasks.taskfile.gaits import hold_pose

    env = forge_gpu.sim.make(task, num_envs=num_envs, device="cpu", seed=0)
    policy = hold_pose(env.task, env.world, {}) if name == "hold_pose" else forge_gpu.sim.make_policy(name, env)
    env.reset()
    running, returns, lengths = np.zeros(num_envs), [], []
    terms, active_steps, reward_sum = 0.0, 0, 0.0
    for _ in range(steps):
        r = env.step(policy(env.observation)).numpy()
        active = r.info["active"]
        running += r.reward
        reward_sum += float(r.reward[active].sum())
        terms = terms + r.observation["reward_terms"][active].sum(0)
        active_steps += int(active.sum())
        ended = r.terminated | r.truncated
        returns += list(running[ended])
        lengths += list(r.observation["step_id"][ended])
        running[ended] = 0.0
    names = env.calibration["reward_terms"]
    per_term = " ".join(f"{n} {v / active_steps:+.3g}" for n, v in zip(names, terms, strict=True))
    return {
        "task": task,
        "policy": name,
        "episodes_ended": len(returns),
        "mean_return": float(np.mean(returns)) if returns else float("nan"),
        "mean_length": float(np.mean(lengths)) if lengths else float("nan"),
        "reward_per_step": reward_sum / active_steps,
        "terms_per_step": per_term,
    }


def main(argv=None) -> int:
    import warp as wp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--envs", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--policy-envs", type=int, default=32, help="envs of the policies' runs")
    parser.add_argument("--policy-steps", type=int, default=300, help="steps of the policies' runs")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    if args.smoke:
        args.seconds, args.envs, args.policy_envs, args.policy_steps = 0.2, [4], 2, 5
    rows, policies, hooks = [], [], []
    for task in TASKS:
        for n in args.envs:
            rows.append({k: v for k, v in measure_stepping(task, n, args.device, args.seconds, "random").items()
                         if k in ("task", "num_envs", "env_steps_per_s")})  # fmt: skip
            if task in HOOKED:
                hooks.append(hook_times(task, n, args.device))
    for task, names in (("quadruped", ("random", "expert", "hold_pose")), ("humanoid", ("random", "expert"))):
        for name in names:
            policies.append(policy_row(task, name, args.policy_envs, args.policy_steps))
    policy_columns = ["task", "policy", "episodes_ended", "mean_return", "mean_length", "reward_per_step"]
    md = (
        "## Task files: env-steps/s (random policy)\n\n"
        + table(rows, ["task", "num_envs", "env_steps_per_s"])
        + "\n\n## The task's kernels per step, microseconds (best of 7 x 50 calls of each hook)\n\n"
        + table(hooks, ["task", "num_envs", "apply_action_us", "reset_worlds_us", "observe_us", "total_us"])
        + f"\n\n## Policies on their task's reward ({args.policy_envs} envs, {args.policy_steps} steps, seed 0)\n\n"
        + table(policies, policy_columns)
        + "\n\nReward terms' means per active step:\n\n"
        + "\n".join(f"- {p['task']} {p['policy']}: {p['terms_per_step']}" for p in policies)
    )
    data = {"machine": machine(), "rows": rows, "hooks": hooks, "policies": policies}
    path = save("taskfile", data, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
