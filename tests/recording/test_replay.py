"""replay: re-simulating recorded episodes from their state (re-observe, re-render) or from their actions (the
state must come back bit for bit on the CPU), and the new run it writes."""

import threading

import numpy as np
import pytest
from helpers.envtools import DEVICES

import forge_gpu
from forge_gpu.cli import main

ALL = forge_gpu.reading.EpisodeReadOptions(state=True)


def _record(path, task, *, envs, episodes, policy="random", seed=0, device="cpu", **overrides):
    env = forge_gpu.sim.make(task, num_envs=envs, device=device, seed=seed, **overrides)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy(policy, env), str(path), episodes=episodes)
    return path


def _episodes(path, options=ALL):
    run = forge_gpu.reading.open_run(path)
    return list(run.read(list(range(len(run))), options))


@pytest.fixture(scope="module")
def reach_run(tmp_path_factory):
    """A small reach run with randomized colours and camera, expert policy (most episodes succeed)."""
    ranges = {
        "randomize.target_color": {"low": [0.5, 0.0, 0.0], "high": [1.0, 0.4, 0.4]},
        "randomize.camera_position_offset": {"low": [-0.03] * 3, "high": [0.03] * 3},
        "randomize.joint_stiffness_scale": [0.7, 1.3],
    }
    path = tmp_path_factory.mktemp("reach") / "run"
    return _record(
        path, "reach", envs=3, episodes=5, policy="expert", max_steps=25, **{"params.image_size": 32}, **ranges
    )


@pytest.mark.parametrize(
    ("task", "overrides"),
    [
        (
            "cartpole",
            {"max_steps": 30, "randomize.mass_scale": [0.5, 2.0], "randomize.actuator_gain_scale": [0.5, 1.5]},
        ),
        ("ant", {"max_steps": 12, "randomize.friction": [0.4, 1.2], "randomize.mass_scale": [0.8, 1.2]}),
    ],
)
@pytest.mark.parametrize("device", DEVICES)
def test_from_actions_replays_cartpole_and_ant_bit_for_bit(tmp_path, task, overrides, device):
    """Bit for bit on the CPU, and on CUDA without contacts (cartpole). On CUDA the ant's contacts make a replay
    equal within float32 rounding, not bit for bit (3.8e-6 at most, measured on an H200): the bound is 1e-4."""
    run = _record(tmp_path / "run", task, envs=3, episodes=4, device=device, **overrides)
    report = forge_gpu.recording.replay(run, tmp_path / "again", from_="actions", batch=2, device=device)
    recorded = _episodes(run)
    assert report["diverged"] == 0 and len(report["divergence"]) == len(recorded) == report["episodes"]
    bound = 0.0 if device == "cpu" or task == "cartpole" else 1e-4

    def same(x, y) -> bool:
        return np.array_equal(x, y) if bound == 0.0 else np.allclose(x, y, rtol=0.0, atol=bound)

    assert all(d["max_error"] <= bound for d in report["divergence"]), report["divergence"]
    again = _episodes(tmp_path / "again")
    for a, b in zip(recorded, again, strict=True):
        assert (a.env_id, a.episode_id, a.steps, a.instruction) == (b.env_id, b.episode_id, b.steps, b.instruction)
        for name in a.obs:
            assert same(a.obs[name], b.obs[name]) and same(a.next[name], b.next[name]), name
        for name in a.state:
            assert same(a.state[name], b.state[name]), name
        assert a.params.keys() == b.params.keys() and all(np.array_equal(a.params[k], b.params[k]) for k in a.params)


def test_from_actions_replays_reach_bit_for_bit(tmp_path, reach_run):
    """Every episode replayed (its divergence report alone starts empty, so a replay of none would pass) and its
    states compared here with the recorded ones."""
    report = forge_gpu.recording.replay(reach_run, tmp_path / "again", from_="actions", batch=4)
    recorded, again = _episodes(reach_run), _episodes(tmp_path / "again")
    assert report["episodes"] == len(recorded) == len(again) == len(report["divergence"]) > 0
    assert report["diverged"] == 0 and all(d["max_error"] == 0.0 for d in report["divergence"])
    for a, b in zip(recorded, again, strict=True):
        assert (a.env_id, a.episode_id, a.steps) == (b.env_id, b.episode_id, b.steps)
        assert a.state.keys() == b.state.keys() and all(np.array_equal(a.state[k], b.state[k]) for k in a.state)


