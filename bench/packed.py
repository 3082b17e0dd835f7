"""The packed layout's figures, each a ratio within one run.

python bench/packed.py                   # CPU sizes, about 15 minutes on 2 cores
python bench/packed.py --smoke           # seconds-long check that every figure is produced
python bench/packed.py --only reader     # one section: checksum, ingest, pipeline, rss, reader, windows_mmap, verify

  checksum          CRC32C (the crc32c package, the blocks' checksum) against zlib.crc32 and ISA-L's crc32 (isal, the
                    schema-1 writer's), GB/s over one 8 MiB buffer in memory, the median of 7.

  ingest_SHAPE      make_recorder's default recorder (packed, its defaults) fed pre-made host batches (cartpole
                    layout: proprio 4, action 1, 4096 envs; no stepping), rows (env rows appended) per second over
                    appends + close. SHAPE short: ~25-step episodes (end probability 0.04); long: 200-step episodes.
                    Against (a) a raw sequential write of the same bytes into the same directory (os.write of
                    8 MiB chunks into one file, then close), run right after each of ``pairs`` recorder runs:
                    vs_raw_write is the median of the pairs' ratios (each in vs_raw_write_runs), rows_per_s and
                    raw_write_mb_per_s the medians of each side; (b) bench/common.py's per-row
                    reference recorder on the first 1/8 of the batches (it is slow); (c) the schema-1
                    NpzRecorder (2 writers) on the same 1/8.
  ingest_SHAPE_CODEC  the same with lz4 or zstd buffer compression: rows/s, vs_none (its speed over the
                    uncompressed run's), size_vs_none (bytes written over the uncompressed run's).
  ingest_short_checksum  the short shape again, alternated with the same recorder whose writer skips the checksum
                    (PackedWriter._checksum patched to return 0: such a run does not read; for this figure only),
                    ``pairs`` pairs: the medians of rows/s with and without, their ratio, and the share of the run's
                    wall time the writer thread spent in the checksum (read back from the page cache + CRC32C).
  files_per_100k    files in a packed run per 100,000 cartpole episodes of ~25 steps, from the short run
                    (schema 1: two per episode).
  pipeline          cartpole, 1024 envs, CPU, random policy (~25-step episodes): ``collect`` recording packed
                    to --record-dir against ``collect`` with ``directory=None``, same steps, alternated;
                    env-steps/s of the stepping loop. Five pairs (the order within a pair alternates), each ratio
                    printed: ``efficiency`` with the state columns (recorded by default), ``efficiency_no_state``
                    with record_state = false; ``cpu_overhead``: the CPU seconds (every thread) of the recording
                    collect over the bare one's, minus 1 (what recording costs the cores, whatever else runs on
                    the machine: on 2 cores an upper bound of the slowdown, the recorder's work on the consumer and
                    writer threads all serialized with stepping by the GIL); then ``pipeline``: the median and the
                    lowest of each.
  rss               peak RSS of ``forge-gpu collect reach --envs 256`` at 128x128 (RGB-D) with max_steps 100
                    and 1000, packed, in fresh processes (same step count); ratio second/first.
  reader_TASK       the same episodes in both layouts (recorded packed, converted to npz), one process:
                    read_episodes episodes/s; windows/s (history 2, horizon 8) of schema-1 action_windows
                    against Windows.batch over all windows in batches of 256 (in order, and shuffled: random
                    batches of 256 from a global permutation); Windows' load time is given apart. Per-item
                    windows: the packed run's action_windows (one dict a window, in order: iterating a Windows,
                    its load included), against schema 1's and against the batches in order
                    (action_windows_vs_batch_in_order). Each rate is the median of 3 repeats, after os.sync(),
                    from the page cache.
                    cartpole: 1024 episodes of 200 steps; reach: 256 episodes of ~50 steps, 64x64 RGB-D.
                    Then packed read_episodes with verification (the default) and without
                    (EpisodeReadOptions(verify=False)), 5 alternated pairs: packed_unverified_episodes_per_s and
                    verify_cost (the pairs' median verified rate over their median unverified one); and Windows'
                    load time with verification and without, 3 alternated pairs, medians.
  windows_mmap      Windows(run, 2, 8) over one packed reach-layout run (64x64 RGB-D, 128 envs, 100 steps,
                    ~370 MB of frames), loaded (the default) against mmap=True, each in a fresh process: the
                    anonymous memory it holds after construction (RssAnon, over the process's before), the load
                    time, and shuffled batches of 256 per second (median of 3, page cache warm: the run was
                    just written). Ratios: mmap over loaded.
  verify            reading.verify_run over one packed reach-layout run of >= 1 GB (128x128 RGB-D, 64 envs, 150
                    steps), from a cold page cache (echo 3 > /proc/sys/vm/drop_caches; where that is refused,
                    posix_fadvise DONTNEED on each file: ``cold_cache`` says which; after the drop a 3-step run is
                    verified, untimed, so that the code's own pages are back), against a raw sequential read of the
                    same files (8 MiB reads into one reused buffer), 5 alternated pairs: MB/s of each (medians)
                    and the ratio verify / raw.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
from common import (  # noqa: E402
    PerRowRecorder,
    figure_directory,
    fs_type,
    machine,
    make_batches,
    median_rate,
    new_directory,
    pipeline,
    raw_sequential_write,
    record,
    run_sections,
    save,
    section_args,
    table,
)

import forge_gpu  # noqa: E402
from forge_gpu.curation import convert_run  # noqa: E402
from forge_gpu.reading import Windows  # noqa: E402
from forge_gpu.recording import NpzRecorder, PackedRecorder, make_recorder  # noqa: E402

FULL = {
    "checksum": {"megabytes": 8, "repeats": 7},
    "ingest": {"num_envs": 4096, "short_steps": 400, "long_steps": 402, "pairs": 5},
    "pipeline": {"num_envs": 1024, "steps": 600, "pairs": 5},
    "rss": {"num_envs": 256, "image_size": 128, "steps": 24},
    "reader": {"cartpole": (1024, 200, 0.0, None), "reach": (256, 50, 0.02, 64)},
    "windows_mmap": {"num_envs": 128, "steps": 100, "image_size": 64},
    "verify": {"num_envs": 64, "steps": 150, "image_size": 128, "pairs": 5},
}
SMOKE = {
    "checksum": {"megabytes": 1, "repeats": 1},
    "ingest": {"num_envs": 64, "short_steps": 40, "long_steps": 22, "pairs": 1},
    "pipeline": {"num_envs": 16, "steps": 20, "pairs": 1},
    "rss": {"num_envs": 4, "image_size": 32, "steps": 3},
    "reader": {"cartpole": (32, 20, 0.0, None), "reach": (8, 10, 0.05, 16)},
    "windows_mmap": {"num_envs": 8, "steps": 12, "image_size": 16},
    "verify": {"num_envs": 8, "steps": 12, "image_size": 16, "pairs": 1, "drop_caches": False},
}


def ingest(sizes: dict, parent: str) -> list[dict]:
    rows = []
    for shape, steps, max_steps, end_prob in (
        ("short", sizes["short_steps"], 200, 0.04),
        ("long", sizes["long_steps"], 200, 0.0),
    ):
        env, batches = make_batches(sizes["num_envs"], steps, max_steps=max_steps, end_prob=end_prob)
        count = len(batches) * sizes["num_envs"]
        with figure_directory(parent) as where:
            # The recorder (make_recorder's defaults) and the raw write of its bytes in turn, ``pairs`` times: the
            # page cache's write speed drifts 10x over seconds here, and adjacent runs share the drift.
            ratios, runs = [], []
            for _ in range(sizes["pairs"]):
                directory = new_directory(where, "packed")
                recorder = make_recorder(directory, env)
                seconds, _ = record(recorder, batches)
                files = len(os.listdir(directory))
                raw = raw_sequential_write(where, recorder.bytes_written)
                ratios.append(raw / seconds)
                runs.append((seconds, raw))
            seconds, raw = (float(np.median(values)) for values in zip(*runs, strict=True))
            compressed = {}
            for codec in ("lz4", "zstd"):
                other = PackedRecorder(new_directory(where, codec), env, compression=codec)
                compressed[codec] = (record(other, batches)[0], other.bytes_written)
            part = batches[: max(len(batches) // 8, 2)]
            reference = PerRowRecorder(new_directory(where, "per-row"))
            reference_seconds, _ = record(reference, part)
            npz = NpzRecorder(new_directory(where, "npz"), env)
            npz_seconds, _ = record(npz, part)
        part_rows = len(part) * sizes["num_envs"]
        rows_per_s = count / seconds
        rows.append(
            {
                "figure": f"ingest_{shape}",
                "rows_per_s": rows_per_s,
                "mb_per_s": recorder.bytes_written / seconds / 1e6,
                "episodes_per_s": recorder.completed_episodes / seconds,
                "vs_raw_write": float(np.median(ratios)),
                "vs_raw_write_runs": " ".join(f"{r:.3g}" for r in ratios),
                "raw_write_mb_per_s": recorder.bytes_written / raw / 1e6,
                "vs_per_row": rows_per_s / (part_rows / reference_seconds),
                "vs_npz": rows_per_s / (part_rows / npz_seconds),
                "episodes": recorder.completed_episodes,
            }
        )
        for codec, (codec_seconds, codec_bytes) in compressed.items():
            rows.append(
                {
                    "figure": f"ingest_{shape}_{codec}",
                    "rows_per_s": count / codec_seconds,
                    "vs_none": seconds / codec_seconds,
                    "size_vs_none": codec_bytes / recorder.bytes_written,
                }
            )
        if shape == "short":
            rows.append({"figure": "files_per_100k", "files_per_100k": files / recorder.completed_episodes * 1e5})
            rows.append(checksum_cost(env, batches, sizes["pairs"], parent))
    return rows


def checksum_cost(env, batches, pairs: int, parent: str) -> dict:
    """``ingest_short_checksum``: the recorder with its checksums and without, alternated (see the docstring)."""
    from forge_gpu._src.formats.packed.write import PackedWriter

    count = len(batches) * env.num_envs
    checksum = PackedWriter._checksum
    spent = [0.0]

    def timed(self, offset, length):
        start = time.perf_counter()
        try:
            return checksum(self, offset, length)
        finally:
            spent[0] += time.perf_counter() - start

    rates, shares = {True: [], False: []}, []
    try:
        for pair in range(pairs):
            for on in (True, False) if pair % 2 == 0 else (False, True):
                PackedWriter._checksum = timed if on else (lambda self, offset, length: 0)
                spent[0] = 0.0
                with figure_directory(parent) as where:
                    seconds, _ = record(PackedRecorder(new_directory(where, "packed"), env), batches)
                rates[on].append(count / seconds)
                if on:
                    shares.append(spent[0] / seconds)
    finally:
        PackedWriter._checksum = checksum
    with_, without = (float(np.median(rates[on])) for on in (True, False))
    return {
        "figure": "ingest_short_checksum",
        "rows_per_s": with_,
        "rows_per_s_no_checksum": without,
        "with_over_without": with_ / without,
        "checksum_share_of_wall": float(np.median(shares)),
    }


def rss(sizes: dict, parent: str) -> list[dict]:
    peaks = {}
    with figure_directory(parent) as where:
        for max_steps in (100, 1000):
            script = (
                "import forge_gpu; from forge_gpu.recording import collect; "
                f"env = forge_gpu.sim.make('reach', num_envs={sizes['num_envs']}, device='cpu', max_steps={max_steps}, "
                f"**{{'params.image_size': {sizes['image_size']}}}); "
                f"collect(env, forge_gpu.sim.make_policy('random', env), {new_directory(where, 'rss')!r}, "
                f"steps={sizes['steps']}); "
                # VmHWM: this process's peak; ru_maxrss would keep the parent's peak across exec on Linux
                "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
            )
            done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
            peaks[max_steps] = int(done.stdout.split()[-1]) * 1024
    return [
        {
            "figure": "rss",
            "peak_rss_mb_100": peaks[100] / 1e6,
            "peak_rss_mb_1000": peaks[1000] / 1e6,
            "ratio": peaks[1000] / peaks[100],
        }
    ]


def reader(sizes: dict, parent: str) -> list[dict]:
    read = forge_gpu.reading.read_episodes
    rows = []
    for task, (num_envs, max_steps, end_prob, image) in sizes.items():
        steps = 2 * max_steps + 1 if not end_prob else int(4 / end_prob)
        env, batches = make_batches(num_envs, steps, max_steps=max_steps, end_prob=end_prob, image=image)
        with figure_directory(parent) as where:
            packed = new_directory(where, "packed")
            recorder = PackedRecorder(packed, env, max_buffer_bytes=1 << 30)
            record(recorder, batches)
            npz = os.path.join(where, "npz")
            convert_run(packed, npz, to="npz")
            figure = {"figure": f"reader_{task}", "episodes": recorder.completed_episodes}
            os.sync()  # no writeback of the runs just written during the reads
            for name, run in (("npz", npz), ("packed", packed)):
                figure[f"{name}_episodes_per_s"] = median_rate(
                    lambda run=run: sum(1 for _ in forge_gpu.reading.read_episodes(run))
                )
            for name, run in (("npz", npz), ("packed", packed)):
                figure[f"{name}_action_windows_per_s"] = median_rate(
                    lambda run=run: sum(1 for _ in forge_gpu.reading.action_windows(run, 2, 8))
                )
            for name, run in (("npz", npz), ("packed", packed)):
                start = time.perf_counter()
                windows = Windows(run, 2, 8)
                figure[f"{name}_windows_load_s"] = time.perf_counter() - start
            order = {"in_order": np.arange(len(windows))}
            order["shuffled"] = np.random.default_rng(0).permutation(len(windows))
            for kind, indices in order.items():

                def batches(indices=indices, windows=windows):
                    for at in range(0, len(indices), 256):
                        windows.batch(indices[at : at + 256])
                    return len(indices)

                figure[f"packed_batch_{kind}_per_s"] = median_rate(batches)
            rates = {True: [], False: []}
            for pair in range(5):
                for verify in (True, False) if pair % 2 == 0 else (False, True):
                    options = forge_gpu.reading.EpisodeReadOptions(verify=verify)
                    count = lambda o=options, run=packed: sum(1 for _ in read(run, options=o))  # noqa: E731
                    rates[verify].append(median_rate(count, 1))
            figure["packed_unverified_episodes_per_s"] = float(np.median(rates[False]))
            figure["verify_cost"] = float(np.median(rates[True])) / figure["packed_unverified_episodes_per_s"]
            del windows
            loads = {True: [], False: []}
            for pair in range(3):
                for verify in (False, True) if pair % 2 == 0 else (True, False):
                    start = time.perf_counter()
                    Windows(packed, 2, 8, verify=verify)
                    loads[verify].append(time.perf_counter() - start)
            figure["packed_windows_load_verified_s"] = float(np.median(loads[True]))
            figure["packed_windows_load_unverified_s"] = float(np.median(loads[False]))
        figure["episodes_vs_npz"] = figure["packed_episodes_per_s"] / figure["npz_episodes_per_s"]
        figure["windows_vs_npz"] = figure["packed_batch_in_order_per_s"] / figure["npz_action_windows_per_s"]
        figure["action_windows_vs_npz"] = figure["packed_action_windows_per_s"] / figure["npz_action_windows_per_s"]
        per_item = figure["packed_action_windows_per_s"] / figure["packed_batch_in_order_per_s"]
        figure["action_windows_vs_batch_in_order"] = per_item
        rows.append(figure)
    return rows


_WINDOWS_PROBE = """
import sys, time
import pyarrow  # loaded before the first reading, so that it is not counted
import numpy as np
from forge_gpu.reading import Windows

