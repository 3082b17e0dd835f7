"""PPO (rsl_rl) on forge_gpu's tasks, through ``forge_gpu.sim.RslRlVecEnv``: iterations, returns reached, wall time,
env-steps/s while training against bare stepping and against a training whose rollouts are recorded
(``forge_gpu.recording.RolloutRecorder``), and the trained policy saved as a ``torch.export`` program (``.pt2``), then
scored (loaded back as ``pt2:PATH``) by
``forge_gpu.recording.evaluate`` beside the task's scripted expert over the same episodes.

The rates are measured in alternation, in one run: each round is ``--chunk`` iterations of the training, a window of
bare stepping (random actions, as many env-steps as that rollout) and ``--record-iterations`` iterations of a second
training of the same settings whose rollouts are recorded as a run (verified at the end, then removed). Their
ratios compare figures taken under the same load.

The saved policy runs with no code of the user's:
    forge-gpu evaluate ant --policy pt2:bench/results/ppo_ant.pt2 --episodes 32 --set max_steps=200
    forge-gpu collect ant runs/ant_rl --policy pt2:bench/results/ppo_ant.pt2 --episodes 64

python bench/ppo.py                                  # cartpole and ant on the CPU, a few minutes each
python bench/ppo.py --tasks ant --minutes 10 --envs 256
python bench/ppo.py --smoke                          # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import RESULTS, add_set_option, machine, save, table

TASKS = {
    # task: (default overrides, the training's settings)
    "cartpole": ({"max_steps": 200}, {"hidden": (32, 32), "num_steps_per_env": 24}),
    "ant": ({"max_steps": 200}, {"hidden": (128, 128), "num_steps_per_env": 24}),
}


class Trainer:
    """PPO on one env of ``task`` (``recorder``: its rollouts recorded into that run directory), learned in chunks;
    the time in the env's ``step`` (the rollout) and in whole iterations counted separately."""

    def __init__(self, task: str, args, overrides: dict, record: str | None = None):
        import torch
        from rsl_rl.runners import OnPolicyRunner

        import forge_gpu
        from forge_gpu.sim import default_train_config, track_policy_version

        settings = TASKS[task][1]
        self.steps_per_iteration = settings["num_steps_per_env"]
        self.num_envs = args.envs
        env = forge_gpu.sim.make(task, num_envs=args.envs, device=args.device, seed=args.seed, **overrides)
        recorder = forge_gpu.recording.RolloutRecorder(env, record) if record else None
        self.vec = forge_gpu.sim.RslRlVecEnv(env, recorder=recorder)
        cfg = default_train_config(hidden=settings["hidden"], num_steps_per_env=self.steps_per_iteration)
        with contextlib.redirect_stdout(io.StringIO()):  # rsl_rl prints its models and every iteration
            self.runner = OnPolicyRunner(self.vec, cfg, log_dir=None, device=str(self.vec.device))
        if recorder is not None:
            track_policy_version(self.runner)
        self.iterations, self.stepping, self.seconds = 0, 0.0, 0.0
        # the returns of the episodes that end, summed on the device (no host sync per step)
        self.running = torch.zeros(args.envs, device=self.vec.device)
        self.ended = torch.zeros(2, device=self.vec.device)  # sum of returns, episodes
        step = self.vec.step

        def timed_step(actions):
            start = time.perf_counter()
            out = step(actions)
            self.stepping += time.perf_counter() - start
            _, rewards, dones, _ = out
            self.running.add_(rewards)
            self.ended[0] += (self.running * dones).sum()
            self.ended[1] += dones.sum()
            self.running.mul_(~dones)
            return out

        self.vec.step = timed_step

    def learn(self, iterations: int) -> float:
        """``iterations`` more; the mean return of the episodes that ended meanwhile (NaN: none)."""
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            self.runner.learn(num_learning_iterations=iterations)
        self.seconds += time.perf_counter() - start
        self.iterations += iterations
        total, count = self.ended.tolist()
        self.ended.zero_()
        return total / count if count else float("nan")

    @property
    def env_steps(self) -> int:
        return self.iterations * self.steps_per_iteration * self.num_envs


class Bare:
    """Bare stepping of ``task`` at the training's size: random actions, nothing else."""

    def __init__(self, task: str, args, overrides: dict):
        import forge_gpu

        self.env = forge_gpu.sim.make(task, num_envs=args.envs, device=args.device, seed=args.seed, **overrides)
        self.policy = forge_gpu.sim.make_policy("random", self.env)
        self.env.reset()
        for _ in range(3):  # compile and, on CUDA, capture
            self.env.step(self.policy(self.env.observation))
        self.calls, self.seconds = 0, 0.0

    def window(self, calls: int) -> None:
        import warp as wp

        start = time.perf_counter()
        for _ in range(calls):
            self.env.step(self.policy(self.env.observation))
        wp.synchronize_device(self.env.device)
        self.seconds += time.perf_counter() - start
        self.calls += calls

    @property
    def env_steps_per_s(self) -> float:
        return self.calls * self.env.num_envs / self.seconds


