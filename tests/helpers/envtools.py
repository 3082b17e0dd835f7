"""Test helpers for the simulation side: the devices every device test runs on, and a host rollout."""

import pytest

from forge_gpu._src.sim.device import device_choice


def _devices() -> list:
    """``cpu``, and ``cuda:0``: run where Warp sees a CUDA device, else listed as skipped with the reason."""
    device, why = device_choice()
    skip = pytest.mark.skipif(device != "cuda:0", reason=f"no CUDA device: {why}")
    cuda = pytest.param("cuda:0", marks=[pytest.mark.cuda, skip])
    return ["cpu", cuda]


DEVICES = _devices()
"""The CPU always; ``cuda:0`` always listed, marked ``cuda`` (``pytest -m cuda`` selects every CUDA case: with
bench/gpu.py, the GPU check), skipped (saying why) where Warp sees no CUDA device."""


def torch_on(device: str):
    """torch (skipped where it is not installed) and the torch device of the Warp device ``device``; on CUDA,
    skipped (saying why) where torch has no CUDA."""
    torch = pytest.importorskip("torch")
    if device.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} has no CUDA device (a CPU-only build or no driver)")
    return torch, device


def rollout(env, policy, steps):
    """Host copies of the reset result and of ``steps`` step results."""
    out = [env.reset().numpy()]
    for _ in range(steps):
        out.append(env.step(policy(env.observation)).numpy())
    return out


def assert_graph(env):
    """Assert that ``env`` steps as one captured graph; skip, saying why, on a device that cannot capture one."""
    from forge_gpu._src.sim.env import capture_unsupported

    reason = capture_unsupported(env.device, uses_conditional_nodes=env.config.solver.name == "mujoco")
    if reason is not None:
        pytest.skip(f"{env.device} cannot capture the step as a graph: {reason}")
    assert env.step_mode == "graph", env.step_mode


RL_MAX_STEPS = 12
"""Episode length of the RL wrappers' tests: short, so that rollouts hold terminations and truncations."""


def rl_cartpole(n: int = 4, max_steps: int = RL_MAX_STEPS, **overrides):
    """The RL wrappers' test env: cartpole on the CPU, ``n`` envs, seed 3."""
    import forge_gpu.sim

    return forge_gpu.sim.make("cartpole", num_envs=n, device="cpu", seed=3, max_steps=max_steps, **overrides)


def falling_actions(steps: int, n: int = 4, a: int = 1):
    """Large random forces ``[steps, n, a]``, so that some poles fall (terminations) before ``RL_MAX_STEPS``
    (truncations)."""
    import numpy as np

    return np.random.default_rng(0).uniform(-1.5, 1.5, size=(steps, n, a)).astype(np.float32)
