"""What each durability level costs: packed recording of pre-made batches at durability ``process`` (the page
cache) and ``machine`` (each block synced before its commit line and the log after it), alternated, one run.

python bench/durability.py            # cartpole-like 4096 envs ~25-step episodes, and 64x64 RGB-D 256 envs
python bench/durability.py --smoke    # seconds-long check that every figure is produced

Figures per shape and level: rows_per_s (rows appended, close included, over the wall time), episodes_per_s,
syncs (fdatasync and fsync calls), mb_per_s, and vs_process (rows_per_s over the process level's, medians of
--repeats alternating runs). Runs go to --record-dir (default: a temporary directory under the system's);
its file system is printed: a sync costs what that disk's cache flush costs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from common import fs_type, machine, make_batches, save, table

SHAPES = {
    "short": {"num_envs": 4096, "steps": 60, "image": None},
    "images": {"num_envs": 256, "steps": 30, "image": 64},
}
SMOKE = {"short": {"num_envs": 64, "steps": 10, "image": None}, "images": {"num_envs": 8, "steps": 6, "image": 16}}


def record(parent: str, env, batches, durability: str) -> dict:
    from forge_gpu.recording import PackedRecorder

    syncs = [0]
    real = os.fdatasync, os.fsync

    def counted(fn):
        def sync(fd):
            syncs[0] += 1
            fn(fd)

        return sync

    os.fdatasync, os.fsync = counted(real[0]), counted(real[1])
    directory = os.path.join(parent, f"run-{durability}-{time.monotonic_ns()}")
    try:
        start = time.perf_counter()
        recorder = PackedRecorder(directory, env, durability=durability, statistics=False)
        for observation, result in batches:
            recorder.append(observation, result)
        recorder.close()
        seconds = time.perf_counter() - start
    finally:
        os.fdatasync, os.fsync = real
    rows = len(batches) * env.num_envs
    row = {"rows_per_s": rows / seconds, "episodes_per_s": recorder.completed_episodes / seconds}
    row |= {"syncs": syncs[0], "mb_per_s": recorder.bytes_written / seconds / 1e6}
    shutil.rmtree(directory, ignore_errors=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--record-dir", default=None)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    shapes = SMOKE if args.smoke else SHAPES
    repeats = 1 if args.smoke else args.repeats
    parent = tempfile.mkdtemp(prefix="forge-durability-", dir=args.record_dir)
    rows = []
    try:
        for shape, size in shapes.items():
            end_prob = 0.04 if size["image"] is None else 0.02
            env, batches = make_batches(
                size["num_envs"], size["steps"], max_steps=200, end_prob=end_prob, image=size["image"]
            )
            runs = {"process": [], "machine": []}
            record(parent, env, batches, "process")  # warm-up: imports, first allocations
            for _ in range(repeats):
                for level in runs:
                    runs[level].append(record(parent, env, batches, level))
            for level, measured in runs.items():
                row = {"shape": shape, "durability": level}
                row |= {k: statistics.median(r[k] for r in measured) for k in measured[0]}
                rows.append(row)
            rows[-1]["vs_process"] = rows[-1]["rows_per_s"] / rows[-2]["rows_per_s"]
            rows[-2]["vs_process"] = 1.0
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    where = f"{parent} ({fs_type(os.path.dirname(parent))})"
    columns = ["shape", "durability", "rows_per_s", "episodes_per_s", "mb_per_s", "syncs", "vs_process"]
    md = f"## Durability levels (runs under {where}, medians of {repeats})\n\n" + table(rows, columns)
    path = save("durability", {"machine": machine(), "where": where, "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
