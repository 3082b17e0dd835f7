"""Robot models as users bring them (tasks/taskfile/: model, modelfile, actuators, penetration): meshes, the model's
own actuators and keyframes, its options, floor and placement said at build, what it holds that is not simulated
named in one warning, a body inside the ground reported after the first reset, and the two shipped robots
(configs/robots/): servo_dog stands on its servos holding its keyframe, mesh_arm collects, replays and renders."""

import shutil
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.tasks.taskfile.modelfile import ModelWarning
from forge_gpu.cli import main

ROBOTS = Path(__file__).resolve().parents[2] / "configs" / "robots"
SERVO_DOG = ROBOTS / "servo_dog" / "task.toml"
MESH_ARM = ROBOTS / "mesh_arm" / "task.toml"


def _copy(tmp_path: Path, robot: str, toml_edit=None, model_edit=None) -> Path:
    """A copy of a shipped robot's folder in ``tmp_path`` (a new path: a fresh probe), its files edited."""
    folder = tmp_path / robot
    shutil.copytree(ROBOTS / robot, folder)
    task = folder / "task.toml"
    unique = f"t_{zlib.crc32(str(folder).encode()):08x}"  # a task id of its own
    text = task.read_text().replace(f'task = "{robot}"', f'task = "{unique}"', 1)
    task.write_text(toml_edit(text) if toml_edit else text)
    if model_edit:
        name = {"servo_dog": "servo_dog.xml", "mesh_arm": "mesh_arm.urdf"}[robot]
        (folder / name).write_text(model_edit((folder / name).read_text()))
    return task


def _messages(record, text: str) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, ModelWarning) and text in str(w.message)]


def test_servo_dog_holds_its_home_keyframe_standing_on_its_own_servos():
    """No [action] kind: the action is the model's eight position servos (kp 60, kv 3); zero action holds the
    keyframe, so the torso stays near the keyframe's height for 2 s."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        env = forge_gpu.sim.make(str(SERVO_DOG), num_envs=2, device="cpu", seed=0)
    assert env.task.plan.action_kind == "actuators" and env.task.spec.action_dim == 8
    assert env.task.plan.action_joints[:2] == ["fl_hip", "fl_knee"]
    # The floor is replaced as the file says (ground = true); the model's option timestep equals control_dt /
    # substeps: nothing said.
    assert not _messages(record, "floor") and not _messages(record, "timestep")
    assert not _messages(record, "overlap by")  # the keyframe's feet touch the ground, nothing deeper
    result = env.reset()
    z0 = result.observation["proprio"].numpy()[:, 0].copy()
    assert np.allclose(z0, 0.358)  # the keyframe's root height
    zero = np.zeros((2, 8), np.float32)
    for _ in range(100):
        result = env.step(zero)
    z = result.observation["proprio"].numpy()[:, 0]
    print(f"servo_dog root height: {z0[0]:.4f} m at reset, {z[0]:.4f} m after 2 s of zero action")
    assert not result.terminated.numpy().any() and np.all(np.abs(z - z0) < 0.03), z
    joints = result.observation["proprio"].numpy()[:, 11:19]
    assert np.allclose(joints, [0.6, -1.2] * 4, atol=0.1), joints


def test_an_explicit_action_replaces_the_models_servos_and_an_unknown_keyframe_is_refused(tmp_path):
    task = _copy(
        tmp_path, "servo_dog", lambda t: t.replace("[action]\n", '[action]\nkind = "effort"\njoints = ["*"]\n')
    )
    env = forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    assert env.task.plan.action_kind == "effort"
    assert not env.model.joint_target_ke.numpy().any()  # the servos are off: the action's torques alone act
    task = _copy(tmp_path / "b", "servo_dog", lambda t: t.replace('pose = "home"', 'pose = "crouch"'))
    with pytest.raises(ValueError, match=r"model.pose = 'crouch': no such keyframe .*the model's are 'home'$"):
        forge_gpu.sim.make(str(task), num_envs=2, device="cpu")


def test_the_models_motors_take_their_gear_and_ctrlrange(tmp_path):
    """The ant's motors (gear 15, ctrlrange [-1, 1]) as the default action: action 0.5 times scale 4 is ctrl 2,
    clipped by MuJoCo to 1, which is 15 N m: the same motion as the explicit effort action of 15 N m, the same
    joints in the model's order."""
    text = (ROBOTS.parents[0] / "ant.toml").read_text().split("[action]")[0].replace('task = "ant"', 'task = "{id}"')
    text += '\n[[observations]]\nterm = "joint_pos"\n'
    (tmp_path / "motors.toml").write_text(text.replace("{id}", "ant_motors") + "[action]\nscale = 4.0\n")
    (tmp_path / "efforts.toml").write_text(
        text.replace("{id}", "ant_efforts") + '[action]\nkind = "effort"\njoints = ["hip_*", "ankle_*"]\nscale = 15.0\n'
    )
    motors = forge_gpu.sim.make(str(tmp_path / "motors.toml"), num_envs=2, device="cpu", seed=1)
    efforts = forge_gpu.sim.make(str(tmp_path / "efforts.toml"), num_envs=2, device="cpu", seed=1)
    assert motors.task.plan.action_kind == "actuators"
    order = motors.task.plan.action_joints  # the MJCF's actuator order: hip_4, ankle_4, hip_1, ...
    assert order[:2] == ["hip_4", "ankle_4"] and sorted(order) == sorted(efforts.task.plan.action_joints)
    signs = np.array([1, -1, 1, 1, -1, -1, 1, -1], np.float32)
    motors.reset(), efforts.reset()
    for _ in range(10):
        a = motors.step(np.tile(0.5 * signs, (2, 1))).state["joint_q"].numpy()
        b = efforts.step(np.tile(signs[[order.index(j) for j in efforts.task.plan.action_joints]], (2, 1)))
    moved = np.abs(a[:, 7:] - motors.task.default_q.numpy()[:, 7:]).max()
    assert moved > 0.05 and np.allclose(a, b.state["joint_q"].numpy(), atol=1e-3)


