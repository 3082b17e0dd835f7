"""Recording throughput: forge_gpu's NpzRecorder against simple alternatives, each ratio within one run.

python bench/recorder.py                 # CPU sizes, a few minutes
python bench/recorder.py --smoke         # seconds-long check that every figure is produced
python bench/recorder.py --only ingest   # sections: ingest, deflate, publish, pipeline, bytes (repeatable)

Host batches come from bench/common.py's ``make_batches`` (``forge_gpu.testing``: the env's next-step auto-reset
semantics) and are generated before any clock starts. Forge and its reference run in turn (A/B/A/B: --reps pairs; 7
for publish and write_bytes), each into a fresh directory under one figure's folder (under --record-dir), which is
deleted only after the figure's last run; every timed run starts after os.sync(). A row gives the medians of both
and the median of the pairs' ratios: file creation on this disk drifts 10x over seconds, and adjacent runs share the
drift. ingest_none rows (env-transitions) per second, end to end (append every batch, publish, close), of
NpzRecorder (2 writers, stored members) against a plain per-row recorder fed the same batches: Python dicts per env
and per row, np.stack + np.savez on episode end, tmp + rename for the .npz and its marker. 1024 envs, proprio 4,
action 1, every episode 200 steps. ingest_packed the same rows per second of the default recorder (make_recorder's:
packed, its defaults: one writer thread, statistics, checksums) fed the same batches, against the same per-row
recorder runs; run third in each round (NpzRecorder, per-row, packed). ingest_none_vs_disk the same forge figure
against the disk's ceiling for it: the raw publication loop (below) publishing as many files of forge's mean size on
2 threads, run after each pair. The reference runs on the first half of the batches (one episode per env): it is
slow. append_only the same two recorders on the first 100 batches, in which no episode ends: appends alone.
publish_wW episodes published per second with short episodes (end_prob 0.04, 60 batches: ~16 steps) by NpzRecorder
with W writers, against a raw publication loop on W threads: per episode two files (a payload of the recorder's mean
episode-file size and a 100-byte marker), each written to a temporary name and renamed. write_bytes bytes of episode
files published per second with stored members and an rgb 64x64x3 uint8 field (128 envs, 200-step episodes, 4.9 MB
per file), against raw writes of the same bytes: one file per episode-sized chunk (open, write, close; no rename) on
as many threads (2), from 16 distinct episode-sized buffers in turn. Every episode ends in the last batch, so the
writers do all their work in ``close``: write_bytes is the bytes over the close's time, write_bytes_e2e over appends
+ close. write_bytes_vs_publish write_bytes against the raw publication loop (tmp + rename for the file and for a
100-byte marker, as FORMAT.md asks) of the same files, run after each pair. ingest_deflate1_wW rows per second of
the ingest_none workload with deflate level 1 and W writers; the reference is ingest_none's forge figure (stored
members, 2 writers) of the same run. pipeline_POLICY cartpole, 1024 envs, on the CPU: ``collect`` recording (stored
members) against the same ``collect`` with ``directory=None``, same policy and step count; env-steps per second over
the whole call, including the recorder's close. expert: max_steps 500, 600 steps (every env publishes one 500-step
episode); random: ~25-step episodes, 200 steps. pipeline_random_vs_disk the recording run's episodes published per
second against the raw publication loop on 2 threads publishing as many files of its mean size, right after each
pair. Columns: forge and reference in the row's unit; ratio = forge / reference; target from the issue. """

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
from common import (  # noqa: E402
    MARKER,
    PerRowRecorder,
    active_rows,
    figure_directory,
    machine,
    make_batches,
    new_directory,
    on_threads,
    raw_publish,
    record,
    save,
    table,
    write_file,
)

from forge_gpu.recording import NpzRecorder, make_recorder  # noqa: E402

