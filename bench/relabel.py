"""What relabeling with the expert costs: collect's env-steps/s with ``label = "expert"`` (the expert called inside the
captured step on every observation, its action recorded as ``obs/expert_action``) and with a 0.5 expert mix too (one
more kernel per step, the per-episode draw at resets), against plain collection at the same size, in one run.

Three envs of one task and seed (plain, label, label + mix); for each, ``forge_gpu.recording.collect`` with the random
policy as the learner for ``--steps`` steps, without recording (``directory=None``: stepping and the host transport)
and into a new packed run. Rounds alternate the three envs, each round in another order (none always runs first or
last); the best of each is kept (a shared machine's load falls on all). ``ratio`` is env-steps/s against plain's in the
same mode, best against best: 0.9 or more is the target (at most 10% slower). ``ratio_median``: the median over the
rounds of the variant's rate over plain's in the same round (the two measured seconds apart), and ``ratio_low`` /
``ratio_high`` the rounds' extremes: the spread a single ratio has on this machine. plain and label step the same
physics (the same seed and actions; label only records the expert's action beside them). With the mix, the expert's
episodes are other physics than the random policy's (a pushed cube, contacts): that part of a difference is the
episodes', not the relabel's.

``own share``: what the relabel adds to each step, timed alone. The label+mix env's relabel launches (the expert on
the observation, the copy into ``expert_action``, the mix's choice) are captured as a graph of their own, as they run
inside the step, and its replays are timed against the env's own steps, alternated in short bursts (median of each):
the share of a step's time they take, free of the physics' and the machine's variation between the envs.
``label_step_ratio``: in the same alternation, a label env's step rate over a plain env's (the same physics, no
collect around them): what the label does to a whole step.

python bench/relabel.py                          # push, state only, 64 and 256 envs, on the default device
python bench/relabel.py --smoke                  # seconds-long check that every figure is produced
python bench/relabel.py --envs 4096 --steps 500 --device cuda:0
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import add_set_option, machine, save, table

ROUNDS = 6
VARIANTS = {"plain": {}, "label": {"label": "expert"}, "label+mix": {"label": "expert", "expert_mix": 0.5}}


def measure(task: str, num_envs: int, steps: int, device: str, overrides: dict, parent: Path) -> list[dict]:
    import forge_gpu

    envs = {
        name: forge_gpu.sim.make(task, num_envs=num_envs, device=device, **overrides, **extra)
        for name, extra in VARIANTS.items()
    }
    policies = {name: forge_gpu.sim.make_policy("random", env) for name, env in envs.items()}
    rates: dict[tuple[str, str], list[float]] = {}
    names = list(envs)
    count = 0
    for round_ in range(ROUNDS + 1):  # round 0 compiles and captures: not counted
        for mode in ("no recording", "recorded"):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                directory = None
                if mode == "recorded":
                    count += 1
                    directory = str(parent / f"run-{count}")
                summary = forge_gpu.recording.collect(envs[name], policies[name], directory, steps=steps)
                if directory is not None:
                    shutil.rmtree(directory)
                if round_:
                    rates.setdefault((mode, name), []).append(summary.env_steps_per_second)
    rows = []
    for mode in ("no recording", "recorded"):
        plain = np.array(rates[(mode, "plain")])
        for name in VARIANTS:
            mine = np.array(rates[(mode, name)])
            paired = mine / plain  # round by round
            rows.append(
                {
                    "task": task,
                    "device": str(envs[name].device),
                    "num_envs": num_envs,
                    "steps": steps,
                    "mode": mode,
                    "variant": name,
                    "env_steps_per_s": float(mine.max()),
                    "ratio": float(mine.max() / plain.max()),
                    "ratio_median": float(np.median(paired)),
                    "ratio_low": float(paired.min()),
                    "ratio_high": float(paired.max()),
                }
            )
    return rows


def own_share(task: str, num_envs: int, device: str, overrides: dict, bursts: int = 15, burst: int = 20) -> dict:
    """The relabel launches of one step (label + mix), captured alone, against the whole step: median seconds of
    ``burst`` replays of each, alternated ``bursts`` times. In the same alternation, bursts of a plain env's steps
    and of a label env's (no mix: the same physics as plain's): ``label_step_ratio``, plain's median step time over
    label's, is what the label does to a step's rate, without collect's threads around it."""
    import time

    import warp as wp

    import forge_gpu
    from forge_gpu._src.sim.capture import capture_step

    env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, label="expert", expert_mix=0.5, **overrides)
    policy = forge_gpu.sim.make_policy("random", env)
    env.reset()
    for _ in range(3):
        env.step(policy(env.observation))
    labels = env.labels

    def relabel() -> None:
        labels.choose(env.action_input)
        labels.observe(env.observation)

    graph = capture_step(env.device, relabel)
    others = {
        name: forge_gpu.sim.make(task, num_envs=num_envs, device=device, **overrides, **extra)
        for name, extra in (("plain", {}), ("label", {"label": "expert"}))
    }
    others_policy = {name: forge_gpu.sim.make_policy("random", other) for name, other in others.items()}
    for name, other in others.items():
        other.reset()
        for _ in range(3):
            other.step(others_policy[name](other.observation))

    def timed_burst(call) -> float:
        wp.synchronize_device(env.device)
        began = time.perf_counter()
        for _ in range(burst):
            call()
        wp.synchronize_device(env.device)
        return (time.perf_counter() - began) / burst

    times: dict[str, list[float]] = {"step": [], "relabel": [], "plain": [], "label": []}
    for _ in range(bursts):
        times["step"].append(timed_burst(lambda: env.step(policy(env.observation))))
        times["relabel"].append(timed_burst(lambda: wp.capture_launch(graph)))
        for name, other in others.items():
            times[name].append(timed_burst(lambda o=other, p=others_policy[name]: o.step(p(o.observation))))
    step, own, plain, label = (float(np.median(times[k])) for k in ("step", "relabel", "plain", "label"))
    return {"task": task, "device": str(env.device), "num_envs": num_envs, "step_ms": step * 1e3,
            "relabel_ms": own * 1e3, "own_share": own / step, "plain_step_ms": plain * 1e3,
            "label_step_ms": label * 1e3, "label_step_ratio": plain / label}  # fmt: skip


