"""LeRobot policies in forge_gpu (sim/lerobot_policy.py), without LeRobot: a fake policy with LeRobot's interface
(``config.input_features``/``output_features``, ``predict_action_chunk``, ``select_action``, ``reset``; identity
processors) loaded through the adapter's loader seam into a small push env on the CPU. The env's fields reach it
under the LeRobot export's names and values, its chunk is what it returns, a feature the env does not give is refused
in one line, and without LeRobot the error says how to install it. Also the task-declared environment state (the
spec's ``environment_state``: code tasks, task files, the export's default)."""

import json
from dataclasses import dataclass, field

import numpy as np
import pytest
from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

import forge_gpu
from forge_gpu._src.core.instructions import episode_instructions
from forge_gpu._src.sim import lerobot_policy as adapter
from forge_gpu._src.sim.policies import TorchPolicy
from forge_gpu.export import export_lerobot

torch = pytest.importorskip("torch")

FAST = {"params.render": False, "max_steps": 12}
PUSH_FIELDS = ("cube_pose", "cube_velocity", "goal_position")


@dataclass
class Feature:
    shape: tuple


@dataclass
class FakeConfig:
    input_features: dict
    output_features: dict = field(default_factory=lambda: {"action": Feature((4,))})
    type: str = "fake"
    n_obs_steps: int = 1
    n_action_steps: int = 3
    chunk_size: int = 5
    temporal_ensemble_coeff: float | None = None


class FakePolicy:
    """A deterministic chunk of ``chunk_size`` actions from the state and environment state; every batch it is given
    is kept (copied). ``select_action`` pops a queue of ``n_action_steps`` shared by the batch, as ACT does."""

    def __init__(self, config: FakeConfig, *, chunk_api: bool = True):
        self.config = config
        self.batches, self.resets, self.queue = [], 0, []
        if not chunk_api:
            self.predict_action_chunk = None

    def _chunk(self, batch):
        x = torch.cat([batch[k] for k in ("observation.state", "observation.environment_state") if k in batch], -1)
        base = torch.tanh(x[:, :4] + 0.1 * x[:, -4:])  # [N, 4]
        steps = torch.arange(self.config.chunk_size, dtype=torch.float32)[None, :, None]
        return 0.5 * base[:, None, :] - 0.05 * steps

    def _keep(self, batch):  # copies: the state may be a view of the env's buffer, which the next step overwrites
        self.batches.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()})

    def predict_action_chunk(self, batch):
        self._keep(batch)
        return self._chunk(batch)

    def select_action(self, batch):
        self._keep(batch)
        if not self.queue:
            self.queue = list(self._chunk(batch)[:, : self.config.n_action_steps].transpose(0, 1))
        return self.queue.pop(0)

    def reset(self):
        self.resets += 1
        self.queue = []


def state_config(**kw) -> FakeConfig:
    inputs = {"observation.state": Feature((11,)), "observation.environment_state": Feature((16,))}
    return FakeConfig(input_features=inputs, **kw)


def loader_of(policy):
    def load(directory, device):
        load.seen = (directory, device)
        return policy, (lambda batch: batch), (lambda action: action)

    return load


def pretrained(tmp_path):
    """A directory laid out as lerobot-train's output: checkpoints/last/pretrained_model/config.json."""
    directory = tmp_path / "train" / "checkpoints" / "last" / "pretrained_model"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"type": "act"}))
    return tmp_path / "train", directory


@pytest.fixture(scope="module")
def push_env():
    return forge_gpu.sim.make("push", num_envs=4, device="cpu", seed=3, **FAST)


def test_fields_reach_the_policy_under_the_export_names(push_env, tmp_path):
    """observation.state is proprio, observation.environment_state the push task's declared fields concatenated in
    order (what the export writes), task each env's instruction; only the features the policy takes are given; the
    chunk's first n_action_steps come back, [N, H, A] with chunk = H = n_action_steps (the whole chunk with ACT's
    temporal ensembling)."""
    env = push_env
    run_dir, model_dir = pretrained(tmp_path)
    policy = FakePolicy(state_config())
    load = loader_of(policy)
    fn = adapter.lerobot_policy(run_dir, env, loader=load)
    assert load.seen == (str(model_dir), "cpu")
    assert env.spec["environment_state"] == list(PUSH_FIELDS)
    assert fn.mode == "chunk" and fn.predicted == 5 and fn.chunk == fn.n_action_steps == 3
    assert not hasattr(fn, "history")
    env.reset()
    env.step(forge_gpu.sim.load_policy("expert", env)(env.observation))
    host = env.result.numpy().observation
    observation = {k: torch.from_numpy(v.numpy()) for k, v in env.observation.items()}
    chunk = fn(observation)
    batch = policy.batches[-1]
    assert set(batch) == {"observation.state", "observation.environment_state", "task"}
    np.testing.assert_array_equal(batch["observation.state"].numpy(), host["proprio"])
    want = np.concatenate([host[f] for f in PUSH_FIELDS], axis=1)
    np.testing.assert_array_equal(batch["observation.environment_state"].numpy(), want)
    params = {name: values.numpy() for name, values in env.randomizer.recorded.items()}
    assert batch["task"] == episode_instructions(env.spec["instruction_template"], params)  # each env's own
    assert len(set(batch["task"])) > 1
    assert chunk.shape == (4, 3, 4) and chunk.dtype == torch.float32
    torch.testing.assert_close(chunk, policy._chunk(batch)[:, :3])
    ensembled = FakePolicy(state_config(n_action_steps=1, temporal_ensemble_coeff=0.01))
    fn = adapter.lerobot_policy(run_dir, env, loader=loader_of(ensembled))
    assert fn.chunk == 5 and fn(observation).shape == (4, 5, 4)