def train(task: str, args, overrides: dict) -> dict:
    """Train PPO; in each round, after the training's ``--chunk`` iterations, a window of bare stepping of as many
    env-steps as their rollout and (unless ``--no-record``) ``--record-iterations`` iterations of a second, recorded
    training: the three rates are measured under the same load, alternating."""
    import torch

    import forge_gpu
    from forge_gpu.sim import export_policy

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    trainer = Trainer(task, args, overrides)
    bare = Bare(task, args, overrides)
    folder = Path(tempfile.mkdtemp(prefix=f"ppo_{task}_"))
    recorded = None if args.no_record else Trainer(task, args, overrides, record=str(folder / "rollouts"))
    curve = []
    start = time.perf_counter()
    while trainer.iterations < args.iterations and time.perf_counter() - start < args.minutes * 60:
        curve.append((trainer.iterations + args.chunk, trainer.learn(args.chunk)))
        bare.window(args.chunk * trainer.steps_per_iteration)
        if recorded is not None:
            recorded.learn(args.record_iterations)
        print(f"  {task}: iteration {curve[-1][0]}, mean episode return {curve[-1][1]:.2f}, "
              f"{time.perf_counter() - start:.0f} s", flush=True)  # fmt: skip
    wall = time.perf_counter() - start
    path = Path(args.out or RESULTS) / f"ppo_{task}.pt2"
    path.parent.mkdir(parents=True, exist_ok=True)
    export_policy(trainer.runner, path, format="pt2")
    row = {
        "iterations": trainer.iterations,
        "env_steps": trainer.env_steps,
        "train_seconds": trainer.seconds,
        "wall_seconds": wall,
        "train_env_steps_per_s": trainer.env_steps / trainer.seconds,
        "rollout_env_steps_per_s": trainer.env_steps / trainer.stepping,
        "bare_env_steps_per_s": bare.env_steps_per_s,
        "return_first": curve[0][1],
        "return_reached": curve[-1][1],
        "curve": curve,
        "policy": str(path),
    }
    if recorded is not None:
        recorder = recorded.vec.recorder
        recorded.vec.close()
        report = forge_gpu.reading.verify_run(recorder.directory)
        row.update(
            recorded_iterations=recorded.iterations,
            recorded_train_env_steps_per_s=recorded.env_steps / recorded.seconds,
            recorded_rollout_env_steps_per_s=recorded.env_steps / recorded.stepping,
            recorded_episodes=recorder.completed_episodes,
            recorded_mb=recorder.recorder.bytes_written / 1e6,
            recorded_stall_seconds=recorder.stall_seconds,
            recorded_verify="ok" if report["ok"] else "FAILED",
        )
    shutil.rmtree(folder, ignore_errors=True)
    return row


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
    parser.add_argument(
        "--chunk",
        type=int,
        default=5,
        help="iterations per round: each round is followed by a bare-stepping window (default 5)",
    )
    parser.add_argument(
        "--record-iterations", type=int, default=2, help="iterations of the recorded training per round (default 2)"
    )
    parser.add_argument("--no-record", action="store_true", help="no recorded training beside (no recording figures)")
    parser.add_argument("--eval-envs", type=int, default=32)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch's CPU threads (default 1)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    parser.add_argument("--smoke", action="store_true", help="2 iterations of 16 envs (1 recorded), 4 episodes scored")
    add_set_option(parser, "a config override for every task, e.g. max_steps=100")
    args = parser.parse_args(argv)
    if args.smoke:
        args.envs, args.iterations, args.chunk, args.eval_envs, args.eval_episodes = 16, 2, 1, 4, 4
        args.record_iterations = 1
    rows = []
    for task in args.tasks:
        overrides = {**TASKS[task][0], **dict(args.overrides)}
        print(f"{task}: training PPO on {args.envs} envs ({args.device}), {overrides}", flush=True)
        trained = train(task, args, overrides)
        ppo = score(task, f"pt2:{trained['policy']}", args, overrides)
        expert = score(task, "expert", args, overrides)
        bare = trained["bare_env_steps_per_s"]
        recording = {}
        if "recorded_train_env_steps_per_s" in trained:
            recording = {
                "recorded_vs_plain": trained["recorded_train_env_steps_per_s"] / trained["train_env_steps_per_s"],
                "recorded_rollout_vs_rollout": (
                    trained["recorded_rollout_env_steps_per_s"] / trained["rollout_env_steps_per_s"]
                ),
            }
        rows.append({
            "task": task, "envs": args.envs, **{k: v for k, v in trained.items() if k != "curve"},
            "curve": trained["curve"], "training_vs_bare": trained["train_env_steps_per_s"] / bare,
            "rollout_vs_bare": trained["rollout_env_steps_per_s"] / bare, **recording,
            "eval_return_ppo": ppo["mean"], "eval_std_ppo": ppo["std"], "eval_length_ppo": ppo["mean_length"],
            "eval_return_expert": expert["mean"], "eval_std_expert": expert["std"],
            "eval_length_expert": expert["mean_length"], "overrides": overrides,
        })  # fmt: skip
    columns = [
        *("task", "envs", "iterations", "env_steps", "train_seconds", "return_first", "return_reached"),
        *("train_env_steps_per_s", "rollout_env_steps_per_s", "bare_env_steps_per_s", "training_vs_bare"),
        "rollout_vs_bare",
        *(() if args.no_record else ("recorded_vs_plain", "recorded_rollout_vs_rollout", "recorded_episodes")),
        *(() if args.no_record else ("recorded_verify",)),
        *("eval_return_ppo", "eval_return_expert", "eval_length_ppo", "eval_length_expert"),
    ]
    markdown = table(rows, columns)
    print(markdown)
    payload = {"machine": machine(gpu=args.device != "cpu"), "rows": rows, "eval_episodes": args.eval_episodes}
    print(save("ppo_smoke" if args.smoke else "ppo", payload, markdown, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
