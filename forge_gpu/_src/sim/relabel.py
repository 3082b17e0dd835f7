"""Relabeling with the expert (DAgger): every frame labelled, inside the step, with the action the task's expert takes
in the frame's state; optionally a share of episodes executing the expert's actions instead of the learner's.

With ``label = "expert"`` in the config (``make(..., label="expert")``, ``collect --label expert``) the env calls the
task's expert on every observation it makes (reset, step, restore), after the observation and before the step result
is packed, inside the captured step: the expert only launches kernels, so the label costs no host round trip. The
expert's action is copied into the observation field ``expert_action`` (float32 ``[A]``, as the expert returns it,
not clipped), so ``obs/expert_action[t]`` is the label of the state the policy acted in at ``t``; env.spec's
``labels`` marks the field (``core/labels.py``).

With ``expert_mix = BETA`` too (``collect --mix BETA``), each episode draws at its reset, from the env's keyed stream
``(seed, env, episode)`` (``rng.STREAM_MIX``), whether it executes the expert's actions (probability BETA) or the
policy's; the draw is the per-episode param ``expert_executed`` (1.0 or 0.0, recorded like a randomized value, so
``select --where "expert_executed == 1"`` and ``Windows(params=True)`` see it). The policy is still called for the
whole batch; one kernel at the start of the step chooses, per world, the label of its current frame or the policy's
action, which the step then clips and executes as always (``executed_action``, the run's ``action``).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from forge_gpu._src.core.checks import is_int
from forge_gpu._src.core.labels import EXPERT_EXECUTED, LABEL_SOURCES
from forge_gpu.kernels import relabel as kernels


class ExpertLabels:
    """The label buffer, the per-episode mix and their kernels of one env (``VectorEnv`` owns one when its config
    has ``label``)."""

    def __init__(self, task, world, mix: float | None):
        """ValueError (one line) for a task without an expert."""
        self.field = LABEL_SOURCES["expert"]
        self.expert = task.expert(world)
        if self.expert is None:
            raise ValueError(f"label = 'expert': task {task.spec.id!r} has no expert to label its frames with")
        self.world, self.mix = world, mix
        n, a, device = world.num_envs, task.spec.action_dim, world.device
        self.label = wp.zeros((n, a), dtype=float, device=device)
        """The expert's action for the current observation, float32 [N, A]: the observation field ``expert_action``."""
        self.executed = wp.zeros(n, dtype=float, device=device)
        """Whether each world's current episode executes the expert's actions, float32 [N] (1.0 or 0.0)."""
        self.chosen = wp.zeros((n, a), dtype=float, device=device)
        """The action each world's step executes before clipping, float32 [N, A] (with a mix)."""

    @property
    def fields(self) -> dict[str, wp.array]:
        """The observation fields the labels add: ``expert_action``."""
        return {self.field: self.label}

    @property
    def params(self) -> dict[str, wp.array]:
        """The per-episode params they add: ``expert_executed`` with a mix, none without."""
        return {EXPERT_EXECUTED: self.executed} if self.mix is not None else {}

    def spec(self) -> dict:
        """env.spec's additions: the field (``observation``), its mark (``labels``) and the mix's param (``params``)."""
        shape = list(self.label.shape[1:])
        return {
            "observation": {self.field: {"shape": shape, "dtype": "float32"}},
            "labels": {self.field: "expert"},
            "params": {EXPERT_EXECUTED: {"shape": [], "dtype": "float32"}} if self.mix is not None else {},
        }

    def observe(self, observation: dict) -> None:
        """Label the current observation: the expert's action for it, copied into ``label`` (launches only)."""
        action = self.expert(observation)
        if not isinstance(action, wp.array) or action.dtype != wp.float32 or action.shape != self.label.shape:
            shape = getattr(action, "shape", None)
            raise ValueError(
                f"the task's expert returned {type(action).__name__} of shape {shape}; expected a float32 Warp array "
                f"of shape {tuple(self.label.shape)}"
            )
        wp.copy(self.label, action)

    def draw(self, reset_mask: wp.array) -> None:
        """Draw whether the new episodes of the worlds in ``reset_mask`` execute the expert's actions (with a mix)."""
        if self.mix is None:
            return
        w = self.world
        wp.launch(
            kernels.draw_mix_kernel,
            dim=w.num_envs,
            inputs=[w.seed, float(self.mix), reset_mask, w.draw_episode, w.draw_env],
            outputs=[self.executed],
            device=w.device,
        )

    def restore(self, reset_mask: wp.array, params: dict) -> None:
        """Set the draws of the worlds in ``reset_mask`` to the recorded ``params[expert_executed]`` (with a mix)."""
        if self.mix is None:
            return
        given = wp.array(
            np.ascontiguousarray(params[EXPERT_EXECUTED], np.float32).reshape(-1), device=self.world.device
        )
        wp.launch(
            kernels.restore_mix_kernel,
            dim=self.world.num_envs,
            inputs=[reset_mask, given],
            outputs=[self.executed],
            device=self.world.device,
        )

    def choose(self, action: wp.array) -> wp.array:
        """The actions the step executes (before clipping): with a mix, per world the label of its current frame or
        ``action`` (the policy's), chosen by one kernel into ``chosen``; without, ``action`` itself."""
        if self.mix is None:
            return action
        wp.launch(
            kernels.choose_action_kernel,
            dim=action.shape,
            inputs=[self.executed, self.label, action],
            outputs=[self.chosen],
            device=self.world.device,
        )
        return self.chosen


