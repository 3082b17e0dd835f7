"""VectorEnv on the cartpole task: shapes, step semantics, determinism, policies, bad actions."""

import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import warp as wp
from helpers.envtools import DEVICES, assert_graph, rollout, torch_on

import forge_gpu


@pytest.mark.parametrize("device", DEVICES)
def test_shapes_and_dtypes(device):
    """Every field of the result has the documented shape and dtype, and the spec describes it."""
    env = forge_gpu.sim.make("cartpole", num_envs=3, device=device)
    policy = forge_gpu.sim.make_policy("random", env)
    first = env.reset().numpy()
    result = env.step(policy(env.observation)).numpy()
    for r in (first, result):
        obs = r.observation
        assert set(obs) == set(env.spec["observation"])
        for name, desc in env.spec["observation"].items():
            assert obs[name].shape == (3, *desc["shape"]) and obs[name].dtype == np.dtype(desc["dtype"])
        np.testing.assert_array_equal(obs["env_id"], np.arange(3))
        assert r.reward.shape == (3,) and r.reward.dtype == np.float32
        assert r.terminated.dtype == r.truncated.dtype == r.info["active"].dtype == np.bool_
        assert r.info["executed_action"].shape == (3, 1) and r.info["executed_action"].dtype == np.float32
    assert not first.info["active"].any() and (first.observation["step_id"] == 0).all()
    assert result.info["active"].all() and (result.observation["step_id"] == 1).all()
    assert env.spec["action_shape"] == [1] and env.spec["instruction"] == "keep the pole upright"
    assert env.calibration == {} and env.task.scene.kind == "task_file" and env.task.spec.id == "cartpole"
    assert env.config.to_dict()["num_envs"] == 3 and env.seed == 0