def test_what_the_defaults_replace_is_said_and_what_the_file_sets_is_not(tmp_path):
    """The task steps at control_dt / substeps: a model timestep that differs is replaced. By the defaults the
    file left unset, the build says so naming both; by the file's own values, the file said it. The same for the
    model's floor (ground unset: said) and its solver iterations (the default [solver] iterations: said)."""
    unset = _copy(tmp_path, "servo_dog", lambda t: t.replace("control_dt = 0.02\nsubsteps = 4\n", ""),
                  lambda m: m.replace('timestep="0.005"', 'timestep="0.004"'))  # fmt: skip
    default = r'<option timestep="0.004"> replaced by the task\'s default .* = 0.02 / 4 = 0.005 s'
    with pytest.warns(ModelWarning, match=default):
        forge_gpu.sim.make(str(unset), num_envs=2, device="cpu")
    given = _copy(tmp_path / "b", "servo_dog", model_edit=lambda m: m.replace('timestep="0.005"', 'timestep="0.004"'))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        forge_gpu.sim.make(str(given), num_envs=2, device="cpu")
    assert not _messages(record, "timestep")
    implicit = _copy(
        tmp_path / "c",
        "servo_dog",
        lambda t: t.replace("ground = true\n", "").replace("\niterations = 10\n", "\n"),
        lambda m: m.replace('<option timestep="0.005"', '<option timestep="0.005" iterations="50"'),
    )
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        forge_gpu.sim.make(str(implicit), num_envs=2, device="cpu")
    assert _messages(record, "its floor 'floor' replaced by the ground plane (z = 0; model.ground = true says so")
    assert _messages(record, '<option iterations="50"> replaced by the default [solver] iterations = ')


def test_what_is_not_simulated_is_named_in_one_warning(tmp_path):
    sensors = '  <sensor>\n    <jointpos name="hip_angle" joint="fl_hip"/>\n    <framequat name="imu" objtype="body" objname="torso"/>\n  </sensor>\n</mujoco>'  # noqa: E501
    task = _copy(tmp_path, "servo_dog", model_edit=lambda m: m.replace("</mujoco>", sensors))
    with pytest.warns(ModelWarning) as record:
        forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    lines = _messages(record, "not simulated")
    assert len(lines) == 1 and "2 sensor(s) 'hip_angle', 'imu'" in lines[0] and "\n" not in lines[0], lines


def test_position_replaces_the_root_and_a_body_in_the_ground_is_reported_once(tmp_path):
    """Without position the model's own root height stands (0.45 m, not 0); with one, it replaces it (as the
    docs say); a torso placed 0.1 m up starts with its legs inside the ground: one warning after the first reset
    names them and the depth."""
    table = '[model.pose]\n"*_hip" = 0.6\n"*_knee" = -1.2\n'
    own = _copy(tmp_path, "servo_dog", lambda t: t.replace('pose = "home"\n', table))
    env = forge_gpu.sim.make(str(own), num_envs=2, device="cpu")
    assert np.isclose(env.task.default_q.numpy()[0, 2], 0.45)
    low = _copy(
        tmp_path / "b", "servo_dog", lambda t: t.replace('pose = "home"\n', "position = [0.0, 0.0, 0.1]\n" + table)
    )
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        env = forge_gpu.sim.make(str(low), num_envs=2, device="cpu")
        assert np.isclose(env.task.default_q.numpy()[0, 2], 0.1)
        env.reset()
        env.reset()
    inside = _messages(record, "overlap by")
    assert len(inside) == 1 and "servo_dog.xml: at the first reset" in inside[0], inside
    assert "ground_plane" in inside[0] and "_foot (body " in inside[0] and "overlap by 0.2" in inside[0], inside


