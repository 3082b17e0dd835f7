"""The grasping tasks (lift, stack, place where registered): env-steps per second against num_envs, state only and
with both RGB-D cameras, random and expert policies; and the solver's overflow counts at the shipped settings.

python bench/grasp.py                    # CPU: 16, 64, 256 envs; CUDA: 256 .. 4096
python bench/grasp.py --smoke            # seconds-long check that every figure is produced
python bench/grasp.py --tasks lift --envs 64 --policies expert --seconds 5

Each row is one ``collect`` call (the transport, the recorder into a temporary packed run with the default codecs:
rgb zstd, depth quantized) of S steps from a reset, S fixed per row from a warm-up so that the row takes about
--seconds (at least --min-steps steps, default 2). Modes:
  state   ``params.render = false``: no camera (proprio, the objects' poses, the recorded state)
  rgbd    both cameras (the task's ``front`` and the robot's ``wrist``) at --image-size px, rgb and depth each
Figures:
  env_steps_per_s       num_envs * S / the wall time of the whole call, including the recorder's close
  loop_env_steps_per_s  CollectionSummary.env_steps_per_second: the stepping loop alone
  vs_state              loop_env_steps_per_s / the state row's (same task, policy and num_envs): the cameras' cost
                        (the loop figures: a short window's fixed costs, the recorder's start and close, stay out)
The windows are short (a few seconds from a reset): the expert's rows cover its approach more than its grasp.

Overflow: per task and policy, one whole episode (the task's max_steps) per env at --overflow-envs envs, state
only, recorded, counted from the step results' overflow flags (``CollectionSummary.solver_overflow``): env-steps with
dropped contacts or constraint rows (``nconmax``, ``njmax``: must be 0) and env-steps stopped at an iteration limit
(less converged); with the share of those episodes that ended in success (few episodes: a rough figure).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import machine, save, table

TASKS = ["lift", "stack", "place"]
CPU_ENVS = [16, 64, 256]
CUDA_ENVS = [256, 1024, 4096]


def mode_overrides(mode: str, image_size: int) -> dict:
    """The config changes of a mode: the cameras off, or on at ``image_size`` px."""
    return {"params.render": False} if mode == "state" else {"params.render": True, "params.image_size": image_size}


def measure(task: str, num_envs: int, policy_name: str, mode: str, device: str, args, parent: str) -> dict:
    import warp as wp

    import forge_gpu
    from forge_gpu.recording import RecordingOptions, collect

    overrides = mode_overrides(mode, args.image_size) | ({"max_steps": args.max_steps} if args.max_steps else {})
    env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, seed=0, **overrides)
    policy = forge_gpu.sim.make_policy(policy_name, env)
    env.reset()
    env.step(policy(env.observation))  # compile
    wp.synchronize_device(env.device)
    t0 = time.perf_counter()
    for _ in range(2):
        env.step(policy(env.observation))
    wp.synchronize_device(env.device)
    steps = max(args.min_steps, min(int(args.seconds / ((time.perf_counter() - t0) / 2)), env.config.max_steps))
    directory = Path(tempfile.mkdtemp(prefix=f"{task}-{num_envs}-{mode}-", dir=parent))
    directory.rmdir()  # collect creates the run directory itself
    try:
        t0 = time.perf_counter()
        summary = collect(env, policy, str(directory), steps=steps, options=RecordingOptions(format="packed"))
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    overflow = summary.solver_overflow
    images = [f for f in env.spec["observation"] if f.endswith("rgb")]
    return {
        "task": task,
        "device": str(env.device),
        "num_envs": num_envs,
        "policy": policy_name,
        "mode": mode,
        "cameras": len(images),
        "image_size": args.image_size if mode == "rgbd" else 0,
        "steps": steps,
        "env_steps_per_s": num_envs * steps / wall,
        "loop_env_steps_per_s": summary.env_steps_per_second,
        "mb_written": summary.bytes_written / 1e6,
        "dropped_steps": overflow.get("dropped", {}).get("steps", 0),
        "not_converged_steps": overflow.get("not_converged", {}).get("steps", 0),
    }


def overflow_counts(task: str, policy_name: str, num_envs: int, device: str, args, parent: str) -> dict:
    """One whole episode per env of ``task`` with ``policy_name`` at the shipped settings, recorded (state only):
    the solver's overflow counts and the share of episodes that ended in success."""
    import numpy as np

    import forge_gpu
    from forge_gpu.recording import collect

    overrides = {"params.render": False} | ({"max_steps": args.max_steps} if args.max_steps else {})
    env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, seed=1, **overrides)
    policy = forge_gpu.sim.make_policy(policy_name, env)
    directory = Path(parent) / f"overflow-{task}-{policy_name}"
    t0 = time.perf_counter()
    summary = collect(env, policy, str(directory), episodes=num_envs)
    seconds = time.perf_counter() - t0
    reader = forge_gpu.reading.open_run(directory)
    options = forge_gpu.reading.EpisodeReadOptions(observation_keys=[])
    ended = [bool(e.terminated[-1]) for e in reader.read(list(range(len(reader))), options)]
    shutil.rmtree(directory, ignore_errors=True)
    report = summary.solver_overflow
    return {
        "task": task,
        "policy": policy_name,
        "num_envs": num_envs,
        "max_steps": env.config.max_steps,
        "nconmax": env.config.solver.nconmax,
        "njmax": env.config.solver.njmax,
        "episodes": summary.episodes,
        "env_steps": report.get("env_steps", 0),
        "dropped_steps": report.get("dropped", {}).get("steps", 0),
        "dropped_env_steps": report.get("dropped", {}).get("env_steps", 0),
        "not_converged_env_steps": report.get("not_converged", {}).get("env_steps", 0),
        "flags": sorted(report.get("flags", {})),
        "success_rate": float(np.mean(ended)) if ended else 0.0,
        "seconds": seconds,
    }


