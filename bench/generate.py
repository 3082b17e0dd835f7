"""Demonstration generation: yield and rate from 10 source demonstrations, against the expert's collection.

Per task (lift, stack, place): 10 source episodes of the scripted expert with extra noise (a stand-in for human
demonstrations: a grasp point off by up to 8 mm, 3 mm of noise on each step's move), then
``forge_gpu.recording.generate`` of N successful episodes from them at E envs (generate's defaults for these tasks:
``--follow command``, ``--select nearest``); the yield (successes per attempt),
per subtask the attempts that reached it and the failures in it, attempts/s and the generation's env-steps/s; and
the expert's own collection of N episodes at the same E envs (env-steps/s, episodes/s). Cameras off.

Then behaviour cloning, the comparison a user makes: ``bench/imitation.py``'s policy (its defaults: an MLP from 2
frames of the state fields to a chunk of 8 actions, 10,000 Adam steps; ``--bc-head gmm``, the default, its mixture
head, its log standard deviations floored at ``--bc-log-std-min``, -3 by default) trained on the source run, on the
N generated and on the N expert episodes, once per training seed
(``--bc-seeds``), each scored by ``forge_gpu.recording.evaluate`` over ``--bc-episodes`` keyed episodes (seed
``--bc-eval-seed``, ``--bc-envs`` worlds on the CPU, the chunk run open loop 4 steps). Rows are written as they come
(``complete`` false until the end). ``--bc-tasks`` names the tasks it runs on; ``--bc-seeds`` with no value skips it;
``--bc-runs`` names the runs it trains on. ``--without-held`` generates with the task's subtasks but none carrying a
body (each segment moved with its object alone: the comparison for the held body's correction).

python bench/generate.py                               # lift, stack, place: 1,000 each at 16 envs, on the CPU
python bench/generate.py --envs 32 --tasks stack place lift --bc-tasks lift   # behaviour cloning on lift alone
python bench/generate.py --smoke                       # seconds-long check that every figure is produced
python bench/generate.py --envs 32 --follow pose --select random   # the gain follower, sources drawn uniformly
python bench/generate.py --envs 32 --follow pose --gain 0.3          # the gain follower at 0.3 of the pose error
python bench/generate.py --episodes 1000 --envs 1024 --device cuda:0
python bench/generate.py --new-task --episodes 500 --envs 32   # bench/tasks/tray.toml: no expert, scripted sources

``--new-task`` measures a task with no expert instead (bench/tasks/tray.toml, the Panda dropping a cube into a
tray): its 10 sources are bench/tasks/tray_sources.py's scripted episodes (a stand-in for a person's), there is no
expert collection to compare with; written to bench/results/generate-tray.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import add_set_option, machine, save, table

SOURCE_NOISE = {"params.expert.position_noise": 0.008, "params.expert.action_noise": 0.003}
"""The expert's extra noise for the source demonstrations (the shipped files: 4 mm and 1 mm)."""


def without_held(task: str) -> dict:
    """The override that generates ``task`` with its subtasks as shipped but none carrying a body (no ``held``: each
    segment moved with its object alone, the hand's offset uncorrected)."""
    import forge_gpu

    subtasks = forge_gpu.sim.task_config(task).params.subtasks
    return {"params.subtasks": [{k: v for k, v in s.items() if k != "held"} for s in subtasks]}


