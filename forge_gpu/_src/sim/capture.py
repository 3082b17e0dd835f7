"""The step as one graph: whether a device can capture it, and the capture itself, made ready to launch.

Warp instantiates a captured CUDA graph lazily, at its first ``wp.capture_launch``, and the driver may refuse
it only then (a conditional node or an allocation node it cannot run). :func:`capture_step` instantiates the
graph right after the capture, so that a refusal reaches the caller's guard with the capture's own failures,
before anything has run; ``VectorEnv`` also guards the first launch, where Warp could not instantiate early.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import warp as wp


def capture_unsupported(device, *, uses_conditional_nodes: bool) -> str | None:
    """Why a step cannot be captured as one graph on ``device``, or None when it can.

    On CUDA, MuJoCo Warp's solver loops are conditional graph nodes (CUDA driver and toolkit 12.4 or
    newer) and the solver allocates inside the graph (stream-ordered memory pools).
    """
    if not device.is_cuda:
        return None
    if uses_conditional_nodes and not wp.is_conditional_graph_supported():
        return (
            "conditional graph nodes need a CUDA driver and toolkit 12.4 or newer (driver "
            f"{wp.get_cuda_driver_version()}, Warp's toolkit {wp.get_cuda_toolkit_version()}); update the driver"
        )
    if not wp.is_mempool_enabled(device):
        return f"memory pools are not enabled on {device} (allocations inside a graph need them)"
    return None


def capture_step(device, body: Callable[[], None]):
    """``body`` captured as one graph on ``device`` and instantiated (see :func:`instantiate`): a ``wp.Graph``
    ready for ``wp.capture_launch``. Raises whatever the capture or the driver raised; nothing has run then."""
    with wp.ScopedCapture(device=device) as capture:
        body()
    instantiate(capture.graph)
    return capture.graph


def instantiate(graph) -> None:
    """Make a captured CUDA graph executable now, as ``wp.capture_launch`` does at its first call, without
    launching it; raise ``RuntimeError`` where the driver refuses.

    Warp 1.19 has no public call for this: it is the native call ``wp.capture_launch`` makes
    (``wp_cuda_graph_create_exec`` on the graph's device's current stream), and the executable goes where
    ``capture_launch`` looks for it (``graph.graph_exec``), so the first launch only launches. Nothing to do on
    the CPU (Warp replays a CPU graph from its recorded operations), for an instantiated graph, or where this
    Warp lacks the native call (the first launch then instantiates, as Warp does by default).
    """
    if not graph.device.is_cuda or graph.graph_exec is not None:
        return
    try:
        from warp._src import context as warp_context
    except ImportError:  # another Warp layout: its first launch instantiates, as Warp does by default
        return
    runtime = warp_context.runtime
    create = getattr(getattr(runtime, "core", None), "wp_cuda_graph_create_exec", None)
    if create is None:
        return
    executable = ctypes.c_void_p()
    stream = graph.device.stream
    if not create(graph.device.context, stream.cuda_stream, graph.graph, ctypes.byref(executable)):
        raise RuntimeError(f"the driver refused to instantiate the captured graph: {runtime.get_error_string()}")
    graph.graph_exec = executable


def solver_syncs_per_step(config) -> int:
    """At most how often an eager CUDA step waits for the device in MuJoCo Warp's solver loop alone: outside a
    graph ``wp.capture_while`` copies the loop's condition to the host and synchronizes before each iteration
    and once more to stop, ``iterations + 1`` times per substep. 0 for the other solvers (no such loop)."""
    if config.solver.name != "mujoco":
        return 0
    return config.substeps * (config.solver.iterations + 1)


def eager_cost(config, device) -> str:
    """What stepping eagerly costs on ``device`` with ``config``, in words and in the config's numbers."""
    launches = "every step then pays Python's launch cost for each of its kernels"
    syncs = solver_syncs_per_step(config) if device.is_cuda else 0
    if not syncs:
        return f"{launches} (on the CPU about 12x slower at 64 envs, less at thousands)"
    return (
        f"{launches} and waits for the device up to {syncs} times: outside a graph, MuJoCo Warp's solver loop "
        f"copies its condition to the host and synchronizes before each of up to {config.solver.iterations} "
        f"iterations and once to stop, in each of {config.substeps} substeps, so the host never runs ahead of the GPU"
    )
