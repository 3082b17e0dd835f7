"""``RslRlVecEnv``: a :class:`VectorEnv` as rsl_rl's ``VecEnv`` (rsl-rl-lib 5.x: observations in a TensorDict of
groups), so that rsl_rl's ``OnPolicyRunner`` trains on it."""

from __future__ import annotations

import warnings

from forge_gpu._src.rl.gym import INSTALL, GymVectorEnv, network_fields

try:
    import torch
    from rsl_rl.env import VecEnv
    from tensordict import TensorDict
    from torch import nn
except ImportError as e:  # said once, with the one command that fixes it
    raise ImportError(f"forge_gpu.sim.RslRlVecEnv needs rsl-rl-lib>=5 ({e}): {INSTALL}") from e

POLICY_GROUP = "policy"
"""The TensorDict key of the env's ``proprio`` (the task's policy observation group)."""

BOOKKEEPING = ("env_id", "episode_id", "step_id", "time", "proprio")
"""Observation fields that are no group of their own (``proprio`` is :data:`POLICY_GROUP`)."""


def observation_groups(spec: dict) -> list[str]:
    """The env's observation fields rsl_rl gets as groups beside ``policy``: the float32 vectors (``[N, D]``) that
    are neither bookkeeping nor an expert's label (a task file's ``critic`` group, an object's pose, ...)."""
    return [name for name in network_fields(spec) if name not in BOOKKEEPING]


class RslRlVecEnv(VecEnv):
    """``env`` (a :class:`VectorEnv`) for rsl_rl: ``step(actions) -> (observations, rewards, dones, extras)``.

    - Observations: a ``TensorDict`` of groups, ``policy`` (the env's ``proprio``) and every other float32 vector
      field under its name (:func:`observation_groups`: a task file's ``critic`` group among them); the runner's
      ``obs_groups`` picks what the actor and the critic read. Each step's groups are new tensors on the env's
      device (one device copy per group: rsl_rl keeps a step's observations until after the next step, which
      overwrites the env's buffers); rewards and dones likewise; nothing goes through the host.
    - ``dones`` = terminated or truncated, ``extras["time_outs"]`` = truncated (rsl_rl bootstraps those).
    - Autoreset is the env's (next-step, :class:`GymVectorEnv`): after a done, the env's next step resets that env
      and ignores its action; that row comes back with reward 0, not done (the runner's episode statistics count
      it as the first step of the next episode, whose length reads one more than the env's).
    - ``episode_length_buf`` is the env's ``step_id``; it cannot be written (rsl_rl's ``init_at_random_ep_len``):
      the env's episodes start at step 0, their draws keyed by (seed, env, episode).
    - ``recorder``: a ``forge_gpu.recording.RolloutRecorder`` of the same env records the training's rollouts as a
      run (:class:`GymVectorEnv`), each episode with the policy version that chose its first action
      (:func:`track_policy_version` counts the runner's updates); :meth:`close` closes the run.
    """

    def __init__(self, env, *, recorder=None):
        self.gym = GymVectorEnv(env, recorder=recorder)
        """The gymnasium view of the same env (zero-copy tensors)."""
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = int(env.spec["action_shape"][0])
        self.max_episode_length = int(env.config.max_steps)
        self.device = self.gym.device
        self.cfg = env.config.to_dict()
        self.groups = observation_groups(env.spec)
        """The observation fields given as groups beside ``policy``."""
        observation, _ = self.gym.reset()
        self._observation = observation
        self._step_id = observation["step_id"]

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """The env's ``step_id`` (a view, int32 ``[N]``): steps since each episode's first frame."""
        return self._step_id

    @episode_length_buf.setter
    def episode_length_buf(self, value) -> None:
        raise ValueError(
            "episode_length_buf cannot be set (rsl_rl's init_at_random_ep_len): the env's episodes start at step 0, "
            "their draws keyed by (seed, env, episode); train with init_at_random_ep_len=False"
        )

    def get_observations(self) -> TensorDict:
        """The current observation groups (new tensors)."""
        observation = self._observation
        groups = {POLICY_GROUP: observation["proprio"].clone()}
        groups.update({name: observation[name].clone() for name in self.groups})
        return TensorDict(groups, batch_size=[self.num_envs], device=self.device)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """One step of every env: ``(observations, rewards, dones, extras)`` (``extras["time_outs"]``)."""
        _, reward, terminated, truncated, _ = self.gym.step(actions)
        dones = terminated | truncated
        return self.get_observations(), reward.clone(), dones, {"time_outs": truncated.clone(), "log": {}}

    @property
    def recorder(self):
        """The ``RolloutRecorder`` of the training's rollouts, or None."""
        return self.gym.recorder

    def close(self, error: BaseException | None = None) -> None:
        """Close the recording, if any (``error``: the training failed with it; the run is closed as failed)."""
        self.gym.close(error=error)

    def __enter__(self) -> RslRlVecEnv:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(error=value)