def measure(task: str, num_envs: int, episodes: int, sources: int, device: str, overrides: dict, parent: str,
            bc=None, held: bool = True, gain: float | None = None, follow: str = "command",
            select: str = "nearest") -> dict:  # fmt: skip
    """The yield and rates of ``task``'s generation; with ``bc`` (runs -> rows), behaviour cloning on its runs;
    ``held`` false: without the held body's correction."""
    import forge_gpu
    from forge_gpu._src.generate.follower import Motion

    folder = Path(tempfile.mkdtemp(prefix=f"generate-{task}-", dir=parent))
    try:
        source = folder / "source"
        env = forge_gpu.sim.make(task, num_envs=min(num_envs, sources), device=device, seed=100,
                                 **overrides, **SOURCE_NOISE)  # fmt: skip
        forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("expert", env), str(source), episodes=sources)
        del env
        subtasks = {} if held else without_held(task)
        summary = forge_gpu.recording.generate(source, folder / "generated", episodes=episodes, num_envs=num_envs,
                                               device=device, task=task, overrides=overrides | subtasks,
                                               motion=Motion(follow=follow, gain=gain), select=select)  # fmt: skip
        env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, seed=7, **overrides)
        expert = forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("expert", env), str(folder / "expert"),
                                             episodes=episodes)  # fmt: skip
        generation_rate = summary.env_steps / summary.seconds
        expert_rate = expert.env_steps / expert.seconds
        row = {
            "task": task,
            "held": held,
            "follow": follow,
            "select": select,
            "gain": Motion(gain=gain).pose_gain if follow == "pose" else None,
            "device": str(env.device),
            "num_envs": num_envs,
            "sources_used": summary.sources,
            "episodes": summary.episodes,
            "attempts": summary.attempts,
            "yield": summary.yield_,
            "attempts_per_s": summary.attempts_per_s,
            "generate_env_steps_per_s": generation_rate,
            "expert_env_steps_per_s": expert_rate,
            "expert_episodes_per_s": expert.episodes / expert.seconds,
            "rate_ratio": generation_rate / expert_rate,
        }
        for name, reached, failed in zip(summary.subtasks, summary.reached, summary.failed_in, strict=True):
            row[f"reached_{name}"] = reached / summary.attempts
            row[f"failed_in_{name}"] = failed
        print(table([row], list(row)), flush=True)
        if bc is not None:
            row["bc"] = bc({"sources": source, "generated": folder / "generated", "expert": folder / "expert"})
        return row
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def behaviour_cloning(task: str, runs: dict, args, overrides: dict, done: list) -> list[dict]:
    """``bench/imitation.py``'s policy (its defaults, ``--bc-head``) trained on each run of ``runs`` (name -> run)
    with each of ``args.bc_seeds``, scored with ``forge_gpu.recording.evaluate`` over ``args.bc_episodes`` keyed
    episodes (seed ``args.bc_eval_seed``, ``args.bc_envs`` worlds on the CPU). ``done(row)`` after each row."""
    import imitation
    import torch

    import forge_gpu

    bc = imitation.build_parser().parse_args(["--task", task, "--episodes", str(args.bc_episodes),
                                              "--execution", "open_loop", "--head", args.bc_head,
                                              "--log-std-min", str(args.bc_log_std_min)])  # fmt: skip
    if args.smoke:
        bc.train_steps, bc.batch, bc.hidden = 20, 32, 32
    torch.set_num_threads(bc.threads)
    eval_env = imitation.make_env(task, args.bc_envs, args.bc_eval_seed, overrides)
    bc.fields = imitation.policy_fields(eval_env.spec)
    rows = []
    for name, run in runs.items():
        windows = imitation.load_windows(str(run), bc.history, bc.horizon, "action", fields=bc.fields)
        episodes = len(forge_gpu.reading.open_run(str(run)))
        for seed in args.bc_seeds:
            checkpoint, figures = imitation.train([windows], str(run), bc, seed)
            row = {"task": task, "trained_on": name, "episodes": episodes, "seed": seed, **figures}
            row |= imitation.score(eval_env, checkpoint, bc)
            rows.append(row)
            print(table([row], BC_COLUMNS), flush=True)
            done(row)
    return rows


RUNS = ("sources", "generated", "expert")
"""The runs of a task that behaviour cloning trains on: the source demonstrations, the generated and the expert's."""

BC_COLUMNS = ["task", "trained_on", "episodes", "seed", "windows", "train_s", "open_loop_success", "open_loop_eval_s"]


def bc_summary(rows: list[dict]) -> list[dict]:
    """Per task and training run: the mean success at the end over the seeds, and its spread."""
    out = {}
    for r in rows:
        out.setdefault((r["task"], r["trained_on"]), []).append(r)
    summary = []
    for (task, name), group in out.items():
        rates = np.asarray([r["open_loop_success_at_end"] for r in group])
        summary.append({"task": task, "trained_on": name, "episodes": group[0]["episodes"], "seeds": len(group),
                        "success_mean": float(rates.mean()), "success_min": float(rates.min()),
                        "success_max": float(rates.max()),
                        "success": f"{rates.mean():.1%} ({', '.join(f'{v:.1%}' for v in rates)})"})  # fmt: skip
    return summary


