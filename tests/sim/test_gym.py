"""GymVectorEnv: gymnasium's vector interface over the env, torch views of its buffers (rl/gym.py)."""

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium", reason="gymnasium is not installed: pip install 'forge-gpu[rl]'")
torch = pytest.importorskip("torch")

from helpers.envtools import RL_MAX_STEPS as MAX_STEPS  # noqa: E402
from helpers.envtools import falling_actions as _actions  # noqa: E402
from helpers.envtools import rl_cartpole as _env  # noqa: E402

import forge_gpu.sim  # noqa: E402
from forge_gpu._src.sim.step_result import StepResult  # noqa: E402


def _host(result: StepResult) -> dict:
    return {k: np.array(v.numpy(), copy=True) for k, v in result.arrays().items()}


def _host_gym(obs, reward, terminated, truncated, info) -> dict:
    out = {f"obs/{k}": v.numpy().copy() for k, v in obs.items()}
    out.update(reward=reward.numpy().copy(), terminated=terminated.numpy().copy(), truncated=truncated.numpy().copy())
    out.update({f"info/{k}": v.numpy().copy() for k, v in info.items() if k not in ("params", "state")})
    out.update({f"state/{k}": v.numpy().copy() for k, v in info["state"].items()})
    out.update({f"params/{k}": v.numpy().copy() for k, v in info["params"].items()})
    return out


def test_spaces_match_the_data():
    env = forge_gpu.sim.GymVectorEnv(_env())
    assert env.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.NEXT_STEP
    assert isinstance(env, gymnasium.vector.VectorEnv)
    obs, _ = env.reset()
    assert set(obs) == set(env.single_observation_space.spaces) == set(env.env.spec["observation"])
    assert env.single_action_space.shape == (1,) and env.action_space.shape == (4, 1)
    for _ in range(MAX_STEPS + 3):
        host = {k: v.numpy() for k, v in obs.items()}
        for name, value in host.items():
            space = env.observation_space[name]
            assert value.shape == space.shape and value.dtype == space.dtype, name
        assert env.observation_space.contains(host)
        action = env.action_space.sample()
        assert env.action_space.contains(action)
        obs, reward, terminated, truncated, info = env.step(torch.from_numpy(action))
        assert reward.dtype == torch.float32 and reward.shape == (4,)
        assert terminated.dtype == truncated.dtype == torch.bool
        assert all(t.device == torch.device(env.device) for t in (*obs.values(), reward, terminated, truncated))


def test_rollout_equals_the_envs_own_bit_for_bit():
    """The same actions through the wrapper (torch) and into the env itself (numpy): every array equal."""
    actions = _actions(40)
    plain = _env()
    expected = [_host(plain.reset())] + [_host(plain.step(a)) for a in actions]
    env = forge_gpu.sim.GymVectorEnv(_env())
    obs, info = env.reset(seed=3)
    got = [_host_gym(obs, *(env._reward, env._terminated, env._truncated), info)]
    got += [_host_gym(*env.step(torch.from_numpy(a))) for a in actions]
    ends = 0
    for e, g in zip(expected, got, strict=True):
        assert set(e) == set(g)
        for key in e:
            np.testing.assert_array_equal(g[key], e[key], err_msg=key)
        ends += int(e["terminated"].sum() + e["truncated"].sum())
    assert ends > 4  # the rollout crossed episode ends