def expert_chunks(env, state: dict, params: dict | None, horizon: int, fields: tuple[str, ...] = ()) -> dict:
    """The expert's own chunk of ``horizon`` actions from each of ``env.num_envs`` recorded states (DAgger labels a
    policy with action chunks can follow): every world restored to its ``state`` (and its episode's ``params``,
    :meth:`VectorEnv.restore`), then the task's expert run for ``horizon`` steps, the whole batch at once.

    A world's episode clock restarts at the restored frame, so ``max_steps`` counts from there. Each step is one
    expert call and one env step of all the worlds (no loop over worlds); the env is left wherever the chunks ended.

    Returns ``action`` float32 ``[N, horizon, A]``, the actions the steps executed (clipped to the bounds, as a
    recorded ``action``); ``valid`` bool ``[N, horizon]``, false from the first step after the world's episode
    ended (a terminal state or the restarted clock's ``max_steps``: those actions belong to the next episode);
    ``obs/<F>`` ``[N, horizon, ...]`` for each name in ``fields``, the observation each action was taken in
    (step 0: the restored frame). ValueError (one line) for a ``horizon`` below 1 or a task without an expert."""
    if not is_int(horizon) or horizon < 1:
        raise ValueError(f"expert_chunks: horizon is {horizon!r}; expected an integer >= 1")
    expert = env.task.expert(env.world)
    if expert is None:
        raise ValueError(f"expert_chunks: task {env.task.spec.id!r} has no expert")
    result = env.restore(state, params)
    n, a = env.num_envs, len(env.spec["action_low"])
    out = {"action": np.zeros((n, horizon, a), np.float32), "valid": np.zeros((n, horizon), bool)}
    for name in fields:
        first = result.observation[name].numpy()
        out[f"obs/{name}"] = np.zeros((n, horizon, *first.shape[1:]), first.dtype)
    alive = np.ones(n, bool)
    for h in range(horizon):
        for name in fields:
            out[f"obs/{name}"][:, h] = result.observation[name].numpy()
        result = env.step(expert(result.observation))
        out["action"][:, h] = result.info["executed_action"].numpy()
        out["valid"][:, h] = alive
        alive &= ~(result.terminated.numpy() | result.truncated.numpy())
    return out