def measure_new_task(num_envs: int, episodes: int, sources: int, device: str, overrides: dict, parent: str) -> dict:
    """Generate ``episodes`` of bench/tasks/tray.toml from ``sources`` scripted episodes (no expert to compare)."""
    sys.path.insert(0, str(Path(__file__).parent / "tasks"))
    import tray_sources

    import forge_gpu

    folder = Path(tempfile.mkdtemp(prefix="generate-tray-", dir=parent))
    try:
        source = folder / "source"
        tray_sources.record(str(source), episodes=sources, num_envs=sources, device=device, **overrides)
        summary = forge_gpu.recording.generate(source, folder / "generated", episodes=episodes, num_envs=num_envs,
                                               device=device, overrides=overrides)  # fmt: skip
        print("\n".join(summary.lines()), flush=True)
        row = {
            "task": "tray (bench/tasks/tray.toml)",
            "device": device,
            "num_envs": num_envs,
            "sources_recorded": sources,
            "sources_used": summary.sources,
            "episodes": summary.episodes,
            "attempts": summary.attempts,
            "yield": summary.yield_,
            "attempts_per_s": summary.attempts_per_s,
            "generate_env_steps_per_s": summary.env_steps / summary.seconds,
            "seconds": summary.seconds,
        }
        for name, reached, failed in zip(summary.subtasks, summary.reached, summary.failed_in, strict=True):
            row[f"reached_{name}"] = reached / summary.attempts
            row[f"failed_in_{name}"] = failed
        return row
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main_new_task(args, device: str, overrides: dict, parent: str) -> int:
    began = time.perf_counter()
    row = measure_new_task(args.envs, args.episodes, args.sources, device, overrides, parent)
    print(f"({time.perf_counter() - began:.0f} s)", flush=True)
    columns = ["task", "device", "num_envs", "sources_recorded", "sources_used", "episodes", "attempts", "yield",
               "attempts_per_s", "generate_env_steps_per_s"]  # fmt: skip
    subtask_columns = sorted(k for k in row if k.startswith(("reached_", "failed_in_")))
    md = "## Demonstration generation for a task with no expert\n\n" + table([row], columns)
    md += "\n\n### Per subtask\n\n" + table([row], ["task", *subtask_columns])
    path = save("generate-tray", {"machine": machine(), "overrides": overrides, "rows": [row]}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


def main(argv=None) -> int:
    import warp as wp

    import forge_gpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["lift", "stack", "place"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--episodes", type=int, default=1000, help="successful episodes generated per task")
    parser.add_argument("--sources", type=int, default=10, help="source demonstrations per task")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--new-task", action="store_true",
                        help="bench/tasks/tray.toml (no expert), its scripted sources; not --tasks")  # fmt: skip
    parser.add_argument("--record-dir", default=None, help="where the runs are written (removed after)")
    parser.add_argument("--bc-seeds", type=int, nargs="*", default=[0, 1, 2],
                        help="behaviour cloning's training seeds per run (none: no behaviour cloning)")  # fmt: skip
    parser.add_argument("--bc-tasks", nargs="*", default=None, help="the tasks behaviour cloning runs on (default all)")
    parser.add_argument("--without-held", action="store_true",
                        help="generate without the held body's correction (no subtask's held key)")  # fmt: skip
    parser.add_argument("--follow", default="command", choices=["command", "pose"],
                        help="how the follower makes joint targets (generate --follow)")  # fmt: skip
    parser.add_argument("--select", default="nearest", choices=["nearest", "random"],
                        help="each subtask's source segment (generate --select)")  # fmt: skip
    parser.add_argument("--gain", type=float, default=None,
                        help="--follow pose: the share of the pose error per step (generate --gain)")  # fmt: skip
    parser.add_argument("--bc-runs", nargs="+", default=list(RUNS), choices=RUNS,
                        help="the runs behaviour cloning trains on (default all three)")  # fmt: skip
    parser.add_argument("--bc-episodes", type=int, default=200, help="keyed evaluation episodes per policy")
    parser.add_argument("--bc-envs", type=int, default=200, help="worlds of the evaluation")
    parser.add_argument("--bc-eval-seed", type=int, default=2)
    parser.add_argument("--bc-head", default="gmm", choices=["mse", "gmm"], help="bench/imitation.py's --head")
    parser.add_argument("--bc-log-std-min", type=float, default=-3.0,
                        help="bench/imitation.py's --log-std-min (the mixture's floor; its default: -7)")  # fmt: skip
    add_set_option(parser, "config override passed to make and generate (default params.render=false)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    parser.add_argument("--name", default="generate", help="the results' file name without .json")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    device = args.device or forge_gpu.sim.default_device()
    if args.smoke:
        args.envs, args.episodes, args.sources, args.bc_episodes, args.bc_envs = 4, 4, 4, 4, 4
        args.bc_seeds = args.bc_seeds[:1]
    import imitation

    imitation.check_log_std_min(parser, "--bc-log-std-min", args.bc_log_std_min)
    from forge_gpu._src.generate.follower import Motion

    try:
        Motion(follow=args.follow, gain=args.gain).check(flags=True)
    except ValueError as error:
        parser.error(str(error))
    for flag in ("envs", "episodes", "sources", "bc_episodes", "bc_envs"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected an integer >= 1")
    overrides = dict(args.overrides) or {"params.render": False}
    parent = args.record_dir or tempfile.gettempdir()
    if args.new_task:
        return main_new_task(args, device, overrides, parent)
    bc_tasks = args.tasks if args.bc_tasks is None else args.bc_tasks
    if set(bc_tasks) - set(args.tasks):
        parser.error(f"--bc-tasks {' '.join(bc_tasks)}: expected tasks of --tasks ({' '.join(args.tasks)})")
    rows, bc_rows = [], []
    columns = ["task", "device", "num_envs", "follow", "select", "sources_used", "episodes", "attempts", "yield",
               "attempts_per_s", "generate_env_steps_per_s", "expert_env_steps_per_s", "rate_ratio"]  # fmt: skip

    def write(done: bool) -> Path:
        subtask_columns = sorted({k for r in rows for k in r if k.startswith(("reached_", "failed_in_"))})
        md = "## Demonstration generation against the expert's collection\n\n" + table(rows, columns)
        md += "\n\n### Per subtask\n\n" + table(rows, ["task", *subtask_columns])
        summary = bc_summary(bc_rows)
        if bc_rows:
            floor = f", log std >= {args.bc_log_std_min:g}" if args.bc_head == "gmm" else ""
            md += (f"\n\n### Behaviour cloning ({args.bc_head} head{floor}, {args.bc_episodes} keyed episodes a "
                   f"policy, success at the end: the mean over the seeds, then each seed's)\n\n")  # fmt: skip
            md += table(summary, ["task", "trained_on", "episodes", "seeds", "success"])
        payload = {"machine": machine(), "overrides": overrides, "source_noise": SOURCE_NOISE,
                   "bc_head": args.bc_head, "bc_log_std_min": args.bc_log_std_min,
                   "rows": [{k: v for k, v in r.items() if k != "bc"} for r in rows], "bc_rows": bc_rows,
                   "bc_summary": summary, "complete": done}  # fmt: skip
        path = save(args.name, payload, md, args.out)
        if done:
            print(md)
        return path

    def record(row: dict) -> None:
        bc_rows.append(row)
        write(done=False)

    for task in args.tasks:
        began = time.perf_counter()
        bc = None
        if args.bc_seeds and task in bc_tasks:

            def bc(runs, task=task):
                chosen = {name: runs[name] for name in args.bc_runs}
                return behaviour_cloning(task, chosen, args, overrides, record)

        rows.append(measure(task, args.envs, args.episodes, args.sources, device, overrides, parent, bc,
                            held=not args.without_held, gain=args.gain, follow=args.follow,
                            select=args.select))  # fmt: skip
        write(done=False)
        print(f"({time.perf_counter() - began:.0f} s)", flush=True)
    path = write(done=True)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