def track_policy_version(runner) -> None:
    """Make each PPO update of ``runner`` (an rsl_rl ``OnPolicyRunner`` on a :class:`RslRlVecEnv` with a
    recorder) advance the recorder's ``policy_version`` by one: an episode then records how many updates the
    policy that chose its first action had had (0: the initial policy). ValueError (one line) for a runner whose
    env records nothing."""
    recorder = getattr(runner.env, "recorder", None)
    if recorder is None:
        raise ValueError("track_policy_version: the runner's env records nothing (RslRlVecEnv(env, recorder=...))")
    update = runner.alg.update

    def counted(*args, **kwargs):
        out = update(*args, **kwargs)
        recorder.policy_version += 1
        return out

    runner.alg.update = counted


def default_train_config(*, hidden: tuple[int, ...] = (64, 64), num_steps_per_env: int = 24, groups=()) -> dict:
    """An rsl_rl ``OnPolicyRunner`` config of PPO with MLP actor and critic on ``policy`` (and ``groups``, e.g.
    ``["critic"]``, for the critic): a starting point for small tasks."""
    return {
        "num_steps_per_env": num_steps_per_env,
        "save_interval": 10**9,
        "check_for_nan": False,  # a host sync per step; the env flags non-finite actions itself
        "obs_groups": {"actor": [POLICY_GROUP], "critic": [POLICY_GROUP, *groups]},
        "actor": {
            "class_name": "rsl_rl.models.MLPModel",
            "hidden_dims": list(hidden),
            "activation": "elu",
            "obs_normalization": True,
            "distribution_cfg": {"class_name": "rsl_rl.modules.GaussianDistribution", "init_std": 1.0},
        },
        "critic": {
            "class_name": "rsl_rl.models.MLPModel",
            "hidden_dims": list(hidden),
            "activation": "elu",
            "obs_normalization": True,
        },
        "algorithm": {
            "class_name": "rsl_rl.algorithms.PPO",
            "num_learning_epochs": 5,
            "num_mini_batches": 4,
            "learning_rate": 1e-3,
            "schedule": "adaptive",
            "gamma": 0.99,
            "lam": 0.95,
            "entropy_coef": 0.005,
            "desired_kl": 0.01,
            "max_grad_norm": 1.0,
        },
    }


FIELD_OF_GROUP = {POLICY_GROUP: "proprio"}
"""The observation field of a group whose name is not the field's own."""


class DictPolicy(nn.Module):
    """A deterministic policy on the env's observation dict: ``forward(observation: Dict[str, Tensor]) -> [N, A]``,
    the ``fields`` concatenated (in order) into ``model`` (rsl_rl's exported actor: its observation normalizer,
    its MLP, its distribution's mean). What ``pt2:PATH`` and ``torchscript:PATH`` load
    (``forge_gpu.sim.load_policy``)."""

    def __init__(self, model: nn.Module, fields: list[str]):
        super().__init__()
        self.model = model
        self.fields = list(fields)

    def forward(self, observation: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = [observation[name] for name in self.fields]
        return self.model(torch.cat(parts, dim=-1)).contiguous()


EXPORT_FORMATS = ("pt2", "torchscript")
"""``export_policy``'s formats: ``pt2`` (``torch.export``, the default) and ``torchscript`` (deprecated by torch)."""


def export_policy(runner, path, *, format: str = "pt2") -> None:
    """Save ``runner``'s (an rsl_rl ``OnPolicyRunner``'s) actor as a :class:`DictPolicy` at ``path``, on the CPU:
    ``forge-gpu collect TASK --policy pt2:PATH`` (or ``torchscript:PATH``) and ``forge-gpu evaluate`` run it (moved
    to the env's device there).

    ``format``: ``"pt2"`` (default) writes a ``torch.export`` ``ExportedProgram`` (``torch.export.save``; load it
    with ``torch.export.load(path).module()``) whose one argument is the dict of the observation fields the actor
    reads, with a dynamic batch dimension (any ``N``); ``"torchscript"`` writes a TorchScript module (``torch.jit``,
    which torch deprecates). ValueError (one line) for another format, before anything is written."""
    if format not in EXPORT_FORMATS:
        raise ValueError(f"export_policy(format={format!r}): expected one of {', '.join(EXPORT_FORMATS)}")
    actor = runner.alg.get_policy()
    fields = [FIELD_OF_GROUP.get(group, group) for group in actor.obs_groups]
    module = DictPolicy(actor.as_jit(), fields).to("cpu").eval()
    if format == "torchscript":
        with warnings.catch_warnings():  # torch 2.10+ marks TorchScript deprecated; it is what loads without the code
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.script(module).save(str(path))
        return
    observations = runner.env.get_observations()
    groups = zip(fields, actor.obs_groups, strict=True)
    example = {name: torch.zeros(2, observations[group].shape[-1]) for name, group in groups}  # 1 would specialize
    batch = torch.export.Dim("batch")
    with torch.no_grad():
        program = torch.export.export(module, (example,), dynamic_shapes=({name: {0: batch} for name in fields},))
    torch.export.save(program, str(path))
