"""On-disk containers for a packed, append-only episode store, against raw writes of the same bytes.

python bench/container.py                          # files under bench/results/tmp (the repo's disk)
python bench/container.py --dir /dev/shm/cbench    # the same on tmpfs
python bench/container.py --smoke                  # seconds-long check that every figure is produced

A step is one row per env in the columns of ``columns()``; each layout's steps are generated into
preallocated [steps, envs, ...] arrays before any clock starts, and a write call appends one chunk of
--steps-per-write steps (default: as many as fit in 8 MiB, at least 1) as zero-copy [steps*envs, ...] views.
  cartpole   4096 envs, proprio 4, action 1, no images, 200 steps (smoke: 256 envs, 20 steps)
  reach64    256 envs, proprio 14, action 4, rgb 64x64x3 uint8 (flat background, a blob, uniform noise +-2),
             depth 64x64 float32 (a plane, the blob nearer, gaussian noise 2 mm), 50 steps (smoke: 16, 5)
Candidates:
  raw           one file, os.writev of every column's bytes per chunk: the reference (vs_raw = rows_per_s / raw's)
  npy_columns   one file per column, raw bytes appended per chunk (a .npy header, rewritten at close, and the
                episode index are not written)
  arrow_ipc     pyarrow.ipc.new_stream on a pyarrow.OSFile, one record batch per chunk; compression none, lz4
                or zstd (pyarrow's default level and thread pool); multi-dim columns as FixedSizeListArray of the
                flattened row, zero-copy from numpy (bool columns are bit-packed: a copy)
  parquet       pyarrow.parquet.ParquetWriter, one row group per chunk; compression none or zstd, every other
                option at pyarrow's default (dictionary encoding and statistics on)
Each trial of a candidate writes into a fresh directory under --dir, starting after os.sync() and ending after
close (no fsync, as in the recorder: on a disk this is mostly getting the bytes into the page cache); then the
files' st_size; then two reads of the files just written (from the page cache: decode cost, not the disk)
into contiguous numpy arrays per column, of every column and of obs/proprio + action only. raw reads the
whole file (its columns are interleaved per chunk: its projection reads it all too); npy_columns np.fromfile;
arrow_ipc pa.memory_map + open_stream(..., IpcReadOptions(included_fields=...)).read_all(); parquet
pq.read_table(columns=...). Every read-back is compared with what was written, and a mismatch raises.
Trial 0 (first-touch page faults, pyarrow's pools) is dropped; the first candidate of a trial rotates; the
figures are medians of --trials. MB = 1e6 bytes of uncompressed column data; size_ratio = st_size / those.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
from common import machine, save, table  # noqa: E402

FULL = {
    "cartpole": {"envs": 4096, "proprio": 4, "action": 1, "image": 0, "steps": 200, "max_steps": 200},
    "reach64": {"envs": 256, "proprio": 14, "action": 4, "image": 64, "steps": 50, "max_steps": 100},
}
SMOKE = {
    "cartpole": {**FULL["cartpole"], "envs": 256, "steps": 20},
    "reach64": {**FULL["reach64"], "envs": 16, "steps": 5},
}
CANDIDATES = [("raw", "none"), ("npy_columns", "none"), *[("arrow_ipc", c) for c in ("none", "lz4", "zstd")]]
CANDIDATES += [("parquet", "none"), ("parquet", "zstd")]
PROJECTION = ["obs/proprio", "action"]
TABLE = "layout container compression rows_per_s mb_per_s vs_raw bytes_on_disk size_ratio read_rows_per_s"
TABLE = [*TABLE.split(), "projected_read_rows_per_s"]


def columns(spec: dict) -> list[tuple[str, type, tuple]]:
    """(name, dtype, per-row shape) of every column, in write order."""
    cols = [(f"obs/{name}", np.int32, ()) for name in ("env_id", "episode_id", "step_id")]
    cols += [("obs/time", np.float32, ()), ("obs/proprio", np.float32, (spec["proprio"],))]
    if h := spec["image"]:
        cols += [("obs/rgb", np.uint8, (h, h, 3)), ("obs/depth", np.float32, (h, h))]
    cols += [("action", np.float32, (spec["action"],)), ("reward", np.float32, ())]
    return cols + [("terminated", np.bool_, ()), ("truncated", np.bool_, ())]


def make_data(spec: dict, cols, rng) -> dict[str, np.ndarray]:
    """[steps, envs, ...] arrays: per-env episodes (terminating with p=0.01 per step, truncating at max_steps),
    step counters, time = step_id * 0.02, proprio a smooth random walk reset per episode, a policy-like action."""
    steps, n, h = spec["steps"], spec["envs"], spec["image"]
    data = {name: np.empty((steps, n, *shape), dtype) for name, dtype, shape in cols}
    step_id, episode_id = np.zeros(n, np.int32), np.zeros(n, np.int32)
    state = rng.normal(0, 0.05, (n, spec["proprio"])).astype(np.float32)
    if h:
        yy, xx = np.mgrid[0:h, 0:h].astype(np.float32)
        background = rng.integers(40, 200, (n, 1, 1, 3)).astype(np.int16)
        plane = (rng.uniform(0.8, 1.5, (n, 1, 1)) + rng.uniform(-2e-3, 2e-3, (n, 1, 1)) * (xx + yy)).astype(np.float32)
    for t in range(steps):
        data["obs/env_id"][t] = np.arange(n)
        data["obs/episode_id"][t], data["obs/step_id"][t] = episode_id, step_id
        data["obs/time"][t] = step_id * np.float32(0.02)
        data["obs/proprio"][t] = state
        action = np.tanh(-2 * state[:, : spec["action"]] + rng.normal(0, 0.1, (n, spec["action"])))
        data["action"][t] = action
        if h:
            cy, cx = (h / 2 + h / 3 * np.tanh(state[:, :2])).T[:, :, None, None]
            blob = (yy - cy) ** 2 + (xx - cx) ** 2 < (h / 12) ** 2
            rgb = np.where(blob[..., None], np.int16(220), background) + rng.integers(-2, 3, (n, h, h, 3), np.int16)
            data["obs/rgb"][t] = np.clip(rgb, 0, 255)
            data["obs/depth"][t] = plane - 0.2 * blob + rng.normal(0, 2e-3, (n, h, h)).astype(np.float32)
            data["reward"][t] = -np.linalg.norm(state[:, :3], axis=1)
        else:
            data["reward"][t] = 1.0
        terminated = rng.random(n) < 0.01
        truncated = ~terminated & (step_id + 1 >= spec["max_steps"])
        data["terminated"][t], data["truncated"][t] = terminated, truncated
        done = terminated | truncated
        state += rng.normal(0, 0.02, state.shape).astype(np.float32) + 0.02 * action.mean(1, keepdims=True)
        state[done] = rng.normal(0, 0.05, (int(done.sum()), spec["proprio"]))
        episode_id, step_id = episode_id + done, np.where(done, 0, step_id + 1).astype(np.int32)
    return data


# -- writers: (directory, chunks, cols, compression) ---------------------------------------------------


def write_all(fd: int, views: list) -> None:
    """os.writev until every byte of ``views`` is written."""
    views = [memoryview(v).cast("B") for v in views]
    while views:
        n = os.writev(fd, views)
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if views:
            views[0] = views[0][n:]


def column_file(directory: str, name: str) -> str:
    return os.path.join(directory, name.replace("/", "__") + ".bin")


def write_raw(directory, chunks, cols, compression) -> None:
    fd = os.open(os.path.join(directory, "data.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in chunks:
            write_all(fd, [chunk[name] for name, _, _ in cols])
    finally:
        os.close(fd)


def write_npy_columns(directory, chunks, cols, compression) -> None:
    fds = [os.open(column_file(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for name, _, _ in cols]
    try:
        for chunk in chunks:
            for fd, (name, _, _) in zip(fds, cols, strict=True):
                write_all(fd, [chunk[name]])
    finally:
        for fd in fds:
            os.close(fd)


def arrow_type(dtype, shape) -> pa.DataType:
    kind = pa.from_numpy_dtype(dtype)
    return pa.list_(kind, int(np.prod(shape))) if shape else kind


def arrow_array(a: np.ndarray, shape) -> pa.Array:
    """Zero-copy from numpy (bools excepted: Arrow bit-packs them); a multi-dim row as a fixed-size list."""
    flat = pa.array(a.reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, int(np.prod(shape))) if shape else flat


def batches(chunks, cols):
    schema = pa.schema([pa.field(name, arrow_type(dtype, shape), nullable=False) for name, dtype, shape in cols])
    chunks = (
        pa.RecordBatch.from_arrays([arrow_array(c[name], shape) for name, _, shape in cols], schema=schema)
        for c in chunks
    )
    return schema, chunks


def write_arrow_ipc(directory, chunks, cols, compression) -> None:
    schema, record_batches = batches(chunks, cols)
    options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    with pa.OSFile(os.path.join(directory, "data.arrows"), "wb") as sink:
        with pa.ipc.new_stream(sink, schema, options=options) as writer:
            for batch in record_batches:
                writer.write_batch(batch)


def write_parquet(directory, chunks, cols, compression) -> None:
    schema, record_batches = batches(chunks, cols)
    with pq.ParquetWriter(os.path.join(directory, "data.parquet"), schema, compression=compression) as writer:
        for batch in record_batches:
            writer.write_batch(batch, row_group_size=batch.num_rows)


# -- readers: (directory, cols, names, chunk_rows) -> {name: [rows, ...] array} --------------------------


def read_raw(directory, cols, names, chunk_rows) -> dict:
    buf, offset, parts = np.fromfile(os.path.join(directory, "data.bin"), np.uint8), 0, {n: [] for n in names}
    for rows in chunk_rows:
        for name, dtype, shape in cols:
            nbytes = rows * np.dtype(dtype).itemsize * int(np.prod(shape))
            if name in parts:
                parts[name].append(buf[offset : offset + nbytes].view(dtype).reshape(rows, *shape))
            offset += nbytes
    return {name: np.concatenate(p) for name, p in parts.items()}


def read_npy_columns(directory, cols, names, chunk_rows) -> dict:
    out = {}
    for name, dtype, shape in cols:
        if name in names:
            out[name] = np.fromfile(column_file(directory, name), dtype).reshape(-1, *shape)
    return out


def arrow_to_numpy(tbl: pa.Table, cols, names) -> dict:
    out = {}
    for name, dtype, shape in cols:
        if name in names:
            parts = [(c.flatten() if shape else c).to_numpy(zero_copy_only=False) for c in tbl.column(name).chunks]
            out[name] = np.concatenate(parts).astype(dtype, copy=False).reshape(-1, *shape)
    return out


def read_arrow_ipc(directory, cols, names, chunk_rows) -> dict:
    indices = [i for i, (name, _, _) in enumerate(cols) if name in names]
    with pa.memory_map(os.path.join(directory, "data.arrows")) as source:
        try:
            tbl = pa.ipc.open_stream(source, options=pa.ipc.IpcReadOptions(included_fields=indices)).read_all()
        except (AttributeError, TypeError):  # a pyarrow without included_fields: read all, then select
            tbl = pa.ipc.open_stream(source).read_all().select(indices)
        return arrow_to_numpy(tbl, cols, names)


def read_parquet(directory, cols, names, chunk_rows) -> dict:
    return arrow_to_numpy(pq.read_table(os.path.join(directory, "data.parquet"), columns=list(names)), cols, names)


WRITERS = {"raw": write_raw, "npy_columns": write_npy_columns, "arrow_ipc": write_arrow_ipc, "parquet": write_parquet}
READERS = {"raw": read_raw, "npy_columns": read_npy_columns, "arrow_ipc": read_arrow_ipc, "parquet": read_parquet}


def file_system(path: str) -> dict:
    """The mount holding ``path`` (the longest matching mount point in /proc/mounts) and statvfs figures."""
    real, best = os.path.realpath(path), {"mount": "", "type": "unknown", "device": "", "options": ""}
    mounts = Path("/proc/mounts").read_text().splitlines() if os.path.exists("/proc/mounts") else []
    for line in mounts:
        device, mount, kind, options = line.split()[:4]
        mount = mount.replace("\\040", " ")
        if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best["mount"]):
            best = {"mount": mount, "type": kind, "device": device, "options": options}
    st = os.statvfs(path)
    return {"path": real, **best, "block_size": st.f_bsize, "free_bytes": st.f_bavail * st.f_frsize}


def trial(container, compression, parent, chunks, cols, chunk_rows, flat, label) -> tuple:
    """Write (timed from after os.sync() to after close), size, full and projected reads (timed, checked)."""
    directory = tempfile.mkdtemp(prefix=label.replace(" ", "-") + "-", dir=parent)
    os.sync()  # no dirty pages of an earlier trial are flushed on this one's time
    t0 = time.perf_counter()
    WRITERS[container](directory, chunks, cols, compression)
    seconds = [time.perf_counter() - t0]
    size = sum(entry.stat().st_size for entry in os.scandir(directory))
    for names in ([name for name, _, _ in cols], PROJECTION):
        t0 = time.perf_counter()
        got = READERS[container](directory, cols, names, chunk_rows)
        seconds.append(time.perf_counter() - t0)
        for name in names:
            if got[name].shape != flat[name].shape or not np.array_equal(got[name], flat[name]):
                raise RuntimeError(f"{label}: {name} read back differs from what was written")
    shutil.rmtree(directory)
    return (*seconds, size)


def measure_layout(layout: str, spec: dict, trials: int, parent: str, steps_per_write: int | None, rng) -> list:
    cols = columns(spec)
    data = make_data(spec, cols, rng)
    flat = {name: a.reshape(-1, *a.shape[2:]) for name, a in data.items()}
    rows, nbytes = spec["steps"] * spec["envs"], sum(a.nbytes for a in data.values())
    per_write = steps_per_write or max(1, (8 << 20) // (nbytes // spec["steps"]))
    starts = range(0, spec["steps"], per_write)
    chunks = [{name: a[s : s + per_write].reshape(-1, *a.shape[2:]) for name, a in data.items()} for s in starts]
    chunk_rows = [len(chunk["reward"]) for chunk in chunks]
    results = {candidate: [] for candidate in CANDIDATES}
    for k in range(trials + 1):  # trial 0 is the warm-up, dropped below
        first = k % len(CANDIDATES)  # the candidate that goes first rotates
        for container, compression in CANDIDATES[first:] + CANDIDATES[:first]:
            label = f"{layout} {container} {compression}"
            got = trial(container, compression, parent, chunks, cols, chunk_rows, flat, label)
            results[(container, compression)].append(got)
    medians = {c: [statistics.median(x) for x in zip(*r[1:], strict=True)] for c, r in results.items()}
    out, raw_write = [], medians[CANDIDATES[0]][0]
    for (container, compression), (write, read, projected, size) in medians.items():
        values = [layout, container, compression, rows / write, nbytes / write / 1e6, raw_write / write, int(size)]
        row = dict(zip(TABLE, [*values, size / nbytes, rows / read, rows / projected], strict=True))
        row |= {"rows": rows, "uncompressed_bytes": nbytes, "steps_per_write": per_write}
        out.append(row | {"trials_write_read_projected_bytes": results[(container, compression)]})  # [0]: warm-up
    return out


def main(argv=None) -> int:
    import warp as wp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None, help="parent of the trial directories (default bench/results/tmp)")
    parser.add_argument("--trials", type=int, default=None, help="trials per candidate (default 3; smoke 1)")
    parser.add_argument("--steps-per-write", type=int, default=None, help="steps per write call (default: 8 MiB)")
    parser.add_argument("--layouts", nargs="+", default=list(FULL), choices=list(FULL))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    sizes = SMOKE if args.smoke else FULL
    trials = args.trials or (1 if args.smoke else 3)
    base = args.dir or str(HERE / "results" / "tmp")
    os.makedirs(base, exist_ok=True)
    fs = file_system(base)
    rng = np.random.default_rng(0)
    started, rows = time.perf_counter(), []
    parent = tempfile.mkdtemp(prefix="container-", dir=base)
    try:
        for layout in args.layouts:
            rows += measure_layout(layout, sizes[layout], trials, parent, args.steps_per_write, rng)
    finally:
        shutil.rmtree(parent)
    md = f"## Containers ({fs['type']} at {fs['mount']}, files under {fs['path']}; medians of {trials} trials, "
    md += "reads from the page cache)\n\n" + table(rows, TABLE)
    payload = {"machine": machine(), "file_system": fs, "trials": trials, "pyarrow": pa.__version__}
    payload |= {"sizes": {k: sizes[k] for k in args.layouts}, "seconds": time.perf_counter() - started, "rows": rows}
    path = save("container", payload, md, args.out)
    print(md)
    print(f"\nwrote {path} ({payload['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
