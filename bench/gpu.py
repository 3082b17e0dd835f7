"""The GPU figures, one command: each section in a process of its own, so that one failure costs one row.

python bench/gpu.py --out DIR          # on a GPU machine (cuda:0)
python bench/gpu.py --smoke --out DIR  # tiny sizes on whatever device there is (CI: the CPU)

With ``pytest -m cuda`` (every device-parametrized test's CUDA case) this is the GPU check. Each section runs as
``python bench/gpu.py --section NAME`` under a timeout, its output in DIR/gpu_logs/NAME.log; a section that raises,
dies or hangs gives an ``error`` or ``timeout`` row with the last lines of its log, keeps the rows it gave before,
and the next section runs. Every child runs with FORGE_GPU_VERBOSE=1, so the logs carry Warp's module-load lines:
the last row counts the modules Warp compiled rather than found in its kernel cache (``forge-gpu precompile``).
The table is printed and written with the JSON to DIR/gpu.{md,json} (default bench/results). Exit status 1
when a check failed or a section did not finish.

Sections (one row per figure):
  machine         platform, Python, CPUs, load, GPU and driver, package versions, the device
  bandwidth       the transport's copy of one reach batch (no camera) into a pinned slot, timed with the slot's
                  CUDA events, against the page-locked device-to-host peak (one 256 MiB ``wp.copy``); target 0.8.
                  On the CPU: np.copyto of the same bytes
  pipeline_TASK   env-steps/s stepping only, with the transport (``collect`` without recording) and with
                  recording (packed, statistics off); efficiency = recording / stepping, target 0.9
  frames          reach with RGB-D: bytes moved per step raw and with rgb as JPEG encoded where the step ran
                  (nvJPEG on CUDA), encode frames/s, env-steps/s raw vs encoded, overflows, and the last batch
                  decoded on the CPU within the codec's PSNR bound
  transport       bench/transport.py's measurement (its methods: a synchronous copy per field, the host snapshot
                  ring, torch non-blocking copies into pinned tensors, nothing) per layout and env count: bytes,
                  time per step, overlap with stepping, copy-only GB/s against the page-locked device-to-host peak
                  (ratio). Its rows also in DIR/transport-cuda.json (the CPU's: bench/results/transport.json).
                  torch_pinned is left out, with a row saying so, where torch has no CUDA
  syncs           does the stepping loop (policy + step) wait on the device? A burst of steps queued behind a
                  delay kernel: the host returns while the device is still on the delay kernel exactly when no
                  step synchronized. Not meaningful on the CPU, whose launches run synchronously
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from common import RESULTS, psnr, save, table

FULL = {
    "pipeline": {"cartpole": 4096, "reach": 1024, "ant": 1024, "push": 1024},
    "steps": 200,
    "bandwidth": {"num_envs": 1024, "publishes": 50},
    "frames": {"num_envs": 512, "image_size": 128, "steps": 20},
    "syncs": {"num_envs": 64, "burst": 32, "delay_s": 0.25},
    "transport": {
        "envs": {"cartpole": [1024, 16384], "reach_rgbd64": [1024, 4096], "reach_rgbd128": [1024]},
        "seconds": 0.5,
    },
}
SMOKE = {
    "pipeline": {"cartpole": 16},
    "steps": 8,
    "bandwidth": {"num_envs": 4, "publishes": 3},
    "frames": {"num_envs": 4, "image_size": 32, "steps": 4},
    "syncs": {"num_envs": 16, "burst": 8, "delay_s": 0.05},
    "transport": {"envs": {"cartpole": [8], "reach_rgbd64": [4]}, "seconds": 0.05},
}
TIMEOUT_S = {"full": 300.0, "smoke": 600.0}
"""One section's timeout: a cold kernel cache compiles every module a task loads in its first section."""


