"""The cost of a row and of an episode: every row of its table in one run, each a ratio within the run.

python bench/costs.py                 # CPU sizes, a few minutes on 2 cores
python bench/costs.py --smoke         # seconds-long check that every figure is produced
python bench/costs.py --only read_episodes --only loader   # some rows

  recorder        make_recorder's defaults (packed) fed pre-made host batches (forge_gpu.testing: cartpole's layout,
                  1024 envs, 200-step episodes, no state columns), rows/s over appends + close, against
                  bench/common.py's PerRowRecorder (per-row Python dicts, np.savez per episode) on 128 envs of the
                  same episodes (its rate does not depend on the env count; it is slow).
  ingest          make_recorder's defaults fed bench/common.py's host batches (4096 envs, ~25-step episodes), rows/s,
                  against a raw sequential write of as many bytes (bench/common.py's raw_sequential_write) as rows/s.
  pipeline        bench/common.py's pipeline (cartpole, 1024 envs, CPU, random policy): recorded over
                  unrecorded env-steps/s, each pair printed, the median as the figure.
  read_episodes   1024 cartpole episodes of 200 steps, recorded packed and converted to schema 1 (npz): a first
                  pass ``for episode in forge_gpu.reading.read_episodes(run)`` in a new process (numpy and pyarrow
                  imported before the clock, as a training script has them; forge_gpu's own lazy modules counted, from
                  byte-compiled files as an installed package has them), then a
                  warm pass (the median of 3) in the same process; the run in the page cache. Episodes/s.
  action_windows  forge_gpu.reading.action_windows(run, 2, 8) over the same runs, windows/s (median of 3).
  windows_epoch   an epoch of shuffled batches of 256 (history 2, horizon 8): ``Windows(packed, 2, 8)`` made and
                  batched over a permutation, against the schema-1 run's action_windows collated by hand (every
                  window listed, then np.stack per key for each batch of the same permutation); windows/s, loads
                  included (given apart too).
  image_batches   Windows.batch of shuffled batches of 256 (history 2, horizon 4) over a 128x128 RGB-D packed run
                  stored raw (synthetic frames: 32 envs, 100 steps), the batch's bytes per second against a plain
                  copy of as many bytes (np.copyto into a buffer reused, the machine's memory bandwidth for it).
  loader          torch DataLoader over the cartpole run: WindowMapDataset (history 2, horizon 4), batches of 256
                  handed out whole by a BatchSampler over a RandomSampler (bench/common.py's loader_rate), 2000
                  batches (epochs of one loader, its workers kept), 2 workers
                  against 0 workers, samples/s over the whole row (the workers' start in it) and after its first
                  batch (steady_ratio).
"""

from __future__ import annotations

import compileall
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
import common  # noqa: E402
from common import (  # noqa: E402
    PerRowRecorder,
    active_rows,
    figure_directory,
    loader_rate,
    machine,
    make_batches,
    median_rate,
    new_directory,
    raw_sequential_write,
    record,
    run_sections,
    save,
    section_args,
    table,
)

import forge_gpu  # noqa: E402

FULL = {
    "recorder": {"num_envs": 1024, "reference_envs": 128, "max_steps": 200, "steps": 201},
    "ingest": {"num_envs": 4096, "steps": 400},
    "pipeline": {"num_envs": 1024, "steps": 600, "pairs": 3},
    "reading": {"num_envs": 1024, "max_steps": 200},
    "image_batches": {"num_envs": 32, "steps": 100, "image": 128, "batches": 40},
    "loader": {"num_envs": 1024, "max_steps": 200, "batches": 2000},
}
SMOKE = {
    "recorder": {"num_envs": 32, "reference_envs": 8, "max_steps": 10, "steps": 11},
    "ingest": {"num_envs": 64, "steps": 40},
    "pipeline": {"num_envs": 16, "steps": 20, "pairs": 1},
    "reading": {"num_envs": 16, "max_steps": 20},
    "image_batches": {"num_envs": 4, "steps": 12, "image": 16, "batches": 2},
    "loader": {"num_envs": 16, "max_steps": 20, "batches": 3},
}
TARGETS = {"recorder": 180, "ingest": 0.8, "pipeline": 0.95, "read_episodes": 20, "action_windows": 20}
TARGETS |= {"windows_epoch": 50, "loader": 1.0}


def figure(path: str, forge: float, reference: float | None, unit: str, reference_is: str, **extra) -> dict:
    ratio = forge / reference if reference else None
    row = {"path": path, "forge": forge, "reference": reference if reference else "-", "unit": unit}
    row |= {"ratio": "-" if ratio is None else ratio, "target": TARGETS.get(path, "-"), "reference_is": reference_is}
    return row | extra