@pytest.mark.parametrize("device", DEVICES)
def test_auto_reset_keeps_true_terminal_state(device):
    """After a terminal step the env's next row is a reset frame; the terminal row is the real state."""
    env = forge_gpu.sim.make("cartpole", num_envs=8, device=device)
    frames = rollout(env, forge_gpu.sim.make_policy("random", env), 60)
    limit = env.config.params.pole_angle_limit
    checked = 0
    for before, after in zip(frames[1:], frames[2:], strict=False):
        for i in np.flatnonzero(before.terminated):
            proprio = before.observation["proprio"][i]
            assert abs(proprio[2]) > limit or abs(proprio[0]) > env.config.params.cart_limit
            assert not after.info["active"][i]
            assert after.observation["step_id"][i] == 0
            assert after.observation["episode_id"][i] == before.observation["episode_id"][i] + 1
            assert after.reward[i] == 0 and not after.terminated[i] and not after.truncated[i]
            assert after.observation["time"][i] == 0
            assert abs(after.observation["proprio"][i, 2]) <= env.config.params.reset_pole_angle + 1e-6
            np.testing.assert_array_equal(after.info["executed_action"][i], 0.0)
            checked += 1
    assert checked > 0, "the random policy should drop some poles within 60 steps"
    # Rows that did not end stay active and count up.
    for before, after in zip(frames[1:], frames[2:], strict=False):
        going = ~(before.terminated | before.truncated)
        assert after.info["active"][going].all()
        np.testing.assert_array_equal(after.observation["step_id"][going], before.observation["step_id"][going] + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_truncation_at_max_steps(device):
    """An episode that survives is truncated exactly when step_id reaches max_steps, then reset."""
    env = forge_gpu.sim.make("cartpole", num_envs=4, device=device, max_steps=6)
    frames = rollout(env, forge_gpu.sim.make_policy("expert", env), 8)
    for t in range(1, 6):
        assert not frames[t].truncated.any()
    assert frames[6].truncated.all() and not frames[6].terminated.any()
    assert (frames[6].observation["step_id"] == 6).all()
    np.testing.assert_allclose(frames[6].observation["time"], 6 * env.config.control_dt, rtol=1e-6)
    assert not frames[7].info["active"].any() and (frames[7].observation["episode_id"] == 1).all()
    assert frames[8].info["active"].all()


def test_determinism_and_independence_from_env_count():
    """The same seed gives identical rollouts; env i's episodes do not depend on num_envs."""

    def run(n, seed):
        env = forge_gpu.sim.make("cartpole", num_envs=n, device="cpu", seed=seed, max_steps=20)
        return rollout(env, forge_gpu.sim.make_policy("random", env), 45)

    a, b, wide, other = run(4, 3), run(4, 3), run(64, 3), run(4, 4)
    for fa, fb, fw in zip(a, b, wide, strict=True):
        for name, value in fa.observation.items():
            np.testing.assert_array_equal(value, fb.observation[name])
            np.testing.assert_array_equal(value, fw.observation[name][:4])
        np.testing.assert_array_equal(fa.reward, fw.reward[:4])
        np.testing.assert_array_equal(fa.info["executed_action"], fw.info["executed_action"][:4])
    assert not np.array_equal(a[10].observation["proprio"], other[10].observation["proprio"])
    assert (a[-1].observation["episode_id"] >= 1).all(), "the run should cover several episodes"


def episode_lengths(env, policy, steps):
    env.reset()
    lengths, truncated = [], 0
    for _ in range(steps):
        r = env.step(policy(env.observation)).numpy()
        ended = r.terminated | r.truncated
        lengths += r.observation["step_id"][ended].tolist()
        truncated += int(r.truncated.sum())
    return np.array(lengths), truncated


def test_expert_outlives_random_policy():
    """The LQR expert keeps >= 95% of episodes alive to truncation; random ones fall within tens of steps."""
    env = forge_gpu.sim.make("cartpole", num_envs=40, device="cpu", max_steps=300)
    lengths, truncated = episode_lengths(env, forge_gpu.sim.make_policy("expert", env), 300)
    assert len(lengths) == 40 and truncated / len(lengths) >= 0.95
    random_lengths, _ = episode_lengths(env, forge_gpu.sim.make_policy("random", env), 300)
    assert random_lengths.mean() * 5 < lengths.mean()


@pytest.mark.parametrize("device", DEVICES)
def test_bad_actions_raise_and_change_nothing(device):
    """Wrong shape, dtype, device or non-finite actions raise ValueError and leave the env untouched.

    But for one case on CUDA, where checking a device array's values before the step would wait for the device:
    there the step itself flags the env whose action holds a NaN (``info["action_nonfinite"]``) and executes
    zeros for it; ``check_action`` (which may wait) still refuses it on every device."""
    env = forge_gpu.sim.make("cartpole", num_envs=4, device=device, seed=1)
    twin = forge_gpu.sim.make("cartpole", num_envs=4, device=device, seed=1)
    env.reset(), twin.reset()
    good = np.full((4, 1), 0.3, dtype=np.float32)
    before = env.result.numpy()
    nan = good.copy()
    nan[2, 0] = np.nan
    device_nan = wp.array(nan, device=device)
    bad = [
        np.zeros((4, 2), np.float32),
        np.zeros((3, 1), np.float32),
        good.astype(np.float64),
        nan,
        wp.zeros((4, 1), dtype=wp.float64, device=device),
        [[0.0]] * 4,
    ]
    if not env.device.is_cuda:
        bad.append(device_nan)  # refused on the host: the CPU check costs no wait
    for action in bad:
        with pytest.raises(ValueError):
            env.step(action)
        after = env.result.numpy()
        for name in before.observation:
            np.testing.assert_array_equal(before.observation[name], after.observation[name])
    with pytest.raises(ValueError, match="1 non-finite"):
        env.check_action(device_nan)
    a, b = env.step(good).numpy(), twin.step(good).numpy()
    np.testing.assert_array_equal(a.observation["proprio"], b.observation["proprio"])
    if env.device.is_cuda:
        zeroed = good.copy()
        zeroed[2, 0] = 0.0  # what the env executes for the flagged row
        a, b = env.step(device_nan).numpy(), twin.step(zeroed).numpy()
        np.testing.assert_array_equal(a.info["action_nonfinite"], [False, False, True, False])
        assert not b.info["action_nonfinite"].any()
        np.testing.assert_array_equal(a.info["executed_action"], zeroed)
        np.testing.assert_array_equal(a.observation["proprio"], b.observation["proprio"])


def test_action_is_clipped_to_bounds():
    """Actions outside the bounds are executed clipped, and the result reports the executed action."""
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu")
    env.reset()
    r = env.step(np.array([[5.0], [-0.25]], dtype=np.float32)).numpy()
    np.testing.assert_array_equal(r.info["executed_action"], [[1.0], [-0.25]])


@pytest.mark.parametrize("device", DEVICES)
def test_torch_views_share_memory(device):
    """to_torch() gives zero-copy views of the device buffers (on CUDA ordered after the env's stream) and torch
    actions are accepted; on CUDA one made on another torch stream is ordered after it (wait_stream)."""
    torch, torch_device = torch_on(device)
    env = forge_gpu.sim.make("cartpole", num_envs=2, device=device)
    env.reset()
    views = env.result.to_torch()
    assert views.observation["proprio"].device == torch.device(torch_device)
    r = env.step(torch.zeros((2, 1), dtype=torch.float32, device=torch_device))
    env.result.to_torch()  # torch's current stream waits for this step (on CUDA), as a caller must
    np.testing.assert_array_equal(views.observation["proprio"].cpu().numpy(), r.observation["proprio"].numpy())
    with pytest.raises(ValueError):
        env.step(torch.zeros((2, 1), dtype=torch.float64, device=torch_device))
    if env.device.is_cuda:
        side = torch.cuda.Stream(device=torch_device)
        with torch.cuda.stream(side):
            torch.cuda._sleep(10_000_000)  # the action is written well after the step is queued behind it
            action = torch.full((2, 1), 0.25, dtype=torch.float32, device=torch_device)
            executed = env.step(action).info["executed_action"].numpy()
        np.testing.assert_array_equal(executed, 0.25)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_torch_action_executes_its_values(device):
    """A strided torch action (a column of a wider tensor) is made contiguous before the step reads it."""
    torch, torch_device = torch_on(device)
    env = forge_gpu.sim.make("cartpole", num_envs=3, device=device)
    env.reset()
    wide = torch.tensor([[0.1, 9.0], [-0.2, 9.0], [0.3, 9.0]], dtype=torch.float32, device=torch_device)
    action = wide[:, :1]
    assert not action.is_contiguous()
    executed = env.step(action).info["executed_action"].numpy()
    np.testing.assert_array_equal(executed, action.cpu().numpy())


@pytest.mark.wheel_layout
def test_import_does_not_pull_torch(tmp_path):
    """import forge_gpu (and the env) does not import torch. Run away from the repository root, whose source-tree
    ``forge_gpu`` would shadow an installed one (``python -c`` puts the working directory first on sys.path)."""
    import subprocess
    import sys

    code = "import forge_gpu, sys; forge_gpu.sim.make; forge_gpu.sim.StepResult; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


@pytest.mark.parametrize("device", DEVICES)
def test_graph_replay_equals_eager_stepping(device):
    """The captured-graph step gives bit-identical results to eager stepping, resets included."""
    runs = []
    for capture in (False, True):
        env = forge_gpu.sim.make("cartpole", num_envs=6, device=device, seed=2, max_steps=9, capture_graph=capture)
        runs.append(rollout(env, forge_gpu.sim.make_policy("random", env), 25))
        if not capture:
            assert env.step_mode == "eager: capture_graph = false in the config"
    assert_graph(env)
    for eager, graph in zip(*runs, strict=True):
        for name, value in eager.arrays().items():
            np.testing.assert_array_equal(value, graph.arrays()[name])


@pytest.mark.parametrize("graph", [True, False])
def test_non_finite_actions_are_flagged_by_the_step_itself(graph):
    """The step's first kernel flags envs whose action holds a NaN or inf and executes zeros for them."""
    env = forge_gpu.sim.make("cartpole", num_envs=4, device="cpu", capture_graph=graph)
    env.reset()
    action = np.full((4, 1), 0.5, np.float32)
    action[1, 0], action[3, 0] = np.nan, np.inf
    env.action_input.assign(action)  # what a CUDA step stages without waiting to check it
    if graph:
        assert_graph(env)
        wp.capture_launch(env._graph)
    else:
        env._step_body()
    flags = env.result.info["action_nonfinite"].numpy()
    executed = env.result.info["executed_action"].numpy()
    np.testing.assert_array_equal(flags, [False, True, False, True])
    np.testing.assert_array_equal(executed[:, 0], [0.5, 0.0, 0.5, 0.0])
    assert np.isfinite(env.proprio.numpy()).all()


def test_collect_raises_when_a_flagged_batch_reaches_the_host(tmp_path, monkeypatch):
    """With the CUDA staging (no check before the step), collect still fails on a NaN action, naming the rows."""
    from forge_gpu.recording import collect
    from forge_gpu.sim import VectorEnv

    def stage_without_waiting(self, action, *, check_values=False):
        if check_values:  # collect's up-front check of the policy still runs
            return
        wp.copy(self.action_input, action)

    monkeypatch.setattr(VectorEnv, "_stage_action", stage_without_waiting)
    env = forge_gpu.sim.make("cartpole", num_envs=3, device="cpu", max_steps=50)
    bad = wp.array(np.array([[0.1], [np.nan], [0.2]], np.float32), device="cpu")
    calls = []

    def policy(observation):
        calls.append(1)
        return bad if len(calls) > 4 else forge_gpu.sim.make_policy("random", env)(observation)

    with pytest.raises(ValueError, match=r"non-finite actions .* env rows \[1\]"):
        collect(env, policy, str(tmp_path / "run"), steps=20)
    assert forge_gpu.formats.read_manifest(tmp_path / "run")["status"] == "failed"


def test_device_choice_on_this_machine_says_why():
    """Unpatched: cuda:0 where Warp sees a CUDA device, else the CPU, with the reason for the choice."""
    import forge_gpu._src.sim.device as env_module

    device, why = env_module.device_choice()
    if wp.get_cuda_device_count() > 0:
        assert device == "cuda:0" and why.startswith(f"Warp sees {wp.get_cuda_device_count()} CUDA device(s)")
    elif env_module.gpu_present():
        assert device == "cpu" and why.startswith("a GPU is present but not usable: ")
    else:
        assert device == "cpu"
        assert why == "no NVIDIA GPU on this machine; using Warp's CPU device (every feature works, slower)"


def test_a_present_but_unusable_gpu_is_not_a_silent_cpu_fallback(monkeypatch):
    """default_device() says why it falls back to the CPU when a GPU exists that Warp cannot use, each cause in
    its own words; without a GPU, or with a usable one, it chooses without a warning."""
    import forge_gpu._src.sim.device as env_module

    monkeypatch.setattr(env_module, "gpu_present", lambda: True)
    monkeypatch.setattr(wp, "get_cuda_device_count", lambda: 0)
    with pytest.warns(RuntimeWarning, match="a GPU is present but not usable"):
        assert env_module.default_device() == "cpu"
    causes = [
        (None, None, "this Warp build has no CUDA support (install the CUDA build of warp-lang)"),
        ((12, 8), None, "Warp could not load or initialize the NVIDIA driver (check `nvidia-smi`"),
        ((12, 8), (12, 4), "Warp finds no usable CUDA device (driver (12, 4))"),
    ]
    for toolkit, driver, cause in causes:
        monkeypatch.setattr(wp, "get_cuda_toolkit_version", lambda toolkit=toolkit: toolkit)
        monkeypatch.setattr(wp, "get_cuda_driver_version", lambda driver=driver: driver)
        device, why = env_module.device_choice()
        assert device == "cpu" and why.startswith(f"a GPU is present but not usable: {cause}")
        assert why.endswith("; falling back to the CPU device")
        with pytest.warns(RuntimeWarning, match=re.escape(f"forge_gpu: {why}")):
            assert env_module.default_device() == "cpu"

    monkeypatch.setattr(env_module, "gpu_present", lambda: False)
    device, why = env_module.device_choice()
    assert device == "cpu" and "no NVIDIA GPU" in why
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert env_module.default_device() == "cpu"

    real_get_device = wp.get_device
    monkeypatch.setattr(wp, "get_cuda_device_count", lambda: 2)
    monkeypatch.setattr(
        wp, "get_device", lambda name=None: SimpleNamespace(name="H200") if name == "cuda:0" else real_get_device(name)
    )
    assert env_module.device_choice() == ("cuda:0", "Warp sees 2 CUDA device(s); using cuda:0 (H200)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert env_module.default_device() == "cuda:0"