def test_declared_environment_state_chooses_the_fields_and_their_order(push_env, tmp_path, monkeypatch):
    """A spec declaring other fields (goal first, no velocity) gives the policy those, in that order; a policy
    trained on the default width is then refused for its shape."""
    env = push_env
    monkeypatch.setitem(env.spec, "environment_state", ["goal_position", "cube_pose"])
    inputs = {"observation.state": Feature((11,)), "observation.environment_state": Feature((10,))}
    policy = FakePolicy(FakeConfig(input_features=inputs))
    fn = adapter.lerobot_policy(pretrained(tmp_path)[1], env, loader=loader_of(policy))
    env.reset()
    host = env.result.numpy().observation
    fn({k: torch.from_numpy(v.numpy()) for k, v in env.observation.items()})
    want = np.concatenate([host["goal_position"], host["cube_pose"]], axis=1)
    np.testing.assert_array_equal(policy.batches[-1]["observation.environment_state"].numpy(), want)
    with pytest.raises(ValueError, match=r"takes observation.environment_state of shape \[16\]; .* gives \[10\]"):
        adapter.lerobot_policy(tmp_path / "train", env, loader=loader_of(FakePolicy(state_config())))


def test_missing_features_and_bad_shapes_are_refused_in_one_line(push_env, tmp_path):
    env = push_env
    _, directory = pretrained(tmp_path)
    image = state_config()
    image.input_features["observation.images.rgb"] = Feature((3, 64, 64))
    cases = [
        (image, r"takes observation.images.rgb \[3, 64, 64\], which task 'push' does not give; it gives: "),
        (
            FakeConfig(input_features={"observation.state": Feature((14,))}),
            r"takes observation.state of shape \[14\]; task 'push' gives \[11\]",
        ),
        (state_config(output_features={"action": Feature((7,))}), r"gives action of shape \[7\]; task 'push' takes"),
    ]
    for config, message in cases:
        with pytest.raises(ValueError, match=message) as caught:
            adapter.lerobot_policy(directory, env, loader=loader_of(FakePolicy(config)))
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="no LeRobot policy there"):
        adapter.lerobot_policy(tmp_path / "nothing", env, loader=loader_of(FakePolicy(state_config())))


def test_select_action_fallback_drives_the_env_and_resets_at_episode_starts(tmp_path):
    """A policy without a chunk API runs through select_action inside TorchPolicy: the env executes its actions,
    and reset runs at the first step and whenever an env starts an episode (every env re-plans then)."""
    env = forge_gpu.sim.make("push", num_envs=4, device="cpu", seed=5, **{**FAST, "max_steps": 4})
    policy = FakePolicy(state_config(), chunk_api=False)
    fn = adapter.lerobot_policy(pretrained(tmp_path)[1], env, loader=loader_of(policy))
    assert fn.mode == "select_action" and not hasattr(fn, "chunk")
    driven = drive(env, fn)
    env.reset()
    resets, starts = [], []
    for _ in range(7):
        starts.append(int((env.observation["step_id"].numpy() == 0).any()))
        before = policy.resets
        action = driven(env.observation)
        resets.append(policy.resets - before)
        result = env.step(action).numpy()
        executed = result.info["executed_action"][result.info["active"]]
        want = np.clip(action.numpy(), -1, 1)[result.info["active"]]
        np.testing.assert_allclose(executed, want, rtol=1e-6)
    # Episodes of 4 transitions: the first observation of each (step_id 0) comes after the step that resets.
    assert resets == starts and starts[:2] == [1, 0] and sum(starts) == 2
    assert len(policy.batches) == 7


