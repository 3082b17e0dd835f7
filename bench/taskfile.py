"""Task files against hand-written tasks, and what the shipped robots' policies earn.

- env-steps/s of the file-based ant (configs/ant.toml, one generated observe kernel) and cartpole
  (configs/cartpole.toml) against the hand-written tasks they replaced (``forge_gpu.testing``'s
  ``register_handwritten``: forge_gpu/_src/sim/tasks/handwritten_ant.py, handwritten_cartpole.py), same config,
  same envs, one run, measured in alternating rounds: the ratio of the medians and of the best rounds (a fresh env
  on this CPU steps in one of two speeds, about 2x apart, whichever the task: the best rounds compare the fast
  mode);
- the task's own kernels per step (action, reset, observe hooks launched alone, best of 7 x 50), which a loaded
  machine disturbs far less than whole steps;
- env-steps/s of the robots from files (quadruped, humanoid) at 64 and 1024 envs, random policy;
- each robot's policies on its own reward, same seed and envs: the random policy, the config's expert (quadruped:
  a sinusoid trot whose amplitude follows the commanded vx; humanoid: PD holding the start pose) and, for the
  quadruped, hold_pose (stand): mean return and length of the episodes that ended, mean reward per active step,
  and each reward term's mean per active step (which term pays).

python bench/taskfile.py              # comparisons at 64 and 1024 envs; robots at 64 and 1024; policies (CPU)
python bench/taskfile.py --smoke      # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
from common import machine, measure_stepping, save, table  # noqa: E402

PAIRS = (("ant", "ant_handwritten"), ("cartpole", "cartpole_handwritten"))


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
    from forge_gpu._src.sim.taskfile.task import hold_pose

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
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of each comparison")
    parser.add_argument("--pair-envs", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--robot-envs", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--policy-envs", type=int, default=32, help="envs of the policies' runs")
    parser.add_argument("--policy-steps", type=int, default=300, help="steps of the policies' runs")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    if args.smoke:
        args.seconds, args.rounds, args.pair_envs, args.robot_envs = 0.2, 1, [4], [4]
        args.policy_envs, args.policy_steps = 2, 5
    from forge_gpu.testing import register_handwritten

    register_handwritten(Path(tempfile.mkdtemp(prefix="forge-gpu-bench-")))
    rows, ratios, policies, hooks = [], [], [], []
    for file_task, hand_task in PAIRS:
        for n in args.pair_envs:
            rates = {hand_task: [], file_task: []}
            for _ in range(args.rounds):  # alternate, so that a change of load weighs on both alike
                for task in rates:
                    row = measure_stepping(task, n, args.device, args.seconds, "random")
                    rates[task].append(row["env_steps_per_s"])
            for task, values in rates.items():
                rows.append({"task": task, "num_envs": n, "env_steps_per_s": float(np.median(values))})
            ratio = float(np.median(rates[file_task]) / np.median(rates[hand_task]))
            best = float(np.max(rates[file_task]) / np.max(rates[hand_task]))
            ratios.append({"task": file_task, "num_envs": n, "file_over_handwritten": ratio, "best_over_best": best})
            hooks += [hook_times(task, n, args.device) for task in (hand_task, file_task)]
    for task in ("quadruped", "humanoid"):
        for n in args.robot_envs:
            rows.append({k: v for k, v in measure_stepping(task, n, args.device, args.seconds, "random").items()
                         if k in ("task", "num_envs", "env_steps_per_s")})  # fmt: skip
    for task, names in (("quadruped", ("random", "expert", "hold_pose")), ("humanoid", ("random", "expert"))):
        for name in names:
            policies.append(policy_row(task, name, args.policy_envs, args.policy_steps))
    policy_columns = ["task", "policy", "episodes_ended", "mean_return", "mean_length", "reward_per_step"]
    md = (
        "## Task files: env-steps/s (random policy)\n\n"
        + table(rows, ["task", "num_envs", "env_steps_per_s"])
        + f"\n\n## File-based / hand-written ({args.rounds} alternating rounds: medians, best rounds)\n\n"
        + table(ratios, ["task", "num_envs", "file_over_handwritten", "best_over_best"])
        + "\n\n## The task's kernels per step, microseconds (best of 7 x 50 calls of each hook)\n\n"
        + table(hooks, ["task", "num_envs", "apply_action_us", "reset_worlds_us", "observe_us", "total_us"])
        + f"\n\n## Policies on their task's reward ({args.policy_envs} envs, {args.policy_steps} steps, seed 0)\n\n"
        + table(policies, policy_columns)
        + "\n\nReward terms' means per active step:\n\n"
        + "\n".join(f"- {p['task']} {p['policy']}: {p['terms_per_step']}" for p in policies)
    )
    data = {"machine": machine(), "rows": rows, "ratios": ratios, "hooks": hooks, "policies": policies}
    path = save("taskfile", data, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
