"""The grasping tasks' two RGB-D cameras on the shipped lift task: the task's fixed ``front`` camera and the wrist
camera the Panda's robot file carries on the hand. A short run of lift with its expert records both; the wrist
camera looks between the fingers (the cube fills more of it as the hand closes on it); replay ``--from actions``
re-simulates without divergence and ``--from state`` re-renders both cameras equal to the recorded frames; the
LeRobot and robomimic exports hold both cameras, and the report's gallery shows both in a real browser."""

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from helpers.scripts import TOOLS, load_script

import forge_gpu

LIFT = Path(__file__).resolve().parents[2] / "configs" / "lift.toml"
SIZE = 32
STEPS = 60  # the expert's hand reaches the cube and closes on it by about step 55
CAMERAS = {"rgb": [SIZE, SIZE, 3], "depth": [SIZE, SIZE], "wrist_rgb": [SIZE, SIZE, 3], "wrist_depth": [SIZE, SIZE]}

browser = load_script(TOOLS / "browser.py", "tools_browser")  # headless Chromium (tools/browser.py)
needs_chromium = pytest.mark.skipif(browser.chromium() is None, reason="no chromium: .ci/run installs it (apt-get)")


@pytest.fixture(scope="module")
def lift_run(tmp_path_factory):
    """A lift run of the expert: 2 envs, 32 px cameras, one episode each of STEPS steps."""
    out = tmp_path_factory.mktemp("grasp_cameras") / "lift"
    overrides = {"params.image_size": SIZE, "max_steps": STEPS}
    env = forge_gpu.sim.make(str(LIFT), num_envs=2, device="cpu", seed=4, **overrides)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("expert", env), str(out), episodes=2)
    return out


def read(run):
    """Every episode of ``run``, with its state."""
    reader = forge_gpu.reading.open_run(run)
    return list(reader.read(list(range(len(reader))), forge_gpu.reading.EpisodeReadOptions(state=True)))


def cube_share(rgb: np.ndarray, color) -> np.ndarray:
    """Per frame, the share of the image's pixels of about the cube's colour (``color`` in 0..1)."""
    target = np.asarray(color, dtype=np.float32) * 255
    near = np.abs(rgb.astype(np.float32) - target).max(axis=-1) < 60
    return near.reshape(len(rgb), -1).mean(axis=1)


def test_lift_records_both_cameras_and_the_wrist_camera_sees_the_grasp(lift_run):
    manifest = forge_gpu.formats.read_manifest(lift_run)
    observation = manifest["env_spec"]["observation"]
    assert {f: observation[f]["shape"] for f in CAMERAS} == CAMERAS
    cameras = manifest["calibration"]["cameras"]
    assert list(cameras) == ["front", "wrist"] and cameras["wrist"]["mounted_on"]["body"] == "hand"
    palette = tomllib.loads(LIFT.read_text())["palette"]
    episodes = read(lift_run)
    assert len(episodes) == 2
    for e in episodes:
        assert e.steps == STEPS
        color = palette[re.match(r"lift the (\w+) cube", e.instruction).group(1)]
        wrist = cube_share(np.concatenate([e.obs["wrist_rgb"], e.next["wrist_rgb"][-1:]]), color)
        front = cube_share(np.concatenate([e.obs["rgb"], e.next["rgb"][-1:]]), color)
        # The front camera sees the cube at the start (the hand hides it later); the hand closes on it, so it fills a
        # good part of the wrist camera's image at the end, far more than at the start (from above, before the descent).
        assert front[0] > 0
        print(f"cube's share of the image: front {front[0]:.3f} at the start; wrist {wrist[0]:.3f} -> {wrist[-1]:.3f}")
        assert wrist[-1] > 0.15 and wrist[-1] > 2 * wrist[0]
        # The wrist camera's depth: near things (the fingers, the cube) within the hand's reach at the end.
        depth = e.next["wrist_depth"][-1]
        assert (depth > 0).all() and depth.min() < 0.15


def test_replay_from_actions_has_zero_divergence(lift_run, tmp_path):
    report = forge_gpu.recording.replay(lift_run, tmp_path / "actions", from_="actions", batch=2)
    assert report["episodes"] == 2 and report["diverged"] == 0
    assert all(d["first_step"] is None for d in report["divergence"]) and len(report["divergence"]) == 2


def test_replay_from_state_rerenders_both_cameras_equal(lift_run, tmp_path):
    report = forge_gpu.recording.replay(lift_run, tmp_path / "state", from_="state", batch=2)
    assert report["episodes"] == 2
    again = {(e.env_id, e.episode_id): e for e in read(tmp_path / "state")}
    for e in read(lift_run):
        a = again[(e.env_id, e.episode_id)]
        for field in CAMERAS:
            assert np.array_equal(e.obs[field], a.obs[field]) and np.array_equal(e.next[field], a.next[field]), field


def test_the_exports_hold_both_cameras(lift_run, tmp_path):
    lerobot = forge_gpu.export.export_lerobot(lift_run, tmp_path / "lerobot")
    assert lerobot["left_out"] == ["depth", "wrist_depth"]
    info = json.loads((tmp_path / "lerobot" / "meta" / "info.json").read_text())
    for key in ("observation.images.rgb", "observation.images.wrist_rgb"):
        assert info["features"][key]["shape"][:2] == [SIZE, SIZE], key
        assert list((tmp_path / "lerobot" / "videos" / key).rglob("*.mp4")), key
    import h5py

    forge_gpu.export.export_robomimic(lift_run, tmp_path / "lift.hdf5")
    episodes = read(lift_run)
    with h5py.File(tmp_path / "lift.hdf5") as f:
        demos = [f[f"data/{name}"] for name in sorted(f["data"])]
        assert len(demos) == 2
        for demo in demos:
            for field, shape in CAMERAS.items():
                assert demo[f"obs/{field}"].shape == (STEPS, *shape), field
                assert demo[f"next_obs/{field}"].shape == (STEPS, *shape), field
        # The exported images are the recorded ones.
        stored = {np.asarray(d["obs/wrist_rgb"]).tobytes() for d in demos}
        assert stored == {e.obs["wrist_rgb"].tobytes() for e in episodes}


@needs_chromium
def test_the_reports_gallery_shows_both_cameras_in_a_browser(lift_run, tmp_path):
    out = tmp_path / "report.html"
    result = forge_gpu.reading.report(lift_run, out)
    assert result["gallery"] == 2
    page = browser.load(out, screenshot=tmp_path / "report.png")
    assert page.checked and page.errors == [] and page.console == []
    for e in read(lift_run):
        stem = f"env{e.env_id:05d}-episode{e.episode_id:08d}"
        for shown in ("rgb | depth", "wrist_rgb | wrist_depth"):
            assert page.images.get(f"{stem} {shown}") == "yes", (stem, shown, sorted(page.images))