def test_from_actions_reports_where_a_changed_model_diverges(tmp_path, reach_run):
    """A config that changes the physics (heavier links) makes the states differ: the first step and the error
    are reported and the episode is left out of the output."""
    report = forge_gpu.recording.replay(
        reach_run, tmp_path / "heavy", from_="actions", overrides={"params.link_density": 2000.0}, batch=8
    )
    assert report["diverged"] == len(report["divergence"]) > 0 and report["episodes"] == 0
    assert all(d["first_step"] >= 1 and d["max_error"] > 1e-5 for d in report["divergence"])


def test_from_state_re_renders_the_recorded_images(tmp_path, reach_run):
    report = forge_gpu.recording.replay(reach_run, tmp_path / "again", batch=2)
    recorded, again = _episodes(reach_run), _episodes(tmp_path / "again")
    assert report["episodes"] == len(recorded) == len(again) > 0
    for a, b in zip(recorded, again, strict=True):
        assert (a.env_id, a.episode_id, a.steps) == (b.env_id, b.episode_id, b.steps)
        for name in a.obs:
            assert np.array_equal(a.obs[name], b.obs[name]), name
        for name in ("action", "reward", "terminated", "truncated"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert all(np.array_equal(a.state[k], b.state[k]) for k in a.state)
        assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)


@pytest.mark.parametrize("device", DEVICES)
def test_a_larger_re_render_is_a_readable_run_with_the_new_images(tmp_path, device):
    run = _record(
        tmp_path / "run", "reach", envs=2, episodes=2, max_steps=6, device=device, **{"params.image_size": 64}
    )
    forge_gpu.recording.replay(run, tmp_path / "big", overrides={"params.image_size": 128}, device=device)
    manifest = forge_gpu.formats.read_manifest(tmp_path / "big")
    assert manifest["status"] == "closed" and manifest["env_spec"]["observation"]["rgb"]["shape"] == [128, 128, 3]
    assert manifest["replayed_from"]["from"] == "state"
    small, big = _episodes(run), _episodes(tmp_path / "big")
    for a, b in zip(small, big, strict=True):
        assert b.obs["rgb"].shape == (a.steps, 128, 128, 3) and b.obs["depth"].shape == (a.steps, 128, 128)
        for name in a.obs:
            if name not in ("rgb", "depth"):
                assert np.array_equal(a.obs[name], b.obs[name]), name
        for name in ("action", "reward", "terminated", "truncated"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
    windows = forge_gpu.reading.Windows(tmp_path / "big", history=2, horizon=2)
    assert windows.batch(np.arange(len(windows)))["obs/rgb"].shape[-3:] == (128, 128, 3)


def test_another_camera_pose_changes_the_images_and_nothing_else(tmp_path, reach_run):
    forge_gpu.recording.replay(reach_run, tmp_path / "moved", overrides={"params.camera_position": [0.9, -0.6, 0.7]})
    for a, b in zip(_episodes(reach_run), _episodes(tmp_path / "moved"), strict=True):
        assert not np.array_equal(a.obs["rgb"], b.obs["rgb"]) and not np.array_equal(a.obs["depth"], b.obs["depth"])
        assert np.array_equal(a.obs["proprio"], b.obs["proprio"]) and np.array_equal(a.reward, b.reward)
        assert all(np.array_equal(a.state[k], b.state[k]) for k in a.state)
    calibration = forge_gpu.formats.read_manifest(tmp_path / "moved")["calibration"]["cameras"]["front"]
    assert calibration["camera_to_world"][0][3] == pytest.approx(0.9)


def test_rendering_switched_on_for_a_run_recorded_without_it(tmp_path):
    """A run recorded with params.render = false stores no image column and no camera; replaying it from state with
    rendering on adds rgb and depth, the very frames a run recorded with rendering on holds."""
    small = {"params.image_size": 32, "randomize.camera_position_offset": {"low": [-0.03] * 3, "high": [0.03] * 3}}
    run = _record(tmp_path / "run", "reach", envs=2, episodes=2, max_steps=5, **small, **{"params.render": False})
    manifest = forge_gpu.formats.read_manifest(run)
    assert not {"rgb", "depth"} & set(manifest["env_spec"]["observation"])
    assert "cameras" not in manifest["calibration"]
    assert all(not {"rgb", "depth"} & set(e.obs) for e in _episodes(run))
    assert "rgb" not in forge_gpu.reading.Windows(run, history=1, horizon=1).batch(np.arange(2))
    forge_gpu.recording.replay(run, tmp_path / "rendered", overrides={"params.render": True})
    seen = tmp_path / "seen"  # recorded with rendering on, at the default codecs the replay writes too
    env = forge_gpu.sim.make("reach", num_envs=2, device="cpu", seed=0, max_steps=5, **small)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(seen), episodes=2)
    assert (
        forge_gpu.formats.read_manifest(seen)["codecs"]
        == forge_gpu.formats.read_manifest(tmp_path / "rendered")["codecs"]
    )
    rendered, recorded = _episodes(tmp_path / "rendered"), _episodes(seen)
    assert forge_gpu.formats.read_manifest(tmp_path / "rendered")["calibration"]["cameras"]["front"]["randomized"]
    for a, b in zip(rendered, recorded, strict=True):
        assert a.obs["rgb"].any() and a.obs["depth"].any()
        for name in ("rgb", "depth", "proprio"):
            assert np.array_equal(a.obs[name], b.obs[name]) and np.array_equal(a.next[name], b.next[name]), name


