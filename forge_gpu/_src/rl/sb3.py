"""``Sb3VecEnv``: a :class:`VectorEnv` as Stable-Baselines3's ``VecEnv`` (numpy on the host, SB3's episode ends), so
that SB3's algorithms (``PPO("MlpPolicy", ...)``) train on it."""

from __future__ import annotations

import numpy as np

from forge_gpu._src.rl.gym import GymVectorEnv, network_fields

INSTALL_SB3 = "pip install 'forge-gpu[sb3]'"
"""What installs Stable-Baselines3."""

try:
    import gymnasium
    import torch
    from stable_baselines3.common.vec_env import VecEnv
except ImportError as e:  # said once, with the one command that fixes it
    raise ImportError(f"forge_gpu.sim.Sb3VecEnv needs stable-baselines3>=2.4 ({e}): {INSTALL_SB3}") from e

POLICY_FIELD = "proprio"
"""The observation field SB3's policy reads by default (the task's policy observation group)."""


class Sb3VecEnv(VecEnv):
    """``env`` (a :class:`VectorEnv`) for Stable-Baselines3: ``step(actions) -> (obs, rewards, dones, infos)``,
    numpy arrays on the host.

    - Observations: with ``fields=None`` (default) a float32 ``Box`` ``[D]``, the env's ``proprio`` (SB3's
      ``"MlpPolicy"``); with ``fields`` (a list of float32 vector fields, ``network_fields``, e.g. ``["proprio",
      "critic"]``) a ``Dict`` of one ``Box`` per field (``"MultiInputPolicy"``). The bookkeeping fields (ids, step,
      time) are no input of a policy and are not given; ``Sb3VecEnv.env`` has them.
    - One host copy per step, which SB3 cannot do without (it takes numpy): the observation fields, rewards,
      terminated and truncated are put side by side in one float32 tensor on the env's device and copied to the
      host at once (on CUDA this waits for the step). The arrays returned are new every step (SB3 may keep them).
    - Episode ends: ``dones[i]`` = terminated or truncated; an ended env's ``infos[i]`` holds
      ``"terminal_observation"`` (its final observation), ``"TimeLimit.truncated"`` (SB3 bootstraps those) and
      ``"episode"`` (``{"r": return, "l": length}``, what SB3 logs as ``ep_rew_mean``, ``ep_len_mean``); the
      others' dicts are empty. ``infos`` is a list of ``N`` dicts (SB3's interface): making it is the one
      per-env Python work of a step (an empty dict each, keys for the ended envs only); everything else is
      whole-array.
    - Autoreset is the env's own, next-step: the env makes the new episode's first frame at its *next* step, which
      resets that env and ignores its action. SB3 expects that frame in the ended row of ``obs`` at once; it does
      not exist yet, so the ended row of ``obs`` is the final observation (as ``infos[i]["terminal_observation"]``),
      and the next step returns the new episode's first frame with reward 0, not done. SB3 thus sees each episode
      end as the env's episode end (dones, bootstrapping, returns and lengths are exact) followed by one transition
      whose action has no effect (reward 0), counted in the next episode's first step: one step per episode more
      than a same-step reset would take, as with rsl_rl (:class:`RslRlVecEnv`).
    - ``seed(s)``: the env's draws are keyed by the seed it was made with (``make(..., seed=)``); ``seed(s)`` (what
      ``PPO(seed=s)`` calls) accepts that seed or None and refuses any other in one line.
    - ``actions``: a numpy array ``[N, A]`` (or what reshapes to it, as SB3 gives); clipped to the action bounds by
      the env.
    """

    def __init__(self, env, *, fields: list[str] | None = None):
        self.gym = GymVectorEnv(env)
        """The gymnasium view of the same env (zero-copy tensors on the env's device)."""
        self.env = env
        self.device = self.gym.device
        spec = env.spec
        allowed = network_fields(spec)
        self.dict_observation = fields is not None
        """True: observations are a dict of ``fields``; False: the ``proprio`` array."""
        if fields is None:
            fields = [POLICY_FIELD]
        elif isinstance(fields, str) or not fields or len(set(fields)) != len(fields):
            raise ValueError(f"Sb3VecEnv(fields={fields!r}): expected a list of distinct field names, one or more")
        for name in fields:
            if name not in allowed:
                raise ValueError(
                    f"Sb3VecEnv(fields=...): {name!r} is no float32 vector field of the env's observation; "
                    f"the fields a policy can take are {', '.join(allowed)}"
                )
        self.fields = list(fields)
        """The observation fields SB3 gets."""
        widths = [int(spec["observation"][name]["shape"][0]) for name in self.fields]
        self._bounds = np.cumsum([0, *widths]).tolist()
        self._width = self._bounds[-1]
        boxes = {name: self.gym.single_observation_space[name] for name in self.fields}
        space = gymnasium.spaces.Dict(boxes) if self.dict_observation else boxes[POLICY_FIELD]
        self.num_actions = int(spec["action_shape"][0])
        self._returns = np.zeros(env.num_envs, dtype=np.float64)
        self._actions = None
        super().__init__(env.num_envs, space, self.gym.single_action_space)

    # -- the steps ---------------------------------------------------------------------------------

    def reset(self):
        """A fresh episode in every env: the observation (numpy)."""
        observation, _ = self.gym.reset()
        self._returns[:] = 0.0
        self.reset_infos = [{} for _ in range(self.num_envs)]
        obs, _ = self._host(observation)
        return obs

    def step_async(self, actions) -> None:
        """Take ``actions`` (numpy ``[N, A]``) for :meth:`step_wait`; a bad shape or dtype is refused in one line."""
        actions = np.asarray(actions)
        if actions.size != self.num_envs * self.num_actions or not np.issubdtype(actions.dtype, np.number):
            raise ValueError(
                f"Sb3VecEnv.step: actions have dtype {actions.dtype} and shape {actions.shape}; expected numbers of "
                f"shape ({self.num_envs}, {self.num_actions})"
            )
        self._actions = np.ascontiguousarray(actions.reshape(self.num_envs, self.num_actions), dtype=np.float32)

    def step_wait(self):
        """One step of every env with the actions of :meth:`step_async`: ``(obs, rewards, dones, infos)``."""
        if self._actions is None:
            raise RuntimeError("Sb3VecEnv.step_wait: no actions (call step_async first)")
        actions, self._actions = self._actions, None
        observation, *outcome, _ = self.gym.step(actions)
        obs, (reward, terminated, truncated) = self._host(observation, outcome)
        dones = terminated | truncated
        self._returns += reward
        infos = [{} for _ in range(self.num_envs)]
        ended = np.flatnonzero(dones)
        if ended.size:
            returns = self._returns[ended]
            lengths = self._step_ids[ended]
            for k, i in enumerate(ended.tolist()):  # the ended envs only
                infos[i] = {
                    "terminal_observation": self._row(obs, i),
                    "TimeLimit.truncated": bool(truncated[i]),
                    "episode": {"r": float(returns[k]), "l": int(lengths[k])},
                }
            self._returns[ended] = 0.0
        return obs, reward, dones, infos

    def _host(self, observation: dict, outcome=None):
        """The observation's fields and step ids (and ``outcome``: rewards, terminated, truncated) of the gymnasium
        view's tensors, side by side in one float32 tensor copied to the host at once."""
        parts = [observation[name] for name in self.fields]
        parts.append(observation["step_id"].unsqueeze(1))
        if outcome is not None:
            parts += [value.unsqueeze(1) for value in outcome]
        host = torch.cat([p.to(torch.float32) for p in parts], dim=1).cpu().numpy()  # new memory every step
        w = self._width
        self._step_ids = host[:, w].astype(np.int64)
        if self.dict_observation:
            spans = zip(self.fields, self._bounds[:-1], self._bounds[1:], strict=True)
            obs = {name: host[:, a:b] for name, a, b in spans}
        else:
            obs = host[:, :w]
        if outcome is None:
            return obs, None
        return obs, (host[:, w + 1].copy(), host[:, w + 2] > 0.5, host[:, w + 3] > 0.5)

    def _row(self, obs, i: int):
        if self.dict_observation:
            return {name: value[i].copy() for name, value in obs.items()}
        return obs[i].copy()

    # -- SB3's VecEnv interface beyond stepping ----------------------------------------------------

    def seed(self, seed: int | None = None):
        """SB3's seeding (``PPO(seed=...)`` calls it): ``seed`` must be None or the env's own seed, by which its
        draws are keyed; another is refused (make the env with ``make(..., seed=...)``)."""
        integral = isinstance(seed, int | np.integer) and not isinstance(seed, bool)
        if seed is not None and (not integral or seed != self.env.seed):
            raise ValueError(
                f"Sb3VecEnv.seed({seed!r}): this env's draws are keyed by its seed {self.env.seed} "
                "(make(..., seed=)); make the env with the seed you give SB3"
            )
        return [self.env.seed] * self.num_envs

    def close(self) -> None:
        """Nothing to release: the env stays usable."""

    def get_attr(self, attr_name: str, indices=None) -> list:
        """``attr_name`` of the env (one object for every index); ``render_mode`` is None."""
        value = None if attr_name == "render_mode" else getattr(self.env, attr_name)
        return [value] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value, indices=None) -> None:
        raise ValueError(
            f"Sb3VecEnv.set_attr({attr_name!r}): the envs are worlds of one batched env, set on Sb3VecEnv.env itself"
        )

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list:
        raise ValueError(
            f"Sb3VecEnv.env_method({method_name!r}): the envs are worlds of one batched env; call Sb3VecEnv.env's "
            "methods on it directly"
        )

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        """No gymnasium wrapper is around any env."""
        return [False] * len(self._indices(indices))

    def _indices(self, indices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)
