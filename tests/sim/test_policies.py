"""The built-in and torch policies (sim/policies.py) on every device: a torch policy's actions are what the env
executes, it runs on the env's stream on CUDA, and its bad actions are refused."""

import numpy as np
import pytest
import warp as wp
from helpers.envtools import DEVICES, torch_on

import forge_gpu
from forge_gpu._src.sim.policies import TorchPolicy
from forge_gpu.sim import load_policy


@pytest.mark.parametrize("device", DEVICES)
def test_torch_policy_actions_are_what_the_env_executes(device):
    """A torch MLP sees zero-copy views of the observation and its actions are executed (clipped); on CUDA it
    runs on the env's Warp stream (its torch wrapper), on the CPU on no stream."""
    torch, torch_device = torch_on(device)
    from helpers.torch_policies import tiny_mlp

    env = forge_gpu.sim.make("cartpole", num_envs=4, device=device, max_steps=5)
    policy = load_policy("helpers.torch_policies:tiny_mlp", env)
    assert isinstance(policy, TorchPolicy)
    if env.device.is_cuda:
        assert policy._stream.cuda_stream == wp.get_stream(env.device).cuda_stream
    else:
        assert policy._stream is None
    net = tiny_mlp(env.spec, "cpu")  # the same weights (seeded), on the host
    before = env.reset().numpy()
    for _ in range(8):
        action = policy(env.observation)
        assert action.device == env.device and tuple(action.shape) == (4, 1)
        after = env.step(action).numpy()
        with torch.no_grad():
            want = np.clip(net({"proprio": torch.from_numpy(before.observation["proprio"])}).numpy(), -1, 1)
        active = after.info["active"]
        np.testing.assert_allclose(after.info["executed_action"][active], want[active], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(after.info["executed_action"][~active], 0.0)
        before = after
    assert torch_device == str(wp.device_to_torch(env.device))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_policy_refuses_bad_actions(device):
    """Wrong shape, dtype or device raise ValueError naming what was wrong; non-finite actions raise in the
    policy on the CPU and are flagged by the step on CUDA (no wait for the device), zeros executed."""
    _, torch_device = torch_on(device)
    from helpers import torch_policies

    env = forge_gpu.sim.make("cartpole", num_envs=3, device=device)
    env.reset()
    for factory, words in [
        (torch_policies.wrong_shape, "shape"),
        (torch_policies.wrong_dtype, "float64"),
        (torch_policies.wrong_device, "meta"),
    ]:
        with pytest.raises(ValueError, match=words):
            TorchPolicy(env, factory(env.spec, torch_device))(env.observation)
    nan = TorchPolicy(env, torch_policies.nan_actions(env.spec, torch_device))
    if not env.device.is_cuda:
        with pytest.raises(ValueError, match="non-finite"):
            nan(env.observation)
        return
    result = env.step(nan(env.observation)).numpy()
    np.testing.assert_array_equal(result.info["action_nonfinite"], True)
    np.testing.assert_array_equal(result.info["executed_action"], 0.0)


@pytest.mark.parametrize("device", DEVICES)
def test_pt2_policy_runs_an_exported_program_on_the_envs_device(device, tmp_path):
    """``pt2:PATH``: a ``torch.export`` program saved on the CPU, taking a dict of observation fields with a dynamic
    batch, runs on the env's device; its actions are the module's own, and it is given only the fields it names."""
    torch, torch_device = torch_on(device)

    class Gain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.linspace(-0.5, 0.5, 4).reshape(4, 1))

        def forward(self, observation: dict[str, torch.Tensor]) -> torch.Tensor:
            return (observation["proprio"] @ self.weight).contiguous()

    module = Gain().eval()
    batch = torch.export.Dim("batch")
    example = ({"proprio": torch.zeros(2, 4)},)
    program = torch.export.export(module, example, dynamic_shapes=({"proprio": {0: batch}},))
    path = tmp_path / "gain.pt2"
    torch.export.save(program, str(path))
    for n in (3, 6):
        env = forge_gpu.sim.make("cartpole", num_envs=n, device=device, max_steps=5)
        policy = load_policy(f"pt2:{path}", env)
        assert policy.fn.fields == ["proprio"]
        env.reset()
        for _ in range(3):
            action = policy(env.observation)
            proprio = torch.from_numpy(env.observation["proprio"].numpy().copy())
            expected = module({"proprio": proprio}).detach().numpy()
            np.testing.assert_allclose(action.numpy(), expected, rtol=1e-6, atol=1e-6)
            assert str(wp.device_to_torch(action.device)) == str(torch_device)
            env.step(action)


def test_pt2_and_the_other_path_forms_are_policy_names():
    from forge_gpu._src.sim.names import check_policy_name

    for name in ("pt2:policy.pt2", "torchscript:policy.pt", "lerobot:some/checkpoint"):
        check_policy_name(name)
    for name in ("pt2:", "pt2:  "):
        with pytest.raises(ValueError, match=r"unknown policy.*pt2:PATH \(a torch.export policy file\)"):
            check_policy_name(name)