FULL = {
    "long": {"num_envs": 1024, "max_steps": 200, "steps": 402, "reference_batches": 201, "append_batches": 100},
    "short": {"num_envs": 1024, "max_steps": 200, "steps": 60, "end_prob": 0.04, "pairs": 7},
    "bytes": {"num_envs": 128, "max_steps": 200, "steps": 200, "image": 64, "pairs": 7},
    "pipeline": {"num_envs": 1024, "expert_steps": 600, "random_steps": 200, "max_steps": 500, "random_max_steps": 0},
}
SMOKE = {
    "long": {"num_envs": 16, "max_steps": 10, "steps": 22, "reference_batches": 11, "append_batches": 5},
    "short": {"num_envs": 16, "max_steps": 10, "steps": 20, "end_prob": 0.2, "pairs": 1},
    "bytes": {"num_envs": 8, "max_steps": 10, "steps": 10, "image": 8, "pairs": 1},
    "pipeline": {"num_envs": 8, "expert_steps": 12, "random_steps": 12, "max_steps": 5, "random_max_steps": 5},
}

#: The sections ``--only`` chooses from, in the order they run (deflate runs after ingest, whose figure it takes).
SECTIONS = ["ingest", "deflate", "publish", "pipeline", "bytes"]


# -- the plain per-row recorder -----------------------------------------------------------------------


# -- helpers ------------------------------------------------------------------------------------------


def run_forge(parent: str, env, batches, *, close: bool = True, **kwargs) -> dict:
    directory = new_directory(parent, "forge")
    recorder = NpzRecorder(directory, env, **kwargs)
    seconds, close_seconds = record(recorder, batches, close=close)
    recorder.close()
    return {
        "seconds": seconds,
        "close_seconds": close_seconds,
        "episodes": recorder.completed_episodes,
        "bytes": recorder.bytes_written,
    }


def run_packed(parent: str, env, batches) -> dict:
    """The default recorder (``make_recorder``'s: packed, its defaults) fed ``batches``."""
    recorder = make_recorder(new_directory(parent, "packed"), env)
    seconds, close_seconds = record(recorder, batches)
    return {"seconds": seconds, "close_seconds": close_seconds, "episodes": recorder.completed_episodes}


def run_reference(parent: str, batches) -> dict:
    directory = new_directory(parent, "reference")
    recorder = PerRowRecorder(directory)
    seconds, _ = record(recorder, batches)
    return {"seconds": seconds, "episodes": recorder.completed_episodes, "bytes": recorder.bytes_written}


def raw_write(parent: str, count: int, payloads: list[bytes], threads: int) -> float:
    """Write ``count`` files (open, write, close) on ``threads`` threads, cycling through ``payloads``."""
    directory = new_directory(parent, "raw-write")
    os.mkdir(directory)

    def write(k: int) -> None:
        write_file(os.path.join(directory, f"chunk{k:08d}"), payloads[k % len(payloads)])

    return on_threads(threads, count, write)


def alternate(reps: int, forge, reference) -> tuple[list, list]:
    """Run forge, reference, forge, reference, ... ``reps`` times each; both lists of results."""
    a, b = [], []
    for _ in range(reps):
        a.append(forge())
        b.append(reference())
    return a, b


def median(values) -> float:
    return float(statistics.median(values))


def row(figure: str, workload: str, writers, unit: str, forge, reference, reference_is: str, target):
    """One table row. ``forge`` and ``reference``: one figure each, or lists of figures measured in adjacent
    pairs (A/B/A/B); then each is the median and the ratio is the median of the pairs' ratios, so that the
    disk's drifts (file creation here varies 10x over seconds) cancel out pair by pair."""
    if isinstance(forge, list):
        ratio = median(f / r for f, r in zip(forge, reference, strict=True))
        forge, reference = median(forge), median(reference)
    else:
        ratio = forge / reference
    return {
        "figure": figure,
        "workload": workload,
        "writers": writers,
        "unit": unit,
        "forge": forge,
        "reference": reference,
        "ratio": ratio,
        "target": target,
        "reference_is": reference_is,
    }


# -- the measurements ---------------------------------------------------------------------------------