def say(message: str) -> None:
    """A progress line in the section's log (the last ones go into an error or timeout row)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def device_of(ctx):
    import warp as wp

    import forge_gpu

    return wp.get_device(ctx.device or forge_gpu.sim.default_device())


def machine(ctx):
    import importlib.metadata

    import warp as wp

    info = {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count()}
    if hasattr(os, "getloadavg"):
        info["load_average_1m"] = round(os.getloadavg()[0], 2)  # other processes on a shared machine skew figures
    for name in ("forge-gpu", "warp-lang", "newton", "mujoco-warp", "torch"):
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            info[name] = "-"
    if wp.get_cuda_device_count() > 0:
        gpu = wp.get_device("cuda:0")
        info["gpu"] = f"{gpu.name}, sm_{gpu.arch}, {gpu.total_memory / 2**30:.0f} GiB"
        driver = wp.get_cuda_driver_version()
        info["cuda_driver"] = ".".join(map(str, driver)) if driver else "none"
    info["device"] = str(device_of(ctx))
    info["kernel_cache"] = wp.config.kernel_cache_dir
    for key, value in info.items():
        yield {"figure": key, "value": value}


def bandwidth(ctx):
    import warp as wp

    import forge_gpu
    from forge_gpu.recording import HostSnapshotTransport

    device, size = device_of(ctx), ctx.sizes["bandwidth"]
    publishes = size["publishes"]
    env = forge_gpu.sim.make("reach", num_envs=size["num_envs"], device=str(device), **{"params.render": False})
    env.reset()
    transport = HostSnapshotTransport(env, slots=4)
    seen = []

    def consume():
        while (batch := transport.get()) is not None:
            seen.append(batch.slot)
            transport.release(batch)

    consumer = threading.Thread(target=consume)
    consumer.start()
    start = time.perf_counter()
    for _ in range(publishes):
        transport.publish()
    transport.close()
    consumer.join()
    wall = time.perf_counter() - start
    nbytes = transport.bytes_per_step
    if device.is_cuda:
        copy = transport.device_copy_seconds / publishes
        source = wp.zeros(256 << 20, dtype=wp.uint8, device=device)
        pinned = wp.empty(256 << 20, dtype=wp.uint8, device="cpu", pinned=True)
        begin, end = wp.Event(device, enable_timing=True), wp.Event(device, enable_timing=True)
        peaks = []
        for _ in range(5):
            stream = wp.get_stream(device)
            stream.record_event(begin)
            wp.copy(pinned, source, stream=stream)
            stream.record_event(end)
            wp.synchronize_event(end)
            peaks.append((256 << 20) / (wp.get_event_elapsed_time(begin, end) / 1e3))
        peak, reference = max(peaks), "page-locked device-to-host peak"
    else:
        copy = wall / publishes  # the CPU copy runs in publish itself
        a, b = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            np.copyto(b, a)
            times.append(time.perf_counter() - t0)
        peak, reference = nbytes / min(times), "np.copyto of the same bytes"
    rate = nbytes / copy
    yield {
        "figure": f"transport copy, reach x{env.num_envs} ({nbytes / 1e6:.1f} MB per step)",
        "value": f"{rate / 1e9:.2f} GB/s against {peak / 1e9:.2f} GB/s ({reference})",
        "ratio": rate / peak,
        "target": 0.8,
        "ok": len(seen) == publishes,
    }


def pipeline(task: str, ctx):
    import warp as wp

    import forge_gpu
    from forge_gpu.recording import RecordingOptions, collect

    device, num_envs, steps = device_of(ctx), ctx.sizes["pipeline"][task], ctx.sizes["steps"]
    say(f"make {task} x{num_envs}")
    env = forge_gpu.sim.make(task, num_envs=num_envs, device=str(device), max_steps=200)
    policy = forge_gpu.sim.make_policy("random", env)
    collect(env, policy, None, steps=3)  # compile and capture outside the timed runs
    env.reset()
    start = time.perf_counter()
    for _ in range(steps):
        env.step(policy(env.observation))
    wp.synchronize_device(device)
    stepping = num_envs * steps / (time.perf_counter() - start)
    yield {"figure": f"{task} x{num_envs} on {device} (step {env.step_mode}): stepping only",
           "value": f"{stepping:,.0f} env-steps/s"}  # fmt: skip
    transport = collect(env, policy, None, steps=steps).env_steps_per_second
    yield {"figure": f"{task}: with the transport", "value": f"{transport:,.0f} env-steps/s"}
    # A process's first recording pays once for what every later one reuses (its first collection on an H200 ran
    # at a quarter of the second's rate): a short one first, then the timed one.
    for warm in (True, False):
        directory = Path(tempfile.mkdtemp(prefix=f"gpu-{task}-", dir=ctx.record_dir)) / "run"
        try:
            count, options = max(steps // 10, 2) if warm else steps, RecordingOptions(statistics=False)
            recorded = collect(env, policy, str(directory), steps=count, options=options)
        finally:
            shutil.rmtree(directory.parent, ignore_errors=True)
    rate = recorded.env_steps_per_second
    yield {"figure": f"{task}: recorded (packed, statistics off)",
           "value": f"{rate:,.0f} env-steps/s, stall {recorded.stall_fraction:.1%}",
           "ratio": rate / stepping, "target": 0.9}  # fmt: skip
    if not any(array.ndim == 4 for array in env.observation.values()):  # no camera: no frames to encode
        return
    # Where the frames' encoding on the host bounds the recording: the same with as many encode threads as the
    # machine has cores, and with the frames stored raw (no encoding: the writer and the disk alone).
    cores = os.cpu_count() or 1
    for label, options in (
        (f"{cores} encode threads", RecordingOptions(statistics=False, writers=cores)),
        ("frames raw (codecs none)", RecordingOptions(statistics=False, codecs={"*": "none"})),
    ):
        directory = Path(tempfile.mkdtemp(prefix=f"gpu-{task}-", dir=ctx.record_dir)) / "run"
        try:
            again = collect(env, policy, str(directory), steps=max(steps // 4, 2), options=options)  # a rate: fewer
        finally:
            shutil.rmtree(directory.parent, ignore_errors=True)
        yield {"figure": f"{task}: recorded, {label}",
               "value": f"{again.env_steps_per_second:,.0f} env-steps/s, stall {again.stall_fraction:.1%}",
               "ratio": again.env_steps_per_second / stepping, "target": 0.9}  # fmt: skip


def _publish(env, policy, transport, steps: int) -> tuple[float, dict]:
    """Step and publish ``steps`` times with a consumer releasing every batch; the wall time and the last batch's
    encoded fields (copied)."""
    from forge_gpu._src.core.codecs import EncodedFrames

    last: dict = {}

    def consume():
        while (batch := transport.get(timeout=120)) is not None:
            for name, frames in batch.observation.items():
                if isinstance(frames, EncodedFrames):
                    last[name] = EncodedFrames(frames.spec, frames.payload.copy(), frames.offsets.copy())
            transport.release(batch)

    consumer = threading.Thread(target=consume)
    consumer.start()
    start = time.perf_counter()
    try:
        for _ in range(steps):
            env.step(policy(env.observation))
            transport.publish(timeout=120)
    finally:
        transport.close()
        consumer.join(timeout=120)
    return time.perf_counter() - start, last


def frames(ctx):
    """reach with RGB-D, random policy, each step published into a transport of 4 slots whose consumer releases
    every batch: raw, then with ``rgb`` encoded as JPEG where the step ran (nvJPEG on CUDA, Pillow on the CPU)."""
    import warp as wp

    import forge_gpu
    from forge_gpu._src.collect.encode import make_encoder
    from forge_gpu._src.core.codecs import CodecSpec, decode_frames
    from forge_gpu.recording import HostSnapshotTransport

    size = ctx.sizes["frames"]
    device = wp.get_device(ctx.device or forge_gpu.sim.default_device())
    n, s, steps = size["num_envs"], size["image_size"], size["steps"]
    say(f"make reach x{n} at {s}x{s} on {device}")
    env = forge_gpu.sim.make("reach", num_envs=n, device=str(device), max_steps=200, **{"params.image_size": s})
    policy = forge_gpu.sim.make_policy("random", env)
    env.reset()
    env.step(policy(env.observation))  # compile and capture outside the timed runs
    spec = CodecSpec("jpeg")
    encoder = make_encoder(env, {"rgb": spec}, where="device" if device.is_cuda else "host")
    where = f"{encoder.name} on {device}"
    raw = HostSnapshotTransport(env, slots=4)
    say("raw")
    raw_seconds, _ = _publish(env, policy, raw, steps)
    encoded = HostSnapshotTransport(env, slots=4, encoder=encoder)
    say(f"encoded ({where})")
    encoded_seconds, last = _publish(env, policy, encoded, steps)
    rendered = env.observation["rgb"].numpy()  # the frames of the last published step
    payloads = encoded.payloads
    moved_raw = raw.bytes_per_step
    moved_encoded = encoded.bytes_per_step + payloads.payload_bytes / steps
    rgb = payloads.raw_bytes["rgb"]
    name = f"reach {s}x{s} RGB-D x{n}"
    yield {"figure": f"bytes moved per step, raw ({name})", "value": f"{moved_raw:,} B (rgb {rgb:,} B)"}
    yield {
        "figure": f"bytes moved per step, rgb as {spec} ({where})",
        "value": f"{moved_encoded:,.0f} B (rgb payload {payloads.payload_bytes / steps:,.0f} B, "
        f"{payloads.payload_bytes / steps / n:,.0f} B per frame)",
        "ratio": moved_raw / moved_encoded,
    }
    per_step = payloads.encode_seconds / steps
    yield {
        "figure": f"encode time per step ({where})",
        "value": f"{per_step * 1e3:.2f} ms, {n / per_step:,.0f} frames/s",
    }
    raw_rate, encoded_rate = n * steps / raw_seconds, n * steps / encoded_seconds
    yield {
        "figure": "env-steps/s stepping + publishing, raw vs encoded",
        "value": f"{raw_rate:,.0f} vs {encoded_rate:,.0f}",
        "ratio": encoded_rate / raw_rate,
    }
    yield {"figure": "overflows (payloads spilled past the slot's area)", "value": str(payloads.overflows)}
    decoded = decode_frames(spec, last["rgb"], (s, s, 3), np.uint8)
    quality = psnr(decoded, rendered)
    bound = spec.codec.min_psnr
    yield {
        "figure": "the last batch decodes with the CPU codec (Pillow)",
        "value": f"min PSNR {quality.min():.1f} dB over {len(quality)} frames (bound {bound:g} dB)",
        "ok": bool(len(decoded) == n and (quality >= bound).all()),
    }


@functools.cache
def delay_kernel():
    """A one-thread kernel of ``iterations`` dependent multiply-adds: work the device is busy with while the host
    queues the burst."""
    import warp as wp

    def delay(iterations: int, out: wp.array(dtype=wp.float32)):
        x = out[0]
        for _ in range(iterations):
            x = x * 0.9999999 + 1.0
        out[0] = x

    delay.__annotations__ = {"iterations": int, "out": wp.array(dtype=wp.float32)}  # types, not strings
    return wp.kernel(delay)


def syncs(ctx):
    """The burst of steps queued behind a delay kernel of about ``delay_s`` (calibrated with CUDA events): a step
    that waited on the device (any host sync) would wait for the delay kernel too, so the event recorded after
    it is still pending when the host returns exactly when no step waited."""
    import warp as wp

    import forge_gpu

    device, size = device_of(ctx), ctx.sizes["syncs"]
    burst = size["burst"]
    env = forge_gpu.sim.make("cartpole", num_envs=size["num_envs"], device=str(device))
    policy = forge_gpu.sim.make_policy("random", env)
    env.reset()
    for _ in range(3):
        env.step(policy(env.observation))
    wp.synchronize_device(device)
    name = f"cartpole x{env.num_envs} (step {env.step_mode})"
    if not device.is_cuda:
        start = time.perf_counter()
        for _ in range(burst):
            env.step(policy(env.observation))
        queued = time.perf_counter() - start
        wp.synchronize_device(device)
        total = time.perf_counter() - start
        yield {"figure": f"{burst} steps of {name} queued without synchronizing",
               "value": f"queue {queued:.4f} s of {total:.4f} s: not meaningful on the CPU (launches are synchronous)",
               "ratio": queued / total, "target": "well below 1 (on CUDA)"}  # fmt: skip
        return
    stream = wp.get_stream(device)
    begin, delayed, done = (wp.Event(device, enable_timing=True) for _ in range(3))
    delay, out = delay_kernel(), wp.zeros(1, dtype=wp.float32, device=device)

    def launch_ms(iterations: int) -> float:
        stream.record_event(begin)
        wp.launch(delay, dim=1, inputs=[iterations, out], device=device)
        stream.record_event(done)
        return wp.get_event_elapsed_time(begin, done)

    launch_ms(1)  # loads the module: not part of the calibration
    iterations = 1 << 16
    while (ms := launch_ms(iterations)) < 20.0 and iterations < 2**28:
        iterations *= 8
    iterations = int(min(2**31 - 1, iterations * size["delay_s"] * 1e3 / max(ms, 1e-3)))
    for count in sorted({1, 4, burst}):
        stream.record_event(begin)
        start = time.perf_counter()
        wp.launch(delay, dim=1, inputs=[iterations, out], device=device)
        stream.record_event(delayed)
        for _ in range(count):
            env.step(policy(env.observation))
        stream.record_event(done)
        queued = time.perf_counter() - start
        pending = not delayed.is_complete
        wp.synchronize_event(done)
        total = time.perf_counter() - start
        verdict = "0 host syncs" if pending else "the loop waited on the device"
        # A long burst can also wait for room in the device's launch queue (each step is a graph of many kernels)
        # without any sync: one step that waits is the sync this looks for.
        yield {"figure": f"{count} step(s) of {name} queued behind a "
                         f"{wp.get_event_elapsed_time(begin, delayed):.0f} ms delay kernel",
               "value": f"host returned after {queued * 1e3:.2f} ms, device done after {total * 1e3:.1f} ms: {verdict}",
               "ratio": queued / total, "target": "well below 1", "ok": pending}  # fmt: skip


def transport(ctx):
    """bench/transport.py's rows on the device, at the sizes of ``ctx.sizes["transport"]``."""
    import torch
    import transport as bench_transport
    import warp as wp

    device, size = device_of(ctx), ctx.sizes["transport"]
    methods = list(bench_transport.MAKERS)
    if device.is_cuda and not torch.cuda.is_available():
        methods.remove("torch_pinned")
        yield {"figure": "torch_pinned", "value": f"left out: torch {torch.__version__} has no CUDA", "ok": True}
    cuda, smoke = device.is_cuda, size["seconds"] < 0.1
    peak = bench_transport.reference_gb_per_s(bench_transport.CUDA_PEAK_BYTES, device, 1.0) if cuda else None
    rows = []
    for layout, envs in size["envs"].items():
        args = SimpleNamespace(layouts=[layout], envs=envs, smoke=smoke, policy="random", slots=4, methods=methods)
        for row in bench_transport.measure_all(args, str(device), cuda, size["seconds"], 3 if smoke else 8, peak):
            rows.append(row)
            figure = f"{row['layout']} x{row['num_envs']}, {row['method']} ({row['mb_per_step']:.2f} MB per step)"
            value = f"step {row['step_median_ms']:.3f} ms, overlap {row['overlap']:.3f}"
            if row["method"] == "none":
                yield {"figure": figure, "value": value}
                continue
            value += f"; copy {row['copy_median_ms']:.3f} ms, {row['gb_per_s']:.2f} GB/s ({row['reference']})"
            yield {"figure": figure, "value": value, "ratio": row["vs_reference"]}
    wp.synchronize_device(device)
    out = Path(ctx.out or RESULTS) / "transport-cuda.json"
    out.write_text(json.dumps({"device": str(device), "slots": 4, "rows": rows}, indent=2))


