"""``forge-gpu doctor``: can this machine collect as designed? Each check says what it found and, for
a problem, what to do about it.

On a GPU machine: the device, driver and toolkit versions, conditional graph nodes (MuJoCo Warp's
solver loops inside a captured step), memory pools (allocations inside a graph), a page-locked
allocation with a copy into it, a tiny capture and replay, and a graph shaped like the solver's (an
allocation, then a ``wp.capture_while`` loop) captured, instantiated and replayed, with what stepping
eagerly instead would cost. On any machine: the same two captures on the CPU device (Warp records
``capture_while`` in CPU graphs too), and the kernel cache. A problem that stops collection from running
as designed makes the command exit 1.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import platform

import numpy as np


@dataclasses.dataclass
class Check:
    name: str
    ok: bool
    found: str
    fix: str = ""


def run_checks() -> list[Check]:
    """Every check, in order; Warp is initialized on the way."""
    import warp as wp

    from forge_gpu._src.sim.capture import capture_unsupported, eager_cost
    from forge_gpu._src.sim.device import device_choice, gpu_present
    from forge_gpu._src.tasks.make import task_config

    checks = [Check("python", True, f"{platform.python_version()} on {platform.platform()}")]
    versions = []
    for name in ("warp-lang", "newton", "mujoco-warp", "mujoco", "numpy", "pyarrow", "torch"):
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} -")
    checks.append(Check("packages", True, ", ".join(versions)))
    device, why = device_choice()
    usable = device != "cpu" or not gpu_present()
    fix = "" if usable else "make Warp see the GPU (driver, CUDA build of warp-lang), or pass --device cpu"
    checks.append(Check("default device", usable, why, fix))
    cartpole = task_config("cartpole")  # the numbers of what eager stepping costs
    if device != "cpu":
        cuda = wp.get_device(device)
        memory = cuda.total_memory / 2**30
        checks.append(Check("gpu", True, f"{cuda.name}, sm_{cuda.arch}, {memory:.0f} GiB"))
        driver, toolkit = _version(wp.get_cuda_driver_version()), _version(wp.get_cuda_toolkit_version())
        checks.append(Check("cuda versions", True, f"driver {driver}, Warp's toolkit {toolkit}"))
        reason = capture_unsupported(cuda, uses_conditional_nodes=True)
        checks.append(
            Check(
                "step capture requirements",
                reason is None,
                "conditional graph nodes and memory pools available" if reason is None else reason,
                "" if reason is None else f"without them the step runs eagerly: {eager_cost(cartpole, cuda)}",
            )
        )
        checks.append(_pinned_copy(wp, device))
        checks.append(_capture_replay(wp, device))
        checks.append(_solver_loop_capture(wp, device, cartpole))
    checks.append(_capture_replay(wp, "cpu"))
    checks.append(_solver_loop_capture(wp, "cpu", cartpole))
    cache = wp.config.kernel_cache_dir
    writable = bool(cache) and os.access(cache, os.W_OK)
    checks.append(
        Check(
            "kernel cache",
            writable,
            f"{cache} (compiled kernels are kept here; the first run on a machine compiles them)",
            "" if writable else "set WARP_CACHE_PATH to a writable folder",
        )
    )
    return checks


def _version(version) -> str:
    return "none" if version is None else ".".join(map(str, version))


def _pinned_copy(wp, device: str) -> Check:
    try:
        source = wp.array(np.arange(1 << 20, dtype=np.float32), device=device)
        pinned = wp.empty(1 << 20, dtype=wp.float32, device="cpu", pinned=True)
        wp.copy(pinned, source)
        wp.synchronize_device(device)
        ok = bool(np.array_equal(pinned.numpy(), np.arange(1 << 20, dtype=np.float32)))
        return Check("page-locked copy", ok, "4 MiB device-to-host into pinned memory, equal" if ok else "wrong data")
    except Exception as exc:
        return Check("page-locked copy", False, f"{type(exc).__name__}: {exc}", "check the driver; see nvidia-smi")


def _capture_replay(wp, device: str) -> Check:
    from forge_gpu.kernels.doctor import increment_kernel

    name = f"capture and replay on {device}"
    try:
        values = wp.zeros(8, dtype=float, device=device)
        with wp.ScopedCapture(device=device) as capture:
            wp.launch(increment_kernel, dim=8, outputs=[values], device=device)
        for _ in range(3):
            wp.capture_launch(capture.graph)
        ok = bool((values.numpy() == 3.0).all())
        return Check(name, ok, "a captured kernel replayed 3 times, right result" if ok else "wrong result")
    except Exception as exc:
        return Check(name, False, f"{type(exc).__name__}: {exc}", "the step will run eagerly (slower)")


def _solver_loop_capture(wp, device: str, config) -> Check:
    """The step's hard part in miniature: inside one graph, an allocation, then a ``wp.capture_while`` loop of
    ``config.solver.iterations`` iterations (MuJoCo Warp's solver loop is one), captured and instantiated as the
    env does (``capture_step``), replayed twice; the result is checked."""
    from forge_gpu._src.sim.capture import capture_step, eager_cost, solver_syncs_per_step
    from forge_gpu.kernels import doctor as kernels

    name, size, iterations = f"solver loop capture on {device}", 8, config.solver.iterations
    where = wp.get_device(device)
    try:
        counter = wp.zeros(1, dtype=wp.int32, device=device)
        values = wp.zeros(size, dtype=float, device=device)

        def step():
            scratch = wp.empty(size, dtype=float, device=device)  # allocated inside the graph, as the solver does
            start = kernels.start_countdown_kernel
            wp.launch(start, dim=size, inputs=[iterations], outputs=[counter, scratch], device=device)

            def iteration():
                wp.launch(kernels.countdown_iteration_kernel, dim=size, inputs=[counter, scratch], device=device)

            wp.capture_while(counter, iteration)
            wp.launch(kernels.accumulate_kernel, dim=size, inputs=[scratch], outputs=[values], device=device)

        with wp.ScopedDevice(device):
            graph = capture_step(where, step)
            for _ in range(2):
                wp.capture_launch(graph)
        got = values.numpy()
    except Exception as exc:
        fix = f"the step will run eagerly: {eager_cost(config, where)}"
        return Check(name, False, f"{type(exc).__name__}: {exc}", fix)
    if not (got == 2.0 * iterations).all():
        found = f"wrong result: {got.tolist()}, expected {2 * iterations}.0 each"
        return Check(name, False, found, "collect with --set capture_graph=false; report the versions above")
    found = f"an allocation and a capture_while loop ({iterations} iterations) in a graph, replayed twice, right result"
    if where.is_cuda:
        found += (
            f"; eager stepping would instead wait for the GPU up to {solver_syncs_per_step(config)} times a step "
            f"({config.task} defaults: {config.substeps} substeps x ({iterations} solver iterations + 1))"
        )
    return Check(name, True, found)


def report(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{'ok ' if c.ok else 'BAD'}  {c.name:<{width}}  {c.found}")
        if c.fix:
            lines.append(f"     {'':<{width}}  -> {c.fix}")
    return "\n".join(lines)
