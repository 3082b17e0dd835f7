"""Shared helpers of the bench scripts (each imports them from here; no script imports another): argument defaults,
timing, JSON and table output, the machine and its file system, sizes on disk, image error, one stepping rate; and
the runs that several scripts measure: synthetic host batches (``forge_gpu.testing``), the per-row reference
recorder, raw file loops, the recording pipeline's pairs, the DataLoader's rate; ``tool`` loads a tool of tools/."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from forge_gpu import testing
from forge_gpu._src.core.episode import episode_stem
from forge_gpu._src.formats.npz.files import make_marker

RESULTS = Path(__file__).resolve().parent / "results"


def machine(*, gpu: bool = True) -> dict:
    """What the figures were measured on (``gpu``: and the GPU, asked of Warp; data-only benches skip it)."""
    info = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version()}
    if hasattr(os, "getloadavg"):
        info["load_average_1m"] = os.getloadavg()[0]  # other processes on a shared machine skew the figures
    if not gpu:
        return info
    import warp as wp

    if wp.get_cuda_device_count() > 0:
        info["gpu"] = wp.get_device("cuda:0").name
    return info


def timed(fn, *, min_seconds: float, min_reps: int = 3) -> list[float]:
    """Call ``fn()`` repeatedly for at least ``min_seconds`` and ``min_reps``; the seconds of each call."""
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def summary_ms(times) -> dict:
    """Median, 95th percentile and mean of the calls' ``times`` [s], in milliseconds."""

    t = np.asarray(times, dtype=np.float64) * 1e3
    return {"median_ms": float(np.median(t)), "p95_ms": float(np.percentile(t, 95)), "mean_ms": float(t.mean())}


