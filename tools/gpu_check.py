"""One prepared GPU check: warm-up, the CUDA and torch tests, then the GPU figures, in one command (issues 13, 21).

python tools/gpu_check.py --out DIR            # on a GPU machine; sized for ~8 minutes on one H200, cold kernel cache
python tools/gpu_check.py --smoke --out DIR    # tiny sizes on whatever device there is (CI: the CPU)
python tools/gpu_check.py --only pipeline --out DIR   # some sections again (warmup, doctor, tests, torch, ...)

Built for one try on a scarce machine. Every section runs in its own process (this script again, with
``--section NAME``), Python unbuffered, its output in ``DIR/gpu_check_logs/NAME.log``, under its own
timeout (ESTIMATES below, with margin). A section that raises gives an ``error`` row with its exception; one
that crashes, hangs or meets a sticky CUDA error costs only its own row: a process cut at its timeout (SIGTERM,
then SIGKILL, its whole process group) gives a ``timeout`` row, one that died an ``error`` row, each with the
last lines of its log and, for a hang, where Python was (a faulthandler dump just before the cut). Rows a
section gave before it failed are kept. Then the next section runs. This process never touches the GPU.
``--start fork`` (--smoke's default) forks each section's process from a zygote that imported Newton and Warp
once (tools/isolate.py), which halves a CPU smoke run; a full run execs a new interpreter per section. The
table and JSON under --out are rewritten after every section, so a run stopped early keeps what it
measured. Exit status 1 when a check failed, a section raised, crashed or timed out.

Sections, in order (one row per figure):
  machine         platform, Python, CPUs, load, GPU, package versions, which forge_gpu was imported, the device
  warmup_TASK     cartpole, reach and ant at 2 envs: make, reset (compiles every kernel module imported, on first
                  use, and captures the step graph), 2 steps; timed per task. Fills the kernel cache for the
                  sections after it, so their times are their own, and a compile failure names its task
  doctor          ``forge-gpu doctor``'s checks (device, driver, toolkit, conditional nodes, memory pools, a
                  page-locked copy, capture and replay)
  tests           pytest -k "cuda or torch": every device-parametrized test on cuda:0 and the torch tests, -v -rA,
                  a per-test timeout where pytest-timeout is importable, junit XML in the logs folder; passed,
                  failed and skipped counted from the XML (stopped at its deadline with SIGINT, pytest still
                  writes what finished)
  bandwidth       the transport's copy of one reach 64x64 batch (1024 envs, 29 MB) into a pinned slot, timed
                  with the slot's CUDA events, against the page-locked device-to-host peak (one 256 MiB
                  ``wp.copy``); target 0.8. On the CPU: np.copyto of the same bytes
  pipeline_TASK   env-steps/s of stepping only, with the transport (``collect`` without recording) and with
                  recording (packed, statistics off, to --record-dir); efficiency = recording / stepping, target
                  0.9. cartpole at 4096 envs, reach 64x64 RGB-D at 1024 envs
  torch           ``collect`` of cartpole on the device driven by torch: a torch callable whose CUDA float32
                  tensors the env stages itself, every other one strided (a column of a wider tensor), then the
                  same through ``load_policy("MODULE:FACTORY")`` (TorchPolicy); each run is read back
                  (``read_episodes``) and every recorded action must equal the policy's output for that row's
                  observation, clipped to the action bounds. On the CPU the same with CPU tensors
  syncs           does the stepping loop (policy + step) wait on the device? See syncs() below. Not meaningful
                  on the CPU device, whose launches run synchronously

Test hook: ``--test-section hang`` / ``--test-section crash`` (hidden from --help) add a section, run first, that
hangs ignoring SIGTERM (cut after HOOK_TIMEOUTS["hang"] s) or aborts after one row; tests/test_bench_smoke.py
uses them to show that the other sections still run and report.
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import json
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# The sections run modules of bench/ (gpu_frames.section) and write results as the benchmarks do
# (bench/common.py): the one folder a tool adds to the path.
sys.path.insert(0, str(ROOT / "bench"))
from common import RESULTS, save, table  # noqa: E402
from isolate import Zygote, log_tail, run_isolated  # noqa: E402  (tools/: this script's folder)
from pytest_driver import pytest_command, run_pytest  # noqa: E402

FULL = {
    "cartpole": {"num_envs": 4096, "steps": 1000},
    "reach": {"num_envs": 1024, "steps": 100},
    "push": {"num_envs": 1024, "steps": 100},
    "randomize": {"num_envs": 4096, "steps": 500},
    "replay": {"num_envs": 256, "steps": 100},
    "bandwidth": {"num_envs": 1024, "publishes": 50},
    "torch": {"num_envs": 1024, "steps": 150, "max_steps": 50},
    "syncs": {"num_envs": 64, "burst": 32, "delay_s": 0.25},
    "tests": {"paths": ["tests"], "marks": "cuda", "per_test_timeout_s": 45},
}
SMOKE = {
    "cartpole": {"num_envs": 16, "steps": 10},
    "reach": {"num_envs": 4, "steps": 4},
    "push": {"num_envs": 4, "steps": 4},
    "randomize": {"num_envs": 16, "steps": 10},
    "replay": {"num_envs": 4, "steps": 12},
    "bandwidth": {"num_envs": 4, "publishes": 3},
    "torch": {"num_envs": 8, "steps": 30, "max_steps": 10},
    "syncs": {"num_envs": 16, "burst": 8, "delay_s": 0.05},
    # every test file collected (an import error fails the run), the CUDA cases selected (skipped on the CPU) and one
    # that runs: a subprocess importing the installed forge_gpu
    "tests": {"paths": ["tests"], "marks": "cuda or wheel_layout", "per_test_timeout_s": 120},
}
WARMUP_TASKS = ("cartpole", "reach", "ant", "push")
RANDOMIZED = {
    "cartpole": {"randomize.mass_scale": [0.5, 2.0], "randomize.actuator_gain_scale": [0.8, 1.2]},
    "ant": {"randomize.friction": [0.3, 1.5], "randomize.joint_armature_scale": [0.5, 1.5]},
}
"""The randomize sections' tasks and ranges: every physics parameter cartpole and ant draw per world."""

