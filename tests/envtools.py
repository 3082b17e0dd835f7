"""Test helpers for the simulation side: the devices every device test runs on, and a host rollout."""

import warp as wp

DEVICES = ["cpu"] + (["cuda:0"] if wp.get_cuda_device_count() > 0 else [])
"""The CPU always, CUDA when Warp sees a device."""


def rollout(env, policy, steps):
    """Host copies of the reset result and of ``steps`` step results."""
    out = [env.reset().numpy()]
    for _ in range(steps):
        out.append(env.step(policy(env.observation)).numpy())
    return out