def measure_ingest(parent: str, size: dict, reps: int, env, batches) -> list[dict]:
    prefix = batches[: size["reference_batches"]]
    rows_all, rows_prefix = active_rows(batches), active_rows(prefix)
    forge, reference, raw, packed = [], [], [], []
    for _ in range(reps):  # forge, the reference, packed, and the raw publication of forge's files, in turn
        forge.append(run_forge(parent, env, batches, writers=2, compression="none"))
        reference.append(run_reference(parent, prefix))
        packed.append(run_packed(parent, env, batches))
        episodes = forge[-1]["episodes"]
        payload = os.urandom(round(forge[-1]["bytes"] / episodes))
        raw.append(raw_publish(parent, episodes, payload, MARKER, 2))
    forge_rate = [rows_all / r["seconds"] for r in forge]
    reference_rate = [rows_prefix / r["seconds"] for r in reference]
    workload = f"{size['num_envs']} envs, {size['max_steps']}-step episodes, proprio 4"
    out = [
        row(
            "ingest_packed",
            workload + f"; make_recorder defaults (packed); {rows_all} rows (reference: first {rows_prefix})",
            1,
            "rows/s",
            [rows_all / r["seconds"] for r in packed],
            reference_rate,
            "per-row Python + np.savez",
            180,
        ),
        row(
            "ingest_none",
            workload + f"; {rows_all} rows (reference: first {rows_prefix})",
            2,
            "rows/s",
            forge_rate,
            reference_rate,
            "per-row Python + np.savez",
            100,
        ),
        # The file system's ceiling for the same run: its episode files published by the raw loop alone.
        row(
            "ingest_none_vs_disk",
            workload + f"; {forge[0]['episodes']} episodes",
            2,
            "rows/s",
            forge_rate,
            [rows_all / s for s in raw],
            "raw tmp+rename x2 of the same files",
            "-",
        ),
    ]
    # The same, appends alone: batches in which no episode ends, so nothing is written (no close either).
    prefix = batches[: size["append_batches"]]
    rows_prefix = active_rows(prefix)
    forge, reference = alternate(
        reps,
        lambda: run_forge(parent, env, prefix, close=False, writers=2, compression="none"),
        lambda: run_reference(parent, prefix),
    )
    forge_rate = [rows_prefix / r["seconds"] for r in forge]
    reference_rate = [rows_prefix / r["seconds"] for r in reference]
    workload += f"; first {len(prefix)} batches, no episode ends; {rows_prefix} rows"
    out.append(row("append_only", workload, 2, "rows/s", forge_rate, reference_rate, "per-row Python appends", "-"))
    return out


def measure_deflate(parent: str, size: dict, reps: int, env, batches, stored_rate: float) -> list[dict]:
    rows_all = active_rows(batches)
    out = []
    for writers in (1, 2, 4):
        runs = [
            run_forge(parent, env, batches, writers=writers, compression="deflate", compression_level=1)
            for _ in range(reps)
        ]
        rate = median(rows_all / r["seconds"] for r in runs)
        workload = f"as ingest_none, deflate level 1; {rows_all} rows"
        out.append(
            row(f"ingest_deflate1_w{writers}", workload, writers, "rows/s", rate, stored_rate, "ingest_none", "-")
        )
    return out


def measure_publish(parent: str, size: dict) -> list[dict]:
    env, batches = make_batches(size["num_envs"], size["steps"], max_steps=size["max_steps"], end_prob=size["end_prob"])
    out = []
    for writers in (1, 2, 4):
        payload = None
        forge, raw = [], []
        for _ in range(size["pairs"]):
            result = run_forge(parent, env, batches, writers=writers, compression="none")
            forge.append(result)
            if payload is None:  # the same byte count as the recorder's mean episode file
                payload = os.urandom(round(result["bytes"] / result["episodes"]))
            raw.append(raw_publish(parent, result["episodes"], payload, MARKER, writers))
        episodes = forge[0]["episodes"]
        forge_rate = [r["episodes"] / r["seconds"] for r in forge]
        raw_rate = [episodes / s for s in raw]
        ended = sum(int(np.count_nonzero(r.terminated | r.truncated)) for _, r in batches)
        mean_steps = active_rows(batches) / ended  # the unfinished episodes' steps counted too: hence "~"
        workload = f"{size['num_envs']} envs, {episodes} episodes of ~{mean_steps:.0f} steps, {len(payload)} B files"
        out.append(
            row(f"publish_w{writers}", workload, writers, "episodes/s", forge_rate, raw_rate, "raw tmp+rename x2", 0.8)
        )
    return out