# The sections, in order: (name, what runs, seconds expected with the process's start-up: a full run on one H200
# with the kernel cache of tools/kernel_cache.py carried in, and --smoke on a 2-core CPU with a warm cache). What
# runs: "FUNCTION" or "FUNCTION:ARGUMENT" of this script, or "MODULE.FUNCTION" of a module in bench/, imported in
# the section's process only; a generator of rows given the context. A module joins with one line here. The full
# column is a budget, not yet measured on a GPU (modules loaded from the cache, none compiled): correct it from
# the `seconds` of the first GPU run.
PLAN = [
    ("machine", "machine_section", 8, 4),
    ("kernels", "kernel_cache.section", 6, 4),
    ("warmup_cartpole", "warmup:cartpole", 20, 8),
    ("warmup_reach", "warmup:reach", 10, 8),
    ("warmup_ant", "warmup:ant", 10, 8),
    ("warmup_push", "warmup:push", 10, 8),
    ("warmup_randomize", "warmup_randomize", 12, 10),
    ("warmup_replay", "warmup_replay", 15, 12),
    ("doctor", "doctor", 10, 8),
    ("tests", "tests", 80, 30),
    ("bandwidth", "bandwidth", 15, 8),
    ("pipeline_cartpole", "pipeline:cartpole", 25, 8),
    ("pipeline_reach", "pipeline:reach", 35, 10),
    ("pipeline_push", "pipeline:push", 20, 10),
    ("pipeline_randomize", "pipeline_randomize", 20, 10),
    ("pipeline_replay", "pipeline_replay", 20, 14),
    ("torch", "torch_section", 15, 10),
    ("syncs", "syncs", 10, 6),
    ("gpu_frames", "gpu_frames.section", 8, 10),  # bench/gpu_frames.py: the GPU frame encoder (issue 30)
]
ESTIMATES = {name: (full, small) for name, _, full, small in PLAN}
HOOK_TIMEOUTS = {"hang": 4.0, "crash": 60.0}
"""Timeouts of the test-hook sections [s]."""
TERM_GRACE_S = 3.0
"""From SIGTERM to SIGKILL when a section is cut."""
TESTS_GRACE_S = 15.0
"""The tests section stops pytest (SIGINT) this long before its own timeout, so pytest can write its junit XML."""
TAR_NAME = "gpu_check.tgz"


def timeout_for(name: str, smoke: bool) -> float:
    """A section's timeout [s]: 1.3 x its estimate + 10 s in a full run (the full sum stays under 9 minutes);
    generous in --smoke, where a CI machine may compile the CPU kernels cold and nothing is scarce."""
    if name in HOOK_TIMEOUTS:
        return HOOK_TIMEOUTS[name]
    full, small = ESTIMATES[name]
    return float(round(120 + 4 * small) if smoke else round(1.3 * full + 10))


def estimate_for(name: str, smoke: bool) -> float:
    if name in HOOK_TIMEOUTS:
        return 1.0
    return float(ESTIMATES[name][1 if smoke else 0])


# -- the sections (each runs in its own process; a generator of rows) ------------------------------------------


def say(ctx, message: str) -> None:
    """A progress line in the section's log (the last ones go into a timeout row)."""
    print(f"[{time.perf_counter() - ctx.started:7.1f} s] {message}", flush=True)


def device_of(ctx):
    """The Warp device of this run (Warp starts here, in the section's process)."""
    import warp as wp

    import forge_gpu

    return wp.get_device(ctx.device or forge_gpu.sim.default_device())


def machine_section(ctx):
    """What the figures were measured on; the parent keeps these rows as the JSON's ``machine``."""
    import importlib.metadata

    import warp as wp

    import forge_gpu
    from forge_gpu._src.sim.device import device_choice

    info = {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count()}
    if hasattr(os, "getloadavg"):
        info["load_average_1m"] = os.getloadavg()[0]  # other processes on a shared machine skew the figures
    for name in ("warp-lang", "newton", "mujoco-warp", "torch", "pytest", "pytest-timeout"):
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            info[name] = "-"
    info["forge_gpu"] = str(Path(forge_gpu.__file__).parent)
    choice, why = device_choice()
    if wp.get_cuda_device_count() > 0:
        gpu = wp.get_device("cuda:0")
        info["gpu"] = f"{gpu.name}, sm_{gpu.arch}, {gpu.total_memory / 2**30:.0f} GiB"
        driver = wp.get_cuda_driver_version()
        info["cuda_driver"] = ".".join(map(str, driver)) if driver else "none"
    info["device"] = ctx.device or choice
    info["device_choice"] = why
    for key, value in info.items():
        yield {"figure": key, "value": value}