def table(rows: list[dict], columns: list[str]) -> str:
    """A markdown table of ``rows`` (floats shown with 4 significant digits)."""

    def cell(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


VERSIONED = {"forge_gpu": "forge-gpu", "warp": "warp-lang", "newton": "newton", "numpy": "numpy", "torch": "torch"}
VERSIONED["pyarrow"] = "pyarrow"


def versions() -> dict:
    """The installed version of each package the figures depend on (None where one is not installed)."""
    from importlib import metadata

    found = {}
    for key, distribution in VERSIONED.items():
        try:
            found[key] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            found[key] = None
    return found


def save(name: str, payload: dict, markdown: str, out_dir: Path | None = None) -> Path:
    """Write ``<name>.json`` and ``<name>.md`` under ``bench/results`` (or ``out_dir``). The JSON says where and when
    its figures were measured: ``machine`` (platform, CPUs, load; the script's GPU), ``versions`` and ``date`` (UTC)."""
    out = Path(out_dir or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    here = machine(gpu=False) | payload.get("machine", {})  # a script's own machine keeps its keys (the GPU, ...)
    payload = {**payload, "machine": here, "versions": versions(), "date": date}
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
    (out / f"{name}.md").write_text(markdown + "\n")
    return out / f"{name}.json"


def plot(rows: list[dict], *, x: str, y: str, series: str, panels: str, path: Path, ylabel: str, title: str) -> Path:
    """One log-log panel per value of ``rows[panels]``, one line per value of ``rows[series]``; a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panel_values = list(dict.fromkeys(r[panels] for r in rows))
    fig, axes = plt.subplots(1, len(panel_values), figsize=(5 * len(panel_values), 4), squeeze=False)
    for ax, panel in zip(axes[0], panel_values, strict=True):
        mine = [r for r in rows if r[panels] == panel]
        for name in dict.fromkeys(r[series] for r in mine):
            line = [r for r in mine if r[series] == name and r[y] > 0]
            if line:
                ax.plot([r[x] for r in line], [r[y] for r in line], marker="o", label=str(name))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.set_title(str(panel))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def section_args(doc: str, sections: dict, argv=None) -> argparse.Namespace:
    """The command line of a script of sections (packed.py, export.py, costs.py): ``--smoke``, ``--only SECTION``
    (repeatable), ``--record-dir`` (where runs are written, default bench/results/tmp) and ``--out``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that every figure is produced")
    parser.add_argument("--only", choices=sorted(sections), action="append", help="run these sections only")
    parser.add_argument("--record-dir", default=str(RESULTS / "tmp"), help="where runs are written")
    parser.add_argument("--out", default=None, help="output folder (default bench/results)")
    return parser.parse_args(argv)


def run_sections(sections: dict, sizes: dict, only: list | None, parent: str) -> list[dict]:
    """Every row of the ``only`` sections (default all, in order), each printed as its table as it comes."""
    rows = []
    for name in only or list(sections):
        for row in sections[name](sizes[name], parent):
            print(table([row], list(row)), flush=True)
            rows.append(row)
    return rows


def parse_override(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` with VALUE a TOML value (``false``, ``128``, ``[1.0, 2.0]``) or else a plain string."""
    import tomllib

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected KEY=VALUE, e.g. params.render=false")
    try:
        return key, tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value


def add_set_option(parser: argparse.ArgumentParser, help: str) -> None:
    """The ``--set KEY=VALUE`` option (repeatable) of the bench scripts that make envs: ``args.overrides``, a list of
    (key, value) pairs."""
    parser.add_argument(
        "--set", dest="overrides", action="append", type=parse_override, default=[], metavar="KEY=VALUE", help=help
    )


def fs_type(path: str) -> str:
    """The file system type of ``path`` (from /proc/mounts; the longest matching mount point)."""
    path, best = os.path.realpath(path), ("", "unknown")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            mount, kind = line.split()[1], line.split()[2]
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best[0]):
                best = (mount, kind)
    except OSError:
        pass
    return best[1]


def tree_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def psnr(decoded: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per-frame PSNR [dB] of uint8 frames (peak 255); inf where a frame is exact."""
    error = (decoded.astype(np.float64) - reference.astype(np.float64)).reshape(len(reference), -1)
    mse = (error**2).mean(axis=1)
    with np.errstate(divide="ignore"):
        return 10 * np.log10(255.0**2 / mse)


def lerobot_video_frames(root: str, steps: list[int]) -> list[np.ndarray]:
    """The camera frames of each episode of the LeRobot export ``root`` (``steps``: each episode's frames, in the
    export's order), decoded with PyAV: one uint8 [T, H, W, 3] array per episode."""
    import av
    import pyarrow.parquet as pq

    meta = pq.read_table(os.path.join(root, "meta/episodes/chunk-000/file-000.parquet")).to_pylist()
    key = "observation.images.rgb"
    fps = json.loads(Path(root, "meta/info.json").read_text())["fps"]
    decoded, out = {}, []
    for m, count in zip(meta, steps, strict=True):
        path = os.path.join(
            root,
            f"videos/{key}/chunk-{m[f'videos/{key}/chunk_index']:03d}/file-{m[f'videos/{key}/file_index']:03d}.mp4",
        )
        if path not in decoded:
            with av.open(path) as container:
                decoded[path] = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        first = round(m[f"videos/{key}/from_timestamp"] * fps)
        out.append(decoded[path][first : first + count])
    return out


def measure_stepping(task: str, num_envs: int, device: str, seconds: float, policy_name: str, overrides=None) -> dict:
    """Median step time and env-steps/s of ``task`` at ``num_envs`` under ``policy_name`` (after 3 warm-up steps:
    compile, and on CUDA capture), for at least ``seconds``."""
    import warp as wp

    import forge_gpu

    env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, **(overrides or {}))
    policy = forge_gpu.sim.make_policy(policy_name, env)
    env.reset()

    def one_step():
        env.step(policy(env.observation))
        wp.synchronize_device(env.device)

    for _ in range(3):  # compile and, on CUDA, capture the graph
        one_step()
    times = np.array(timed(one_step, min_seconds=seconds))
    return {
        "task": task,
        "num_envs": num_envs,
        "device": str(env.device),
        "policy": policy_name,
        "overrides": dict(overrides or {}),
        "steps": len(times),
        "median_step_ms": float(np.median(times) * 1e3),
        "env_steps_per_s": float(num_envs / np.median(times)),
    }


def step_in_alternation(envs: dict, policies: dict, seconds: float, min_steps: int = 5) -> dict:
    """Step the envs (name -> env, each already reset) in alternation, one step of each in turn under its policy
    (name -> policy), for at least ``seconds`` in all and ``min_steps`` rounds, after 3 warm-up rounds (compile, on
    CUDA capture): a shared machine's load falls on all alike. Returns ``{"median": name -> median step time [s],
    "steps": rounds timed}``."""
    import warp as wp

    times: dict = {name: [] for name in envs}

    def one_step(name) -> float:
        env = envs[name]
        start = time.perf_counter()
        env.step(policies[name](env.observation))
        wp.synchronize_device(env.device)
        return time.perf_counter() - start

    for _ in range(3):
        for name in envs:
            one_step(name)
    begun, rounds = time.perf_counter(), 0
    while time.perf_counter() - begun < seconds or rounds < min_steps:
        for name in envs:
            times[name].append(one_step(name))
        rounds += 1
    return {"median": {name: float(np.median(t)) for name, t in times.items()}, "steps": rounds}


# -- runs for the recording and reading figures: synthetic host batches (forge_gpu.testing), a per-row
# reference recorder, raw file loops (bench/recorder.py, packed.py, threads.py, durability.py, costs.py) --


class PerRowRecorder:
    """The simple way: Python lists of per-row dicts per env; on episode end stack them and ``np.savez``
    (stored members, the same file format) to ``<name>.npz.tmp``, rename, then the marker via tmp + rename."""

    def __init__(self, directory: str):
        os.mkdir(directory)
        self.directory = directory
        self.frames: dict[int, list[dict]] = {}
        self.transitions: dict[int, list[tuple]] = {}
        self.completed_episodes = 0
        self.bytes_written = 0

    def append(self, observation, result) -> None:
        active, action = result.info["active"], result.info["executed_action"]
        for i in range(len(active)):
            row = {field: array[i].copy() for field, array in observation.items()}
            if not active[i]:
                self.frames[i], self.transitions[i] = [row], []
                continue
            self.frames[i].append(row)
            self.transitions[i].append((action[i].copy(), result.reward[i], result.terminated[i], result.truncated[i]))
            if result.terminated[i] or result.truncated[i]:
                self._publish(i)

    def _publish(self, env_id: int) -> None:
        frames, transitions = self.frames.pop(env_id), self.transitions.pop(env_id)
        members = {}
        for field in frames[0]:
            stacked = np.stack([frame[field] for frame in frames])
            members[f"obs/{field}"], members[f"next/{field}"] = stacked[:-1], stacked[1:]
        members["action"] = np.stack([t[0] for t in transitions])
        members["reward"] = np.array([t[1] for t in transitions], np.float32)
        members["terminated"] = np.array([t[2] for t in transitions], bool)
        members["truncated"] = np.array([t[3] for t in transitions], bool)
        episode_id = int(frames[0]["episode_id"])
        base = os.path.join(self.directory, episode_stem(env_id, episode_id))
        with open(base + ".npz.tmp", "wb") as f:
            np.savez(f, **members)
            self.bytes_written += f.tell()
        os.replace(base + ".npz.tmp", base + ".npz")
        with open(base + ".json.tmp", "w") as f:
            json.dump(make_marker(env_id, episode_id, len(transitions)), f, indent=2)
        os.replace(base + ".json.tmp", base + ".json")
        self.completed_episodes += 1

    def close(self) -> None:
        pass


MARKER = json.dumps(make_marker(1, 1, 25), indent=2).encode().ljust(100)  # the raw loops' marker file


def new_directory(parent: str, name: str) -> str:
    """A path under ``parent`` that does not exist yet (the recorders create their directory)."""
    path = tempfile.mkdtemp(prefix=name + "-", dir=parent)
    os.rmdir(path)
    return path


@contextlib.contextmanager
def figure_directory(parent: str):
    """A folder for one figure's runs, deleted (and the deletion synced) after its last run: deleting files
    slows the file creations that follow for seconds on some disks (ext4 with online discard, here)."""
    path = tempfile.mkdtemp(prefix="figure-", dir=parent)
    try:
        yield path
    finally:
        shutil.rmtree(path)
        os.sync()


def active_rows(batches) -> int:
    return sum(int(np.count_nonzero(result.info["active"])) for _, result in batches)


def record(recorder, batches, *, close: bool = True) -> tuple[float, float]:
    """Append every batch and close; the seconds it all took and the seconds of the close alone."""
    os.sync()  # every timed run starts with no dirty page cache left by the one before
    t0 = time.perf_counter()
    for observation, result in batches:
        recorder.append(observation, result)
    t1 = time.perf_counter()
    if close:
        recorder.close()
    t2 = time.perf_counter()
    return t2 - t0, t2 - t1


def write_file(path: str, data) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def on_threads(threads: int, count: int, work) -> float:
    """Run ``work(k)`` for k in range(count), spread over ``threads`` threads; the wall seconds."""

    def loop(first: int) -> None:
        for k in range(first, count, threads):
            work(k)

    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    os.sync()  # every timed run starts with no dirty page cache left by the one before
    t0 = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return time.perf_counter() - t0


def raw_publish(
    parent: str, count: int, payload: bytes | list[bytes], marker: bytes, threads: int, *, python_us: float = 0.0
) -> float:
    """Publish ``count`` (payload, marker) pairs, each file to a temporary name then renamed; a list of
    payloads is taken in turn. ``python_us``: microseconds of Python work (holding the GIL) per episode."""
    directory = new_directory(parent, "raw-publish")
    os.mkdir(directory)
    payloads = payload if isinstance(payload, list) else [payload]

    def publish(k: int) -> None:
        if python_us:
            busy(python_us)
        base = os.path.join(directory, f"episode{k:08d}")
        write_file(base + ".npz.tmp", payloads[k % len(payloads)])
        os.replace(base + ".npz.tmp", base + ".npz")
        write_file(base + ".json.tmp", marker)
        os.replace(base + ".json.tmp", base + ".json")

    return on_threads(threads, count, publish)


def busy(microseconds: float) -> None:
    """Hold the GIL for ``microseconds`` of Python work."""
    end = time.perf_counter() + microseconds * 1e-6
    while time.perf_counter() < end:
        pass


def tool(name: str):
    """The module of ``tools/<name>.py`` (a tool a benchmark uses, e.g. tools/browser.py), loaded by its path."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tools_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def make_batches(num_envs: int, steps: int, *, max_steps: int, end_prob: float, image: int | None = None, seed=0):
    """Host batches with the env's step semantics (``forge_gpu.testing``'s, made with whole-array operations): a
    reset batch, then ``steps`` step batches; cartpole's layout, plus RGB-D of ``image`` pixels a side when given."""
    env = testing.synthetic_description(num_envs, max_steps, proprio_dim=4, action_dim=1, images=image is not None,
                                image_shape=(image, image) if image else (4, 5), seed=seed)  # fmt: skip
    return env, testing.make_batches(testing.SyntheticBatches(env, seed=seed, end_prob=end_prob), steps)


def pipeline(sizes: dict, parent: str) -> list[dict]:
    """cartpole collected with and without recording, with and without state columns, ``sizes["pairs"]`` pairs in
    alternating order: each pair's efficiency (recording over bare env-steps/s), CPU overhead and stall, and a
    summary row of the medians (bench/packed.py's pipeline section, bench/costs.py's pipeline row)."""
    import forge_gpu
    from forge_gpu.recording import collect

    envs = {
        state: forge_gpu.sim.make("cartpole", num_envs=sizes["num_envs"], device="cpu", seed=0, record_state=state)
        for state in (True, False)
    }
    policies = {state: forge_gpu.sim.make_policy("random", env) for state, env in envs.items()}
    for state, env in envs.items():
        collect(env, policies[state], None, steps=5)  # compile and warm up
    rows = []
    with figure_directory(parent) as where:
        for pair in range(sizes["pairs"]):
            row = {"figure": f"pipeline_{pair}"}
            for state, env in envs.items():  # with the state columns (the default), then without
                runs, cpu_seconds = {}, {}
                for recording in (False, True) if pair % 2 == 0 else (True, False):  # the order alternates
                    os.sync()
                    directory = new_directory(where, "pipeline") if recording else None
                    cpu = time.process_time()
                    runs[recording] = collect(env, policies[state], directory, steps=sizes["steps"])
                    cpu_seconds[recording] = time.process_time() - cpu
                bare, recorded = runs[False], runs[True]
                efficiency = recorded.env_steps_per_second / bare.env_steps_per_second
                if state:
                    row |= {
                        "recording": recorded.env_steps_per_second,
                        "stepping": bare.env_steps_per_second,
                        "efficiency": efficiency,
                        "cpu_overhead": cpu_seconds[True] / cpu_seconds[False] - 1,
                        "stall": recorded.stall_fraction,
                        "episodes": recorded.episodes,
                    }
                else:
                    row["efficiency_no_state"] = efficiency
            rows.append(row)
    summary = {"figure": "pipeline"}
    summary["cpu_overhead_median"] = float(np.median([row["cpu_overhead"] for row in rows]))
    for key in ("efficiency", "efficiency_no_state"):
        values = [row[key] for row in rows]
        summary |= {f"{key}_median": float(np.median(values)), f"{key}_min": float(min(values))}
    return [*rows, summary]


def loader_rate(run: Path, *, workers: int, batch: int, batches: int) -> dict:
    """Samples/s of a torch DataLoader over ``WindowMapDataset(run)`` with ``workers`` workers, whole batches of
    ``batch`` from a BatchSampler over a RandomSampler, for ``batches`` batches (bench/loader.py, bench/costs.py).
    The first batch's time (``first_batch_s``) holds the run's opening, in the process that makes the batches (the
    sampler's length reads the run's index alone); ``steady_samples_per_s`` leaves it out."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    import forge_gpu

    dataset = forge_gpu.reading.WindowMapDataset(run, history=2, horizon=4)
    sampler = BatchSampler(RandomSampler(dataset, generator=torch.Generator().manual_seed(0)), batch, drop_last=True)
    loader = DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=workers,
                        persistent_workers=workers > 0)  # fmt: skip
    began, seen, first, k = time.perf_counter(), 0, None, 0
    while k < batches:  # epochs of the same loader (its workers kept) until ``batches`` batches
        for item in loader:
            seen, k = seen + len(item["action"]), k + 1
            if first is None:
                first = time.perf_counter() - began  # the run opened where the batches are made (a worker's start)
            if k == batches:
                break
    seconds = time.perf_counter() - began
    steady = (seen - batch) / max(seconds - first, 1e-9)  # after the first batch (the workers' start)
    return {"workers": workers, "batch": batch, "batches": k, "samples": seen, "seconds": seconds,
            "first_batch_s": first, "samples_per_s": seen / seconds, "steady_samples_per_s": steady}  # fmt: skip


def raw_sequential_write(parent: str, nbytes: int, chunk: int = 8 << 20) -> float:
    """Seconds to write ``nbytes`` sequentially into one new file in 8 MiB writes, close included."""
    data = np.random.default_rng(0).integers(0, 256, chunk, dtype=np.uint8).tobytes()
    path = os.path.join(parent, "raw.bin")
    os.sync()
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    left = nbytes
    while left > 0:
        left -= os.write(fd, memoryview(data)[: min(left, chunk)])
    os.close(fd)
    seconds = time.perf_counter() - start
    os.remove(path)
    return seconds


def median_rate(count_items, repeats: int = 3) -> float:
    """Items per second of ``count_items()`` (which returns how many it handled), the median of ``repeats``."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        items = count_items()
        rates.append(items / (time.perf_counter() - start))
    return float(np.median(rates))
