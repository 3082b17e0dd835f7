"""Curation figures: select, merge and split against a plain copy of the same bytes.

python bench/curate.py            # a ~250 MB source run, about a minute on 2 cores
python bench/curate.py --smoke    # seconds-long check that every figure is produced

The source is a packed run made here without simulating (numpy episodes written through ``convert``'s writer, as
``collect`` would lay them out after ``convert``: end to end, uncompressed): EPISODES episodes of STEPS steps,
observation ``proprio`` [16] and ``rgb`` [32, 32, 3] uint8, state [32] float32 per frame, two params; half of the
episodes end terminated (``success``), half truncated. Each row is one call, timed from the call to the published
run (reading and checking the source, writing, recomputing the statistics):

  select_values   select_run(--where "success and return > -1e9"): a values pass over the source's reward and flags,
                  then the kept half read whole and written
  select_index    select_run(--where "env % 2 == 0"): names the index only, so no values pass; about half kept
  select_all      select_run(--where "length > 0"): every episode kept (a re-pack, like convert)
  merge_two       merge_runs([source, source]): both copies, the second's env ids moved
  split_0.1       split_run(val=0.1): both parts

  episodes_per_s  episodes written / seconds;  mb_per_s  bytes of the new run(s) / seconds
  copy_mb_per_s   shutil.copytree of the new run(s) (the same bytes), timed just after, both from the page cache
  vs_copy         mb_per_s / copy_mb_per_s
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
from common import fs_type, machine, save, table, tree_bytes  # noqa: E402

from forge_gpu._src.core.manifest import initial_manifest  # noqa: E402
from forge_gpu._src.curation.writing import write_run  # noqa: E402
from forge_gpu._src.formats.registry import FORMATS  # noqa: E402
from forge_gpu.curation import merge_runs, select_run, split_run  # noqa: E402
from forge_gpu.reading import Episode  # noqa: E402
from forge_gpu.recording import RunDescription  # noqa: E402

FULL = {"episodes": 2000, "steps": 40}
SMOKE = {"episodes": 40, "steps": 8}
ENVS = 64
DT = 0.05


# Made, not declared: this module is loaded by path (test_bench_smoke.py), where a declared dataclass's string
# annotations cannot be resolved.
Scene = dataclasses.make_dataclass("Scene", [("kind", str, dataclasses.field(default="bench"))], frozen=True)


def description() -> RunDescription:
    observation = {
        "env_id": {"shape": [], "dtype": "int32"},
        "episode_id": {"shape": [], "dtype": "int32"},
        "step_id": {"shape": [], "dtype": "int32"},
        "time": {"shape": [], "dtype": "float32"},
        "proprio": {"shape": [16], "dtype": "float32"},
        "rgb": {"shape": [32, 32, 3], "dtype": "uint8"},
    }
    spec = {
        "action_shape": [4],
        "action_low": [-1.0] * 4,
        "action_high": [1.0] * 4,
        "observation": observation,
        "instruction": "bench",
        "control_dt": DT,
        "has_success": True,
        "state": {"joint_q": {"shape": [32], "dtype": "float32"}},
        "params": {"mass_scale": {"shape": [], "dtype": "float32"}, "color": {"shape": [3], "dtype": "float32"}},
    }
    config = {"num_envs": ENVS, "max_steps": 1000, "seed": 0}
    return RunDescription(spec=spec, config=config, task="bench_curate", scene=Scene(), seed=0)


def episodes(count: int, steps: int):
    rng = np.random.default_rng(0)
    for k in range(count):
        env_id, episode_id = k % ENVS, k // ENVS
        frames = {
            "env_id": np.full(steps + 1, env_id, np.int32),
            "episode_id": np.full(steps + 1, episode_id, np.int32),
            "step_id": np.arange(steps + 1, dtype=np.int32),
            "time": (np.arange(steps + 1) * DT).astype(np.float32),
            "proprio": rng.normal(size=(steps + 1, 16)).astype(np.float32),
            "rgb": rng.integers(0, 256, (steps + 1, 32, 32, 3), dtype=np.uint8),
        }
        ended = np.arange(steps) == steps - 1
        yield Episode(
            env_id=env_id,
            episode_id=episode_id,
            steps=steps,
            obs={f: a[:-1] for f, a in frames.items()},
            next={f: a[1:] for f, a in frames.items()},
            action=rng.uniform(-1, 1, (steps, 4)).astype(np.float32),
            reward=rng.normal(size=steps).astype(np.float32),
            terminated=ended & (k % 2 == 0),
            truncated=ended & (k % 2 == 1),
            path="",
            state={"joint_q": rng.normal(size=(steps + 1, 32)).astype(np.float32)},
            params={"mass_scale": np.float32(rng.uniform(0.5, 1.5)), "color": rng.random(3).astype(np.float32)},
        )


def make_source(out: str, sizes: dict) -> str:
    manifest = initial_manifest(description(), 1 << 28, FORMATS["packed"].identity)
    manifest.update(status="closed")
    write_run(out, manifest, episodes(sizes["episodes"], sizes["steps"]), to="packed", compression="none")
    return out


def timed_copy(path: str) -> float:
    """Seconds shutil.copytree takes for ``path`` (the copy removed after)."""
    target = path + ".copy"
    start = time.perf_counter()
    shutil.copytree(path, target)
    seconds = time.perf_counter() - start
    shutil.rmtree(target)
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that every figure is produced")
    parser.add_argument("--record-dir", default=str(HERE / "results" / "tmp"), help="where runs are written")
    parser.add_argument("--out", default=None, help="output folder (default bench/results)")
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    os.makedirs(args.record_dir, exist_ok=True)
    parent = tempfile.mkdtemp(prefix="curate-", dir=args.record_dir)
    rows = []
    start = time.perf_counter()
    try:
        source = make_source(os.path.join(parent, "source"), sizes)
        calls = {
            "select_values": lambda out: select_run(source, out, "success and return > -1e9"),
            "select_index": lambda out: select_run(source, out, "env % 2 == 0"),
            "select_all": lambda out: select_run(source, out, "length > 0"),
            "merge_two": lambda out: merge_runs([source, source], out),
            "split_0.1": lambda out: split_run(source, out, val=0.1, seed=0),
        }
        for figure, call in calls.items():
            out = os.path.join(parent, figure)
            t0 = time.perf_counter()
            report = call(out)
            seconds = time.perf_counter() - t0
            written = report["train"] + report["val"] if "train" in report else report["episodes"]
            nbytes = tree_bytes(out)
            copy = timed_copy(out)
            row = {
                "figure": figure,
                "episodes_in": sizes["episodes"] * (2 if figure == "merge_two" else 1),
                "episodes_out": written,
                "seconds": seconds,
                "episodes_per_s": written / seconds,
                "mb_out": nbytes / 1e6,
                "mb_per_s": nbytes / 1e6 / seconds,
                "copy_mb_per_s": nbytes / 1e6 / copy,
                "vs_copy": copy / seconds,
            }
            rows.append(row)
            print(table([row], list(row)), flush=True)
            shutil.rmtree(out)
        source_mb = tree_bytes(source) / 1e6
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    heading = (
        f"curation figures: a {source_mb:.0f} MB packed source run of {sizes['episodes']} episodes of "
        f"{sizes['steps']} steps, on {fs_type(args.record_dir)} ({args.record_dir}); "
        f"{time.perf_counter() - start:.0f} s"
    )
    markdown = heading + "\n\n" + table(rows, list(rows[0]))
    info = machine(gpu=False)
    payload = {"machine": info, "smoke": args.smoke, "source_mb": source_mb, "rows": rows}
    save("curate", payload, markdown, Path(args.out) if args.out else None)
    print(f"{markdown}\n{json.dumps(info)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