def recorder(size: dict, parent: str) -> list[dict]:
    env, batches = make_batches(size["num_envs"], size["steps"], max_steps=size["max_steps"], end_prob=0.0)
    _, small = make_batches(size["reference_envs"], size["steps"], max_steps=size["max_steps"], end_prob=0.0)
    with figure_directory(parent) as where:
        recording = forge_gpu.recording.make_recorder(new_directory(where, "forge"), env)
        forge_seconds, _ = record(recording, batches)
        reference = PerRowRecorder(new_directory(where, "per-row"))
        reference_seconds, _ = record(reference, small)
    forge = active_rows(batches) / forge_seconds
    per_row = active_rows(small) / reference_seconds
    return [figure("recorder", forge, per_row, "rows/s", f"PerRowRecorder, {size['reference_envs']} envs")]


def ingest(size: dict, parent: str) -> list[dict]:
    env, batches = make_batches(size["num_envs"], size["steps"], max_steps=200, end_prob=0.04)
    count = len(batches) * size["num_envs"]
    with figure_directory(parent) as where:
        recording = forge_gpu.recording.make_recorder(new_directory(where, "ingest"), env)
        seconds, _ = record(recording, batches)
        raw = raw_sequential_write(where, recording.bytes_written)
    mb = recording.bytes_written / 1e6
    return [figure("ingest", count / seconds, count / raw, "rows/s", f"raw sequential write of {mb:.0f} MB")]


def pipeline(size: dict, parent: str) -> list[dict]:
    pairs = [p for p in common.pipeline(size, parent) if p["figure"] != "pipeline"]  # not the summary row
    efficiencies = [p["efficiency"] for p in pairs]
    runs = ", ".join(f"{e:.2f}" for e in efficiencies)
    recorded = float(np.median([p["recording"] for p in pairs]))
    return [figure("pipeline", float(np.median(efficiencies)), None, "recorded/unrecorded", f"runs: {runs}",
                   recorded_env_steps_per_s=recorded)]  # fmt: skip


_FIRST_PASS = """
import json, sys, time
import numpy, pyarrow, pyarrow.ipc  # a training script has these loaded already
import forge_gpu
run = sys.argv[1]
start = time.perf_counter()
count = sum(1 for _ in forge_gpu.reading.read_episodes(run))
first = count / (time.perf_counter() - start)
warm = []
for _ in range(3):
    start = time.perf_counter()
    count = sum(1 for _ in forge_gpu.reading.read_episodes(run))
    warm.append(count / (time.perf_counter() - start))
print(json.dumps({"first": first, "warm": sorted(warm)[1], "episodes": count}))
"""


