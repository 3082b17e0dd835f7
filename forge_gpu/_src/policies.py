"""Built-in policies: ``random`` and the task's ``expert``, both Warp kernels.

A policy is a callable ``(observation: dict[str, wp.array]) -> wp.array [N, A]`` on the env's device.
"""

from __future__ import annotations

import warp as wp

from ..kernels import policies as kernels

BUILTIN_POLICIES = ("random", "expert")


class RandomPolicy:
    """Uniform actions within the bounds, deterministic under the (seed, env, episode, step) contract."""

    def __init__(self, env):
        self.env = env
        self.action = wp.zeros(env._action_in.shape, dtype=float, device=env.device)

    def __call__(self, observation: dict) -> wp.array:
        env = self.env
        wp.launch(
            kernels.random_policy_kernel,
            dim=env.num_envs,
            inputs=[
                env.seed,
                env.action_low,
                env.action_high,
                observation["episode_id"],
                observation["step_id"],
            ],
            outputs=[self.action],
            device=env.device,
        )
        return self.action


def make_policy(name: str, env):
    """The built-in policy ``name`` (``random`` or ``expert``) for ``env``."""
    if name == "random":
        return RandomPolicy(env)
    if name == "expert":
        policy = env.task.expert(env)
        if policy is None:
            raise ValueError(f"task {env.task.spec.id!r} has no expert policy; use 'random'")
        return policy
    raise ValueError(f"unknown policy {name!r}; built-in policies are {', '.join(BUILTIN_POLICIES)}")
