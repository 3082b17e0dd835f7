"""``SkrlVecEnv``: a :class:`VectorEnv` as skrl's environment wrapper (skrl 2.x, torch), so that skrl's trainers
(``SequentialTrainer``) and agents (``PPO``) train on it, in torch tensors on the env's device."""

from __future__ import annotations

from typing import Any

from forge_gpu._src.rl.gym import GymVectorEnv

INSTALL_SKRL = "pip install 'forge-gpu[skrl]'"
"""What installs skrl."""

try:
    import gymnasium
    import torch
    from skrl.envs.wrappers.torch import Wrapper
except ImportError as e:  # said once, with the one command that fixes it
    raise ImportError(f"forge_gpu.sim.SkrlVecEnv needs skrl>=2.1 ({e}): {INSTALL_SKRL}") from e

POLICY_FIELD = "proprio"
"""The observation field skrl's models read (the task's policy observation group)."""
STATE_FIELD = "critic"
"""The observation field given as skrl's state (the critic's input), where the task has one."""


class SkrlVecEnv(Wrapper):
    """``env`` (a :class:`VectorEnv`) for skrl: ``step(actions) -> (observations, rewards, terminated, truncated,
    info)``, torch tensors on the env's device; nothing goes through the host.

    - ``observation_space``: the ``Box`` of the env's ``proprio``; ``state_space``: the ``Box`` of its ``critic``
      group where the task file has one (:meth:`state` gives it), else None. ``action_space``: the action bounds'
      ``Box`` (actions outside are clipped by the env).
    - Observations (and the state) are new tensors every step (one device copy each: skrl keeps a step's
      observations until after the next step, which overwrites the env's buffers); rewards, terminated and
      truncated are ``[N, 1]`` (skrl's shape), copies likewise.
    - Autoreset is the env's own, next-step (:class:`GymVectorEnv`): the step that ends an episode returns its final
      observation; the next step resets that env, ignores its action, and returns the new episode's first frame with
      reward 0, terminated and truncated false. skrl's agents thus see each episode's end as the env's (their
      time-limit bootstrapping reads ``truncated``) followed by one transition whose action has no effect.
    - ``reset()``: the first call resets every env; later calls (skrl's trainers call it when they start) return
      the current observation without resetting, so that a training continues the episodes under way.
    - ``info``: the env's ``info`` (``active``, ``executed_action``, ... as :class:`GymVectorEnv`), views.
    """

    def __init__(self, env):
        gym = GymVectorEnv(env)
        super().__init__(gym)
        self.gym = gym
        """The gymnasium view of the same env (zero-copy tensors)."""
        self.env = env
        self._device = torch.device(gym.device)
        spaces = gym.single_observation_space.spaces
        self._observation_space = spaces[POLICY_FIELD]
        self._state_space = spaces.get(STATE_FIELD)
        self._observation = None
        self._info = {}

    @property
    def observation_space(self) -> gymnasium.Space:
        """The ``Box`` of one env's ``proprio``."""
        return self._observation_space

    @property
    def state_space(self) -> gymnasium.Space | None:
        """The ``Box`` of one env's ``critic`` group, or None (the task has none)."""
        return self._state_space

    @property
    def action_space(self) -> gymnasium.Space:
        """The ``Box`` of one env's action."""
        return self.gym.single_action_space

    @property
    def num_envs(self) -> int:
        return self.env.num_envs

    def reset(self) -> tuple[torch.Tensor, Any]:
        """The first call: a fresh episode in every env; later calls: the current observation (no reset)."""
        if self._observation is None:
            observation, self._info = self.gym.reset()
            self._take(observation)
        return self._observation, self._info

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """One step of every env: ``(observations, rewards, terminated, truncated, info)``."""
        if self._observation is None:
            raise RuntimeError("SkrlVecEnv.step: call reset() first")
        with torch.no_grad():
            observation, reward, terminated, truncated, self._info = self.gym.step(actions)
        self._take(observation)
        outcome = (value.view(-1, 1).clone() for value in (reward, terminated, truncated))
        return (self._observation, *outcome, self._info)

    def state(self) -> torch.Tensor | None:
        """The current ``critic`` group (a new tensor each step), or None."""
        return self._state

    def render(self, *args, **kwargs) -> None:
        """Nothing is rendered (the env's cameras are observation fields)."""
        return None

    def close(self) -> None:
        """Nothing to release: the env stays usable."""

    def _take(self, observation: dict) -> None:
        self._observation = observation[POLICY_FIELD].clone()
        self._state = observation[STATE_FIELD].clone() if self._state_space is not None else None