def anon():
    return int([line.split()[1] for line in open("/proc/self/status") if line.startswith("RssAnon")][0]) * 1024

before = anon()
start = time.perf_counter()
windows = Windows(sys.argv[1], 2, 8, mmap=sys.argv[2] == "mmap")
load = time.perf_counter() - start
held = anon() - before
order = np.random.default_rng(0).permutation(len(windows))
rates = []
for _ in range(3):
    start = time.perf_counter()
    for at in range(0, len(order), 256):
        windows.batch(order[at : at + 256])
    rates.append(len(order) / (time.perf_counter() - start))
print(load, held, float(np.median(rates)), len(windows))
"""


def windows_mmap(sizes: dict, parent: str) -> list[dict]:
    steps = sizes["steps"]
    env, batches = make_batches(sizes["num_envs"], steps, max_steps=steps, end_prob=0.02, image=sizes["image_size"])
    figure = {"figure": "windows_mmap"}
    with figure_directory(parent) as where:
        run = new_directory(where, "packed")
        record(PackedRecorder(run, env, max_buffer_bytes=1 << 30), batches)
        del batches
        figure["run_mb"] = sum(f.stat().st_size for f in Path(run).iterdir()) / 1e6
        for mode in ("loaded", "mmap"):
            done = subprocess.run(
                [sys.executable, "-c", _WINDOWS_PROBE, run, mode], capture_output=True, text=True, check=True
            )
            load, held, rate, count = done.stdout.split()
            figure[f"{mode}_held_mb"] = max(int(held), 0) / 1e6
            figure[f"{mode}_load_s"] = float(load)
            figure[f"{mode}_batch_shuffled_per_s"] = float(rate)
        figure["windows"] = int(count)
    figure["held_mmap_vs_loaded"] = figure["mmap_held_mb"] / max(figure["loaded_held_mb"], 1e-6)
    figure["rate_mmap_vs_loaded"] = figure["mmap_batch_shuffled_per_s"] / figure["loaded_batch_shuffled_per_s"]
    return [figure]


def checksum(sizes: dict, parent: str) -> list[dict]:
    import zlib

    import crc32c
    from isal import isal_zlib

    data = np.random.default_rng(0).integers(0, 256, sizes["megabytes"] << 20, dtype=np.uint8).tobytes()
    row = {"figure": "checksum", "crc32c_hardware": int(crc32c.hardware_based)}
    for name, function in (("crc32c", crc32c.crc32c), ("zlib_crc32", zlib.crc32), ("isal_crc32", isal_zlib.crc32)):
        row[f"{name}_gb_per_s"] = median_rate(lambda f=function: f(data) * 0 + len(data), sizes["repeats"]) / 1e9
    row["crc32c_vs_zlib"] = row["crc32c_gb_per_s"] / row["zlib_crc32_gb_per_s"]
    return [row]


def drop_cache(paths: list[str], everything: bool = True) -> str:
    """Empty the page cache of ``paths``: all of it where this process may (root) and ``everything``, else each
    file's pages; which."""
    os.sync()
    try:
        if not everything:
            raise PermissionError("the smoke run leaves the rest of the cache alone")
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return "fadvise_dontneed"


