"""Env-steps per second against num_envs, per task: stepping only, with the transport, with recording.

python bench/pipeline.py                 # CPU: cartpole 256..4096 envs, other tasks fewer; CUDA up to 16384
python bench/pipeline.py --smoke         # seconds-long check that every figure is produced
python bench/pipeline.py --tasks cartpole --envs 1024 --set record_state=false   # without the state columns

Modes, each S step calls of the same env with the same policy. S is fixed per row: from a warm-up, so that
stepping only takes about --seconds, but at least 2 * max_steps so that every env publishes episodes;
max_steps is overridden to --max-steps (default 50) so that this stays affordable for every task.
  stepping        reset, then a plain ``env.step(policy(obs))`` loop, synchronized at the end
  transport       ``collect(env, policy, None, steps=S)``: stepping plus HostSnapshotTransport and its consumer
  record_packed   ``collect`` recording into a temporary run directory, packed layout, the default image codecs
                  (tasks with cameras: rgb zstd, depth quantized; encoded in the writer's pool of --writers threads)
  record_packed_raw  the same with raw images (``--codec none``), no buffer compression
  record_packed_lz4  raw images with LZ4 buffer compression
  record_packed_jpeg  the default codecs but rgb as jpeg at quality 90
  record_npz      schema 1 (one file per episode), stored (uncompressed) members
  record_npz_deflate1  schema 1 with deflate level 1
Figures:
  env_steps_per_s       num_envs * S / the wall time of the whole call, including the recorder's close
                        (every completed episode published)
  efficiency            env_steps_per_s / the stepping-only figure of the same row: the pipeline efficiency
                        (the design's goal: recording costs under 10%, i.e. record_* efficiency >= 0.9)
  loop_env_steps_per_s  CollectionSummary.env_steps_per_second: the stepping loop alone (from the reset to the
                        transport drained), so writers still busy at the end are not counted
  stall_pct             100 * CollectionSummary.stall_fraction: share of the loop spent waiting for a free slot
Recordings go to a temporary directory (--record-dir chooses its parent) that is deleted afterwards.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import add_set_option, machine, plot, save, table

CPU_ENVS = {"cartpole": [256, 1024, 4096]}
CPU_ENVS_OTHER = [64, 256]  # tasks with contacts or cameras step far slower on the CPU
CUDA_ENVS = [256, 1024, 4096, 16384]
#: mode -> (format, compression, compression level, image codecs)
RECORDINGS = {
    "record_packed": ("packed", "none", 1, {}),
    "record_packed_raw": ("packed", "none", 1, {"*": "none"}),
    "record_packed_lz4": ("packed", "lz4", 1, {"*": "none"}),
    "record_packed_jpeg": ("packed", "none", 1, {"rgb": "jpeg:90"}),
    "record_npz": ("npz", "none", 1, {}),
    "record_npz_deflate1": ("npz", "deflate", 1, {}),
}


def buffer_budget(env) -> int:
    """A recorder byte budget with room for every env's episode buffer plus as many spares (at least 1 GiB)."""
    frame = sum(
        int(np.prod(f["shape"], dtype=np.int64)) * np.dtype(f["dtype"]).itemsize
        for f in env.spec["observation"].values()
    )
    transition = 4 * env.spec["action_shape"][0] + 4 + 2
    steps = env.config.max_steps
    slot = (steps + 1) * frame + steps * transition
    return max(1 << 30, 2 * (env.num_envs + 1) * slot)