def warmup(task: str, ctx, **overrides):
    import warp as wp

    import forge_gpu

    device = device_of(ctx)
    say(ctx, f"make {task} x2 on {device}" + (f" with {overrides}" if overrides else ""))
    t0 = time.perf_counter()
    env = forge_gpu.sim.make(task, num_envs=2, device=str(device), **overrides)
    t1 = time.perf_counter()
    say(ctx, "reset: loads the kernel modules (from the cache, or compiles them) and captures the step")
    env.reset()
    t2 = time.perf_counter()
    policy = forge_gpu.sim.make_policy("random", env)
    for _ in range(2):
        env.step(policy(env.observation))
    wp.synchronize_device(device)
    t3 = time.perf_counter()
    graph = env.step_mode == "graph"
    label = f"{task} x2 on {device}" + (
        f" randomized ({', '.join(k.split('.', 1)[1] for k in overrides)})" if overrides else ""
    )
    yield {
        "figure": f"{label}: make, reset, 2 steps",
        "value": f"make {t1 - t0:.1f} s, reset {t2 - t1:.1f} s, 2 steps {t3 - t2:.2f} s; step {env.step_mode}",
        "ok": graph,
    }


def warmup_randomize(ctx):
    """cartpole and ant with every physics range drawn per world, and a restore of a stepped frame's state and
    params into a fresh env, read back bit for bit."""
    import forge_gpu

    for task, ranges in RANDOMIZED.items():
        yield from warmup(task, ctx, **ranges)
    device = device_of(ctx)
    env = forge_gpu.sim.make("cartpole", num_envs=3, device=str(device), seed=1, **RANDOMIZED["cartpole"])
    env.reset()
    policy = forge_gpu.sim.make_policy("random", env)
    for _ in range(3):
        env.step(policy(env.observation))
    state = {k: v.numpy().copy() for k, v in env.result.state.items()}
    params = {k: v.numpy().copy() for k, v in env.result.params.items()}
    other = forge_gpu.sim.make("cartpole", num_envs=3, device=str(device), seed=9, **RANDOMIZED["cartpole"])
    restored = other.restore(state, params)
    same = all(np.array_equal(restored.state[k].numpy(), v) for k, v in state.items())
    same = same and all(np.array_equal(restored.params[k].numpy(), v) for k, v in params.items())
    yield {
        "figure": f"restore of a stepped cartpole frame on {device}",
        "value": f"read back equal: {same}",
        "ok": same,
    }