def measure_bytes(parent: str, size: dict) -> list[dict]:
    env, batches = make_batches(size["num_envs"], size["steps"], max_steps=size["max_steps"], end_prob=0.0)
    # The image field is added after generation: views into a small pool of random frames, so that the
    # batches take little memory (the recorder copies every row anyway).
    side = size["image"]
    env.spec["observation"]["rgb"] = {"shape": [side, side, 3], "dtype": "uint8"}
    pool = np.random.default_rng(0).integers(0, 256, (4, size["num_envs"], side, side, 3), dtype=np.uint8)
    for k, (observation, _) in enumerate(batches):
        observation["rgb"] = pool[k % len(pool)]
    slot = (size["max_steps"] + 1) * (side * side * 3 + 16 + 16) + size["max_steps"] * 10
    budget = (size["num_envs"] + 2) * slot
    forge, raw, published = [], [], []
    payloads = None
    for _ in range(size["pairs"]):  # forge, raw writes, raw publication, in turn
        result = run_forge(parent, env, batches, writers=2, compression="none", max_buffer_bytes=budget)
        forge.append(result)
        if payloads is None:  # 16 distinct sources (80 MB in the full run), so that they are not all in cache
            payloads = [os.urandom(round(result["bytes"] / result["episodes"])) for _ in range(16)]
        raw.append(raw_write(parent, result["episodes"], payloads, 2))
        published.append(raw_publish(parent, result["episodes"], payloads, MARKER, 2))
    payload = payloads[0]
    total = forge[0]["bytes"]
    raw_rate = [total / s / 1e6 for s in raw]
    workload = f"{size['num_envs']} envs, {size['max_steps']}-step episodes, rgb {side}x{side}x3 uint8"
    workload += f"; {forge[0]['episodes']} files of {len(payload) / 1e6:.3g} MB"
    reference_is = "raw write, 1 file per episode"
    # Every episode ends in the last batch, so the writers do all their work during close.
    writers_rate = [r["bytes"] / r["close_seconds"] / 1e6 for r in forge]
    e2e_rate = [r["bytes"] / r["seconds"] / 1e6 for r in forge]
    return [
        row(
            "write_bytes", workload + " (close only: the writers)", 2, "MB/s", writers_rate, raw_rate, reference_is, 0.7
        ),
        row("write_bytes_e2e", workload + " (appends + close)", 2, "MB/s", e2e_rate, raw_rate, reference_is, "-"),
        # What FORMAT.md asks of every episode, done raw: a second file and two renames on top of the write.
        row(
            "write_bytes_vs_publish",
            workload + " (close only: the writers)",
            2,
            "MB/s",
            writers_rate,
            [total / s / 1e6 for s in published],
            "raw tmp+rename x2 of the same files",
            "-",
        ),
    ]


