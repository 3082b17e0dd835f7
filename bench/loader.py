"""Training windows through a torch ``DataLoader``, with and without worker processes, on a run with camera frames.

python bench/loader.py                  # reach 128x128 RGB-D at the default codecs, batches of 256, 0 and 2 workers
python bench/loader.py --run RUN        # any recorded run
python bench/loader.py --smoke          # seconds-long check that every figure is produced

Each row is ``--batches`` shuffled batches (epochs of one loader, its workers kept) of ``WindowMapDataset``
(history 2, horizon 4) through ``DataLoader(dataset, sampler=BatchSampler(RandomSampler(dataset), B),
batch_size=None, num_workers=W)``: each worker gathers and decodes whole batches (one index list per call, no
per-sample pickling; a worker gathers and decodes a large batch straight into a shared buffer it reuses, and pickles
a small one: forge_gpu/_src/reading/shared_batches.py). Figures: samples/s over the whole row and after its first batch
(steady: the workers' start left out), each against 0 workers in the same run (workers keep the
throughput; >= 1 is the goal).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
from common import loader_rate, machine, save, table  # noqa: E402


def record(out: Path, *, envs: int, size: int, episodes: int) -> Path:
    import forge_gpu

    env = forge_gpu.sim.make("reach", num_envs=envs, device="cpu", seed=0, max_steps=60, **{"params.image_size": size})
    forge_gpu.recording.collect(env, forge_gpu.sim.make_policy("expert", env), str(out), episodes=episodes)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, help="a recorded run (default: record reach RGB-D into a temporary one)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run
        if run is None:
            size, envs, episodes = (32, 4, 4) if args.smoke else (128, 16, 128)
            run = record(Path(tmp) / "run", envs=envs, size=size, episodes=episodes)
        batch, batches = (16, 3) if args.smoke else (args.batch, args.batches)
        rows = [loader_rate(run, workers=w, batch=batch, batches=batches) for w in args.workers]
    base = next((r["samples_per_s"] for r in rows if r["workers"] == 0), rows[0]["samples_per_s"])
    steady = next((r["steady_samples_per_s"] for r in rows if r["workers"] == 0), rows[0]["steady_samples_per_s"])
    for row in rows:
        row["vs_0_workers"] = row["samples_per_s"] / base
        row["steady_vs_0_workers"] = row["steady_samples_per_s"] / steady
    columns = ["workers", "batch", "batches", "samples_per_s", "vs_0_workers", "steady_samples_per_s"]
    columns += ["steady_vs_0_workers", "first_batch_s", "seconds"]
    markdown = "## DataLoader (WindowMapDataset, shuffled batches)\n\n" + table(rows, columns)
    print(markdown)
    path = save("loader", {"machine": machine(gpu=False), "smoke": args.smoke, "rows": rows}, markdown, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
