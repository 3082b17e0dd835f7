"""Sb3VecEnv: Stable-Baselines3's VecEnv over the env, its episode ends, and SB3's PPO on it (rl/sb3.py)."""

import numpy as np
import pytest

pytest.importorskip("stable_baselines3", reason="stable-baselines3 is not installed: pip install 'forge-gpu[sb3]'")

from helpers.envtools import RL_MAX_STEPS as MAX_STEPS
from helpers.envtools import falling_actions as _actions
from helpers.envtools import rl_cartpole as _env

import forge_gpu.sim


def test_spaces_match_the_data():
    from stable_baselines3.common.vec_env import VecEnv

    vec = forge_gpu.sim.Sb3VecEnv(_env())
    assert isinstance(vec, VecEnv) and vec.num_envs == 4
    proprio = vec.env.spec["observation"]["proprio"]
    assert vec.observation_space.shape == tuple(proprio["shape"]) and vec.observation_space.dtype == np.float32
    assert vec.action_space.shape == (1,)
    np.testing.assert_array_equal(vec.action_space.low, vec.env.spec["action_low"])
    obs = vec.reset()
    for a in _actions(MAX_STEPS + 3):
        assert obs.shape == (4, *vec.observation_space.shape) and obs.dtype == np.float32
        assert all(vec.observation_space.contains(row) for row in obs)
        obs, rewards, dones, infos = vec.step(a)
        assert rewards.shape == (4,) and rewards.dtype == np.float32 and dones.dtype == bool
        assert isinstance(infos, list) and len(infos) == 4

    both = forge_gpu.sim.Sb3VecEnv(_env(), fields=["proprio"])  # a Dict, for "MultiInputPolicy"
    assert set(both.observation_space.spaces) == {"proprio"}
    obs = both.reset()
    for name, space in both.observation_space.spaces.items():
        assert obs[name].shape == (4, *space.shape) and obs[name].dtype == space.dtype
        np.testing.assert_array_equal(obs[name], both.env.observation[name].numpy())


def test_rollout_equals_the_envs_own_bit_for_bit():
    """The same actions through the wrapper and into the env itself: observations and rewards equal bit for bit,
    dones where the env's episodes end, terminal_observation its final frame."""
    actions = _actions(40)
    plain = _env()
    plain.reset()
    vec = forge_gpu.sim.Sb3VecEnv(_env(), fields=["proprio"])
    obs = vec.reset()
    np.testing.assert_array_equal(obs["proprio"], plain.observation["proprio"].numpy())
    counts = {"terminated": 0, "truncated": 0}
    for a in actions:
        mine = plain.step(a)
        obs, rewards, dones, infos = vec.step(a)
        terminated, truncated = mine.terminated.numpy(), mine.truncated.numpy()
        np.testing.assert_array_equal(obs["proprio"], mine.observation["proprio"].numpy())
        np.testing.assert_array_equal(rewards, mine.reward.numpy())
        np.testing.assert_array_equal(dones, terminated | truncated)
        for i in range(4):
            if not dones[i]:
                assert infos[i] == {}
                continue
            final = infos[i]["terminal_observation"]
            np.testing.assert_array_equal(final["proprio"], mine.observation["proprio"].numpy()[i])
            assert infos[i]["TimeLimit.truncated"] == bool(truncated[i])
            assert infos[i]["episode"]["l"] == int(mine.observation["step_id"].numpy()[i])
        counts["terminated"] += int(terminated.sum())
        counts["truncated"] += int(truncated.sum())
    assert counts["terminated"] > 0 and counts["truncated"] > 0  # the rollout crossed both kinds of ends


def test_episode_returns_are_the_envs():
    """``infos[i]["episode"]["r"]``: the sum of the env's rewards over the episode that ended."""
    actions = _actions(60)
    plain = _env()
    plain.reset()
    vec = forge_gpu.sim.Sb3VecEnv(_env())
    vec.reset()
    running, checked = np.zeros(4), 0
    for a in actions:
        mine = plain.step(a)
        running += mine.reward.numpy()
        _, _, dones, infos = vec.step(a)
        for i in np.flatnonzero(dones):
            assert infos[i]["episode"]["r"] == pytest.approx(running[i], rel=1e-6)
            running[i] = 0.0
            checked += 1
        assert all(info == {} for i, info in enumerate(infos) if not dones[i])
    assert checked > 4


def test_arrays_returned_are_not_overwritten_by_the_next_step():
    vec = forge_gpu.sim.Sb3VecEnv(_env())
    first = vec.reset()
    kept = first.copy()
    obs, rewards, _, _ = vec.step(_actions(1)[0])
    kept_rewards = rewards.copy()
    vec.step(_actions(2)[1])
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(rewards, kept_rewards)
    assert not np.array_equal(first, obs)


def test_bad_input_is_refused_in_one_line():
    env = _env()
    with pytest.raises(ValueError, match=r"'step_id' is no float32 vector field.*proprio"):
        forge_gpu.sim.Sb3VecEnv(env, fields=["step_id"])
    with pytest.raises(ValueError, match="distinct field names"):
        forge_gpu.sim.Sb3VecEnv(env, fields=["proprio", "proprio"])
    vec = forge_gpu.sim.Sb3VecEnv(env)
    with pytest.raises(ValueError, match=r"seed\(4\).*seed 3"):
        vec.seed(4)
    assert vec.seed(3) == [3] * 4
    vec.reset()
    with pytest.raises(ValueError, match=r"actions have dtype float32 and shape \(4, 2\); expected .* \(4, 1\)"):
        vec.step(np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="set_attr"):
        vec.set_attr("x", 1)


def test_sb3_ppo_learns_a_few_hundred_steps_on_cartpole():
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import Logger

    torch.manual_seed(0)
    vec = forge_gpu.sim.Sb3VecEnv(_env(8, max_steps=50))
    model = PPO("MlpPolicy", vec, n_steps=16, batch_size=32, n_epochs=2, seed=3, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default logger makes a folder in /tmp
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=8 * 16 * 3)
    assert model.num_timesteps == 8 * 16 * 3
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))
    assert len(model.ep_info_buffer) > 0  # the episodes that ended reached SB3's statistics
    assert all(info["l"] >= 1 for info in model.ep_info_buffer)
    action, _ = model.predict(vec.reset(), deterministic=True)
    assert action.shape == (8, 1)
