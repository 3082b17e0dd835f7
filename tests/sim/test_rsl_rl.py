"""RslRlVecEnv: rsl_rl's PPO trains on the env; its exported policy runs as ``torchscript:PATH`` (sim/rl/rsl.py)."""

import numpy as np
import pytest

pytest.importorskip("rsl_rl", reason="rsl-rl-lib is not installed: pip install 'forge-gpu[rl]'")
torch = pytest.importorskip("torch")

import forge_gpu.sim  # noqa: E402
from forge_gpu._src.sim.rl.rsl import default_train_config, export_policy  # noqa: E402


def _env(n=16, **overrides):
    return forge_gpu.sim.make("cartpole", num_envs=n, device="cpu", seed=0, max_steps=20, **overrides)


def test_observations_dones_and_time_outs_follow_the_env():
    env = _env(4)
    vec = forge_gpu.sim.RslRlVecEnv(env)
    obs = vec.get_observations()
    assert set(obs.keys()) == {"policy"} and obs["policy"].shape == (4, env.spec["observation"]["proprio"]["shape"][0])
    assert obs["policy"].data_ptr() != env.observation["proprio"].ptr  # a copy rsl_rl may keep across the next step
    rng = np.random.default_rng(0)
    kept, ends = [], 0
    for _ in range(30):
        action = torch.from_numpy(rng.uniform(-1.5, 1.5, (4, 1)).astype(np.float32))
        obs, rewards, dones, extras = vec.step(action)
        kept.append(obs["policy"])
        np.testing.assert_array_equal(obs["policy"].numpy(), env.observation["proprio"].numpy())
        np.testing.assert_array_equal(rewards.numpy(), env.reward.numpy())
        np.testing.assert_array_equal(dones.numpy(), env.terminated.numpy() | env.truncated.numpy())
        np.testing.assert_array_equal(extras["time_outs"].numpy(), env.truncated.numpy())
        ends += int(dones.sum())
    assert ends > 0
    assert not all(torch.equal(kept[0], k) for k in kept[1:])  # earlier steps' tensors were not overwritten
    assert torch.equal(vec.episode_length_buf, torch.from_numpy(env.observation["step_id"].numpy()))
    with pytest.raises(ValueError, match="init_at_random_ep_len"):
        vec.episode_length_buf = torch.zeros(4, dtype=torch.int32)


def test_ppo_trains_two_iterations_and_the_export_collects(tmp_path):
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(0)
    vec = forge_gpu.sim.RslRlVecEnv(_env())
    runner = OnPolicyRunner(vec, default_train_config(num_steps_per_env=8), log_dir=None, device="cpu")
    before = [p.detach().clone() for p in runner.alg.get_policy().parameters()]
    runner.learn(num_learning_iterations=2)
    assert runner.current_learning_iteration == 1
    after = list(runner.alg.get_policy().parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))  # PPO updated the actor

    path = tmp_path / "policy.pt"
    export_policy(runner, path)
    env = _env(4)
    policy = forge_gpu.sim.load_policy(f"torchscript:{path}", env)
    env.reset()
    inference = runner.get_inference_policy(device="cpu")
    for _ in range(3):
        action = policy(env.observation)
        from tensordict import TensorDict

        proprio = torch.from_numpy(env.observation["proprio"].numpy())
        expected = inference(TensorDict({"policy": proprio}, batch_size=[4]))
        np.testing.assert_allclose(action.numpy(), expected.detach().numpy(), rtol=1e-6, atol=1e-6)
        env.step(action)


def test_torchscript_policy_refuses_a_missing_file(tmp_path):
    env = _env(2)
    with pytest.raises(ValueError, match=r"policy 'torchscript:.*nope.pt'.*no such file"):
        forge_gpu.sim.load_policy(f"torchscript:{tmp_path / 'nope.pt'}", env)
    with pytest.raises(ValueError, match="takes no argument 'x'"):
        forge_gpu.sim.load_policy(f"torchscript:{tmp_path / 'nope.pt'}", env, {"x": 1})