def raw_read(paths: list[str], chunk: int = 8 << 20) -> int:
    """Read ``paths`` sequentially into one reused buffer of ``chunk`` bytes, as cat does; the bytes read."""
    buffer = bytearray(chunk)
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while count := f.readinto(buffer):
                total += count
    return total


def verify(sizes: dict, parent: str) -> list[dict]:
    steps, size = sizes["steps"], sizes["image_size"]
    env, batches = make_batches(sizes["num_envs"], steps, max_steps=steps, end_prob=0.02, image=size)
    figure = {"figure": "verify"}
    with figure_directory(parent) as where:
        small = new_directory(where, "small")  # verified after each cache drop: the code's pages back in memory
        record(PackedRecorder(small, env), batches[:3])
        run = new_directory(where, "packed")
        recorder = PackedRecorder(run, env)
        record(recorder, batches)
        del batches
        paths = sorted(str(p) for p in Path(run).iterdir())
        figure["run_mb"] = sum(os.path.getsize(p) for p in paths) / 1e6
        figure["episodes"] = recorder.completed_episodes
        rates = {"raw": [], "verify": []}
        for pair in range(sizes["pairs"]):
            for kind in ("raw", "verify") if pair % 2 == 0 else ("verify", "raw"):
                figure["cold_cache"] = drop_cache(paths, sizes.get("drop_caches", True))
                forge_gpu.reading.verify_run(small)
                start = time.perf_counter()
                if kind == "raw":
                    raw_read(paths)
                else:
                    report = forge_gpu.reading.verify_run(run)
                    assert report["ok"], report
                rates[kind].append(figure["run_mb"] / (time.perf_counter() - start))
    figure["raw_read_mb_per_s"] = float(np.median(rates["raw"]))
    figure["verify_mb_per_s"] = float(np.median(rates["verify"]))
    figure["verify_vs_raw"] = figure["verify_mb_per_s"] / figure["raw_read_mb_per_s"]
    figure["file_system"] = fs_type(parent)
    for kind, values in rates.items():
        figure[f"{kind}_runs"] = " ".join(f"{v:.0f}" for v in values)
    return [figure]


SECTIONS = {
    "checksum": checksum,
    "ingest": ingest,
    "pipeline": pipeline,
    "rss": rss,
    "reader": reader,
    "windows_mmap": windows_mmap,
    "verify": verify,
}


def main(argv=None) -> int:
    args = section_args(__doc__, SECTIONS, argv)
    os.makedirs(args.record_dir, exist_ok=True)
    parent = tempfile.mkdtemp(prefix="packed-", dir=args.record_dir)
    sizes = SMOKE if args.smoke else FULL
    rows = run_sections(SECTIONS, sizes, args.only, parent)
    os.rmdir(parent)
    heading = f"packed layout figures, runs on {fs_type(args.record_dir)} ({args.record_dir})"
    markdown = heading + "\n\n" + "\n\n".join(table([r], list(r)) for r in rows)
    payload = {"machine": machine(), "file_system": fs_type(args.record_dir), "smoke": args.smoke, "rows": rows}
    save("packed", payload, markdown, Path(args.out) if args.out else None)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
