"""The seams: a recorder records from a plain RunDescription (forge_gpu.sim.describe_run describes an env; an env
itself is refused), both recorders are Recorders, and collect takes a transport factory whose name reaches
run.json."""

import pytest
from helpers.synthetic import SyntheticSim, make_batches, make_description, record, synthetic_description

import forge_gpu
from forge_gpu.formats import read_manifest
from forge_gpu.reading import read_episodes
from forge_gpu.recording import NpzRecorder, PackedRecorder, Recorder, RunDescription


@pytest.mark.parametrize("recorder", [PackedRecorder, NpzRecorder])
def test_a_recorder_records_from_a_plain_description(tmp_path, recorder):
    """Given a RunDescription (no env object) a recorder writes a run whose manifest says what it described."""
    run = make_description(num_envs=3, max_steps=6, transport="elsewhere")
    sim = SyntheticSim(synthetic_description(num_envs=3, max_steps=6), seed=2, end_prob=0.4)
    made = record(tmp_path / "run", run, make_batches(sim, 30), recorder=recorder)
    assert isinstance(made, Recorder)
    manifest = read_manifest(tmp_path / "run")
    assert manifest["transport"] == "elsewhere" and manifest["task"] == "synthetic_push"
    assert manifest["status"] == "closed" and manifest["completed_episodes"] == len(sim.completed) > 0
    assert len(list(read_episodes(tmp_path / "run"))) == len(sim.completed)


def test_a_bad_description_is_refused_naming_the_value():
    """A description without a usable num_envs, or with a scene that is no dataclass, is refused."""
    good = make_description()
    with pytest.raises(ValueError, match="num_envs"):
        RunDescription(spec=good.spec, config={"max_steps": 3}, task="t", scene=good.scene, seed=0)
    with pytest.raises(ValueError, match="scene"):
        RunDescription(spec=good.spec, config=dict(good.config), task="t", scene="table", seed=0)


@pytest.mark.parametrize("recorder", [PackedRecorder, NpzRecorder, forge_gpu.recording.make_recorder])
def test_a_recorder_takes_a_description_not_an_env(tmp_path, recorder):
    """Given an env a recorder refuses it, naming describe_run, and creates nothing; given describe_run(env) it
    records the env's task, seed, config and spec."""
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu", seed=4, max_steps=10)
    with pytest.raises(TypeError, match=r"got VectorEnv; describe an env with forge_gpu.sim.describe_run\(env\)"):
        recorder(tmp_path / "refused", env)
    assert not (tmp_path / "refused").exists()
    run = forge_gpu.sim.describe_run(env, transport="elsewhere")
    assert isinstance(run, RunDescription)
    assert (run.task, run.seed, run.num_envs, run.max_steps, run.transport) == ("cartpole", 4, 2, 10, "elsewhere")
    assert run.spec == env.spec and run.step_mode == env.step_mode
    recorder(tmp_path / "run", run).close()
    manifest = read_manifest(tmp_path / "run")
    assert (manifest["task"], manifest["seed"], manifest["transport"]) == ("cartpole", 4, "elsewhere")
    assert manifest["config"] == env.config.to_dict()


def test_collect_takes_a_transport_factory(tmp_path):
    """collect(transport=factory) moves the steps through the given Transport; its name is run.json's transport."""
    from forge_gpu.recording import HostSnapshotTransport, Transport

    made = []

    class CountingTransport(HostSnapshotTransport):
        """A test double: the host snapshot under another name, counting what it publishes."""

        name = "counting_snapshot"

        def __init__(self, env, slots=4):
            super().__init__(env, slots=slots)
            self.published = 0
            made.append(self)

        def publish(self, result=None):
            self.published += 1
            super().publish(result)

    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu", max_steps=10)
    policy = forge_gpu.sim.make_policy("random", env)
    summary = forge_gpu.recording.collect(env, policy, str(tmp_path / "run"), steps=12, transport=CountingTransport)
    assert isinstance(made[0], Transport) and made[0].published == 13  # the reset batch and 12 steps
    assert read_manifest(tmp_path / "run")["transport"] == "counting_snapshot"
    assert summary.status == "closed"
