"""A task file's several cameras: a fixed ``front`` camera of the task and a ``wrist`` camera its robot file carries,
mounted on the Panda's hand. Both are recorded under their fields, the wrist camera rides with the hand's full pose
(the kernel's pose equals the one the data side recomputes from the recorded state), replay ``--from state``
re-renders both equal, and the readers and exports take both. Bad camera keys are refused in one line."""

import json
from pathlib import Path

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.core.cameras import MOUNT_KEY, mounted_camera_to_world
from forge_gpu._src.tasks.taskfile.plan import plan_task
from forge_gpu._src.tasks.taskfile.spec import resolved

PANDA = Path(__file__).resolve().parents[2] / "configs" / "robots" / "panda" / "panda.xml"

ROBOT = f"""
control_dt = 0.02
substeps = 10

[model]
file = "{PANDA}"
ground = true
contacts = false

[action]
kind = "position"
joints = ["joint*"]
scale = 0.3
stiffness = 400.0
damping = 40.0

[reset]
joint_position = 0.3
joint_velocity = 0.0

[cameras.wrist]
mount = "hand"
size = 32
fov = 60.0
position = [0.08, 0.0, 0.0]
look_at = [0.0, 0.0, 0.15]
up = [1.0, 0.0, 0.0]
"""

TASK = """
task = "two_cameras"
instruction = "move the arm"
robot = "panda_cameras.toml"
num_envs = 2
max_steps = 4
record_state = true

[[observations]]
term = "joint_pos"
[[observations]]
term = "camera"
size = 32
position = [1.2, 0.8, 0.9]
look_at = [0.3, 0.0, 0.4]
"""


def write_task(folder: Path, task: str = TASK, robot: str = ROBOT) -> Path:
    (folder / "panda_cameras.toml").write_text(robot)
    path = folder / "task.toml"
    path.write_text(task.replace('task = "two_cameras"', f'task = "cameras_{folder.name}"'))  # one id per folder
    return path


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("cameras"))


@pytest.fixture(scope="module")
def recorded(task_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "two_cameras"
    env = forge_gpu.sim.make(str(task_file), num_envs=2, device="cpu", seed=2)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(out), episodes=2)
    return env, out


def test_both_cameras_are_recorded_with_their_calibration(recorded):
    env, run = recorded
    manifest = forge_gpu.formats.read_manifest(run)
    observation = manifest["env_spec"]["observation"]
    for field, shape in (("rgb", [32, 32, 3]), ("depth", [32, 32]), ("wrist_rgb", [32, 32, 3]),
                         ("wrist_depth", [32, 32])):  # fmt: skip
        assert observation[field]["shape"] == shape, field
    cameras = manifest["calibration"]["cameras"]
    assert list(cameras) == ["front", "wrist"]
    assert "camera_to_world" in cameras["front"] and MOUNT_KEY not in cameras["front"]
    wrist = cameras["wrist"]
    assert wrist[MOUNT_KEY]["body"] == "hand" and "camera_to_world" not in wrist and not wrist["same_for_all_worlds"]
    assert wrist["intrinsics"]["width"] == 32 and wrist["intrinsics"]["fx"] != cameras["front"]["intrinsics"]["fx"]
    options = forge_gpu.reading.EpisodeReadOptions(state=True)
    episodes = list(forge_gpu.reading.open_run(run).read([0, 1], options))
    for e in episodes:
        # The wrist camera sees something near (the fingers, the arm or the ground within a few metres).
        depth = e.next["wrist_depth"]
        assert (depth > 0).any() and depth[depth > 0].min() < 2.0
        assert not np.array_equal(e.next["rgb"], e.next["wrist_rgb"])
        assert len(np.unique(e.next["wrist_rgb"].reshape(-1, 3), axis=0)) > 4
    # The camera rides with the hand: its pose differs between the frames of an episode as the hand moves.
    poses = mounted_camera_to_world(wrist, episodes[0].state["body_q"])
    assert np.abs(poses[1:, :3, 3] - poses[:1, :3, 3]).max() > 1e-3


def test_the_mounted_camera_is_the_bodys_pose_times_camera_to_body(recorded):
    """The kernel's pose of the wrist camera in every world equals the data side's recomputation from body_q."""
    env, run = recorded
    env.step(np.random.default_rng(0).uniform(-1, 1, env.action_input.shape).astype(np.float32))
    wrist = next(c for c in env.task.file_cameras.all if c.name == "wrist")
    entry = forge_gpu.formats.read_manifest(run)["calibration"]["cameras"]["wrist"]
    body_q = env.state_fields["body_q"].numpy()  # [N, bodies, 7]
    expected = mounted_camera_to_world(entry, body_q)  # one world per row, OpenCV axes
    got = wrist.cameras.transforms.numpy()  # [N, 7]: Newton's camera frame (OpenGL axes)
    for w in range(2):
        x, y, z, s = got[w, 3:]
        r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * s), 2 * (x * z + y * s)],
                      [2 * (x * y + z * s), 1 - 2 * (x * x + z * z), 2 * (y * z - x * s)],
                      [2 * (x * z - y * s), 2 * (y * z + x * s), 1 - 2 * (x * x + y * y)]])  # fmt: skip
        assert np.allclose(got[w, :3], expected[w, :3, 3], atol=1e-5)
        assert np.allclose(r @ np.diag([1.0, -1.0, -1.0]), expected[w, :3, :3], atol=1e-5)
    # The optical axis points from the camera toward the fingertips' side of the hand (+z of the hand's frame).
    hand = mounted_camera_to_world({MOUNT_KEY: entry[MOUNT_KEY], "camera_to_body": np.eye(4)}, body_q)
    assert all(np.dot(expected[w, :3, 2], hand[w, :3, 2]) > 0.8 for w in range(2))


