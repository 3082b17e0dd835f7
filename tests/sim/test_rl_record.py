"""Recording while training: ``RolloutRecorder`` records the rollouts of rsl_rl's PPO as a run (collect/rollouts.py)
that verifies, replays from its actions exactly and reads back with each episode's policy version."""

import json
import threading

import numpy as np
import pytest

pytest.importorskip("rsl_rl", reason="rsl-rl-lib is not installed: pip install 'forge-gpu[rl]'")
torch = pytest.importorskip("torch")

import forge_gpu.reading  # noqa: E402
import forge_gpu.recording  # noqa: E402
import forge_gpu.sim  # noqa: E402
from forge_gpu._src.rl.rsl import default_train_config, track_policy_version  # noqa: E402

STEPS = 12  # per PPO iteration; episodes truncate one step sooner, so that the env's next-step reset makes the
# first frames of the next episodes on a rollout's last step


def _env(n=8, **overrides):
    return forge_gpu.sim.make("cartpole", num_envs=n, device="cpu", seed=0, **{"max_steps": STEPS - 1, **overrides})


def _recorder_threads() -> set:
    return {t for t in threading.enumerate() if t.name == "forge-recorder" and t.is_alive()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two PPO iterations of cartpole on 8 envs, recorded; what the test saw of the episodes it stepped."""
    from rsl_rl.runners import OnPolicyRunner

    run = tmp_path_factory.mktemp("rl") / "run"
    torch.manual_seed(0)
    env = _env()
    seen = {"calls": 0, "ended": 0, "starts": {}}  # starts: (env_id, episode_id) -> the call that made its first frame

    def note_starts():
        step_id, episode_id = env.observation["step_id"].numpy(), env.observation["episode_id"].numpy()
        for e in np.flatnonzero(step_id == 0):
            seen["starts"][(int(e), int(episode_id[e]))] = seen["calls"]

    with forge_gpu.sim.RslRlVecEnv(env, recorder=forge_gpu.recording.RolloutRecorder(env, run)) as vec:
        note_starts()
        runner = OnPolicyRunner(vec, default_train_config(num_steps_per_env=STEPS), log_dir=None, device="cpu")
        track_policy_version(runner)
        step = vec.step

        def counted(actions):
            out = step(actions)
            seen["calls"] += 1
            seen["ended"] += int(out[2].sum())
            note_starts()
            return out

        vec.step = counted
        runner.learn(num_learning_iterations=2)
        assert vec.recorder.policy_version == 2  # one per update
    return run, seen


def test_the_recorded_run_verifies_and_holds_every_ended_episode(trained):
    run, seen = trained
    report = forge_gpu.reading.verify_run(run)
    assert report["ok"], report
    episodes = list(forge_gpu.reading.read_episodes(run))
    assert seen["calls"] == 2 * STEPS
    assert len(episodes) == seen["ended"] > 0  # the last step's ends too: published when the env closed
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["status"] == "closed"
    assert manifest["env_spec"]["params"]["policy_version"] == {"shape": [], "dtype": "float32"}
    assert manifest["env_spec"]["param_sources"] == {"policy_version": "trainer"}
    assert not _recorder_threads()


def test_each_episode_carries_the_version_that_chose_its_first_action(trained):
    run, seen = trained
    episodes = list(forge_gpu.reading.read_episodes(run))
    versions, expected = [], []
    for episode in episodes:
        first = seen["starts"][(episode.env_id, episode.episode_id)]
        # the first action is step first + 1's, taken in iteration first // STEPS after that many updates
        expected.append(first // STEPS)
        versions.append(float(episode.params["policy_version"]))
    assert versions == expected
    assert {0, 1} <= set(expected)
    # an episode whose first frame came on a rollout's last step is acted on by the updated policy
    assert any(seen["starts"][(e.env_id, e.episode_id)] == STEPS for e in episodes)


def test_replay_from_actions_is_exact_and_keeps_the_versions(trained, tmp_path):
    run, _ = trained
    out = tmp_path / "replayed"
    report = forge_gpu.recording.replay(run, out, from_="actions")
    source = {(e.env_id, e.episode_id): e for e in forge_gpu.reading.read_episodes(run)}
    assert report["diverged"] == 0 and report["episodes"] == len(source)
    assert all(d["max_error"] == 0.0 for d in report["divergence"])
    assert forge_gpu.reading.verify_run(out)["ok"]
    for episode in forge_gpu.reading.read_episodes(out):
        recorded = source[(episode.env_id, episode.episode_id)]
        assert episode.params["policy_version"] == recorded.params["policy_version"]
        np.testing.assert_array_equal(episode.action, recorded.action)
        np.testing.assert_array_equal(episode.obs["proprio"], recorded.obs["proprio"])


def test_an_exception_in_training_closes_the_run_as_failed_with_what_was_published(tmp_path):
    before = _recorder_threads()
    env = _env(4, max_steps=3)
    ended = 0
    with pytest.raises(KeyError, match="trainer broke"):
        with forge_gpu.sim.GymVectorEnv(env, recorder=forge_gpu.recording.RolloutRecorder(env, tmp_path / "r")) as g:
            g.reset()
            for _ in range(7):
                _, _, terminated, truncated, _ = g.step(torch.zeros(4, 1))
                ended += int((terminated | truncated).sum())
            raise KeyError("trainer broke")
    manifest = json.loads((tmp_path / "r" / "run.json").read_text())
    assert manifest["status"] == "failed" and "trainer broke" in manifest["error"]
    published = list(forge_gpu.reading.read_episodes(tmp_path / "r"))
    assert 0 < len(published) <= ended  # the last step was not published: the run failed at it
    assert _recorder_threads() <= before


def test_a_recorder_thread_error_reaches_the_step_and_stops_the_thread(tmp_path):
    before = _recorder_threads()
    env = _env(4)
    recorder = forge_gpu.recording.RolloutRecorder(env, tmp_path / "r", slots=2)
    append = recorder.recorder.append

    def failing(observation, result):
        if observation["step_id"].max() >= 2:
            raise OSError("disk full")
        append(observation, result)

    recorder.recorder.append = failing  # the recorder thread's append fails on the third batch
    g = forge_gpu.sim.GymVectorEnv(env, recorder=recorder)
    g.reset()
    with pytest.raises(OSError, match="disk full"):
        for _ in range(8):  # a step's result is published at the next step, seen by the thread after
            g.step(torch.zeros(4, 1))
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "failed"
    assert _recorder_threads() <= before
    g.close()  # closing again changes nothing


def test_bad_recording_input_is_refused_in_one_line(tmp_path):
    env = _env(2)
    with pytest.raises(ValueError, match=r"slots must be an integer >= 2, got 1"):
        forge_gpu.recording.RolloutRecorder(env, tmp_path / "a", slots=1)
    recorder = forge_gpu.recording.RolloutRecorder(env, tmp_path / "b")
    with pytest.raises(ValueError, match="records another env"):
        forge_gpu.sim.GymVectorEnv(_env(2), recorder=recorder)
    with pytest.raises(ValueError, match=r"policy_version must be an integer in \[0, 16777216\], got -1"):
        recorder.policy_version = -1
    env.reset()
    g = forge_gpu.sim.GymVectorEnv(env, recorder=recorder)
    with pytest.raises(ValueError, match=r"first call must be the wrapper's reset\(\)"):
        g.step(torch.zeros(2, 1))
    g.reset()
    g.step(torch.zeros(2, 1))
    g.close()
    assert forge_gpu.reading.verify_run(tmp_path / "b")["ok"]
    with pytest.raises(ValueError, match="is closed"):
        g.step(torch.zeros(2, 1))
