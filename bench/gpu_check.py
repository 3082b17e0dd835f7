"""One prepared GPU check: the CUDA tests, then the GPU figures, in one command (issue 13).

python bench/gpu_check.py --out DIR            # on a GPU machine; sized for at most ~8 minutes on one H200
python bench/gpu_check.py --smoke --out DIR    # tiny sizes on whatever device there is (CI: the CPU)
python bench/gpu_check.py --only pipeline --out DIR   # some sections again (doctor, tests, bandwidth, ...)

A section that raises becomes an ``error`` row (its exception and the last lines of its traceback) and the
next section runs; the table and JSON under --out are rewritten after every section, so a run stopped by
a time limit still leaves what it measured. Exit status 1 when a check failed or a section raised.

Sections, in order (each row of the table is one figure; JSON and markdown under --out):
  doctor          ``forge-gpu doctor``'s checks (device, driver, toolkit, conditional nodes, memory pools,
                  a page-locked copy, capture and replay)
  tests           ``pytest -k cuda``: every device-parametrized test, on cuda:0 (skipped without a GPU)
  bandwidth       the transport's copy of one reach 64x64 batch (1024 envs, 29 MB) into a pinned slot, timed
                  with the slot's CUDA events, against the page-locked device-to-host peak (one 256 MiB
                  ``wp.copy``); target 0.8. On the CPU: np.copyto of the same bytes
  pipeline_TASK   env-steps/s of stepping only, with the transport (``collect`` without recording) and with
                  recording (packed, to --record-dir); efficiency = recording / stepping, target 0.9.
                  cartpole at 4096 envs, reach 64x64 RGB-D at 1024 envs
  syncs           host waits per step, by timing: S steps (policy + step) are queued with no synchronization;
                  ``queue_s`` is the time until the last call returns, ``total_s`` until the device finishes.
                  A step that waited on the device would make queue_s about total_s; a fraction well below 1
                  means the CPU ran ahead (0 host syncs per step in steady state). Not meaningful on the CPU
                  device, whose launches run synchronously.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine, save, table  # noqa: E402

FULL = {
    "cartpole": {"num_envs": 4096, "steps": 2000},
    "reach": {"num_envs": 1024, "steps": 200},
    "bandwidth_publishes": 50,
    "sync_steps": 2000,
    "tests_timeout_s": 300,
}
SMOKE = {
    "cartpole": {"num_envs": 16, "steps": 10},
    "reach": {"num_envs": 4, "steps": 4},
    "bandwidth_publishes": 3,
    "sync_steps": 10,
    "tests_timeout_s": 300,
}


def doctor() -> list[dict]:
    from forge_gpu._src.sim.doctor import run_checks

    return [{"section": "doctor", "figure": c.name, "value": c.found, "ok": c.ok} for c in run_checks()]


def cuda_tests(device, timeout_s: float) -> list[dict]:
    if not device.is_cuda:
        return [{"section": "tests", "figure": "pytest -k cuda", "value": "skipped: no CUDA device", "ok": True}]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-k", "cuda", "-p", "no:cacheprovider"],
            cwd=HERE.parent,
            # Keep the repository's root off sys.path: its forge_gpu/ would shadow an installed one
            # (bench/offline.py install, PYTHONPATH), and without an install it has no forge_gpu.kernels.
            env={**os.environ, "PYTHONSAFEPATH": "1"},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stdout or b"")[-500:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return [
            {
                "section": "tests",
                "figure": "pytest -k cuda",
                "value": f"timed out after {timeout_s:.0f} s: {tail}",
                "ok": False,
            }
        ]
    lines = done.stdout.strip().splitlines()
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    summary = lines[-1] if lines else done.stderr[-500:]
    return [
        {
            "section": "tests",
            "figure": "pytest -k cuda",
            "value": "; ".join([summary, *failures[:10]]),
            "ok": done.returncode == 0,
        }
    ]


def bandwidth(device, publishes: int) -> list[dict]:
    import warp as wp

    import forge_gpu
    from forge_gpu import HostSnapshotTransport

    env = forge_gpu.make("reach", num_envs=4 if device.is_cpu else 1024, device=str(device), **{"params.render": False})
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
        peak, reference = max(peaks), "pinned device-to-host peak"
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
    return [
        {
            "section": "bandwidth",
            "figure": f"transport copy, reach 64x64 x{env.num_envs} ({nbytes / 1e6:.1f} MB)",
            "value": f"{rate / 1e9:.2f} GB/s against {peak / 1e9:.2f} GB/s ({reference})",
            "ratio": rate / peak,
            "target": 0.8,
            "ok": len(seen) == publishes,
        }
    ]


def pipeline(task: str, size: dict, device, record_dir: str) -> list[dict]:
    import warp as wp

    import forge_gpu
    from forge_gpu import collect

    env = forge_gpu.make(task, num_envs=size["num_envs"], device=str(device), max_steps=200)
    policy = forge_gpu.make_policy("random", env)
    collect(env, policy, None, steps=3)  # compile and capture outside the timed runs
    env.reset()
    start = time.perf_counter()
    for _ in range(size["steps"]):
        env.step(policy(env.observation))
    wp.synchronize_device(device)
    stepping = size["num_envs"] * size["steps"] / (time.perf_counter() - start)
    transport = collect(env, policy, None, steps=size["steps"]).env_steps_per_second
    directory = tempfile.mkdtemp(prefix=f"gpu-check-{task}-", dir=record_dir)
    Path(directory).rmdir()
    try:
        recorded = collect(env, policy, directory, steps=size["steps"])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    name = f"{task} x{size['num_envs']} on {device}, step {recorded.step_mode}"
    rows = [
        {"section": f"pipeline_{task}", "figure": f"{name}: stepping only", "value": f"{stepping:,.0f} env-steps/s"},
        {"section": f"pipeline_{task}", "figure": "with the transport", "value": f"{transport:,.0f} env-steps/s"},
        {
            "section": f"pipeline_{task}",
            "figure": "with recording (packed)",
            "value": f"{recorded.env_steps_per_second:,.0f} env-steps/s, stall {recorded.stall_fraction:.1%}",
        },
        {
            "section": f"pipeline_{task}",
            "figure": "pipeline efficiency",
            "value": f"{recorded.env_steps_per_second / stepping:.3f}",
            "ratio": recorded.env_steps_per_second / stepping,
            "target": 0.9,
        },
    ]
    return rows


def syncs(device, steps: int) -> list[dict]:
    import warp as wp

    import forge_gpu

    env = forge_gpu.make("cartpole", num_envs=16 if device.is_cpu else 4096, device=str(device))
    policy = forge_gpu.make_policy("random", env)
    env.reset()
    for _ in range(3):
        env.step(policy(env.observation))
    wp.synchronize_device(device)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(policy(env.observation))
    queued = time.perf_counter() - start
    wp.synchronize_device(device)
    total = time.perf_counter() - start
    fraction = queued / total
    verdict = (
        "CPU device: launches run synchronously"
        if device.is_cpu
        else ("0 host syncs per step (the CPU ran ahead)" if fraction < 0.5 else "the loop waits on the device")
    )
    return [
        {
            "section": "syncs",
            "figure": f"{steps} steps of cartpole x{env.num_envs} queued without synchronizing",
            "value": f"queue {queued:.3f} s of {total:.3f} s: {verdict}",
            "ratio": fraction,
            "target": "well below 1",
        }
    ]


def sections(device, sizes: dict, record_dir: str, smoke: bool) -> dict:
    """Section name -> a callable returning its rows, in the order they run."""
    steps = {
        "doctor": doctor,
        "tests": lambda: cuda_tests(device, sizes["tests_timeout_s"]),
        "bandwidth": lambda: bandwidth(device, sizes["bandwidth_publishes"]),
        "pipeline_cartpole": lambda: pipeline("cartpole", sizes["cartpole"], device, record_dir),
        "pipeline_reach": lambda: pipeline("reach", sizes["reach"], device, record_dir),
        "syncs": lambda: syncs(device, sizes["sync_steps"]),
    }
    if smoke:  # the CPU tests are the suite's own business
        del steps["tests"]
    return steps


def run_section(name: str, step) -> list[dict]:
    """The rows of one section, or one failed row with its error when it raised."""
    started = time.perf_counter()
    try:
        rows = step()
    except Exception as exc:  # noqa: BLE001 - one section's failure must not cost the others
        where = "".join(traceback.format_exception(exc)[-3:]).strip().replace("\n", " | ")
        rows = [
            {"section": name, "figure": "error", "value": f"{type(exc).__name__}: {exc} ({where[-600:]})", "ok": False}
        ]
    for row in rows:
        row["seconds"] = round(time.perf_counter() - started, 1)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI runs this on the CPU)")
    parser.add_argument("--device", default=None, help="Warp device (default: cuda:0 if present, else cpu)")
    parser.add_argument("--record-dir", default=tempfile.gettempdir(), help="where the recordings go (local disk)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    parser.add_argument(
        "--only",
        action="append",
        metavar="PREFIX",
        help="run the sections whose names start with PREFIX (doctor, tests, bandwidth, pipeline, syncs); repeatable",
    )
    args = parser.parse_args(argv)
    import warp as wp

    import forge_gpu

    wp.config.quiet = True
    device = wp.get_device(args.device or forge_gpu.default_device())
    steps = sections(device, SMOKE if args.smoke else FULL, args.record_dir, args.smoke)
    if args.only:
        steps = {name: step for name, step in steps.items() if name.startswith(tuple(args.only))}
        if not steps:
            parser.error(f"--only {args.only}: no section starts with that")
    started = time.perf_counter()
    rows: list[dict] = []
    for name, step in steps.items():
        rows += run_section(name, step)
        markdown = (
            f"GPU check on {device} ({'smoke' if args.smoke else 'full'}), {time.perf_counter() - started:.0f} s\n\n"
        )
        markdown += table(rows, ["section", "figure", "value", "ratio", "target", "ok", "seconds"])
        payload = {"machine": machine(), "device": str(device), "smoke": args.smoke, "rows": rows}
        save("gpu_check", payload, markdown, args.out)
        print(f"{name}: done in {rows[-1]['seconds']} s", flush=True)
    print(markdown)
    return 0 if all(row.get("ok", True) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
