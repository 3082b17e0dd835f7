"""Replay against collection: frames/s of ``replay`` and of direct collection with the same config, and the
workflow replay is for (rendered successful episodes by collecting state-only and re-rendering those).

python bench/replay.py            # reach on the CPU (64 envs, 64x64 images, 200 steps), expert and random
python bench/replay.py --smoke    # seconds-long check that every figure is produced

(a) throughput, one config (reach, rendering on, the expert policy), in one run:
  collect        ``collect`` of S step calls into a packed run: frames recorded / wall time of the call
  replay_state   ``replay(from_="state")`` of that run, same config: frames written / wall time
  replay_actions ``replay(from_="actions")`` of that run: frames / wall time (re-simulates the physics)
  vs_collect     each frames/s / collect's (the target: replay_state >= 0.9)
(b) workflow, per policy and max_steps: K rendered successful reach episodes, from the E episodes that S step
    calls of one seed end
  render_all     collect E episodes with rendering on (the successful ones are K)
  state_only     collect the same E episodes with params.render = false (physics and state only)
  replay         replay(from_="state", successful=True) of the state-only run with rendering on
  speedup        render_all / (state_only + replay)
Every time is the wall time of make + the call (kernels compiled before, in a warm-up).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import machine, save, table

#: (policy, max_steps) of the workflow rows: the expert reaches the target in about 45 steps, so at max_steps
#: 40 a part of its episodes time out; the random policy rarely succeeds.
WORKFLOWS = [("expert", 100), ("expert", 40), ("random", 100)]
SMOKE_WORKFLOWS = [("expert", 20), ("expert", 8), ("random", 10)]


def _collect(root: Path, name: str, *, envs: int, steps: int, policy: str, seed: int, **overrides):
    """``steps`` step calls (not a number of episodes: which episodes end then depends on timing)."""
    import forge_gpu

    began = time.perf_counter()
    env = forge_gpu.sim.make("reach", num_envs=envs, device=None, seed=seed, **overrides)
    summary = forge_gpu.recording.collect(env, forge_gpu.sim.load_policy(policy, env), str(root / name), steps=steps)
    seconds = time.perf_counter() - began
    run = forge_gpu.reading.open_run(root / name)
    frames = sum(run.ids(k)[2] + 1 for k in range(len(run)))
    successes = sum(e.terminated[-1] for e in run.read(list(range(len(run))), forge_gpu.reading.EpisodeReadOptions()))
    return {"seconds": seconds, "frames": frames, "episodes": summary.episodes, "successful": int(successes)}


def _replay(root: Path, source: str, name: str, **kwargs):
    import forge_gpu

    began = time.perf_counter()
    report = forge_gpu.recording.replay(root / source, root / name, **kwargs)
    return {"seconds": time.perf_counter() - began, "frames": report["frames"], "episodes": report["episodes"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200, help="step calls of each collection (E episodes end)")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that every figure is produced")
    parser.add_argument("--out", default=None, help="where the JSON and Markdown go (default bench/results)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.envs, args.steps, args.image_size = 4, 30, 32
    size = {"params.image_size": args.image_size}
    root = Path(tempfile.mkdtemp(prefix="forge-replay-bench-"))
    try:
        # Warm-up: compile every kernel of both configs and of replay.
        _collect(root, "warm", envs=2, steps=10, policy="expert", seed=99, **size)
        _replay(root, "warm", "warm-replay", batch=2)

        collected = _collect(root, "a", envs=args.envs, steps=args.steps, policy="expert", seed=0, **size)
        rows = [{"mode": "collect", **collected}]
        rows.append({"mode": "replay_state", **_replay(root, "a", "a-state", batch=args.envs)})
        rows.append({"mode": "replay_actions", **_replay(root, "a", "a-actions", from_="actions", batch=args.envs)})
        for r in rows:
            r["frames_per_s"] = r["frames"] / r["seconds"]
            r["vs_collect"] = r["frames_per_s"] / rows[0]["frames_per_s"]

        workflow = []
        for policy, max_steps in WORKFLOWS if not args.smoke else SMOKE_WORKFLOWS:
            common = {"envs": args.envs, "steps": args.steps, "policy": policy, "seed": 1, "max_steps": max_steps}
            name = f"{policy}-{max_steps}"
            render_all = _collect(root, f"{name}-all", **common, **size)
            state_only = _collect(root, f"{name}-state", **common, **size, **{"params.render": False})
            again = _replay(
                root, f"{name}-state", f"{name}-replayed", successful=True, batch=args.envs,
                overrides={"params.render": True},
            )  # fmt: skip
            assert again["episodes"] == render_all["successful"] == state_only["successful"], (again, render_all)
            both = state_only["seconds"] + again["seconds"]
            workflow.append(
                {
                    "policy": policy,
                    "max_steps": max_steps,
                    "episodes": render_all["episodes"],
                    "successful_K": render_all["successful"],
                    "success_rate": render_all["successful"] / max(render_all["episodes"], 1),
                    "render_all_s": render_all["seconds"],
                    "state_only_s": state_only["seconds"],
                    "replay_s": again["seconds"],
                    "state_then_replay_s": both,
                    "speedup": render_all["seconds"] / both,
                }
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    columns = ["mode", "episodes", "frames", "seconds", "frames_per_s", "vs_collect"]
    flow_columns = list(workflow[0])
    markdown = "\n\n".join(
        [
            f"reach, {args.envs} envs, {args.image_size}x{args.image_size} images, expert policy",
            table(rows, columns),
            "K rendered successful episodes: render everything vs state-only then replay the successful ones",
            table(workflow, flow_columns),
        ]
    )
    print(markdown)
    payload = {"machine": machine(), "args": vars(args), "throughput": rows, "workflow": workflow}
    save("replay", payload, markdown, Path(args.out) if args.out else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