def main(argv=None) -> int:
    import warp as wp

    import forge_gpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=TASKS, help="task names (unregistered ones are skipped)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--envs", nargs="+", type=int, default=None, help="env counts (CPU: 16 64 256)")
    parser.add_argument("--policies", nargs="+", default=["random", "expert"], choices=["random", "expert"])
    parser.add_argument("--modes", nargs="+", default=["state", "rgbd"], choices=["state", "rgbd"])
    parser.add_argument("--image-size", type=int, default=128, help="the cameras' edge in the rgbd mode [px]")
    parser.add_argument("--seconds", type=float, default=3.0, help="target time per row")
    parser.add_argument(
        "--min-steps", type=int, default=2, help="steps per row at least, whatever --seconds (a longer window)"
    )
    parser.add_argument("--max-steps", type=int, default=0, help="episode length override (0: the task's own)")
    parser.add_argument("--overflow-envs", type=int, default=16, help="envs of the overflow count (0: skip it)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    if args.min_steps < 2:
        parser.error(f"--min-steps {args.min_steps}: expected at least 2")
    wp.config.quiet = True
    device = args.device or forge_gpu.sim.default_device()
    cuda = wp.get_device(device).is_cuda
    envs = args.envs or (CUDA_ENVS if cuda else CPU_ENVS)
    if args.smoke:
        envs, args.seconds, args.image_size, args.max_steps = [2], 0.05, 32, 4
        args.tasks = args.tasks[:1]
        args.overflow_envs = min(args.overflow_envs, 2)
    tasks = []
    for task in args.tasks:
        if task in forge_gpu.sim.TASKS:
            tasks.append(task)
        else:
            print(f"note: skipping task {task!r}: it is not registered")
    rows, overflow = [], []
    with tempfile.TemporaryDirectory(prefix="forge-bench-grasp-") as parent:
        for task in tasks:
            for policy in args.policies:
                for n in envs:
                    state = None
                    for mode in args.modes:
                        row = measure(task, n, policy, mode, device, args, parent)
                        state = row["loop_env_steps_per_s"] if mode == "state" else state
                        row["vs_state"] = row["loop_env_steps_per_s"] / state if state else float("nan")
                        rows.append(row)
                        print(
                            f"{task} {policy} {n} envs {mode}: {row['env_steps_per_s']:.4g} env-steps/s "
                            f"({row['steps']} steps, dropped {row['dropped_steps']})",
                            flush=True,
                        )
                if args.overflow_envs > 0:
                    overflow.append(overflow_counts(task, policy, args.overflow_envs, device, args, parent))
                    o = overflow[-1]
                    print(
                        f"{task} {policy} overflow: {o['episodes']} episodes, {o['env_steps']} env-steps, "
                        f"dropped {o['dropped_env_steps']}, not converged {o['not_converged_env_steps']}",
                        flush=True,
                    )
    columns = ["task", "policy", "num_envs", "mode", "steps", "env_steps_per_s", "loop_env_steps_per_s", "vs_state"]
    columns += ["mb_written", "dropped_steps"]
    md = f"## Grasping ({device}, rgbd: 2 cameras at {args.image_size} px, default codecs)\n\n" + table(rows, columns)
    o_columns = ["task", "policy", "num_envs", "max_steps", "nconmax", "njmax", "episodes", "env_steps"]
    o_columns += ["dropped_env_steps", "not_converged_env_steps", "success_rate"]
    if overflow:
        md += "\n\n### Solver overflow at the shipped settings (whole episodes, state only)\n\n"
        md += table(overflow, o_columns)
    print(md)
    payload = {
        "device": device,
        "machine": machine(),
        "image_size": args.image_size,
        "seconds": args.seconds,
        "min_steps": args.min_steps,
    }
    payload |= {"command": " ".join(["python", "bench/grasp.py", *(argv if argv is not None else sys.argv[1:])])}
    payload |= {"rows": rows, "overflow": overflow}
    path = save("grasp", payload, md, Path(args.out) if args.out else None)
    print(f"saved {path}")
    dropped = sum(o["dropped_env_steps"] for o in overflow)
    if dropped:
        print(f"note: {dropped} env-steps dropped contacts or constraint rows: raise the task's [solver] nconmax/njmax")
    return 0


if __name__ == "__main__":
    sys.exit(main())
