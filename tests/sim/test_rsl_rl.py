"""RslRlVecEnv: rsl_rl's PPO trains on the env; its exported policy runs as ``pt2:PATH`` (torch.export, the default)
and ``torchscript:PATH`` (rl/rsl.py, sim/policies.py)."""

import json

import numpy as np
import pytest

pytest.importorskip("rsl_rl", reason="rsl-rl-lib is not installed: pip install 'forge-gpu[rl]'")
torch = pytest.importorskip("torch")

import forge_gpu.sim  # noqa: E402
from forge_gpu._src.rl.rsl import default_train_config, export_policy  # noqa: E402


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
    export_policy(runner, path, format="torchscript")
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


@pytest.fixture(scope="module")
def trained():
    """A runner after one PPO iteration (its observation normalizer has statistics)."""
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(1)
    vec = forge_gpu.sim.RslRlVecEnv(_env(8))
    runner = OnPolicyRunner(vec, default_train_config(num_steps_per_env=4), log_dir=None, device="cpu")
    runner.learn(num_learning_iterations=1)
    return runner


def _inference(runner, proprio: torch.Tensor) -> np.ndarray:
    from tensordict import TensorDict

    policy = runner.get_inference_policy(device="cpu")
    return policy(TensorDict({"policy": proprio}, batch_size=[proprio.shape[0]])).detach().numpy()


def test_pt2_export_equals_rsl_rls_inference_at_two_batch_sizes(trained, tmp_path):
    path = tmp_path / "policy.pt2"
    export_policy(trained, path)  # pt2 is the default
    program = torch.export.load(str(path))
    module = program.module()
    dim = trained.env.get_observations()["policy"].shape[-1]
    rng = np.random.default_rng(2)
    for n in (3, 17):  # neither is the example batch the program was exported with
        proprio = torch.from_numpy(rng.normal(size=(n, dim)).astype(np.float32))
        got = module({"proprio": proprio})
        assert got.shape == (n, 1) and got.dtype == torch.float32
        np.testing.assert_allclose(got.detach().numpy(), _inference(trained, proprio), rtol=1e-6, atol=1e-6)
    # through load_policy, on the env's own observations
    env = _env(5)
    policy = forge_gpu.sim.load_policy(f"pt2:{path}", env)
    env.reset()
    for _ in range(3):
        action = policy(env.observation)
        proprio = torch.from_numpy(env.observation["proprio"].numpy().copy())
        np.testing.assert_allclose(action.numpy(), _inference(trained, proprio), rtol=1e-6, atol=1e-6)
        env.step(action)


def test_evaluate_runs_a_pt2_policy_from_the_command_line(trained, tmp_path, capsys):
    from forge_gpu.cli import main

    path = tmp_path / "policy.pt2"
    export_policy(trained, path)
    out = tmp_path / "eval.json"
    args = ["evaluate", "cartpole", "--policy", f"pt2:{path}", "--episodes", "4", "--envs", "2", "--device", "cpu"]
    assert main([*args, "--set", "max_steps=10", "--seed", "0", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["n_episodes"] == 4 and len(data["per_episode"]["length"]) == 4
    # the same episodes under the TorchScript export of the same actor: the same figures
    script = tmp_path / "policy.pt"
    export_policy(trained, script, format="torchscript")
    again = tmp_path / "again.json"
    args[3] = f"torchscript:{script}"
    assert main([*args, "--set", "max_steps=10", "--seed", "0", "--json", str(again)]) == 0
    assert json.loads(again.read_text())["per_episode"] == data["per_episode"]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "no such file"),
        (b"not a zip archive", "is no torch.export program"),
    ],
)
def test_pt2_policy_refuses_a_missing_or_corrupt_file_in_one_line(tmp_path, capsys, content, says):
    from forge_gpu.cli import main

    path = tmp_path / "policy.pt2"
    if content is not None:
        path.write_bytes(content)
    env = _env(2)
    with pytest.raises(ValueError, match=rf"policy 'pt2:.*policy.pt2'.*{says}") as error:
        forge_gpu.sim.load_policy(f"pt2:{path}", env)
    assert "\n" not in str(error.value)
    args = ["evaluate", "cartpole", "--policy", f"pt2:{path}", "--episodes", "2", "--envs", "2", "--device", "cpu"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_pt2_policy_refuses_a_program_of_other_inputs(tmp_path):
    plain = torch.nn.Linear(4, 1)
    path = tmp_path / "plain.pt2"
    torch.export.save(torch.export.export(plain, (torch.zeros(2, 4),)), str(path))
    with pytest.raises(ValueError, match="does not take one dict of observation fields"):
        forge_gpu.sim.load_policy(f"pt2:{path}", _env(2))

    class Named(torch.nn.Module):
        def forward(self, observation: dict[str, torch.Tensor]) -> torch.Tensor:
            return observation["nosuch"][:, :1]

    path = tmp_path / "named.pt2"
    torch.export.save(torch.export.export(Named(), ({"nosuch": torch.zeros(2, 4)},)), str(path))
    with pytest.raises(ValueError, match="observation field 'nosuch', which this env does not have"):
        forge_gpu.sim.load_policy(f"pt2:{path}", _env(2))


def test_export_refuses_an_unknown_format(trained, tmp_path):
    with pytest.raises(ValueError, match=r"export_policy\(format='onnx'\): expected one of pt2, torchscript"):
        export_policy(trained, tmp_path / "p.onnx", format="onnx")
    assert not (tmp_path / "p.onnx").exists()