def recorded_run(ctx, task: str, num_envs: int, steps: int, **overrides) -> Path:
    """A closed packed run of ``steps`` random-policy steps, in a new folder under --record-dir."""
    import forge_gpu

    device = device_of(ctx)
    root = Path(tempfile.mkdtemp(prefix=f"gpu-check-{task}-", dir=ctx.record_dir))
    env = forge_gpu.sim.make(
        task, num_envs=num_envs, device=str(device), seed=3, max_steps=max(4, steps // 3), **overrides
    )
    forge_gpu.recording.collect(env, forge_gpu.sim.make_policy("random", env), str(root / "run"), steps=steps)
    return root


def replay_rows(ctx, num_envs: int, steps: int, label: str):
    """A reach run recorded on the device, replayed on it from its actions (states compared) and from its state
    (frames re-rendered); each report's frames/s, ok when nothing diverged."""
    import forge_gpu

    device = device_of(ctx)
    root = recorded_run(ctx, "reach", num_envs, steps)
    try:
        for how in ("actions", "state"):
            say(ctx, f"replay from {how}")
            began = time.perf_counter()
            report = forge_gpu.recording.replay(root / "run", root / how, from_=how, device=str(device))
            seconds = time.perf_counter() - began
            diverged = report.get("diverged", 0)
            yield {
                "figure": f"{label}: reach x{num_envs} replayed from {how} on {device}",
                "value": f"{report['episodes']} episodes, {report['frames']} frames in {seconds:.1f} s "
                f"({report['frames'] / seconds:,.0f} frames/s); diverged: {diverged}",
                "ok": report["episodes"] > 0 and not diverged,
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def warmup_replay(ctx):
    yield from replay_rows(ctx, 2, 8, "warm-up")


def pipeline_replay(ctx):
    size = ctx.sizes["replay"]
    yield from replay_rows(ctx, size["num_envs"], size["steps"], "pipeline")


def doctor(ctx):
    from forge_gpu._src.sim.doctor import run_checks

    for check in run_checks():
        yield {"figure": check.name, "value": check.found, "ok": check.ok}


def tests(ctx):
    """pytest -m cuda (every device-parametrized test's CUDA case) in a child process, stopped with SIGINT at the
    section's deadline; --smoke: tests/test_env.py on the CPU."""
    import importlib.util

    size = ctx.sizes["tests"]
    junit = ctx.logs / "tests-junit.xml"
    junit.unlink(missing_ok=True)
    selection = size["marks"]
    command, env = pytest_command(size["paths"], selection, ROOT)
    command += [f"--junitxml={junit}"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        per_test = f"per-test timeout {size['per_test_timeout_s']} s (pytest-timeout)"
        command += ["-p", "timeout", "--timeout", str(size["per_test_timeout_s"])]
    else:
        per_test = "no per-test timeout: pytest-timeout is not importable"
    deadline = max(10.0, ctx.timeout - TESTS_GRACE_S)
    say(ctx, " ".join(command))
    done = run_pytest(command, env, ROOT, junit, deadline, TESTS_GRACE_S, lambda message: say(ctx, message))
    counts, stopped, seconds, returncode = done["counts"], done["stopped"], done["seconds"], done["returncode"]
    summary = f"{done['selected']} selected: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} "
    summary += f"skipped, {counts['errors']} errors in {seconds:.0f} s (from the {done['source']}; exit {returncode}); "
    summary += per_test
    if stopped:
        summary += f"; {stopped}"
    failures = counts["failures"]
    total = counts["passed"] + counts["failed"] + counts["errors"] + counts["skipped"]
    yield {
        "figure": f"pytest {' '.join(size['paths'])}" + (f" -m {selection}" if selection else ""),
        "value": "; ".join([summary, *failures[:10], *([f"{len(failures) - 10} more"] if len(failures) > 10 else [])]),
        "ok": not stopped and returncode == 0 and not failures and total > 0,
    }


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
    say(ctx, f"{publishes} publishes")
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
    yield {
        "figure": f"transport copy, reach 64x64 x{env.num_envs} ({nbytes / 1e6:.1f} MB)",
        "value": f"{rate / 1e9:.2f} GB/s against {peak / 1e9:.2f} GB/s ({reference})",
        "ratio": rate / peak,
        "target": 0.8,
        "ok": len(seen) == publishes,
    }


def pipeline(task: str, ctx, size_name: str | None = None, **overrides):
    import warp as wp

    import forge_gpu
    from forge_gpu.recording import RecordingOptions, collect

    device, size = device_of(ctx), ctx.sizes[size_name or task]
    section = f"pipeline_{size_name or task}"
    say(ctx, f"make {task} x{size['num_envs']}" + (f" with {overrides}" if overrides else ""))
    env = forge_gpu.sim.make(task, num_envs=size["num_envs"], device=str(device), max_steps=200, **overrides)
    policy = forge_gpu.sim.make_policy("random", env)
    collect(env, policy, None, steps=3)  # compile and capture outside the timed runs
    env.reset()
    say(ctx, f"stepping only, {size['steps']} steps")
    start = time.perf_counter()
    for _ in range(size["steps"]):
        env.step(policy(env.observation))
    wp.synchronize_device(device)
    stepping = size["num_envs"] * size["steps"] / (time.perf_counter() - start)
    name = f"{task}{' randomized' if overrides else ''} x{size['num_envs']} on {device}, step {env.step_mode}"
    yield {"section": section, "figure": f"{name}: stepping only", "value": f"{stepping:,.0f} env-steps/s"}
    say(ctx, "with the transport")
    transport = collect(env, policy, None, steps=size["steps"]).env_steps_per_second
    yield {"section": section, "figure": "with the transport", "value": f"{transport:,.0f} env-steps/s"}
    directory = tempfile.mkdtemp(prefix=f"gpu-check-{task}-", dir=ctx.record_dir)
    Path(directory).rmdir()
    say(ctx, f"recording to {directory}")
    try:
        recorded = collect(env, policy, directory, steps=size["steps"], options=RecordingOptions(statistics=False))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    yield {
        "section": section,
        "figure": "with recording (packed, statistics off)",
        "value": f"{recorded.env_steps_per_second:,.0f} env-steps/s, stall {recorded.stall_fraction:.1%}",
    }
    yield {
        "section": section,
        "figure": "pipeline efficiency",
        "value": f"{recorded.env_steps_per_second / stepping:.3f}",
        "ratio": recorded.env_steps_per_second / stepping,
        "target": 0.9,
    }


def pipeline_randomize(ctx):
    yield from pipeline("cartpole", ctx, "randomize", **RANDOMIZED["cartpole"])


def action_pattern(env_id, episode_id, step_id):
    """The torch section's policy as a function of the observation: multiples of 0.25 in [-1.5, 1.5] (exact in
    float32, a third of them outside the action bounds), computed the same way from torch or numpy ids."""
    return (((env_id * 3 + episode_id * 5 + step_id * 7) % 13) - 6) * 0.25


def torch_action(observation: dict, counter: dict):
    """``action_pattern`` of torch observation views, as float32 ``[N, 1]`` on their device; every other call
    a strided tensor (the first column of a wider one, whose second column would give the wrong action)."""
    import torch

    action = action_pattern(observation["env_id"], observation["episode_id"], observation["step_id"])
    action = action.to(torch.float32)[:, None]
    counter["calls"] += 1
    if counter["calls"] % 2:
        wide = torch.full((action.shape[0], 2), 9.0, dtype=torch.float32, device=action.device)
        wide[:, :1] = action
        action = wide[:, :1]
        if action.is_contiguous():
            raise AssertionError("the strided action came out contiguous")
        counter["strided"] += 1
    return action


def strided_torch_policy(spec, device):
    """A ``MODULE:FACTORY`` torch policy (``load_policy``): ``torch_action`` of TorchPolicy's observation views."""
    counter = {"calls": 0, "strided": 0}

    def policy(observation):
        return torch_action(observation, counter)

    policy.counter = counter
    return policy


def check_recorded_actions(directory: str, low: np.ndarray, high: np.ndarray) -> tuple[bool, str]:
    """Read a run back; every recorded action must be ``clip(action_pattern(observation))``."""
    import forge_gpu

    episodes = rows = clipped = mismatched = 0
    first = ""
    for episode in forge_gpu.reading.read_episodes(directory):
        episodes += 1
        obs = episode.obs
        raw = action_pattern(obs["env_id"].astype(np.int64), obs["episode_id"].astype(np.int64), obs["step_id"])
        want = np.clip(raw.astype(np.float32)[:, None], low, high)
        bad = np.flatnonzero(np.any(episode.action != want, axis=1))
        rows += len(want)
        clipped += int(np.count_nonzero(np.any(raw[:, None] != want, axis=1)))
        mismatched += len(bad)
        if len(bad) and not first:
            t = bad[0]
            first = (
                f"; first: env {episode.env_id} episode {episode.episode_id} step {obs['step_id'][t]}: "
                f"recorded {episode.action[t].tolist()}, policy {want[t].tolist()}"
            )
    ok = episodes > 0 and mismatched == 0 and clipped > 0
    verdict = "every one equals" if mismatched == 0 else f"{mismatched} differ from"
    return ok, f"{episodes} episodes, {rows} actions read back: {verdict} the policy's, clipped ({clipped} were){first}"


def torch_section(ctx):
    import torch
    import warp as wp

    import forge_gpu
    from forge_gpu.recording import RecordingOptions

    device, size = device_of(ctx), ctx.sizes["torch"]
    usable = device.is_cpu or torch.cuda.is_available()
    yield {
        "figure": "torch",
        "value": f"{torch.__version__} (CUDA build {torch.version.cuda}), CUDA available {torch.cuda.is_available()}",
        "ok": usable,
    }
    if not usable:
        return
    env = forge_gpu.sim.make("cartpole", num_envs=size["num_envs"], device=str(device), max_steps=size["max_steps"])
    low, high = (np.asarray(env.spec[key], dtype=np.float32) for key in ("action_low", "action_high"))
    counter = {"calls": 0, "strided": 0}

    def staged(observation):
        # StepResult.to_torch() orders torch's current stream after the env's; the env orders its stream after
        # the tensor's (VectorEnv._from_torch) and makes a strided one contiguous.
        return torch_action(env.result.to_torch().observation, counter)

    policies = [(f"a torch callable on {wp.device_to_torch(device)}: the env stages its tensors", staged, counter)]
    loaded = forge_gpu.sim.load_policy(f"{__name__}:strided_torch_policy", env)
    policies.append(("load_policy('MODULE:FACTORY'), TorchPolicy", loaded, loaded.fn.counter))
    for label, policy, calls in policies:
        directory = tempfile.mkdtemp(prefix="gpu-check-torch-", dir=ctx.record_dir)
        Path(directory).rmdir()
        say(ctx, f"{label}: {size['steps']} steps recorded to {directory}")
        try:
            summary = forge_gpu.recording.collect(
                env, policy, directory, steps=size["steps"], options=RecordingOptions(statistics=False)
            )
            ok, found = check_recorded_actions(directory, low, high)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        yield {
            "figure": f"{label}, cartpole x{env.num_envs}",
            "value": f"{found}; {calls['strided']} of {calls['calls']} calls strided; "
            f"{summary.env_steps_per_second:,.0f} env-steps/s, step {summary.step_mode}",
            "ok": ok and calls["strided"] > 0,
        }


@functools.cache
def delay_kernel():
    """A one-thread kernel that runs for about ``iterations`` dependent multiply-adds: work the device is busy
    with while the host queues the burst."""
    import warp as wp

    def delay(iterations, out):
        x = out[0]
        for _ in range(iterations):
            x = x * 0.9999999 + 1.0
        out[0] = x

    # Types, not the strings that ``from __future__ import annotations`` would make of them (wp is local here).
    delay.__annotations__ = {"iterations": int, "out": wp.array(dtype=wp.float32)}
    # One module name whether this file runs as __main__ (a section) or is imported (tools/kernel_cache.py), so
    # the kernel cache built ahead holds it under the name and hash a section looks for.
    delay.__module__, delay.__qualname__ = "gpu_check_delay", "delay"
    return wp.kernel(delay)


DELAY_MOST = 2**31 - 1
"""The delay kernel's most iterations (an int32 argument)."""


def delay_iterations(launch_ms, delay_s: float) -> int:
    """Iterations of the delay kernel for about ``delay_s`` of device time, given ``launch_ms(iterations)``: one
    launch's device milliseconds. The first launch is a warm-up whose time is thrown away: it includes loading
    (or compiling) the kernel's module, which would make the kernel look slow and the delay come out far too
    short. Then 2^16 iterations, times 8 until a launch takes 20 ms, scaled to ``delay_s``."""
    launch_ms(1)
    iterations = 1 << 16
    while True:
        ms = launch_ms(iterations)
        if ms >= 20.0 or iterations >= DELAY_MOST:
            break
        iterations = min(DELAY_MOST, iterations * 8)
    return int(min(DELAY_MOST, iterations * delay_s * 1e3 / max(ms, 1e-3)))


def syncs(ctx):
    """Does the stepping loop (policy + step) wait on the device? A short burst of B steps of a small env.

    Short, because CUDA lets only so many launches be pending on a stream (about a thousand) before a launch
    blocks the host until the device retires one; a step is about three launches (the policy's kernel, the
    action's copy, the step graph), so B = 32 stays far below that, while the 2000 steps queued before this
    check filled the queue, and the host then waited on the queue, not on a sync, making queue_s about total_s
    whatever the loop did. Small (64 envs), because the queue is what is measured, not the physics.

    Two rows: (1) the burst alone: the time until the host returned from the last step (queue_s) against the
    time until the device finished it (total_s, ``wp.synchronize_event`` on an event recorded after the
    burst); with a device faster than Python both are close, so this row is a figure, not a check. (2) the
    check: the same burst queued behind a delay kernel that keeps the device busy for about ``delay_s``
    (calibrated with CUDA events). A step that waited on the device (any host sync) would wait for the delay
    kernel too, so the host returns before the device has finished the delay kernel, an event recorded after
    it still pending (``Event.is_complete`` false), exactly when no step waited; queue_s / total_s is then far
    below 1. On the CPU device launches run synchronously: the figure is given and said to be not meaningful.
    """
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
    name = f"{burst} steps of cartpole x{env.num_envs} (step {env.step_mode})"
    if not device.is_cuda:
        start = time.perf_counter()
        for _ in range(burst):
            env.step(policy(env.observation))
        queued = time.perf_counter() - start
        wp.synchronize_device(device)
        total = time.perf_counter() - start
        yield {
            "figure": f"{name} queued without synchronizing",
            "value": f"queue {queued:.4f} s of {total:.4f} s: not meaningful on the CPU (launches run synchronously)",
            "ratio": queued / total,
            "target": "well below 1 (on CUDA)",
        }
        return
    stream = wp.get_stream(device)

    def event():
        return wp.Event(device, enable_timing=True)

    # (1) the burst alone
    begin, end = event(), event()
    stream.record_event(begin)
    start = time.perf_counter()
    for _ in range(burst):
        env.step(policy(env.observation))
    queued = time.perf_counter() - start
    stream.record_event(end)
    wp.synchronize_event(end)
    total = time.perf_counter() - start
    device_ms = wp.get_event_elapsed_time(begin, end)
    yield {
        "figure": f"{name} queued without synchronizing",
        "value": f"host {queued * 1e6 / burst:.0f} us/step; the host returned after {queued * 1e3:.2f} ms, the "
        f"device finished after {total * 1e3:.2f} ms ({device_ms:.2f} ms between events around the burst)",
        "ratio": queued / total,
        "target": "< 1",
    }
    # (2) behind a delay kernel: calibrate it to about delay_s
    delay, out = delay_kernel(), wp.zeros(1, dtype=wp.float32, device=device)

    def launch_ms(iterations: int) -> float:
        stream.record_event(begin)
        wp.launch(delay, dim=1, inputs=[iterations, out], device=device)
        stream.record_event(end)
        return wp.get_event_elapsed_time(begin, end)

    iterations = delay_iterations(launch_ms, size["delay_s"])
    say(ctx, f"delay kernel: {iterations} iterations for about {size['delay_s']} s")
    delayed, done = event(), event()
    stream.record_event(begin)
    start = time.perf_counter()
    wp.launch(delay, dim=1, inputs=[iterations, out], device=device)
    stream.record_event(delayed)
    for _ in range(burst):
        env.step(policy(env.observation))
    stream.record_event(done)
    queued = time.perf_counter() - start
    delay_pending, burst_pending = not delayed.is_complete, not done.is_complete
    wp.synchronize_event(done)
    total = time.perf_counter() - start
    delay_ms = wp.get_event_elapsed_time(begin, delayed)
    verdict = (
        "0 host syncs: the host had queued every step while the device was still on the delay kernel"
        if delay_pending
        else "the loop waited on the device: the delay kernel had finished when the host returned"
    )
    yield {
        "figure": f"{name} queued behind a {delay_ms:.0f} ms delay kernel",
        "value": f"host returned after {queued * 1e3:.2f} ms, device finished after {total * 1e3:.1f} ms "
        f"(burst still pending at return: {burst_pending}): {verdict}",
        "ratio": queued / total,
        "target": "well below 1",
        "ok": delay_pending,
    }


def hang_section(ctx):
    """Test hook: hang, deaf to SIGTERM and SIGINT, as a process stuck in a CUDA call would."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    say(ctx, "hang: a test hook (tests/test_bench_smoke.py), sleeping until killed")
    while True:
        time.sleep(3600)
    yield  # a generator, like the other sections


def crash_section(ctx):
    """Test hook: one row, then the process aborts (SIGABRT), as on a fatal CUDA error."""
    yield {"figure": "before the crash", "value": "a row given before the process died"}
    say(ctx, "crash: a test hook (tests/test_bench_smoke.py), aborting")
    os.abort()


def section_function(target: str):
    """The generator function a PLAN entry names (a module of bench/ is imported only here, in its process)."""
    if "." in target:
        import importlib

        module, name = target.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)
    name, _, argument = target.partition(":")
    function = globals()[name]
    return functools.partial(function, argument) if argument else function


SECTIONS = {name: target for name, target, _, _ in PLAN}
HOOKS = {"hang": hang_section, "crash": crash_section}


# -- one section, in its own process ------------------------------------------------------------------------------


def error_row(name: str, exc: BaseException) -> dict:
    lines = "".join(traceback.format_exception(exc)[-3:]).strip().splitlines()
    where = " | ".join(line for line in lines if line.strip(" ^~"))  # without the caret lines under the code
    return {"section": name, "figure": "error", "value": f"{type(exc).__name__}: {exc} ({where[-600:]})", "ok": False}


def write_rows(path: Path, rows: list[dict], done: bool) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rows": rows, "done": done}, default=str))
    os.replace(tmp, path)


def run_section_here(args) -> int:
    """The child: run one section, writing its rows to --rows-file after each one; exit without cleanup."""
    name, timeout = args.section, args.section_timeout
    if timeout:  # where Python is, in the log, just before the parent cuts this process
        faulthandler.dump_traceback_later(timeout - min(2.0, 0.2 * timeout), exit=False)
    ctx = SimpleNamespace(
        device=args.device,
        sizes=SMOKE if args.smoke else FULL,
        smoke=args.smoke,
        record_dir=args.record_dir,
        logs=Path(args.rows_file).parent,
        timeout=timeout or 600.0,
        started=time.perf_counter(),
    )
    path = Path(args.rows_file)
    rows: list[dict] = []
    write_rows(path, rows, done=False)
    say(ctx, f"section {name} (pid {os.getpid()}, timeout {timeout:.0f} s)")
    try:
        function = HOOKS[name] if name in HOOKS else section_function(SECTIONS[name])
        for row in function(ctx):
            row = {"section": name, **row}
            rows.append(row)
            write_rows(path, rows, done=False)
            say(ctx, f"row: {row['figure']}: {row['value']}")
    except Exception as exc:
        traceback.print_exc()
        rows.append(error_row(name, exc))
    write_rows(path, rows, done=True)
    say(ctx, "done")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown (CUDA, torch, threads) that could hang after the rows are safe


# -- the parent: each section in a child process, under its timeout ----------------------------------------------


# What a forked section's zygote imports once (tools/isolate.py): the modules whose import is most of a section's
# start on the CPU. Importing them creates no CUDA context (the zygote refuses to fork where one did).
PRELOAD = ["numpy", "warp", "newton", "newton.solvers"]
_zygotes: list[Zygote] = []


def zygote(env: dict) -> Zygote:
    """The zygote the forked sections start from: one per run, started anew where the last one was closed."""
    if not _zygotes or _zygotes[-1].proc.poll() is not None:
        _zygotes.append(Zygote(PRELOAD, env))
    return _zygotes[-1]


def run_child(name: str, args, logs: Path, most: float | None = None) -> tuple[list[dict], dict]:
    """Run one section in its own process under its timeout (at most ``most`` seconds): its rows, and what became
    of it."""
    estimate, timeout = estimate_for(name, args.smoke), timeout_for(name, args.smoke)
    timeout = timeout if most is None else max(1.0, min(timeout, most))
    log_path, rows_path = logs / f"{name}.log", logs / f"{name}.rows.json"
    log_path.unlink(missing_ok=True)
    rows_path.unlink(missing_ok=True)
    command = [sys.executable, "-u", str(Path(__file__).resolve()), "--section", name]
    command += ["--rows-file", str(rows_path), "--section-timeout", str(timeout), "--record-dir", args.record_dir]
    command += ["--smoke"] if args.smoke else []
    command += ["--device", args.device] if args.device else []
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1", FORGE_GPU_VERBOSE="1")
    if args.start == "fork":
        status, note, returncode, seconds = zygote(env).run(command[2:], log_path, timeout, env, TERM_GRACE_S)
    else:
        status, note, returncode, seconds = run_isolated(command, log_path, timeout, env, TERM_GRACE_S)
    try:
        payload = json.loads(rows_path.read_text())
    except (OSError, ValueError):
        payload = {"rows": [], "done": False}
    rows = payload["rows"]
    tail, where = log_tail(log_path.read_text(errors="replace"))
    detail = f"; last output: {tail}" + (f"; {where}" if where else "") + f" (log {log_path})"
    if status == "timeout":
        rows.append(
            {
                "section": name,
                "figure": "timeout",
                "value": f"cut at its timeout of {timeout:.0f} s (estimate {estimate:.0f} s), {note}{detail}",
                "ok": False,
            }
        )
    elif returncode != 0 or not payload["done"]:
        code = returncode
        how = f"died of {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        status = "error"
        rows.append({"section": name, "figure": "error", "value": f"the process {how}{detail}", "ok": False})
    elif any(row["figure"] == "error" for row in rows):
        status = "error"
    elif not all(row.get("ok", True) for row in rows):
        status = "failed"
    for row in rows:
        row["seconds"] = round(seconds, 1)
    info = {"section": name, "estimate_s": estimate, "timeout_s": timeout, "seconds": round(seconds, 1)}
    return rows, info | {"status": status, "log": str(log_path)}


def write_tar(out: Path, path: Path) -> None:
    """``out``'s table, JSON and logs as one gzipped tar at ``path`` (replaced whole), so that a command cut at
    its limit still returns every section done before the cut as one file (a device call returns few files)."""
    import tarfile

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in ("gpu_check.json", "gpu_check.md", "gpu_check_logs"):
            if (out / name).exists():
                tar.add(out / name, arcname=name)
    os.replace(tmp, path)


COMPILED = re.compile(r"^Module (\S+) (?:[0-9a-f]{7} )?load on device '([^']+)'.* \(compiled\)", re.M)


def compiled_modules(logs: Path) -> list[str]:
    """The modules the sections' logs say Warp compiled (not found in the kernel cache), as MODULE@DEVICE."""
    found = set()
    for log in logs.glob("*.log"):
        found |= {f"{m}@{d}" for m, d in COMPILED.findall(log.read_text(errors="replace"))}
    return sorted(found)


def plan(names: list[str], smoke: bool) -> str:
    lines = [{"section": n, "estimate_s": estimate_for(n, smoke), "timeout_s": timeout_for(n, smoke)} for n in names]
    lines.append(
        {
            "section": "total",
            "estimate_s": sum(r["estimate_s"] for r in lines),
            "timeout_s": sum(r["timeout_s"] for r in lines),
        }
    )
    return table(lines, ["section", "estimate_s", "timeout_s"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI runs this on the CPU)")
    parser.add_argument("--device", default=None, help="Warp device (default: cuda:0 if present, else cpu)")
    parser.add_argument("--record-dir", default=tempfile.gettempdir(), help="where the recordings go (local disk)")
    parser.add_argument("--out", default=None, help="results folder (default bench/results); logs: OUT/gpu_check_logs")
    parser.add_argument(
        "--only",
        action="append",
        metavar="PREFIX",
        help="run the sections whose names start with PREFIX (warmup, doctor, tests, bandwidth, pipeline, torch, "
        "syncs); repeatable; machine always runs",
    )
    parser.add_argument(
        "--tar",
        default=None,
        help=f"also write the results as one .tgz here after every section (for a device call's $OUT: $OUT/{TAR_NAME})",
    )
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="stop within this many seconds: a section "
        "runs only where its timeout fits in what is left (cut to fit otherwise); the rest are skipped",
    )
    parser.add_argument(
        "--start",
        choices=("exec", "fork"),
        default=None,
        help="how a section's process starts: exec (a new interpreter; the default on a full run) or fork (from a "
        "process that imported Newton and Warp once, without initializing Warp; the default with --smoke)",
    )
    parser.add_argument("--test-section", action="append", choices=sorted(HOOKS), default=[], help=argparse.SUPPRESS)
    parser.add_argument("--section", choices=[*SECTIONS, *HOOKS], help=argparse.SUPPRESS)  # the child's
    parser.add_argument("--rows-file", help=argparse.SUPPRESS)
    parser.add_argument("--section-timeout", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.section:
        return run_section_here(args)
    args.start = args.start or ("fork" if args.smoke else "exec")
    try:
        return run_sections(args, parser)
    finally:
        while _zygotes:
            _zygotes.pop().close()


def run_sections(args, parser) -> int:

    names = [name for name in SECTIONS if name != "machine"]
    if args.only:
        names = [name for name in names if name.startswith(tuple(args.only))]
        if not names:
            parser.error(f"--only {args.only}: no section starts with that")
    names = [*dict.fromkeys(args.test_section), "machine", *names]
    out = Path(args.out or RESULTS)
    logs = out / "gpu_check_logs"
    logs.mkdir(parents=True, exist_ok=True)
    mode = "smoke" if args.smoke else "full"
    start = f"each in its own process ({args.start})"
    print(f"GPU check ({mode}): {len(names)} sections, {start}; logs in {logs}", flush=True)
    print(plan(names, args.smoke), flush=True)
    machine = {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count()}
    rows: list[dict] = []
    sections: list[dict] = []
    started = time.perf_counter()
    markdown = ""
    for index, name in enumerate(names, 1):
        left = None if args.deadline_s is None else args.deadline_s - (time.perf_counter() - started)
        estimate, timeout = estimate_for(name, args.smoke), timeout_for(name, args.smoke)
        if left is not None and left < min(timeout, 2 * estimate):
            print(f"[{index}/{len(names)}] {name}: skipped, {left:.0f} s left of --deadline-s", flush=True)
            value = f"{left:.0f} s left of --deadline-s {args.deadline_s:.0f}"
            section_rows = [{"section": name, "figure": "skipped", "value": value, "ok": False}]
            info = {"section": name, "status": "skipped", "seconds": 0.0, "estimate_s": estimate, "timeout_s": timeout}
        else:
            print(f"[{index}/{len(names)}] {name} ...", flush=True)
            section_rows, info = run_child(name, args, logs, None if left is None else left - 1.0)
        rows += section_rows
        sections.append(info)
        if name == "machine":
            machine |= {r["figure"]: r["value"] for r in section_rows if r["figure"] not in ("error", "timeout")}
        device = machine.get("device", args.device or "the default device")
        markdown = f"GPU check on {device} ({mode}), {time.perf_counter() - started:.0f} s\n\n"
        markdown += table(rows, ["section", "figure", "value", "ratio", "target", "ok", "seconds"])
        markdown += "\n\n" + table(sections, ["section", "status", "seconds", "estimate_s", "timeout_s"])
        payload = {"machine": machine, "device": device, "smoke": args.smoke, "sections": sections, "rows": rows}
        save("gpu_check", payload, markdown, out)
        if args.tar:
            write_tar(out, Path(args.tar))
        print(f"    {info['status']} in {info['seconds']} s (estimate {info['estimate_s']:.0f} s)", flush=True)
    compiled = compiled_modules(logs)
    on_cuda = [m for m in compiled if not m.endswith("@cpu")]
    value = f"{len(on_cuda)} on CUDA" + (f" ({', '.join(on_cuda)})" if on_cuda else "")
    value += f", {len(compiled) - len(on_cuda)} on the CPU (the carried cache holds CUDA modules only)"
    print(f"kernel modules Warp compiled during the run (not found in its kernel cache): {value}", flush=True)
    if sections:
        markdown += f"\n\nKernel modules compiled during the run: {value}\n"
        payload = {"machine": machine, "device": device, "smoke": args.smoke, "sections": sections, "rows": rows}
        save("gpu_check", payload | {"compiled_modules": compiled}, markdown, out)
        if args.tar:
            write_tar(out, Path(args.tar))
    print(markdown)
    return 0 if all(row.get("ok", True) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