def sections(sizes: dict) -> dict:
    """Section name -> generator function of the context."""
    found = {"machine": machine, "bandwidth": bandwidth}
    found |= {f"pipeline_{task}": functools.partial(pipeline, task) for task in sizes["pipeline"]}
    return found | {"frames": frames, "syncs": syncs, "transport": transport}


# -- one section, in its own process ------------------------------------------------------------------------------


def run_section_here(args) -> int:
    """The child: one section's rows, written to --rows-file after each one."""
    sizes = SMOKE if args.smoke else FULL
    ctx = SimpleNamespace(device=args.device, sizes=sizes, record_dir=args.record_dir, out=args.out)
    path, rows, done = Path(args.rows_file), [], False

    def write() -> None:
        path.write_text(json.dumps({"rows": rows, "done": done}, default=str))

    write()
    try:
        for row in sections(ctx.sizes)[args.section](ctx):
            rows.append({"section": args.section, **row})
            write()
            say(f"row: {row['figure']}: {row['value']}")
    except Exception as exc:
        traceback.print_exc()
        rows.append({"section": args.section, "figure": "error", "value": f"{type(exc).__name__}: {exc}", "ok": False})
    done = True
    write()
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown (CUDA, torch, threads) that could hang once the rows are safe


def tail(log: Path, lines: int = 3) -> str:
    text = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return " | ".join(text[-lines:])[-600:]


