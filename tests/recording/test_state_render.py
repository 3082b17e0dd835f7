"""``forge-gpu render`` of a run without a camera (collect/state_render.py): the robot drawn from the recorded state
by a camera placed on it, frames that show the robot and its motion; a run without state refused in one line."""

import numpy as np
import pytest
from PIL import Image

import forge_gpu
from forge_gpu._src.collect.state_render import camera_on, draw_from_state
from forge_gpu.cli import main
from forge_gpu.reading import EpisodeReadOptions


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A closed cartpole run (no camera, its state recorded) of 2 envs, 12-step episodes."""
    run = tmp_path_factory.mktemp("state") / "run"
    args = ["collect", "cartpole", "--envs", "2", "--episodes", "2", "--set", "max_steps=12", "--device", "cpu"]
    assert main([*args, "--out", str(run)]) == 0
    return run


def test_the_camera_frames_every_shape_from_a_fixed_direction():
    """Two bodies 1 m apart on x with shapes of radius 0.1 m: the camera looks at their middle from +x, -y, above,
    far enough for the 1.2 m box (and the margin) to fit the field of view."""
    body_q = np.array([[0, 0, 0.5, 0, 0, 0, 1], [1, 0, 0.5, 0, 0, 0, 1]], float)
    shapes = np.array([[0, 0, 0, 0, 0.1], [1, 0, 0, 0, 0.1]], float)
    camera = camera_on(body_q, shapes, 64)
    assert np.allclose(camera.look_at, [0.5, 0, 0.5])
    view = np.subtract(camera.position, camera.look_at)
    assert view[0] > 0 and view[1] < 0 and view[2] > 0 and np.isclose(view[0], -view[1])
    half = np.tan(np.radians(camera.fov_deg) / 2) * (np.linalg.norm(view) - 0.65)  # at the box's near side
    assert half >= 0.6


def test_render_draws_the_robot_from_the_recorded_state(cartpole_run, tmp_path, capsys):
    """The frames of a run without a camera, drawn from its state: not blank (the robot's pixels differ from the
    background the corners see), different where the recorded state moves, one per recorded frame; the command
    says where its camera stood and writes a GIF of them."""
    capsys.readouterr()
    run = cartpole_run
    reader = forge_gpu.reading.open_run(run)
    episode = next(reader.read([0], EpisodeReadOptions(state=True)))
    frames, camera = draw_from_state(run, (episode.env_id, episode.episode_id), size=64, device="cpu")
    assert frames.shape == (episode.steps + 1, 64, 64, 3) and frames.dtype == np.uint8
    background = frames[:, 0, 0]
    robot = (frames != background[:, None, None]).any(axis=-1)
    assert (robot.mean(axis=(1, 2)) > 0.01).all(), robot.mean(axis=(1, 2))  # every frame shows the robot
    body_q = episode.state["body_q"]
    moved = np.abs(body_q - body_q[0]).max(axis=(1, 2)) > 1e-3
    changed = (frames != frames[0]).any(axis=(1, 2, 3))
    assert moved.any() and (changed[moved]).all() and not changed[0]
    gif = tmp_path / "episode.gif"
    argv = ["render", str(run), "--episode", f"{episode.env_id}:{episode.episode_id}", "--size", "64"]
    assert main([*argv, "--device", "cpu", "--out", str(gif)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "no camera frames: drew the robot from the recorded state (a 64 px camera at" in out[0]
    assert out[1] == f"wrote {gif}"
    assert Image.open(gif).n_frames == episode.steps + 1


def test_render_refuses_a_run_without_state_in_one_line(tmp_path, capsys):
    """A run recorded with record_state = false and no camera: render names that in one line (exit 2, nothing
    written); --plot still plots its numbers."""
    run = tmp_path / "run"
    args = ["collect", "cartpole", "--envs", "2", "--episodes", "2", "--set", "max_steps=6", "--device", "cpu"]
    assert main([*args, "--set", "record_state=false", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["render", str(run), "--out", str(tmp_path / "x.gif")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "records no simulator state" in err[0] and "render --plot" in err[0], err
    assert not (tmp_path / "x.gif").exists()
    assert main(["render", str(run), "--plot", "--out", str(tmp_path / "x.png")]) == 0
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"
