"""World: the ``N`` worlds of one Newton model and the device buffers that a task's hooks share with the env.

:class:`~forge_gpu._src.sim.env.VectorEnv` owns one and passes it to every hook of its task, so a task
module imports this module (and ``tasks.base``), never the env. Arrays are indexed by world first
(``[N, ...]``); a task reads and writes them only from kernels it launches. What a task adds itself (its
observation fields, its calibration) it returns from ``bind`` (:class:`~forge_gpu._src.sim.task.TaskBinding`);
the env then stores it here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import warp as wp

if TYPE_CHECKING:
    import newton

    from forge_gpu._src.sim.config import TaskConfig


class World:
    """The model, state and control of ``N`` replicated worlds, and the per-world buffers of a step."""

    def __init__(self, config: TaskConfig, model: newton.Model, *, proprio_dim: int, action_dim: int):
        """Allocate the buffers of ``config.num_envs`` worlds on ``config.device`` for ``model`` (already
        finalized, with ``num_envs`` worlds)."""
        n, device = config.num_envs, wp.get_device(config.device)
        self.config = config
        """The task's whole configuration."""
        self.device = device
        """The Warp device every buffer lives on."""
        self.num_envs = n
        """N, the number of worlds."""
        self.seed = config.seed
        """Seed of every random draw; reset kernels draw from (seed, world, episode)."""
        self.model = model
        """The Newton model of all N worlds."""
        self.state_0 = model.state()
        """The current state: resets write it, the substeps end in it, observations read it."""
        self.control = model.control()
        """The control the solver reads each substep (joint efforts ``joint_f``, targets ``joint_target_q``)."""

        # Per-world views of the joint arrays of state_0 and the control.
        self.joint_q = self.state_0.joint_q.reshape((n, -1))
        """Joint coordinates per world, float32 [N, coords] (a view of ``state_0.joint_q``)."""
        self.joint_qd = self.state_0.joint_qd.reshape((n, -1))
        """Joint velocities per world, float32 [N, dofs] (a view of ``state_0.joint_qd``)."""
        self.joint_f = self.control.joint_f.reshape((n, -1))
        """Joint efforts per world [N or N m], float32 [N, dofs] (a view of ``control.joint_f``)."""

        def zeros(shape, dtype=float):
            return wp.zeros(shape, dtype=dtype, device=device)

        def vector(values):
            return wp.array(np.asarray(values, np.float32), device=device)

        self.action_low = vector(config.action.low)
        """Lower action bound, float32 [A]."""
        self.action_high = vector(config.action.high)
        """Upper action bound, float32 [A]."""
        self.action_scale = vector(config.action.scale)
        """Multiplier from the executed action to the joint effort or target, float32 [A]."""
        self.action_input = zeros((n, action_dim))
        """The staged action, float32 [N, A]: ``VectorEnv.step`` copies the caller's action here and the
        step's first kernel reads it. Its shape is the one a policy returns."""
        self.executed_action = zeros((n, action_dim))
        """The action after clipping, float32 [N, A]; zero on reset rows. ``apply_action`` reads it."""
        self.reset_mask = zeros(n + 1, wp.bool)
        """Worlds reset during this call, bool [N + 1] (the last entry, global world -1, stays false)."""
        self.episode_id = wp.full(n, -1, dtype=wp.int32, device=device)
        """Episode counter per world, int32 [N]; -1 before the first reset. During ``reset_worlds`` a reset
        world still holds its previous id (the new episode is id + 1); the env advances it after ``observe``."""
        self.draw_env = wp.array(np.arange(n, dtype=np.int32), device=device)
        """The env key of the world's random draws (``kernels/rng.py``'s ``env_id``), int32 [N]: the world's
        index. Every reset, randomization and random-policy draw is keyed by ``(draw_env, draw_episode)``."""
        self.draw_episode = self.episode_id
        """The episode key of the world's random draws, int32 [N]: ``episode_id`` itself (the same array), so a
        reset draws from the next episode's key. An evaluation gives both keys arrays of its own
        (``forge_gpu.recording.evaluate``): episode ``j`` of the evaluation draws from ``(j, 0)`` whichever world
        runs it."""
        self.idle = wp.zeros(n, dtype=wp.bool, device=device)
        """An idle world resets at every step, bool [N]: it never runs a transition, so no episode of it ends. All
        false, but in an evaluation, whose worlds go idle once its N episodes have started."""
        self.proprio = zeros((n, proprio_dim))
        """The ``proprio`` observation, float32 [N, P]; ``observe`` writes it."""
        self.task_reward = zeros(n)
        """The task's reward of the transition, float32 [N]; ``observe`` writes it (the env zeroes reset rows)."""
        self.task_terminated = zeros(n, wp.bool)
        """The task's terminal condition, bool [N]; ``observe`` writes it."""
        self.task_fields: dict[str, wp.array] = {}
        """The task's observation fields (name -> [N, ...] array), from its ``bind``; set by the env."""
        self.params: dict[str, wp.array] = {}
        """The current episode's value of every parameter the task can randomize (name -> float32 [N, ...]; the
        nominal value where the config does not randomize it), set by the env before ``bind``; reset draws
        them (``sim/randomize.py``) and the task's kernels read its own (a task's ``apply_params`` may settle its own
        drawn values before they are recorded: ``push`` moves a goal colour equal to the cube's to the next one)."""
        self.calibration: dict[str, Any] = {}
        """The task's sensor calibration (JSON-serializable, recorded in run.json), from its ``bind``; set by
        the env."""
