"""PPO (rsl_rl) on forge_gpu's tasks, through ``forge_gpu.sim.RslRlVecEnv``: iterations, returns reached, wall time,
env-steps/s while training against bare stepping, and the trained policy saved as TorchScript, then scored by
``forge_gpu.recording.evaluate`` beside the task's scripted expert over the same episodes.

The saved policy runs with no code of the user's:
    forge-gpu evaluate ant --policy torchscript:bench/results/ppo_ant.pt --episodes 32 --set max_steps=200
    forge-gpu collect ant runs/ant_rl --policy torchscript:bench/results/ppo_ant.pt --episodes 64

python bench/ppo.py                                  # cartpole and ant on the CPU, a few minutes each
python bench/ppo.py --tasks ant --minutes 10 --envs 256
python bench/ppo.py --smoke                          # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

from common import RESULTS, add_set_option, machine, measure_stepping, save, table

TASKS = {
    # task: (default overrides, the training's settings)
    "cartpole": ({"max_steps": 200}, {"hidden": (32, 32), "num_steps_per_env": 24}),
    "ant": ({"max_steps": 200}, {"hidden": (128, 128), "num_steps_per_env": 24}),
}


def train(task: str, args, overrides: dict) -> dict:
    import torch
    from rsl_rl.runners import OnPolicyRunner

    import forge_gpu
    from forge_gpu._src.sim.rl.rsl import default_train_config, export_policy

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    settings = TASKS[task][1]
    env = forge_gpu.sim.make(task, num_envs=args.envs, device=args.device, seed=args.seed, **overrides)
    vec = forge_gpu.sim.RslRlVecEnv(env)
    cfg = default_train_config(hidden=settings["hidden"], num_steps_per_env=settings["num_steps_per_env"])
    with contextlib.redirect_stdout(io.StringIO()):  # rsl_rl prints its models and every iteration
        runner = OnPolicyRunner(vec, cfg, log_dir=None, device=str(vec.device))
    stepping = [0.0]
    step = vec.step
    # the returns of the episodes that end, summed on the device (no host sync per step)
    running = torch.zeros(args.envs, device=vec.device)
    ended = torch.zeros(2, device=vec.device)  # sum of returns, episodes

    def timed_step(actions):
        start = time.perf_counter()
        out = step(actions)
        stepping[0] += time.perf_counter() - start
        _, rewards, dones, _ = out
        running.add_(rewards)
        ended[0] += (running * dones).sum()
        ended[1] += dones.sum()
        running.mul_(~dones)
        return out

    vec.step = timed_step
    iterations, curve = 0, []
    start = time.perf_counter()
    while iterations < args.iterations and time.perf_counter() - start < args.minutes * 60:
        with contextlib.redirect_stdout(io.StringIO()):
            runner.learn(num_learning_iterations=args.chunk)
        iterations += args.chunk
        total, count = ended.tolist()
        ended.zero_()
        curve.append((iterations, total / count if count else float("nan")))
        print(f"  {task}: iteration {iterations}, mean episode return {curve[-1][1]:.2f}, "
              f"{time.perf_counter() - start:.0f} s", flush=True)  # fmt: skip
    wall = time.perf_counter() - start
    env_steps = iterations * settings["num_steps_per_env"] * args.envs
    path = Path(args.out or RESULTS) / f"ppo_{task}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    export_policy(runner, path)
    return {
        "iterations": iterations,
        "env_steps": env_steps,
        "train_seconds": wall,
        "train_env_steps_per_s": env_steps / wall,
        "rollout_env_steps_per_s": env_steps / stepping[0],
        "return_first": curve[0][1],
        "return_reached": curve[-1][1],
        "curve": curve,
        "policy": str(path),
    }


def score(task: str, policy_name: str, args, overrides: dict) -> dict:
    import numpy as np

    import forge_gpu

    env = forge_gpu.sim.make(task, num_envs=args.eval_envs, device=args.device, seed=args.seed + 1, **overrides)
    policy = forge_gpu.sim.load_policy(policy_name, env)
    result = forge_gpu.recording.evaluate(env, policy, episodes=args.eval_episodes)
    return {"mean": float(np.mean(result.returns)), "std": float(np.std(result.returns)),
            "mean_length": float(np.mean(result.lengths))}  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--envs", type=int, default=64, help="training envs (default 64)")
    parser.add_argument("--iterations", type=int, default=10**6, help="PPO iterations at most (default: --minutes)")
    parser.add_argument("--minutes", type=float, default=4.0, help="training time per task (default 4)")
    parser.add_argument("--chunk", type=int, default=5, help="iterations between progress lines (default 5)")
    parser.add_argument("--eval-envs", type=int, default=32)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch's CPU threads (default 1)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    parser.add_argument("--smoke", action="store_true", help="2 iterations of 16 envs, 4 episodes scored")
    add_set_option(parser, "a config override for every task, e.g. max_steps=100")
    args = parser.parse_args(argv)
    if args.smoke:
        args.envs, args.iterations, args.chunk, args.eval_envs, args.eval_episodes = 16, 2, 1, 4, 4
    rows = []
    for task in args.tasks:
        overrides = {**TASKS[task][0], **dict(args.overrides)}
        print(f"{task}: training PPO on {args.envs} envs ({args.device}), {overrides}", flush=True)
        trained = train(task, args, overrides)
        bare = measure_stepping(task, args.envs, args.device, 1.0 if args.smoke else 5.0, "random", overrides)
        ppo = score(task, f"torchscript:{trained['policy']}", args, overrides)
        expert = score(task, "expert", args, overrides)
        rows.append({
            "task": task, "envs": args.envs, **{k: v for k, v in trained.items() if k != "curve"},
            "curve": trained["curve"], "bare_env_steps_per_s": bare["env_steps_per_s"],
            "training_vs_bare": trained["train_env_steps_per_s"] / bare["env_steps_per_s"],
            "rollout_vs_bare": trained["rollout_env_steps_per_s"] / bare["env_steps_per_s"],
            "eval_return_ppo": ppo["mean"], "eval_std_ppo": ppo["std"], "eval_length_ppo": ppo["mean_length"],
            "eval_return_expert": expert["mean"], "eval_std_expert": expert["std"],
            "eval_length_expert": expert["mean_length"], "overrides": overrides,
        })  # fmt: skip
    columns = [
        *("task", "envs", "iterations", "env_steps", "train_seconds", "return_first", "return_reached"),
        *("train_env_steps_per_s", "rollout_env_steps_per_s", "bare_env_steps_per_s", "training_vs_bare"),
        *("rollout_vs_bare", "eval_return_ppo", "eval_return_expert", "eval_length_ppo", "eval_length_expert"),
    ]
    markdown = table(rows, columns)
    print(markdown)
    payload = {"machine": machine(gpu=args.device != "cpu"), "rows": rows, "eval_episodes": args.eval_episodes}
    print(save("ppo_smoke" if args.smoke else "ppo", payload, markdown, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