def test_episode_selection(tmp_path, reach_run):
    recorded = _episodes(reach_run)
    pick = [(recorded[1].env_id, recorded[1].episode_id), (recorded[3].env_id, recorded[3].episode_id)]
    forge_gpu.recording.replay(reach_run, tmp_path / "picked", episodes=pick)
    assert [(e.env_id, e.episode_id) for e in _episodes(tmp_path / "picked")] == pick
    successful = [e for e in recorded if e.terminated[-1]]
    assert successful
    forge_gpu.recording.replay(reach_run, tmp_path / "ok", successful=True, limit=2)
    kept = _episodes(tmp_path / "ok")
    assert [(e.env_id, e.episode_id) for e in kept] == [(e.env_id, e.episode_id) for e in successful[:2]]
    with pytest.raises(ValueError, match="holds no episode env 9 episode 9"):
        forge_gpu.recording.replay(reach_run, tmp_path / "none", episodes=[(9, 9)])
    assert not (tmp_path / "none").exists()


def test_refusals_name_what_differs(tmp_path, reach_run):
    with pytest.raises(ValueError, match="the run is of task 'reach', not 'cartpole'"):
        forge_gpu.recording.replay(reach_run, tmp_path / "x", task="cartpole")
    with pytest.raises(ValueError, match="replay keeps the run's randomize"):
        forge_gpu.recording.replay(reach_run, tmp_path / "x", overrides={"randomize.mass_scale": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"incompatible config: state 'body_q' is \{.*\} in the run and None"):
        forge_gpu.recording.replay(reach_run, tmp_path / "x", overrides={"record_state": False})
    stateless = _record(tmp_path / "stateless", "cartpole", envs=2, episodes=2, max_steps=5, record_state=False)
    with pytest.raises(ValueError, match="records no simulator state"):
        forge_gpu.recording.replay(stateless, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_a_stop_closes_the_output_with_what_is_done(tmp_path, reach_run):
    """Stopped at the first progress report: the worlds finish the episodes they hold, take no new one, and the
    output is a closed run of those."""
    stop = threading.Event()
    report = forge_gpu.recording.replay(reach_run, tmp_path / "part", batch=2, stop=stop, progress=lambda c: stop.set())
    total = len(_episodes(reach_run))
    assert report["interrupted"] and 0 < report["episodes"] < total
    manifest = forge_gpu.formats.read_manifest(tmp_path / "part")
    assert manifest["replayed_from"]["interrupted"] is True and manifest["status"] == "closed"
    assert len(_episodes(tmp_path / "part")) == report["episodes"]


def test_cli_replay_from_actions(tmp_path, reach_run, capsys):
    code = main(["replay", str(reach_run), str(tmp_path / "out"), "--from", "actions", "--batch", "3"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    n = len(_episodes(reach_run))
    assert f"divergence: 0 of {n} episodes beyond 1e-05; largest state error 0\n" in printed
    assert f"replay actions: {n}/{n} episodes" in printed
    assert main(["replay", str(reach_run), str(tmp_path / "bad"), "--episodes", "1-2"]) == 2
