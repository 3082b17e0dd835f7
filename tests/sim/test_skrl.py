"""SkrlVecEnv: skrl's environment wrapper over the env, torch tensors on its device, and skrl's PPO on it
(rl/skrl.py)."""

import numpy as np
import pytest

pytest.importorskip("skrl", reason="skrl is not installed: pip install 'forge-gpu[skrl]'")
torch = pytest.importorskip("torch")

from helpers.envtools import falling_actions as _actions  # noqa: E402
from helpers.envtools import rl_cartpole as _env  # noqa: E402

import forge_gpu.sim  # noqa: E402


def test_spaces_match_the_data_and_tensors_stay_on_the_device():
    from skrl.envs.wrappers.torch import Wrapper

    wrapped = forge_gpu.sim.SkrlVecEnv(_env())
    assert isinstance(wrapped, Wrapper) and wrapped.num_envs == 4
    assert wrapped.device == torch.device("cpu")
    proprio = wrapped.env.spec["observation"]["proprio"]
    assert wrapped.observation_space.shape == tuple(proprio["shape"]) and wrapped.state_space is None
    assert wrapped.action_space.shape == (1,)
    obs, _ = wrapped.reset()
    assert obs.shape == (4, *wrapped.observation_space.shape) and obs.dtype == torch.float32
    obs, reward, terminated, truncated, _ = wrapped.step(torch.zeros(4, 1))
    assert reward.shape == terminated.shape == truncated.shape == (4, 1)
    assert terminated.dtype == truncated.dtype == torch.bool
    # new tensors: the next step does not overwrite what skrl keeps
    kept = obs.clone()
    wrapped.step(torch.ones(4, 1))
    assert torch.equal(obs, kept) and obs.data_ptr() != wrapped.env.observation["proprio"].ptr


def test_rollout_equals_the_envs_own_bit_for_bit():
    actions = _actions(40)
    plain = _env()
    plain.reset()
    wrapped = forge_gpu.sim.SkrlVecEnv(_env())
    obs, _ = wrapped.reset()
    np.testing.assert_array_equal(obs.numpy(), plain.observation["proprio"].numpy())
    ends = {"terminated": 0, "truncated": 0}
    for a in actions:
        mine = plain.step(a)
        obs, reward, terminated, truncated, info = wrapped.step(torch.from_numpy(a))
        np.testing.assert_array_equal(obs.numpy(), mine.observation["proprio"].numpy())
        np.testing.assert_array_equal(reward.numpy()[:, 0], mine.reward.numpy())
        np.testing.assert_array_equal(terminated.numpy()[:, 0], mine.terminated.numpy())
        np.testing.assert_array_equal(truncated.numpy()[:, 0], mine.truncated.numpy())
        np.testing.assert_array_equal(info["active"].numpy(), mine.info["active"].numpy())
        ends["terminated"] += int(terminated.sum())
        ends["truncated"] += int(truncated.sum())
    assert ends["terminated"] > 0 and ends["truncated"] > 0


def test_a_second_reset_continues_the_episodes():
    wrapped = forge_gpu.sim.SkrlVecEnv(_env())
    with pytest.raises(RuntimeError, match="reset"):
        wrapped.step(torch.zeros(4, 1))
    wrapped.reset()
    for a in _actions(3):
        obs, *_ = wrapped.step(torch.from_numpy(a))
    again, _ = wrapped.reset()
    assert torch.equal(again, obs)
    assert (wrapped.env.observation["step_id"].numpy() > 0).any()


def test_skrl_ppo_trains_a_few_steps_on_cartpole():
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.memories.torch import RandomMemory
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils.model_instantiators.torch import deterministic_model, gaussian_model

    torch.manual_seed(0)
    env = forge_gpu.sim.SkrlVecEnv(_env(8, max_steps=50))
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "elu"}]
    spaces = {"observation_space": env.observation_space, "action_space": env.action_space, "device": env.device}
    models = {
        "policy": gaussian_model(**spaces, network=net, output="ACTIONS"),
        "value": deterministic_model(**spaces, network=net, output="ONE"),
    }
    cfg = PPO_CFG(rollouts=16, learning_epochs=2, mini_batches=2)
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    agent = PPO(
        models=models,
        memory=RandomMemory(memory_size=16, num_envs=env.num_envs, device=env.device),
        cfg=cfg,
        **spaces,
    )
    probe = {"observations": torch.linspace(-1, 1, 2 * env.observation_space.shape[0]).reshape(2, -1)}
    before = models["value"].act(probe, role="value")[0].detach().clone()  # also makes skrl's lazy layers
    settings = {"timesteps": 48, "headless": True, "disable_progressbar": True, "close_environment_at_exit": False}
    SequentialTrainer(env=env, agents=agent, cfg=settings).train()
    assert not torch.equal(models["value"].act(probe, role="value")[0], before)  # PPO updated the value model
    assert int(env.env.observation["episode_id"].numpy().max()) >= 1  # episodes ended and restarted meanwhile