def main(argv=None) -> int:
    import warp as wp

    import forge_gpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="push")
    parser.add_argument("--device", default=None)
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--steps", type=int, default=60, help="collect's steps per measurement")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    add_set_option(parser, "config override passed to forge_gpu.sim.make (default params.render=false)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    device = args.device or forge_gpu.sim.default_device()
    if args.smoke:
        args.envs, args.steps = [4], 5
    overrides = dict(args.overrides) or {"params.render": False}
    parent = Path(tempfile.mkdtemp(prefix="forge-relabel-"))
    try:
        rows = [row for n in args.envs for row in measure(args.task, n, args.steps, device, overrides, parent)]
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    bursts = 3 if args.smoke else 15
    shares = [own_share(args.task, n, device, overrides, bursts=bursts) for n in args.envs]
    columns = ["task", "device", "num_envs", "steps", "mode", "variant", "env_steps_per_s", "ratio", "ratio_median"]
    columns += ["ratio_low", "ratio_high"]
    md = "## Relabeling with the expert against plain collection\n\n" + table(rows, columns)
    md += "\n\n## The relabel's own share of a step (label + mix, timed alone)\n\n"
    md += table(shares, ["task", "device", "num_envs", "step_ms", "relabel_ms", "own_share", "plain_step_ms",
                         "label_step_ms", "label_step_ratio"])  # fmt: skip
    payload = {"machine": machine(), "overrides": overrides, "rows": rows, "own_share": shares}
    path = save("relabel", payload, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