def run_child(name: str, args, logs: Path, timeout: float) -> list[dict]:
    log, rows_file = logs / f"{name}.log", logs / f"{name}.rows.json"
    rows_file.unlink(missing_ok=True)
    command = [sys.executable, "-u", str(Path(__file__).resolve()), "--section", name, "--rows-file", str(rows_file)]
    command += ["--record-dir", args.record_dir, "--out", str(logs.parent)] + (["--smoke"] if args.smoke else [])
    command += ["--device", args.device] if args.device else []
    env = dict(os.environ, PYTHONFAULTHANDLER="1", FORGE_GPU_VERBOSE="1")
    with open(log, "w") as out:
        try:
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = None
    try:
        payload = json.loads(rows_file.read_text())
    except (OSError, ValueError):
        payload = {"rows": [], "done": False}
    rows = payload["rows"]
    if code is None:
        value = f"cut at its timeout of {timeout:.0f} s; last output: {tail(log)} (log {log})"
        rows.append({"section": name, "figure": "timeout", "value": value, "ok": False})
    elif code != 0 or not payload["done"]:
        value = f"the process exited with status {code}; last output: {tail(log)} (log {log})"
        rows.append({"section": name, "figure": "error", "value": value, "ok": False})
    elif rows and rows[-1]["figure"] == "error":
        rows[-1]["value"] += f"; last output: {tail(log)} (log {log})"
    return rows