def drive(env, fn):
    """A TorchPolicy around ``fn`` (its constructor takes the callable, or a factory of it)."""
    import inspect

    if "factory" in inspect.signature(TorchPolicy).parameters:
        return TorchPolicy(env, lambda spec, device: fn)
    return TorchPolicy(env, fn)


def test_chunk_is_executed_by_forge_gpus_executor(tmp_path, monkeypatch):
    """Through load_policy('lerobot:PATH'): each env executes the first n_action_steps actions of the chunk it took
    open loop, then the chunk of that step's call (the env's episodes do not end in between)."""
    env = forge_gpu.sim.make("push", num_envs=4, device="cpu", seed=3, **{**FAST, "max_steps": 50})
    policy = FakePolicy(state_config())
    monkeypatch.setattr(adapter, "load_pretrained", loader_of(policy))
    try:
        driven = forge_gpu.sim.load_policy(f"lerobot:{pretrained(tmp_path)[0]}", env)
    except ValueError as e:
        pytest.skip(f"load_policy does not dispatch lerobot: policies here: {e}")
    assert driven.fn.mode == "chunk" and driven.fn.chunk == 3
    probed = len(policy.batches)  # the load's one prediction, which told the chunk's length
    env.reset()
    executed = []
    for _ in range(7):
        result = env.step(driven(env.observation)).numpy()
        executed.append(result.info["executed_action"])
    assert len(policy.batches) == probed + 7  # called at every step, for the whole batch
    for k in range(7):
        chunk = policy._chunk(policy.batches[probed + k // 3 * 3])  # the chunk taken at the last refresh
        np.testing.assert_allclose(executed[k], np.clip(chunk[:, k % 3].numpy(), -1, 1), rtol=1e-6)


def test_without_lerobot_the_error_says_how_to_install_it(push_env, tmp_path):
    try:
        import lerobot  # noqa: F401

        pytest.skip("LeRobot is installed here")
    except ImportError:
        pass
    for call in (
        lambda: adapter.load_pretrained(str(pretrained(tmp_path)[1]), "cpu"),
        lambda: adapter.lerobot_policy(tmp_path / "train", push_env),
    ):
        with pytest.raises(adapter.LeRobotMissing, match=r'pip install "lerobot\[dataset\]>=0.6,<0.7"') as caught:
            call()
        assert "Python >= 3.12 and torch < 2.12" in str(caught.value) and "\n" not in str(caught.value)
        assert isinstance(caught.value, ValueError)


def test_task_files_declare_their_environment_state(tmp_path):
    """A task file's environment_state key goes to env.spec; a field the task does not have is refused in one line
    naming it and the allowed ones; a value that is not a list of names is refused naming the file's key."""
    terms = {"params.reward.terms": True}  # cartpole's reward terms: a vector field beside proprio
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu", **terms, **{"params.environment_state": []})
    assert env.spec["environment_state"] == []
    env = forge_gpu.sim.make(
        "cartpole", num_envs=2, device="cpu", **terms, **{"params.environment_state": ["reward_terms"]}
    )
    assert env.spec["environment_state"] == ["reward_terms"]
    assert forge_gpu.sim.make("cartpole", num_envs=2, device="cpu").spec["environment_state"] == []  # the shipped file
    with pytest.raises(ValueError, match=r"environment_state field 'cube_pose' is not .*; allowed: reward_terms$"):
        forge_gpu.sim.make("cartpole", num_envs=2, device="cpu", **terms, **{"params.environment_state": ["cube_pose"]})
    with pytest.raises(ValueError, match=r"environment_state = 'x': expected a list of observation field names"):
        forge_gpu.sim.make("cartpole", num_envs=2, device="cpu", **{"params.environment_state": "x"})


def test_the_export_defaults_to_the_declared_environment_state(tmp_path):
    """A run whose spec declares its environment state is exported with those fields, in that order; an explicit
    environment_state still chooses."""
    pytest.importorskip("av")
    description = synthetic_description(num_envs=2, max_steps=4, action_dim=2)
    observation = description.spec["observation"]
    observation["cube_pose"] = {"shape": [3], "dtype": "float32"}
    observation["goal_position"] = {"shape": [2], "dtype": "float32"}
    description.spec["environment_state"] = ["goal_position"]
    run = tmp_path / "run"
    record(run, description, make_batches(SyntheticSim(description, seed=2), 12))
    report = export_lerobot(run, tmp_path / "declared")
    assert report["environment_state"] == ["goal_position"]
    info = json.loads((tmp_path / "declared/meta/info.json").read_text())
    assert info["features"]["observation.environment_state"]["names"] == ["goal_position_0", "goal_position_1"]
    assert export_lerobot(run, tmp_path / "chosen", environment_state=["cube_pose"])["environment_state"] == [
        "cube_pose"
    ]
