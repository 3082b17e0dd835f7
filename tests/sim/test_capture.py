"""The step's graph (sim/capture.py and VectorEnv's use of it): a capture, an instantiation or a first launch
that fails leaves an env that steps eagerly, says why once, and gives the same steps; the early instantiation
makes the executable ``wp.capture_launch`` would make."""

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest
import warp as wp
from helpers.envtools import rollout

import forge_gpu
from forge_gpu._src.sim import capture as capture_module


def assert_falls_back(break_it, why: str, mode: str):
    """Once ``break_it()`` has run (after an unbroken reference env's rollout), an env warns once (``why``),
    reports ``mode`` and steps like the reference; returns the env."""
    reference = forge_gpu.sim.make("cartpole", num_envs=3, device="cpu", seed=4, max_steps=4)
    want = rollout(reference, forge_gpu.sim.make_policy("random", reference), 7)
    assert reference.step_mode == "graph"
    break_it()
    env = forge_gpu.sim.make("cartpole", num_envs=3, device="cpu", seed=4, max_steps=4)
    with pytest.warns(RuntimeWarning, match=why) as caught:
        got = rollout(env, forge_gpu.sim.make_policy("random", env), 7)
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert env.step_mode.startswith(mode), env.step_mode
    for a, b in zip(got, want, strict=True):  # resets included (max_steps=4)
        for name, value in b.arrays().items():
            np.testing.assert_array_equal(a.arrays()[name], value)
    return env


def test_failed_capture_falls_back_to_eager_stepping_with_one_warning(monkeypatch):
    """A capture that raises leaves a working env that steps eagerly, says why once, and gives the same steps."""

    class Broken:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("no graphs today")

    assert_falls_back(
        lambda: monkeypatch.setattr(wp, "ScopedCapture", Broken),
        "eagerly because graph capture failed.*no graphs today",
        "eager: graph capture failed",
    )


def test_a_refused_instantiation_is_a_failed_capture(monkeypatch):
    """The driver refusing to instantiate the captured graph (in reset, right after the capture) falls back the
    same way, before any step, so run.json's step_mode (written after reset) says eager."""

    def refuse(graph):
        raise RuntimeError("the driver refused to instantiate the captured graph: operation not supported")

    env = assert_falls_back(
        lambda: monkeypatch.setattr(capture_module, "instantiate", refuse),
        "eagerly because graph capture failed.*refused to instantiate",
        "eager: graph capture failed (RuntimeError: the driver refused to instantiate",
    )
    fresh = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu")
    with pytest.warns(RuntimeWarning, match="refused to instantiate"):
        fresh.reset()
    assert fresh.step_mode == env.step_mode  # known before the first step


def test_a_refused_first_launch_falls_back_to_eager_stepping(monkeypatch):
    """Warp instantiates a graph at its first launch where it could not earlier: a first launch that raises (as a
    driver refusing the graph does, before running any of it) is caught like a failed capture; that step and the
    later ones run eagerly, with one warning, and the results equal an unbroken env's."""
    launches = []
    real_launch = wp.capture_launch

    def first_refused(graph, stream=None):
        launches.append(graph)
        if len(launches) == 1:
            raise RuntimeError("Graph creation error: operation not supported when stream is capturing")
        real_launch(graph, stream)

    env = assert_falls_back(
        lambda: monkeypatch.setattr(wp, "capture_launch", first_refused),
        "eagerly because the captured graph's first launch failed.*Graph creation error",
        "eager: the",
    )
    assert len(launches) == 1 and env._graph is None  # the refused launch alone: the rest ran eagerly


def test_a_launched_graph_is_not_guarded_again(monkeypatch):
    """After a first launch that worked, a failing launch is an error of that step, not a silent fallback."""
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu")
    env.reset()
    env.step(np.zeros((2, 1), np.float32))
    assert env.step_mode == "graph"

    def broken(graph, stream=None):
        raise RuntimeError("launch failed")

    monkeypatch.setattr(wp, "capture_launch", broken)
    with pytest.raises(RuntimeError, match="launch failed"):
        env.step(np.zeros((2, 1), np.float32))
    assert env.step_mode == "graph"


def fake_cuda_graph():
    stream = SimpleNamespace(cuda_stream=0x51)
    device = SimpleNamespace(is_cuda=True, context=ctypes.c_void_p(0xC0), stream=stream)
    return SimpleNamespace(device=device, graph=ctypes.c_void_p(0x6A), graph_exec=None)


def test_instantiate_makes_the_executable_capture_launch_would(monkeypatch):
    """On CUDA, instantiate makes the call ``wp.capture_launch`` makes at its first launch (the device's context and
    current stream, the graph) and keeps the executable where capture_launch looks; a refusal raises, naming the
    driver's error; a CPU graph, an instantiated graph, or a Warp without the native call is left as it is."""
    from warp._src import context as warp_context

    calls = []

    def create_exec(context, stream, graph, out):
        calls.append((context.value, stream, graph.value))
        out._obj.value = 0xE8
        return True

    core = SimpleNamespace(wp_cuda_graph_create_exec=create_exec, wp_get_error_string=lambda: b"out of memory")
    monkeypatch.setattr(warp_context.runtime, "core", core)
    graph = fake_cuda_graph()
    capture_module.instantiate(graph)
    assert calls == [(0xC0, 0x51, 0x6A)] and graph.graph_exec.value == 0xE8
    capture_module.instantiate(graph)  # already instantiated: no second executable
    assert len(calls) == 1

    core.wp_cuda_graph_create_exec = lambda *args: False
    with pytest.raises(RuntimeError, match="driver refused to instantiate the captured graph: out of memory"):
        capture_module.instantiate(fake_cuda_graph())

    del core.wp_cuda_graph_create_exec
    untouched = fake_cuda_graph()
    capture_module.instantiate(untouched)
    assert untouched.graph_exec is None
    cpu = SimpleNamespace(device=SimpleNamespace(is_cuda=False), graph_exec=None)
    capture_module.instantiate(cpu)
    assert cpu.graph_exec is None


def test_eager_cost_says_what_an_eager_step_pays_in_the_configs_numbers():
    """On CUDA with the mujoco solver, the host waits for the device before each solver iteration and once more
    to stop, every substep: 4 x (10 + 1) = 44 for the cartpole defaults; not on the CPU, nor without that loop."""
    from forge_gpu.sim import task_config

    cuda, cpu = SimpleNamespace(is_cuda=True), SimpleNamespace(is_cuda=False)
    cartpole = task_config("cartpole")
    assert capture_module.solver_syncs_per_step(cartpole) == 44
    words = capture_module.eager_cost(cartpole, cuda)
    assert "waits for the device up to 44 times" in words and "up to 10 iterations" in words and "4 substeps" in words
    assert "12x" in capture_module.eager_cost(cartpole, cpu) and "waits" not in capture_module.eager_cost(cartpole, cpu)
    featherstone = task_config("cartpole", **{"solver.name": "featherstone", "substeps": 8})
    assert capture_module.solver_syncs_per_step(featherstone) == 0
    assert "waits" not in capture_module.eager_cost(featherstone, cuda)
    assert capture_module.solver_syncs_per_step(task_config("cartpole", substeps=2, **{"solver.iterations": 3})) == 8
