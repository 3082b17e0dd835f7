"""The ant task: layout, reward and termination against NumPy, auto-reset, determinism, the gait, recording."""

import numpy as np
import pytest
from helpers.envtools import DEVICES, rollout

import forge_gpu
from forge_gpu.recording import collect


@pytest.mark.parametrize("device", DEVICES)
def test_shapes_observation_reward_and_termination_match_numpy(device):
    """Fields have the spec's shapes; proprio, reward and termination match a NumPy reference of the state."""
    env = forge_gpu.sim.make("ant", num_envs=3, device=device)
    policy = forge_gpu.sim.make_policy("random", env)
    p = env.config.params  # a task file's sections (configs/ant.toml)
    forward_weight, action_cost = (r["weight"] for r in p.rewards)  # action_cost < 0: a penalty
    min_height, min_upright = (t.get("height", t.get("min_up")) for t in p.terminations)
    start_height = p.model["position"][2]
    first = env.reset().numpy()
    assert env.spec["action_shape"] == [8] and env.task.scene.kind == "task_file" and env.task.spec.has_contacts
    for _ in range(3):
        r = env.step(policy(env.observation)).numpy()
        obs = r.observation
        for name, desc in env.spec["observation"].items():
            assert obs[name].shape == (3, *desc["shape"]) and obs[name].dtype == np.dtype(desc["dtype"])
        assert r.info["executed_action"].shape == (3, 8) and r.reward.dtype == np.float32
        q, qd = env.joint_q.numpy(), env.joint_qd.numpy()
        want = np.concatenate([q[:, 2:7], qd[:, :6], q[:, 7:], qd[:, 6:]], axis=1)
        np.testing.assert_array_equal(obs["proprio"], want)
        a = r.info["executed_action"]
        np.testing.assert_allclose(r.reward, forward_weight * qd[:, 0] + action_cost * (a * a).sum(1), rtol=1e-5)
        up_z = 1.0 - 2.0 * (q[:, 3] ** 2 + q[:, 4] ** 2)
        np.testing.assert_array_equal(r.terminated, (q[:, 2] < min_height) | (up_z < min_upright))
    z0 = first.observation["proprio"][:, 0]
    np.testing.assert_allclose(z0, start_height, rtol=1e-6)
    np.testing.assert_allclose(first.observation["proprio"][:, 1:5], [[0, 0, 0, 1]] * 3, atol=1e-6)
    standing = np.array([0, 1, 0, -1, 0, -1, 0, 1], np.float32)
    assert (np.abs(first.observation["proprio"][:, 11:19] - standing) <= p.reset["joint_position"] + 1e-6).all()


def test_low_torso_terminates_and_auto_resets():
    """A torso below min_height ends the episode; the next row is a reset frame at the start pose."""
    env = forge_gpu.sim.make("ant", num_envs=2, device="cpu", terminations=[{"term": "root_below", "height": 0.7}])
    frames = rollout(env, forge_gpu.sim.make_policy("random", env), 2)
    end, after = frames[1], frames[2]
    assert end.terminated.all() and not end.truncated.any() and end.info["active"].all()
    assert (end.observation["proprio"][:, 0] < 0.7).all()
    assert not after.info["active"].any() and (after.observation["step_id"] == 0).all()
    assert (after.observation["episode_id"] == 1).all() and (after.reward == 0).all()
    np.testing.assert_allclose(after.observation["proprio"][:, 0], env.config.params.model["position"][2], rtol=1e-6)
    np.testing.assert_array_equal(after.info["executed_action"], 0.0)


def test_determinism_and_independence_from_env_count():
    """The same seed gives identical rollouts; env i's episodes do not depend on num_envs (2 vs 4)."""

    def run(n, seed):
        env = forge_gpu.sim.make("ant", num_envs=n, device="cpu", seed=seed, max_steps=8)
        return rollout(env, forge_gpu.sim.make_policy("random", env), 12)

    a, b, wide = run(2, 3), run(2, 3), run(4, 3)
    for fa, fb, fw in zip(a, b, wide, strict=True):
        for name, value in fa.observation.items():
            np.testing.assert_array_equal(value, fb.observation[name])
            np.testing.assert_array_equal(value, fw.observation[name][:2])
        np.testing.assert_array_equal(fa.reward, fw.reward[:2])
    assert (a[-1].observation["episode_id"] == 1).all(), "the run should cross an auto-reset"
    assert not np.array_equal(wide[5].observation["proprio"][0], wide[5].observation["proprio"][1])


def mean_forward_velocity(policy_name, steps=150):
    """Mean torso x velocity [m/s] over the active rows of a rollout of 4 envs."""
    env = forge_gpu.sim.make("ant", num_envs=4, device="cpu", max_steps=steps)
    frames = rollout(env, forge_gpu.sim.make_policy(policy_name, env), steps)
    return np.concatenate([f.observation["proprio"][f.info["active"], 5] for f in frames]).mean()


def test_expert_gait_walks_forward():
    """The scripted trot moves the torso along +x clearly faster than random torques."""
    expert, random = mean_forward_velocity("expert"), mean_forward_velocity("random")
    assert expert > 0.3, expert
    assert expert > random + 0.2, (expert, random)


def test_collected_run_reads_back(tmp_path):
    """Expert episodes collected to disk read back whole, with the ant's fields and shapes."""
    env = forge_gpu.sim.make("ant", num_envs=2, device="cpu", max_steps=10)
    summary = collect(env, forge_gpu.sim.make_policy("expert", env), str(tmp_path / "run"), episodes=4)
    episodes = list(forge_gpu.reading.read_episodes(tmp_path / "run"))
    assert summary.status == "closed" and len(episodes) >= 4
    for ep in episodes:
        assert ep.steps == 10 and ep.truncated[-1] and not ep.terminated.any()
        assert ep.obs["proprio"].shape == (10, 27) and ep.action.shape == (10, 8)
        np.testing.assert_array_equal(ep.obs["proprio"][1:], ep.next["proprio"][:-1])