def passes(run: str) -> dict:
    """The first and the warm pass of read_episodes over ``run``, in a new process. forge_gpu's modules are
    byte-compiled first, as an installed package's are (this VM sets PYTHONDONTWRITEBYTECODE: an editable install's
    modules were otherwise compiled from source in every new process, ~20 ms of the first pass)."""
    compileall.compile_dir(os.path.dirname(forge_gpu.__file__), quiet=1)
    done = subprocess.run([sys.executable, "-c", _FIRST_PASS, run], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def cartpole_runs(size: dict, where: str) -> tuple[str, str]:
    """A packed cartpole run of ``num_envs`` episodes of ``max_steps`` steps, and its schema-1 copy."""
    env, batches = make_batches(size["num_envs"], size["max_steps"] + 1, max_steps=size["max_steps"],
                                             end_prob=0.0)  # fmt: skip
    packed = os.path.join(where, "packed")
    record(forge_gpu.recording.PackedRecorder(packed, env, max_buffer_bytes=1 << 30), batches)
    npz = os.path.join(where, "npz")
    forge_gpu.curation.convert_run(packed, npz, to="npz")
    os.sync()
    return packed, npz


def hand_collated(run: str, order: np.ndarray, batch: int) -> int:
    """Schema 1's windows listed by action_windows, then collated by hand in batches of the ``order``."""
    windows = list(forge_gpu.reading.action_windows(run, 2, 8))
    keys = [k for k, v in windows[0].items() if isinstance(v, np.ndarray)]
    for at in range(0, len(order), batch):
        chosen = [windows[i] for i in order[at : at + batch]]
        {k: np.stack([w[k] for w in chosen]) for k in keys}  # the collated batch, thrown away
    return len(order)


def reading(size: dict, parent: str) -> list[dict]:
    rows = []

    with figure_directory(parent) as where:
        packed, npz = cartpole_runs(size, where)
        first = {name: passes(run) for name, run in (("npz", npz), ("packed", packed))}
        for kind in ("first", "warm"):
            forge, reference = first["packed"][kind], first["npz"][kind]
            rows.append(figure("read_episodes", forge, reference, "episodes/s", f"schema 1 (npz), {kind} pass",
                               pass_=kind, episodes=first["packed"]["episodes"]))  # fmt: skip
        rates = {
            name: median_rate(lambda run=run: sum(1 for _ in forge_gpu.reading.action_windows(run, 2, 8)))
            for name, run in (("npz", npz), ("packed", packed))
        }
        rows.append(figure("action_windows", rates["packed"], rates["npz"], "windows/s", "schema 1 (npz)"))
        start = time.perf_counter()
        windows = forge_gpu.reading.Windows(packed, 2, 8)
        load = time.perf_counter() - start
        order = np.random.default_rng(0).permutation(len(windows))
        for at in range(0, len(order), 256):
            windows.batch(order[at : at + 256])
        forge_seconds = time.perf_counter() - start
        start = time.perf_counter()
        hand_collated(npz, order, 256)
        reference_seconds = time.perf_counter() - start
        rows.append(figure("windows_epoch", len(order) / forge_seconds, len(order) / reference_seconds, "windows/s",
                           "schema 1 action_windows collated by hand", load_s=load))  # fmt: skip
    return rows


def image_batches(size: dict, parent: str) -> list[dict]:
    env, batches = make_batches(size["num_envs"], size["steps"], max_steps=size["steps"], end_prob=0.02,
                                             image=size["image"])  # fmt: skip
    with figure_directory(parent) as where:
        run = os.path.join(where, "raw")
        record(forge_gpu.recording.PackedRecorder(run, env, max_buffer_bytes=1 << 30, codecs={"*": "none"}), batches)
        del batches
        windows = forge_gpu.reading.Windows(run, 2, 4)
        order = np.random.default_rng(0).permutation(len(windows))
        chunks = [order[(k * 256) % len(order) :][:256] for k in range(size["batches"])]
        nbytes = sum(v.nbytes for v in windows.batch(chunks[0]).values() if isinstance(v, np.ndarray))
        start = time.perf_counter()
        for chunk in chunks:
            windows.batch(chunk)
        gathered = nbytes * len(chunks) / (time.perf_counter() - start)
    source, target = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    np.copyto(target, source)
    start = time.perf_counter()
    for _ in chunks:
        np.copyto(target, source)
    copied = nbytes * len(chunks) / (time.perf_counter() - start)
    return [figure("image_batches", gathered / 1e9, copied / 1e9, "GB/s", "np.copyto of the batch's bytes",
                   batch_mb=nbytes / 1e6)]  # fmt: skip


def loader(size: dict, parent: str) -> list[dict]:
    with figure_directory(parent) as where:
        packed, _ = cartpole_runs(size, where)
        rates = {w: loader_rate(Path(packed), workers=w, batch=256, batches=size["batches"])
                 for w in (0, 2)}  # fmt: skip
    forge, reference = rates[2]["samples_per_s"], rates[0]["samples_per_s"]
    steady = rates[2]["steady_samples_per_s"] / rates[0]["steady_samples_per_s"]
    return [figure("loader", forge, reference, "samples/s", "the same with 0 workers (whole row, start included)",
                   workers=2, steady_ratio=steady, first_batch_s=rates[2]["first_batch_s"])]  # fmt: skip


SECTIONS = {"recorder": recorder, "ingest": ingest, "pipeline": pipeline, "reading": reading,
            "image_batches": image_batches, "loader": loader}  # fmt: skip


def main(argv=None) -> int:
    args = section_args(__doc__, SECTIONS, argv)
    os.makedirs(args.record_dir, exist_ok=True)
    parent = tempfile.mkdtemp(prefix="costs-", dir=args.record_dir)
    sizes = SMOKE if args.smoke else FULL
    rows = run_sections(SECTIONS, sizes, args.only, parent)
    os.rmdir(parent)
    columns = ["path", "forge", "reference", "unit", "ratio", "target", "reference_is"]
    markdown = "## The cost of a row and of an episode\n\n" + table(rows, columns)
    save("costs", {"machine": machine(gpu=False), "smoke": args.smoke, "rows": rows}, markdown,
         Path(args.out) if args.out else None)  # fmt: skip
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