COMPILED = re.compile(r"^Module (\S+) .*load on device '([^']+)'.*\(compiled\)", re.M)


def compiled_modules(logs: Path) -> list[str]:
    """MODULE@DEVICE of each module the logs say Warp compiled (not found in its kernel cache)."""
    found = set()
    for log in logs.glob("*.log"):
        found |= {f"{m}@{d}" for m, d in COMPILED.findall(log.read_text(errors="replace"))}
    return sorted(found)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI runs this on the CPU)")
    parser.add_argument("--device", default=None, help="Warp device (default: cuda:0 if present, else cpu)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results); logs in OUT/gpu_logs")
    parser.add_argument("--record-dir", default=tempfile.gettempdir(), help="where the recordings go (local disk)")
    parser.add_argument("--timeout", type=float, default=None, help="one section's limit [s] (300; --smoke 600)")
    parser.add_argument("--section", help=argparse.SUPPRESS)  # the child's
    parser.add_argument("--rows-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.section:
        return run_section_here(args)
    out = Path(args.out or RESULTS)
    logs = out / "gpu_logs"
    logs.mkdir(parents=True, exist_ok=True)
    timeout = args.timeout or TIMEOUT_S["smoke" if args.smoke else "full"]
    rows: list[dict] = []
    for name in sections(SMOKE if args.smoke else FULL):
        print(f"{name} ...", flush=True)
        rows += run_child(name, args, logs, timeout)
    compiled = compiled_modules(logs)
    on_cuda = [m for m in compiled if not m.endswith("@cpu")]
    rows.append({"section": "kernels", "figure": "modules Warp compiled during the run (not in its kernel cache)",
                 "value": f"{len(on_cuda)} on CUDA, {len(compiled) - len(on_cuda)} on the CPU"})  # fmt: skip
    machine_info = {r["figure"]: r["value"] for r in rows if r["section"] == "machine"}
    markdown = f"GPU figures on {machine_info.get('device', '?')}{' (smoke)' if args.smoke else ''}\n\n"
    markdown += table(rows, ["section", "figure", "value", "ratio", "target", "ok"])
    payload = {"machine": machine_info, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "smoke": args.smoke, "rows": rows, "compiled_modules": compiled}  # fmt: skip
    save("gpu", payload, markdown, out)
    print(markdown)
    return 0 if all(row.get("ok", True) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