def measure(task: str, num_envs: int, device: str, seconds: float, args, parent: str) -> list[dict]:
    import warp as wp

    import forge_gpu
    from forge_gpu.recording import collect

    overrides = ({"max_steps": args.max_steps} if args.max_steps > 0 else {}) | dict(args.overrides)
    env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, **overrides)
    policy = forge_gpu.sim.make_policy(args.policy, env)
    env.reset()
    t0 = time.perf_counter()
    for _ in range(3):  # compile and, on CUDA, capture the graph
        env.step(policy(env.observation))
        wp.synchronize_device(env.device)
    steps = max(min(int(seconds / ((time.perf_counter() - t0) / 3)), 300), 2 * env.config.max_steps)

    def step_only() -> float:
        t0 = time.perf_counter()
        env.reset()
        for _ in range(steps):
            env.step(policy(env.observation))
        wp.synchronize_device(env.device)
        return num_envs * steps / (time.perf_counter() - t0)

    first = step_only()
    base = {"task": task, "device": str(env.device), "num_envs": num_envs, "steps": steps, "policy": args.policy}
    runs = {"transport": None, **{mode: spec for mode, spec in RECORDINGS.items() if mode in args.modes}}
    collected = {}
    for mode, recording in runs.items():
        directory = None if recording is None else tempfile.mkdtemp(prefix=f"{task}-{num_envs}-{mode}-", dir=parent)
        if directory is not None:
            Path(directory).rmdir()  # collect creates the run directory itself
        format, compression, level, codecs = recording or ("packed", "none", 1, {})
        codecs = {f: c for f, c in codecs.items() if f == "*" or f in env.spec["observation"]}  # a task's cameras
        try:
            t0 = time.perf_counter()
            summary = collect(
                env,
                policy,
                directory,
                steps=steps,
                slots=args.slots,
                options=forge_gpu.recording.RecordingOptions(
                    format=format,
                    codecs=codecs,
                    writers=args.writers,
                    compression=compression,
                    compression_level=level,
                    max_buffer_bytes=buffer_budget(env) if format == "npz" else None,
                ),
            )
            wall = time.perf_counter() - t0
        finally:
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
        collected[mode] = (num_envs * steps / wall, summary)
    # Stepping only, before and after the collections: their mean is the baseline, so that a slow drift
    # of a shared machine's load does not land on one side of the ratio only.
    last = step_only()
    stepping = (first + last) / 2
    rows = [
        {
            **base,
            "mode": "stepping",
            "env_steps_per_s": stepping,
            "stepping_first": first,
            "stepping_last": last,
            "efficiency": 1.0,
            "loop_env_steps_per_s": stepping,
            "loop_efficiency": 1.0,
            "stall_pct": 0.0,
            "episodes": 0,
            "mb_written": 0.0,
        }
    ]
    for mode, (rate, summary) in collected.items():
        rows.append(
            {
                **base,
                "mode": mode,
                "env_steps_per_s": rate,
                "efficiency": rate / stepping,
                "loop_env_steps_per_s": summary.env_steps_per_second,
                "loop_efficiency": summary.env_steps_per_second / stepping,
                "stall_pct": 100.0 * summary.stall_fraction,
                "episodes": summary.episodes,
                "mb_written": summary.bytes_written / 1e6,
            }
        )
    return rows


def main(argv=None) -> int:
    import warp as wp

    import forge_gpu
    from forge_gpu._src.tasks.catalog import SHIPPED

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(SHIPPED))
    parser.add_argument("--device", default=None)
    parser.add_argument("--envs", nargs="+", type=int, default=None, help="env counts for every task")
    parser.add_argument("--seconds", type=float, default=3.0, help="target stepping-only time per row")
    parser.add_argument("--slots", type=int, default=4, help="transport slots K")
    parser.add_argument("--writers", type=int, default=2, help="recorder writer threads")
    parser.add_argument("--policy", default="random", choices=["random", "expert"])
    parser.add_argument("--max-steps", type=int, default=50, help="episode length override (0: the task's own)")
    parser.add_argument("--modes", nargs="+", default=list(RECORDINGS), help=f"recordings, of {', '.join(RECORDINGS)}")
    parser.add_argument("--record-dir", default=None, help="parent of the temporary run directories")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    add_set_option(parser, "config override, e.g. record_state=false (every frame's state is recorded by default)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    device = args.device or forge_gpu.sim.default_device()
    cuda = wp.get_device(device).is_cuda
    seconds = 0.05 if args.smoke else args.seconds
    if args.smoke:
        args.max_steps = 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="forge-bench-", dir=args.record_dir) as parent:
        for task in args.tasks:
            if task not in forge_gpu.sim.TASKS:
                print(f"note: skipping task {task!r}: it is not registered")
                continue
            default = CUDA_ENVS if cuda else CPU_ENVS.get(task, CPU_ENVS_OTHER)
            envs = args.envs or ([8] if args.smoke else default)
            for n in envs:
                rows += measure(task, n, device, seconds, args, parent)
    columns = ["task", "num_envs", "steps", "mode", "env_steps_per_s", "efficiency", "loop_efficiency", "stall_pct"]
    columns += ["episodes", "mb_written"]
    md = f"## Pipeline ({device}, K={args.slots}, {args.writers} writers, policy {args.policy})\n\n" + table(
        rows, columns
    )
    payload = {"machine": machine(), "device": device, "slots": args.slots, "writers": args.writers}
    payload.update(policy=args.policy, max_steps=args.max_steps, rows=rows)
    path = save("pipeline", payload, md, args.out)
    plot(
        rows,
        x="num_envs",
        y="env_steps_per_s",
        series="mode",
        panels="task",
        path=path.with_suffix(".png"),
        ylabel="env-steps/s",
        title=f"Collection pipeline, {device}",
    )
    print(md)
    print(f"\nwrote {path} and {path.with_suffix('.png').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