def test_a_malformed_model_file_is_refused_naming_the_file_and_line(tmp_path):
    task = _copy(
        tmp_path, "servo_dog", model_edit=lambda m: m.replace('<option timestep="0.005"', "<option timestep=0.005")
    )
    with pytest.raises(ValueError) as error:
        forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    message = str(error.value)
    assert "\n" not in message and f"{task.parent / 'servo_dog.xml'}:6:" in message and "malformed XML" in message


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        ("position = [0.0, 0.7]", "model.position"),
        ('rotation = "up"', "model.rotation"),
        ('ground = "yes"', "model.ground"),
        ('ignore_names = "floor"', "model.ignore_names"),
    ],
)
def test_a_bad_model_value_is_refused_in_one_line_naming_the_file_and_key(tmp_path, capsys, edit, key):
    home = 'ground = true\npose = "home"\n'
    task = _copy(tmp_path, "servo_dog", lambda t: t.replace(home, f'pose = "home"\n{edit}\n'))
    with pytest.raises(ValueError) as error:
        forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    message = str(error.value)
    assert "\n" not in message and str(task) in message and key in message, message
    assert main(["collect", str(task), "--out", str(tmp_path / "out"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0], err


def test_without_trimesh_a_mesh_model_names_the_extra(tmp_path, monkeypatch):
    task = _copy(tmp_path, "mesh_arm")
    monkeypatch.setitem(sys.modules, "trimesh", None)
    with pytest.raises(ValueError) as error:
        forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    message = str(error.value)
    assert "\n" not in message and 'pip install "forge-gpu[meshes]"' in message and "mesh_arm.urdf" in message


def test_mesh_arm_collects_replays_and_renders_its_meshes(tmp_path):
    """A URDF of OBJ and STL links: its effort limits are the action (yaw 5, shoulder 20, elbow 10 N m per unit);
    collected by the CLI, replayed from actions with zero divergence, its camera shows the arm (an MJCF that names
    the same mesh files loads too)."""
    pytest.importorskip("trimesh")
    env = forge_gpu.sim.make(str(MESH_ARM), num_envs=2, device="cpu")
    assert env.task.plan.action_kind == "actuators" and env.task.plan.action_joints == ["yaw", "shoulder", "elbow"]
    run = tmp_path / "run"
    args = ["--episodes", "2", "--envs", "2", "--set", "max_steps=8", "--device", "cpu"]
    assert main(["collect", str(MESH_ARM), "--out", str(run), "--policy", "expert", *args[:-2], "--device", "cpu"]) == 0
    report = forge_gpu.recording.replay(run, tmp_path / "again", from_="actions", batch=2)
    assert report["episodes"] == 2 and report["diverged"] == 0
    assert main(["replay", str(run), str(tmp_path / "states")]) == 0
    episode = next(iter(forge_gpu.reading.open_run(run).read([0], forge_gpu.reading.EpisodeReadOptions())))
    rgb = episode.next["rgb"]
    assert rgb.shape[1:] == (48, 48, 3) and len(np.unique(rgb[0].reshape(-1, 3), axis=0)) > 8
    mjcf = tmp_path / "arm.xml"
    shutil.copy(ROBOTS / "mesh_arm" / "base.obj", tmp_path / "base.obj")
    mjcf.write_text('<mujoco><asset><mesh name="base" file="base.obj"/></asset><worldbody><body name="b" pos="0 0 0.2">'
                    '<freejoint/><geom type="mesh" mesh="base"/></body></worldbody></mujoco>')  # fmt: skip
    import newton

    from forge_gpu._src.tasks.taskfile.model import add_model

    builder = newton.ModelBuilder()
    add_model(builder, {"file": "arm.xml"}, str(tmp_path / "task.toml"))
    assert builder.shape_type[0] == int(newton.GeoType.MESH)


def test_the_cli_says_each_model_warning_as_one_line(tmp_path, capsys):
    """forge-gpu tasks on a model with sensors: the warning is one ``forge-gpu: warning:`` line, not Python's
    two-line warning with a source line."""
    from forge_gpu.cli import main

    sensors = '  <sensor>\n    <jointpos name="hip_angle" joint="fl_hip"/>\n  </sensor>\n</mujoco>'
    task = _copy(tmp_path, "servo_dog", model_edit=lambda m: m.replace("</mujoco>", sensors))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["collect", str(task), "--envs", "2", "--steps", "2", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err.splitlines()
    said = [line for line in err if "not simulated" in line]
    assert len(said) == 1 and said[0].startswith("forge-gpu: warning: ") and "'hip_angle'" in said[0], err
    assert not any("ModelWarning" in line or "warnings.warn" in line for line in err), err


def test_an_actuator_on_a_tendon_is_refused_by_the_default_action_in_one_line(tmp_path, capsys):
    """MuJoCo Warp would drive a tendon actuator, but the action's columns are joints: the default action (the
    model's own actuators) names it in one line instead of dropping it."""
    from forge_gpu.cli import main

    tendon = '  <tendon>\n    <fixed name="hips">\n      <joint joint="fl_hip" coef="1"/>\n    </fixed>\n  </tendon>\n'
    pull = '    <motor name="pull" tendon="hips"/>\n'
    task = _copy(
        tmp_path,
        "servo_dog",
        model_edit=lambda m: m.replace("  <actuator>\n", tendon + "  <actuator>\n" + pull),
    )
    with pytest.raises(ValueError) as error:
        forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    message = str(error.value)
    assert "\n" not in message and "'pull'" in message and "a tendon" in message, message
    assert main(["tasks", str(task)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'pull'" in err[0], err