def measure_collect(
    parent: str, policy_name: str, num_envs: int, steps: int, reps: int, *, disk: bool, **overrides
) -> list[dict]:
    """cartpole on the CPU: ``collect`` recording against ``collect`` without, alternating; with ``disk``, also
    the episodes the recording run published per second against the raw publication of as many files."""
    import warp as wp

    import forge_gpu
    from forge_gpu.recording import RecordingOptions, collect

    env = forge_gpu.sim.make("cartpole", num_envs=num_envs, device="cpu", **overrides)
    policy = forge_gpu.sim.make_policy(policy_name, env)
    env.reset()
    for _ in range(3):  # compile the kernels
        env.step(policy(env.observation))
    wp.synchronize_device(env.device)
    with_recording, without, published, raw = [], [], [], []
    for _ in range(reps):
        for directory in (new_directory(parent, f"collect-{policy_name}"), None):
            os.sync()  # every timed run starts with no dirty page cache left by the one before
            t0 = time.perf_counter()
            options = RecordingOptions(writers=2, compression="none")
            summary = collect(env, policy, directory, steps=steps, options=options)
            seconds = time.perf_counter() - t0
            (with_recording if directory else without).append(num_envs * steps / seconds)
            if directory:
                published.append((summary.episodes, summary.episodes / seconds, summary.bytes_written))
        if disk:
            episodes, _, nbytes = published[-1]
            raw.append(episodes / raw_publish(parent, episodes, os.urandom(round(nbytes / episodes)), MARKER, 2))
    workload = f"cartpole {num_envs} envs, {policy_name} policy, max_steps {env.config.max_steps}, {steps} steps"
    workload += f", {published[0][0]} episodes"
    efficiency = row(
        f"pipeline_{policy_name}",
        workload,
        2,
        "env-steps/s",
        with_recording,
        without,
        "collect without recording",
        0.85,
    )
    if not disk:
        return [efficiency]
    return [
        efficiency,
        row(
            f"pipeline_{policy_name}_vs_disk",
            workload + " (episodes published per second)",
            2,
            "episodes/s",
            [rate for _, rate, _ in published],
            raw,
            "raw tmp+rename x2 of as many files",
            "-",
        ),
    ]


def measure_pipeline(parent: str, size: dict, reps: int) -> list[dict]:
    n = size["num_envs"]
    random_overrides = {"max_steps": size["random_max_steps"]} if size["random_max_steps"] else {}
    return [
        *measure_collect(parent, "expert", n, size["expert_steps"], reps, disk=False, max_steps=size["max_steps"]),
        *measure_collect(parent, "random", n, size["random_steps"], reps, disk=True, **random_overrides),
    ]


def main(argv=None) -> int:
    import warp as wp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=None, help="runs per figure, alternating (default 3; smoke 1)")
    parser.add_argument("--record-dir", default=None, help="parent of the temporary run directories")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run these sections only (default all)")
    args = parser.parse_args(argv)
    only = set(args.only or SECTIONS)
    wp.config.quiet = True
    sizes = SMOKE if args.smoke else FULL
    reps = args.reps or (1 if args.smoke else 3)
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="forge-bench-recorder-", dir=args.record_dir) as parent:
        if only & {"ingest", "deflate"}:
            long = sizes["long"]
            env, batches = make_batches(long["num_envs"], long["steps"], max_steps=long["max_steps"], end_prob=0.0)
            with figure_directory(parent) as folder:
                rows += measure_ingest(folder, sizes["long"], reps, env, batches)
            stored = next(r["forge"] for r in rows if r["figure"] == "ingest_none")
            if "deflate" in only:
                with figure_directory(parent) as folder:
                    rows += measure_deflate(folder, sizes["long"], reps, env, batches, stored)
            del batches
        if "publish" in only:
            with figure_directory(parent) as folder:
                rows += measure_publish(folder, sizes["short"])
        if "pipeline" in only:
            with figure_directory(parent) as folder:
                rows += measure_pipeline(folder, sizes["pipeline"], reps)
        if "bytes" in only:
            with figure_directory(parent) as folder:  # last: it deletes GBs, which slows the disk for a while
                rows += measure_bytes(folder, sizes["bytes"])
    columns = ["figure", "writers", "unit", "forge", "reference", "ratio", "target", "reference_is", "workload"]
    where = args.record_dir or tempfile.gettempdir()
    md = f"## Recorder (CPU, files under {where}, medians of alternating runs)\n\n" + table(rows, columns)
    payload = {"machine": machine(), "record_dir": where, "reps": reps, "sizes": sizes}
    payload["seconds"] = time.perf_counter() - started
    payload["rows"] = rows
    path = save("recorder", payload, md, args.out)
    print(md)
    print(f"\nwrote {path} ({payload['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
