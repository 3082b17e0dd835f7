"""lift's task file: its scene objects refused in one line when wrong, the floor under the table (a cube beyond the
table's edge comes to rest on it; stack and place extend lift and have it too), the coupled gripper (``[action]
follow``), and a collection that replays from its actions with zero divergence."""

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.sim.config import config_dir

LIFT = config_dir() / "lift.toml"
BAD = [
    ("shape = \"box\"\nsize = [\"params.cube_size\"", "shape = \"cone\"\nsize = [\"params.cube_size\"", "model.scene.cube.shape"),  # noqa: E501
    ("size = [1.2, 1.2, 0.05]", "size = [1.2, 0.0, 0.05]", "model.scene.table.size"),
    ("color = [0.55, 0.45, 0.35]", "color = [0.55, 0.45]", "model.scene.table.color"),
    ('mass = "params.cube_mass"\nfriction', "radius = 0.02\nfriction", "model.scene.cube.radius"),
    ('hold = "params.hold_time"', "hold = -1.0", "success[0].hold"),
    ("require = true", 'require = "yes"', "success[0].require"),
    ('other = "cube"', 'other = "left_finger"', "success[1]"),
]


@pytest.mark.parametrize(("old", "new", "key"), BAD, ids=[b[2] for b in BAD])
def test_a_bad_scene_or_condition_is_refused_in_one_line_naming_file_and_key(tmp_path, old, new, key):
    text = LIFT.read_text()
    assert old in text
    (tmp_path / "bad.toml").write_text(text.replace(old, new, 1).replace('task = "lift"', 'task = "lift_bad"'))
    with pytest.raises(ValueError) as error:
        forge_gpu.sim.make(str(tmp_path / "bad.toml"), num_envs=1, device="cpu")
    message = str(error.value)
    assert "\n" not in message and key in message and "bad.toml" in message, message


@pytest.mark.parametrize("task", ["lift", "stack", "place"])
def test_the_grasping_scenes_have_the_floor_under_the_table(task):
    """The floor (a static box) of lift's scene, in stack's and place's by ``extends``: its top at the table's
    bottom, reaching beyond the table on every side."""
    from forge_gpu._src.tasks.taskfile.compose import compose

    scene = compose(config_dir() / f"{task}.toml").table["model"]["scene"]
    table, floor = scene["table"], scene["floor"]
    assert floor["static"] is True
    assert floor["position"][2] + floor["size"][2] / 2 == pytest.approx(table["position"][2] - table["size"][2] / 2)
    for axis in (0, 1):
        assert floor["position"][axis] - floor["size"][axis] / 2 < table["position"][axis] - table["size"][axis] / 2
        assert floor["position"][axis] + floor["size"][axis] / 2 > table["position"][axis] + table["size"][axis] / 2


def test_a_cube_beyond_the_tables_edge_comes_to_rest_on_the_floor():
    """A cube placed past the table's corner (x 1.0, y 0.7; the table ends at 0.9 and 0.6) falls to the floor and
    rests there: finite, its centre at the floor's top (z = -0.05) plus its half edge, within 1 mm, level; one on
    the table beside it stays at the table's top."""
    env = forge_gpu.sim.make("lift", num_envs=2, device="cpu", seed=0, **{
        "params.render": False, "params.reset_spread": 0.0, "randomize.cube_size": [0.05, 0.05],
        "randomize.cube_position": {"low": [0.8, 0.5], "high": [1.0, 0.7]}})  # fmt: skip
    first = env.reset().numpy()
    place = np.array([[1.0, 0.7], [0.6, 0.3]], np.float32)  # beyond the corner; on the table
    q = env.world.joint_q.numpy()
    q[:, 9:11] = place  # the cube's free joint: x, y first
    env.world.joint_q.assign(q)
    hold = first.observation["proprio"][:, :8].copy()
    hold[:, 7] = 0.08
    for _ in range(50):  # 1 s
        cube = env.step(hold).numpy().observation["cube_pose"]
    assert np.isfinite(cube).all()
    assert np.abs(cube[:, :2] - place).max() < 1e-3
    assert np.abs(cube[:, 2] - np.array([-0.05 + 0.025, 0.025])).max() < 1e-3, cube[:, 2]
    assert np.abs(cube[:, 3:5]).max() < 1e-3  # level: no tilt about x or y


def test_a_bad_solver_cone_is_refused_in_one_line():
    with pytest.raises(ValueError) as error:
        forge_gpu.sim.make("lift", num_envs=1, device="cpu", **{"solver.cone": "round"})
    assert "\n" not in str(error.value) and "cone" in str(error.value) and "elliptic" in str(error.value)


def test_the_second_finger_follows_the_gripper_column():
    """The action's last column is the gripper's width: both fingers' position targets are half of it, clipped to
    the fingers' range (0 .. 0.04 m)."""
    env = forge_gpu.sim.make("lift", num_envs=2, device="cpu", seed=0, **{"params.render": False})
    env.reset()
    action = env.world.joint_q.numpy()[:, :8].astype(np.float32)
    action[:, 7] = [0.03, 0.2]  # the second beyond the action's high (0.08): clipped
    env.step(action)
    targets = env.world.control.joint_target_q.numpy().reshape(2, -1)
    assert np.allclose(targets[:, 7], [0.015, 0.04]) and np.allclose(targets[:, 8], targets[:, 7])


def test_lift_replays_from_actions_with_zero_divergence(tmp_path):
    env = forge_gpu.sim.make(
        "lift", num_envs=2, device="cpu", seed=3, **{"params.render": False, "max_steps": 12}
    )
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(tmp_path / "run"), episodes=2)
    report = forge_gpu.recording.replay(tmp_path / "run", tmp_path / "again", from_="actions", batch=2)
    assert report["episodes"] == 2 and report["diverged"] == 0
    assert all(d["max_error"] == 0.0 for d in report["divergence"])
