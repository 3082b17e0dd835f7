"""The device half of ``forge_gpu.recording.evaluate``: the worlds' draw keys of an evaluation, its counters and
its per-episode rows, and the launches of ``kernels/evaluate.py`` that run at the end of every step."""

from __future__ import annotations

import numpy as np
import warp as wp

from forge_gpu.kernels import evaluate as kernels


class EvaluationRows:
    """An evaluation's device arrays (the worlds' draw keys, the counters, one row per episode index) and the step's
    launch that fills them (``VectorEnv.extend_step``)."""

    CHECK_EVERY = 16
    """Steps between two reads of the device's episode counter (each read waits for the device on CUDA)."""

    def __init__(self, env, episodes: int):
        n, device = env.num_envs, env.device
        self.env, self.episodes = env, episodes
        self.counter = wp.array(np.array([n, 0, 0], np.int32), device=device)
        self.draw_env = wp.array(np.arange(n, dtype=np.int32), device=device)
        self.draw_episode = wp.full(n, -1, dtype=wp.int32, device=device)
        self.idle = wp.array(np.arange(n) >= episodes, dtype=wp.bool, device=device)
        self.episode_return = wp.zeros(n, dtype=float, device=device)
        self.episode_max = wp.zeros(n, dtype=float, device=device)
        self.episode_success = wp.zeros(n, dtype=wp.int32, device=device)
        self.success_flags = env.task.success_flags(env.world)
        """The frame's success, bool [N]: the task's own flag, or ``terminated`` (a task whose episodes end
        terminated only when they succeed)."""
        if self.success_flags is None:
            self.success_flags = env.terminated
        self.returns = wp.zeros(episodes, dtype=float, device=device)
        self.max_rewards = wp.zeros(episodes, dtype=float, device=device)
        self.lengths = wp.zeros(episodes, dtype=wp.int32, device=device)
        self.success_once = wp.zeros(episodes, dtype=wp.int32, device=device)
        self.success_at_end = wp.zeros(episodes, dtype=wp.int32, device=device)
        self.worlds = wp.full(episodes, -1, dtype=wp.int32, device=device)
        self.episode_ids = wp.zeros(episodes, dtype=wp.int32, device=device)
        recorded = env.randomizer.recorded
        self.param_sources = {name: a.reshape((a.shape[0], -1)) for name, a in recorded.items()}
        self.params = {
            name: wp.zeros((episodes, a.shape[1]), dtype=float, device=device) for name, a in self.param_sources.items()
        }

    def launch(self) -> None:
        """At the end of every step and of the reset (inside the captured step)."""
        env = self.env
        for name, source in self.param_sources.items():
            wp.launch(
                kernels.start_params_kernel,
                dim=source.shape,
                inputs=[self.episodes, env.reset_mask, self.draw_env, source],
                outputs=[self.params[name]],
                device=env.device,
            )
        wp.launch(
            kernels.evaluate_step_kernel,
            dim=env.num_envs,
            inputs=[
                self.episodes,
                int(env.task.spec.has_success),
                env.reset_mask,
                env.active,
                env.reward,
                env.terminated,
                env.truncated,
                self.success_flags,
                env.step_id,
                env.episode_id,
                env.action_nonfinite,
            ],
            outputs=[
                self.counter,
                self.draw_env,
                self.draw_episode,
                self.episode_return,
                self.episode_max,
                self.episode_success,
                self.idle,
                self.returns,
                self.max_rewards,
                self.lengths,
                self.success_once,
                self.success_at_end,
                self.worlds,
                self.episode_ids,
            ],
            device=env.device,
        )

    def ended(self) -> int:
        """Episodes with an index below N that have ended (waits for the device); ValueError if an action held a NaN
        or inf (on CUDA the step flags it rather than refusing it: ``VectorEnv.action_nonfinite``)."""
        counter = self.counter.numpy()
        if counter[kernels.NONFINITE]:
            raise ValueError(
                f"the policy gave non-finite actions (NaN or inf) in {int(counter[kernels.NONFINITE])} env-steps; "
                "every value must be finite"
            )
        return int(counter[kernels.ENDED])
