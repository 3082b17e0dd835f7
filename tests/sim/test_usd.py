"""USD models (tasks/taskfile/: model, modelfile, stored): ``[model] file = "*.usda"`` imports a USD physics
articulation with Newton's USD importer; the shipped usd_pendulum (configs/robots/usd_pendulum/) collects through
its task file, replays from its actions with zero divergence from the run alone, and renders; ``position`` replaces
the root body's pose as for MJCF; the run stores the stage with its sublayers and references; without usd-core a
USD model is refused in one line naming the extra."""

import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.tasks.taskfile import stored
from forge_gpu._src.tasks.taskfile.model import add_model
from forge_gpu.cli import main

pytest.importorskip("pxr")

ROBOTS = Path(__file__).resolve().parents[2] / "configs" / "robots"


def _copy(tmp_path: Path, edit=None) -> Path:
    """A copy of usd_pendulum's folder in ``tmp_path`` (a new path: a fresh probe), its task file edited."""
    folder = tmp_path / "usd_pendulum"
    shutil.copytree(ROBOTS / "usd_pendulum", folder)
    task = folder / "task.toml"
    unique = f"t_{zlib.crc32(str(folder).encode()):08x}"
    text = task.read_text().replace('task = "usd_pendulum"', f'task = "{unique}"', 1)
    task.write_text(edit(text) if edit else text)
    return task


def test_usd_pendulum_collects_replays_from_the_run_alone_and_renders(tmp_path):
    """Collected by the CLI with its expert, the run stores the .usda; with the task's folder gone, it replays from
    its actions with zero divergence; its camera shows the pendulum; the hinge is the action, the pole a body."""
    task = _copy(tmp_path)
    env = forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    assert env.task.plan.action_joints == ["hinge"] and env.task.spec.action_dim == 1
    assert np.allclose(env.task.default_q.numpy(), 0.8)  # [model.pose] hinge = 0.8
    run = tmp_path / "run"
    args = ["--episodes", "2", "--envs", "2", "--set", "max_steps=8", "--device", "cpu"]
    assert main(["collect", str(task), "--out", str(run), "--policy", "expert", *args]) == 0
    listed = forge_gpu.formats.read_manifest(run)["scene_spec"]["stored"]
    assert sorted(listed["files"]) == ["task.toml", "usd_pendulum.usda"], listed
    assert (run / "task" / "usd_pendulum.usda").read_bytes() == (task.parent / "usd_pendulum.usda").read_bytes()
    shutil.rmtree(task.parent)
    report = forge_gpu.recording.replay(run, tmp_path / "again", from_="actions", batch=2)
    assert report["episodes"] == 2 and report["diverged"] == 0
    assert all(d["max_error"] == 0.0 for d in report["divergence"])
    episode = next(iter(forge_gpu.reading.open_run(run).read([0], forge_gpu.reading.EpisodeReadOptions())))
    rgb = episode.next["rgb"]
    assert rgb.shape[1:] == (48, 48, 3) and len(np.unique(rgb[0].reshape(-1, 3), axis=0)) > 8
    # The pole moves: the hinge's angle changes over the episode (the pole's weight against the expert's PD).
    angles = episode.next["proprio"][:, 0]
    assert np.ptp(angles) > 1e-3, angles