def test_episode_ends_follow_next_step_autoreset():
    """The step that ends an episode returns its final observation; the next resets that env (its action ignored):
    reward 0, terminated and truncated false, a new episode's first frame."""
    actions = _actions(40)
    env = forge_gpu.sim.GymVectorEnv(_env())
    obs, _ = env.reset()
    previous = None
    seen = {"terminated": 0, "truncated": 0}
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(torch.from_numpy(a))
        now = {k: v.clone() for k, v in obs.items()}
        now.update(reward=reward.clone(), terminated=terminated.clone(), truncated=truncated.clone())
        now["active"] = info["active"].clone()
        # truncation exactly at max_steps, never together with a reset row
        np.testing.assert_array_equal(truncated.numpy(), (now["step_id"] == MAX_STEPS).numpy() & ~terminated.numpy())
        if previous is not None:
            ended = previous["terminated"] | previous["truncated"]
            seen["terminated"] += int(previous["terminated"].sum())
            seen["truncated"] += int(previous["truncated"].sum())
            assert torch.equal(~now["active"], ended)
            assert torch.equal(now["reward"][ended], torch.zeros(int(ended.sum())))
            assert not now["terminated"][ended].any() and not now["truncated"][ended].any()
            assert torch.equal(now["step_id"][ended], torch.zeros(int(ended.sum()), dtype=torch.int32))
            assert torch.equal(now["episode_id"][ended], previous["episode_id"][ended] + 1)
            assert torch.equal(now["episode_id"][~ended], previous["episode_id"][~ended])
            # the final observation (the ended row of the previous step) is the episode's last frame
            assert torch.equal(previous["step_id"][ended] > 0, torch.ones(int(ended.sum()), dtype=torch.bool))
        previous = now
    assert seen["terminated"] > 0 and seen["truncated"] > 0


def test_final_observation_is_the_envs_terminal_frame():
    """An ended row's observation is the terminal state the env itself returned for that transition."""
    actions = _actions(30)
    plain = _env()
    plain.reset()
    env = forge_gpu.sim.GymVectorEnv(_env())
    env.reset()
    finals = 0
    for a in actions:
        mine = plain.step(a)
        obs, _, terminated, truncated, _ = env.step(torch.from_numpy(a))
        ended = (terminated | truncated).numpy()
        np.testing.assert_array_equal(obs["proprio"].numpy()[ended], mine.observation["proprio"].numpy()[ended])
        finals += int(ended.sum())
    assert finals > 0


def test_views_share_the_envs_memory_and_a_step_copies_nothing(monkeypatch):
    """CPU: every returned tensor is the env's buffer (same data pointer), the same tensor every step; the
    wrapper's own step work (around env.step) makes no copy, host or device (counted by patching every copy)."""
    base = _env()
    env = forge_gpu.sim.GymVectorEnv(base)
    obs, info = env.reset()
    out = env.step(torch.zeros(4, 1))
    buffers = base.result
    for name, view in out[0].items():
        assert view.data_ptr() == buffers.observation[name].ptr, name
    assert out[1].data_ptr() == buffers.reward.ptr
    assert out[2].data_ptr() == buffers.terminated.ptr and out[3].data_ptr() == buffers.truncated.ptr
    for name, view in out[4]["params"].items():
        assert view.data_ptr() == buffers.params[name].ptr
    assert out[4]["active"].data_ptr() == buffers.info["active"].ptr

    import warp as wp

    copies = []

    def counted(name, real):
        def wrapper(*args, **kwargs):
            copies.append(name)
            return real(*args, **kwargs)

        return wrapper

    for owner, names in (
        (torch.Tensor, ("clone", "copy_", "cpu", "numpy", "to", "item", "tolist", "contiguous")),
        (wp.array, ("numpy", "assign", "list")),
        (wp, ("copy", "to_torch", "from_torch", "clone")),
        (np, ("array", "copy")),
    ):
        for name in names:
            label = f"{getattr(owner, '__name__', owner)}.{name}"
            monkeypatch.setattr(owner, name, counted(label, getattr(owner, name)))
    action = torch.zeros(4, 1)
    stepped = []
    monkeypatch.setattr(base, "step", lambda a: stepped.append(a) or base.result)
    again = env.step(action)
    assert stepped == [action]  # the action reaches the env as given
    assert copies == []
    assert all(a is b for a, b in zip(again[0].values(), out[0].values(), strict=True))
    assert again[1] is out[1]


def test_bad_seed_and_options_are_refused():
    env = forge_gpu.sim.GymVectorEnv(_env())
    with pytest.raises(ValueError, match=r"reset\(seed=4\).*seed 3"):
        env.reset(seed=4)
    with pytest.raises(ValueError, match="no reset options"):
        env.reset(options={"x": 1})
    with pytest.raises(RuntimeError, match="reset"):  # nothing was reset by the refused calls
        env.step(torch.zeros(4, 1))