def test_replay_from_state_rerenders_every_camera_equal(recorded, tmp_path):
    _, run = recorded
    report = forge_gpu.recording.replay(run, tmp_path / "again", batch=2)
    options = forge_gpu.reading.EpisodeReadOptions(state=True)
    ids = list(range(report["episodes"]))
    recorded_episodes = list(forge_gpu.reading.open_run(run).read(ids, options))
    again = list(forge_gpu.reading.open_run(tmp_path / "again").read(ids, options))
    assert len(again) == len(recorded_episodes) == 2
    for a, b in zip(recorded_episodes, again, strict=True):
        for name in ("proprio", "rgb", "depth", "wrist_rgb", "wrist_depth"):
            assert np.array_equal(a.obs[name], b.obs[name]) and np.array_equal(a.next[name], b.next[name]), name


def test_readers_and_exports_take_both_cameras(recorded, tmp_path):
    _, run = recorded
    inspected = forge_gpu.reading.inspect_run(run)
    assert inspected["cameras"]["front"] == {"rgb": "rgb", "depth": "depth", "placed": "fixed"}
    assert inspected["cameras"]["wrist"] == {"rgb": "wrist_rgb", "depth": "wrist_depth", "placed": "mounted on hand"}
    forge_gpu.reading.report(run, tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert 'alt="env00000-episode00000000 rgb | depth"' in page
    assert 'alt="env00000-episode00000000 wrist_rgb | wrist_depth"' in page
    lerobot = forge_gpu.export.export_lerobot(run, tmp_path / "lerobot")
    assert lerobot["left_out"] == ["depth", "wrist_depth"]
    info = json.loads((tmp_path / "lerobot" / "meta" / "info.json").read_text())
    for key in ("observation.images.rgb", "observation.images.wrist_rgb"):
        assert info["features"][key]["shape"][:2] == [32, 32], key
        assert (tmp_path / "lerobot" / "videos" / key).is_dir(), key
    import h5py

    forge_gpu.export.export_robomimic(run, tmp_path / "run.hdf5")
    with h5py.File(tmp_path / "run.hdf5") as f:
        demo = f["data/demo_0"]
        assert demo["obs/wrist_rgb"].shape[1:] == (32, 32, 3) and demo["obs/rgb"].shape[1:] == (32, 32, 3)
        assert demo["next_obs/wrist_depth"].shape[1:] == (32, 32)


def planned_cameras(path: Path) -> list[dict]:
    """The cameras of a task file's plan (no world built)."""
    config = forge_gpu.sim.task_config(str(path))
    return plan_task(resolved(config.params, str(path)), str(path)).cameras


def test_a_robot_camera_joins_the_tasks_with_a_camera_and_can_be_turned_off(tmp_path):
    assert [c["name"] for c in planned_cameras(write_task(tmp_path))] == ["front", "wrist"]
    no_camera = TASK[: TASK.index('[[observations]]\nterm = "camera"')]
    assert planned_cameras(write_task(tmp_path, no_camera)) == []
    off = TASK + '[[observations]]\nterm = "camera"\nname = "wrist"\nenabled = false\n'
    assert [c["name"] for c in planned_cameras(write_task(tmp_path, off))] == ["front"]
    bigger = TASK + '[[observations]]\nterm = "camera"\nname = "wrist"\nsize = 48\n'
    cameras = planned_cameras(write_task(tmp_path, bigger))
    assert [(c["name"], c["size"], c["mount_name"]) for c in cameras] == [("front", 32, None), ("wrist", 48, "hand")]


@pytest.mark.parametrize(
    ("extra", "robot_extra", "message"),
    [
        ('name = "front"\nposition = [1.0, 0.0, 1.0]\nlook_at = [0.0, 0.0, 0.0]\n', "",
         r"observations\[\d\].name = 'front': a second camera of that name"),
        ('name = "Wrist"\nposition = [1.0, 0.0, 1.0]\nlook_at = [0.0, 0.0, 0.0]\n', "",
         r"observations\[\d\].name = 'Wrist': expected a camera name"),
        ('name = "side"\nmount = "hand"\nfollow = "hand"\nposition = [1.0, 0.0, 1.0]\nlook_at = [0.0, 0.0, 0.0]\n',
         "", r"a camera takes follow .* or mount .*, not both"),
        ('name = "side"\nmount = "palm"\nposition = [1.0, 0.0, 1.0]\nlook_at = [0.0, 0.0, 0.0]\n', "",
         r"observations\[\d\].mount = 'palm'"),
        ('name = "side"\nposition = [0.0, 0.0, 1.0]\nlook_at = [0.0, 0.0, 0.0]\nup = [0.0, 0.0, 2.0]\n', "",
         r"must not look along its observations\[\d\].up = \[0.0, 0.0, 2.0\]"),
        ("", '[cameras.front]\nsize = 16\n', r"\[cameras.front\]: the unnamed camera's defaults are \[camera\]"),
    ],
)  # fmt: skip
def test_bad_cameras_are_refused_in_one_line(tmp_path, extra, robot_extra, message):
    task = TASK + ('[[observations]]\nterm = "camera"\n' + extra if extra else "")
    path = write_task(tmp_path, task, ROBOT + robot_extra)
    with pytest.raises(ValueError, match=message) as caught:
        forge_gpu.sim.task_config(str(path))
    assert "\n" not in str(caught.value)