def test_without_usd_core_a_usd_model_is_refused_in_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    import newton  # noqa: F401  (first, with usd-core: Newton registers its USD schemas once, at its import)

    task = _copy(tmp_path)
    monkeypatch.setitem(sys.modules, "pxr", None)
    with pytest.raises(ValueError) as error:
        forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    message = str(error.value)
    assert "\n" not in message and "usd_pendulum.usda" in message and 'pip install "forge-gpu[meshes]"' in message
    assert "usd-core" in message
    assert main(["collect", str(task), "--out", str(tmp_path / "out"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "usd-core" in err[0], err
    assert not (tmp_path / "out").exists()


def test_position_and_rotation_replace_the_root_bodys_pose(tmp_path):
    """The base is fixed 1 m up by the file's joint to the world: without position it stays there; with one, the
    base body is at position and rotation exactly (not 1 m above it), the pole below it as in the file;
    floating = true replaces the file's fixed joint by a free one."""
    import newton

    source = str(ROBOTS / "usd_pendulum" / "task.toml")
    own = newton.ModelBuilder()
    add_model(own, {"file": "usd_pendulum.usda"}, source)
    assert np.allclose(own.body_q[0][:3], [0.0, 0.0, 1.0]) and np.allclose(own.body_q[1][:3], [0.0, 0.0, 0.7])
    turn = [0.0, 0.0, float(np.sin(0.25)), float(np.cos(0.25))]  # 0.5 rad about z
    placed = newton.ModelBuilder()
    add_model(placed, {"file": "usd_pendulum.usda", "position": [0.5, -0.2, 0.4], "rotation": turn}, source)
    assert np.allclose(placed.body_q[0], [0.5, -0.2, 0.4, *turn], atol=1e-6), placed.body_q[0]
    assert np.allclose(placed.body_q[1][:3], [0.5, -0.2, 0.1], atol=1e-6)
    assert add_model(newton.ModelBuilder(), {"file": "usd_pendulum.usda"}, source) == []  # no drive: nothing said
    free = newton.ModelBuilder()
    add_model(free, {"file": "usd_pendulum.usda", "position": [0.0, 0.0, 2.0], "floating": True}, source)
    assert free.joint_type[0] == newton.JointType.FREE and np.allclose(free.joint_q[:3], [0.0, 0.0, 2.0])


LAYERED = """#usda 1.0
(
    subLayers = [@scene/physics.usda@]
    upAxis = "Z"
    metersPerUnit = 1
)

def Xform "robot" (
    prepend apiSchemas = ["PhysicsArticulationRootAPI"]
    prepend references = @parts/body.usda@</body>
)
{
}

def Plane "floor" (
    prepend apiSchemas = ["PhysicsCollisionAPI"]
)
{
    uniform token axis = "Z"
}
"""
PHYSICS = """#usda 1.0
def PhysicsScene "physicsScene" (
    prepend apiSchemas = ["NewtonSceneAPI"]
)
{
    vector3f physics:gravityDirection = (0, 0, -1)
    float physics:gravityMagnitude = 5
    uniform int newton:timeStepsPerSecond = 400
}
"""
BODY = """#usda 1.0
def Xform "body" (
    prepend apiSchemas = ["PhysicsRigidBodyAPI", "PhysicsMassAPI"]
)
{
    float physics:mass = 1
    double3 xformOp:translate = (0, 0, 0.5)
    uniform token[] xformOpOrder = ["xformOp:translate"]
    def Sphere "ball" (
        prepend apiSchemas = ["PhysicsCollisionAPI"]
    )
    {
        double radius = 0.1
    }
}
"""


def test_a_layered_stage_is_stored_with_its_sublayers_and_references_and_its_floor_is_said(tmp_path):
    """A stage whose physics scene is a sublayer and whose body is a reference (in other folders): the run stores
    all three under their relative paths; its static collision plane is its floor, replaced by the ground plane and
    said; its scene's gravity and step rate are said where they differ from the task's."""
    import newton

    from forge_gpu._src.tasks.taskfile.modelfile import read_model_file, stepping

    (tmp_path / "scene").mkdir()
    (tmp_path / "parts").mkdir()
    (tmp_path / "robot.usda").write_text(LAYERED)
    (tmp_path / "scene" / "physics.usda").write_text(PHYSICS)
    (tmp_path / "parts" / "body.usda").write_text(BODY)
    (tmp_path / "task.toml").write_text('task = "layered"\n[model]\nfile = "robot.usda"\n')
    files, name = stored.gather(str(tmp_path / "task.toml"), (str(tmp_path / "robot.usda"), "usd"), "")
    assert name == "task.toml" and sorted(files) == ["parts/body.usda", "robot.usda", "scene/physics.usda", "task.toml"]
    assert files["parts/body.usda"] == BODY.encode()
    builder = newton.ModelBuilder()
    notes = add_model(builder, {"file": "robot.usda"}, str(tmp_path / "task.toml"))
    assert notes == [
        "robot.usda: its floor '/floor' replaced by the ground plane (z = 0; model.ground = true says so, "
        "model.ground = false keeps the model's floor)"
    ]
    assert builder.shape_label.count("/floor") == 0 and "ground_plane" in builder.shape_label
    assert np.allclose(builder.body_q[0][:3], [0.0, 0.0, 0.5]) and np.allclose(builder.gravity, [0, 0, -5.0])
    kept = newton.ModelBuilder()
    assert add_model(kept, {"file": "robot.usda", "ground": False}, str(tmp_path / "task.toml")) == []
    assert "/floor" in kept.shape_label and "ground_plane" not in kept.shape_label
    info = read_model_file(str(tmp_path / "robot.usda"), "usd", "task.toml")
    config = forge_gpu.sim.TaskConfig(task="layered", instruction="")
    said = " ".join(stepping(info, config, str(tmp_path / "task.toml")))
    assert "its physics scene's step 0.0025 s replaced by the task's default" in said, said
    assert "gravity [0.0, 0.0, -5.0] from its physics scene" in said, said


def test_a_joint_drive_is_kept_as_written_and_said(tmp_path):
    """A PhysicsDriveAPI on the hinge becomes Newton's joint target (stiffness per degree turned per radian): the
    build keeps it and says so."""
    import newton
    from pxr import Usd, UsdPhysics

    stage = Usd.Stage.Open(str(ROBOTS / "usd_pendulum" / "usd_pendulum.usda"))
    drive = UsdPhysics.DriveAPI.Apply(stage.GetPrimAtPath("/pendulum/hinge"), "angular")
    drive.CreateStiffnessAttr(5.0), drive.CreateDampingAttr(0.5)
    stage.GetRootLayer().Export(str(tmp_path / "driven.usda"))
    builder = newton.ModelBuilder()
    notes = add_model(builder, {"file": "driven.usda"}, str(tmp_path / "task.toml"))
    assert builder.joint_target_mode[0] == int(newton.JointTargetMode.POSITION) and builder.joint_target_ke[0] > 0
    assert len(notes) == 1 and notes[0].startswith("driven.usda: its joint drives on 'hinge' kept as written"), notes


def test_a_malformed_usd_file_is_refused_in_one_line_naming_the_file(tmp_path):
    import newton

    (tmp_path / "bad.usda").write_text('#usda 1.0\ndef Xform "robot" {\n  double3 xformOp:translate = (0, 0\n}\n')
    with pytest.raises(ValueError) as error:
        add_model(newton.ModelBuilder(), {"file": "bad.usda"}, str(tmp_path / "task.toml"))
    message = str(error.value)
    assert "\n" not in message and str(tmp_path / "bad.usda") in message and "malformed USD" in message, message
