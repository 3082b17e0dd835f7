"""A run carries its task and runs no one's code by surprise: a task file's run stores the task file, its model
file with what that includes and its term module (``task/``, each file's sha256 in run.json); copied to another
folder with the task's own folder gone, it replays bit for bit from itself. Replay imports code the run names
outside forge_gpu only with ``--trust-code``, and the data side (inspect, verify, report, export) never does."""

import json
import shutil

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.tasks.taskfile.stored import model_files
from forge_gpu._src.tasks.taskfile.trust import UntrustedCode, check_import, inside_forge_gpu, named_code, run_code
from forge_gpu.cli import main

ALL = forge_gpu.reading.EpisodeReadOptions(state=True)

MODEL = """<mujoco model="slider">
  <compiler angle="radian"/>
  <worldbody>
    <body name="cart" pos="0 0 1">
      <joint name="slide" type="slide" axis="1 0 0" range="-3 3"/>
      <geom name="cart_geom" type="box" size="0.2 0.1 0.1" mass="1"/>
      <include file="parts/pole.xml"/>
    </body>
  </worldbody>
</mujoco>
"""
POLE = """<mujoco>
  <body name="pole" pos="0 0 0">
    <joint name="hinge" type="hinge" axis="0 1 0"/>
    <geom name="pole_geom" type="capsule" fromto="0 0 0 0 0 0.6" size="0.03" mass="0.1"/>
  </body>
</mujoco>
"""
# Importing the module writes a file beside it: where it appears shows which copy ran, and that one did.
TERMS = """from pathlib import Path

with open(Path(__file__).with_name("imported.txt"), "a") as f:
    f.write("imported\\n")
"""
TASK = """task = "slider_trust"
instruction = "balance"
num_envs = 2
max_steps = 8
control_dt = 0.02
substeps = 2
record_state = true
module = "terms.py"

[solver]
name = "mujoco"
iterations = 10
ls_iterations = 5

[model]
file = "models/slider.xml"
ground = false
contacts = false

[action]
kind = "effort"
joints = ["slide"]
scale = 10.0

[[reset.joints]]
joints = ["slide", "hinge"]
position = 0.1
[[reset.joints]]
joints = ["slide", "hinge"]
velocity = 0.1

[[observations]]
term = "joint_pos"
[[observations]]
term = "joint_vel"

[[rewards]]
term = "alive"
weight = 1.0
[[rewards]]
term = "action_l2"
weight = -0.01

[[terminations]]
term = "joint_pos_beyond"
joints = ["hinge"]
limit = 0.3
"""
STORED = ["models/parts/pole.xml", "models/slider.xml", "slider.toml", "terms.py"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run of a task file (an MJCF model with an include, a term module), recorded; then the task's folder is
    gone, as on another machine."""
    folder = tmp_path_factory.mktemp("task")
    (folder / "models" / "parts").mkdir(parents=True)
    (folder / "models" / "slider.xml").write_text(MODEL)
    (folder / "models" / "parts" / "pole.xml").write_text(POLE)
    (folder / "terms.py").write_text(TERMS)
    (folder / "slider.toml").write_text(TASK)
    run = tmp_path_factory.mktemp("runs") / "run"
    env = forge_gpu.sim.make(str(folder / "slider.toml"), num_envs=2, device="cpu", seed=1)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(run), episodes=3)
    assert (folder / "imported.txt").is_file()  # the user's own task file: its module ran when it was made
    shutil.rmtree(folder)
    return run


@pytest.fixture
def copied(recorded, tmp_path):
    """The run copied into another folder (a shared dataset)."""
    copy = tmp_path / "dataset" / "run"
    shutil.copytree(recorded, copy)
    return copy


def _episodes(path):
    run = forge_gpu.reading.open_run(path)
    return list(run.read(list(range(len(run))), ALL))


def test_the_run_stores_its_task_file_model_with_its_include_and_module(copied):
    manifest = forge_gpu.formats.read_manifest(copied)
    listed = manifest["scene_spec"]["stored"]
    assert listed["folder"] == "task" and listed["task_file"] == "slider.toml" and sorted(listed["files"]) == STORED
    assert (copied / "task" / "slider.toml").read_text() == TASK
    assert (copied / "task" / "models" / "parts" / "pole.xml").read_text() == POLE
    assert len({entry["sha256"] for entry in listed["files"].values()}) == len(STORED)


def test_a_run_replays_from_another_folder_with_its_task_file_gone(copied, tmp_path):
    """Bit for bit from its actions, equal frames from its state; the module that ran is the run's own copy."""
    report = forge_gpu.recording.replay(copied, tmp_path / "actions", from_="actions", trust_code=True)
    assert report["episodes"] == len(forge_gpu.reading.open_run(copied)) >= 3 and report["diverged"] == 0
    assert all(d["max_error"] == 0.0 for d in report["divergence"])
    assert (copied / "task" / "imported.txt").is_file()
    report = forge_gpu.recording.replay(copied, tmp_path / "state", trust_code=True)
    recorded, again = _episodes(copied), _episodes(tmp_path / "state")
    assert len(recorded) == len(again) == report["episodes"]
    for a, b in zip(recorded, again, strict=True):
        assert np.array_equal(a.obs["proprio"], b.obs["proprio"])
        assert np.array_equal(a.next["proprio"], b.next["proprio"])
        assert np.array_equal(a.reward, b.reward) and np.array_equal(a.terminated, b.terminated)
        assert np.array_equal(a.state["joint_q"], b.state["joint_q"])
    # The replayed run carries the same task: it replays from itself too.
    source = forge_gpu.formats.read_manifest(copied)["scene_spec"]["stored"]
    assert forge_gpu.formats.read_manifest(tmp_path / "state")["scene_spec"]["stored"] == source
    assert (tmp_path / "state" / "task" / "models" / "slider.xml").read_text() == MODEL


def test_a_run_whose_module_would_write_a_file_is_refused_without_trust_code(copied, tmp_path, capsys):
    with pytest.raises(UntrustedCode) as caught:
        forge_gpu.recording.replay(copied, tmp_path / "out", from_="actions")
    message = str(caught.value)
    assert "\n" not in message and "terms.py" in message and "--trust-code" in message
    assert main(["replay", str(copied), str(tmp_path / "cli")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "terms.py" in err and "--trust-code" in err
    assert not (copied / "task" / "imported.txt").exists()
    assert not (tmp_path / "out").exists() and not (tmp_path / "cli").exists()


def test_a_run_without_stored_task_naming_a_module_in_its_own_folder_is_refused(copied, tmp_path):
    """A run.json (as an older forge_gpu wrote, or anyone) whose task file path points into the dataset, beside a
    module: replay names the module and imports nothing."""
    manifest = json.loads((copied / "run.json").read_text())
    del manifest["scene_spec"]["stored"]
    manifest["config"]["params"]["file"] = str(copied / "task" / "slider.toml")
    (copied / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(UntrustedCode, match="terms.py.*--trust-code"):
        forge_gpu.recording.replay(copied, tmp_path / "out", from_="actions")
    assert not (copied / "task" / "imported.txt").exists() and not (tmp_path / "out").exists()


def test_reading_inspecting_reporting_exporting_and_verifying_never_import_the_runs_code(copied, tmp_path, capsys):
    assert forge_gpu.reading.inspect_run(copied)["episodes"] >= 3
    assert forge_gpu.reading.verify_run(copied)["ok"]
    assert forge_gpu.reading.report(copied, tmp_path / "report.html")["episodes"] >= 3
    assert forge_gpu.export.export_robomimic(copied, tmp_path / "run.hdf5")["episodes"] >= 3
    assert forge_gpu.export.export_lerobot(copied, tmp_path / "lerobot")["episodes"] >= 3
    for command in (["inspect", str(copied)], ["verify", str(copied)], ["stats", str(copied)]):
        assert main(command) == 0, command
    capsys.readouterr()
    assert len(_episodes(copied)) >= 3
    assert not (copied / "task" / "imported.txt").exists()


def test_a_stored_file_edited_after_the_run_is_refused_in_one_line(copied, tmp_path, capsys):
    model = copied / "task" / "models" / "slider.xml"
    model.write_text(MODEL.replace('mass="1"', 'mass="2"'))
    with pytest.raises(ValueError, match="slider.xml: changed after the run was recorded") as caught:
        forge_gpu.recording.replay(copied, tmp_path / "out", from_="actions", trust_code=True)
    assert "\n" not in str(caught.value)
    assert main(["replay", str(copied), str(tmp_path / "cli"), "--trust-code"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "slider.xml" in err and "sha256" in err
    assert not (copied / "task" / "imported.txt").exists() and not (tmp_path / "out").exists()


def test_code_inside_forge_gpu_is_trusted_and_any_other_named(tmp_path):
    assert inside_forge_gpu("forge_gpu._src.tasks.cartpole:build") and inside_forge_gpu("forge_gpu.kernels.terms")
    assert not inside_forge_gpu("forge_gpu_evil:build") and not inside_forge_gpu("mypkg.forge_gpu:build")
    assert inside_forge_gpu(forge_gpu.__file__) and not inside_forge_gpu(str(tmp_path / "forge_gpu" / "terms.py"))
    shipped = forge_gpu.sim.task_config("cartpole").params
    sections = {"module": shipped.module, "model": shipped.model, "expert": shipped.expert}
    assert named_code(sections, shipped.file) == []  # a builder and an expert, both forge_gpu's
    sections = {"module": "terms.py", "model": {"builder": "pkg.models:build"}, "expert": {"factory": "pkg.x:make"}}
    assert named_code(sections, tmp_path / "t.toml") == [
        f"module = 'terms.py' ({tmp_path / 'terms.py'})",
        "model.builder = 'pkg.models:build'",
        "expert.factory = 'pkg.x:make'",
    ]
    check_import("expert.factory = 'pkg.x:make'", "pkg.x:make")  # outside a run: the user's own choice
    with run_code(str(tmp_path), trusted=False):
        check_import("model.builder = 'forge_gpu._src.tasks.cartpole:build'", "forge_gpu._src.tasks.cartpole")
        with pytest.raises(UntrustedCode, match=r"expert.factory = 'pkg.x:make'.*--trust-code"):
            check_import("expert.factory = 'pkg.x:make'", "pkg.x:make")
    with run_code(str(tmp_path), trusted=True):
        check_import("expert.factory = 'pkg.x:make'", "pkg.x:make")


def test_the_stored_model_files_follow_includes_meshes_and_textures(tmp_path):
    """What an MJCF or URDF references is stored with it (no simulator: the files are only found)."""
    (tmp_path / "assets" / "meshes").mkdir(parents=True)
    (tmp_path / "parts").mkdir()
    for name in ("assets/meshes/link.stl", "assets/wood.png", "urdf_link.obj"):
        (tmp_path / name).write_bytes(b"data")
    (tmp_path / "robot.xml").write_text(
        '<mujoco><compiler meshdir="assets/meshes" texturedir="assets"/><asset><mesh file="link.stl"/>'
        '<texture name="t" file="wood.png"/></asset><include file="parts/arm.xml"/></mujoco>'
    )
    (tmp_path / "parts" / "arm.xml").write_text('<mujoco><include file="parts/hand.xml"/></mujoco>')
    (tmp_path / "parts" / "hand.xml").write_text("<mujoco/>")
    found = {p.relative_to(tmp_path).as_posix() for p in model_files(tmp_path / "robot.xml", "mjcf")}
    assert found == {"robot.xml", "parts/arm.xml", "parts/hand.xml", "assets/meshes/link.stl", "assets/wood.png"}
    (tmp_path / "robot.urdf").write_text(
        '<robot name="r"><link name="a"><visual><geometry><mesh filename="urdf_link.obj"/></geometry></visual>'
        '<collision><geometry><mesh filename="package://other/m.stl"/></geometry></collision></link></robot>'
    )
    found = {p.relative_to(tmp_path).as_posix() for p in model_files(tmp_path / "robot.urdf", "urdf")}
    assert found == {"robot.urdf", "urdf_link.obj"}


def test_a_shipped_task_replays_from_its_stored_copy_without_trust_code(tmp_path):
    """cartpole's stored task file names a model builder and an expert of forge_gpu: trusted, no flag needed; a run
    recorded by another installation (its task file elsewhere) replays from its stored copy bit for bit."""
    run = tmp_path / "run"
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu", seed=0, max_steps=10)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(run), episodes=2)
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["scene_spec"]["stored"]["files"].keys() == {"cartpole.toml"}
    manifest["config"]["params"]["file"] = str(tmp_path / "elsewhere" / "configs" / "cartpole.toml")
    (run / "run.json").write_text(json.dumps(manifest))
    report = forge_gpu.recording.replay(run, tmp_path / "again", from_="actions")
    assert report["episodes"] >= 2 and report["diverged"] == 0
    replayed = forge_gpu.formats.read_manifest(tmp_path / "again")
    assert replayed["config"]["params"]["file"] == str((run / "task" / "cartpole.toml").resolve())  # the stored copy
    assert (tmp_path / "again" / "task" / "cartpole.toml").read_bytes() == (run / "task" / "cartpole.toml").read_bytes()


def test_a_task_naming_its_model_by_an_absolute_path_replays_only_the_model_it_stored(tmp_path):
    """The stored task file still names the absolute path: replay reads it there, and refuses once it differs from
    the file the run stored."""
    folder = tmp_path / "task"
    (folder / "models" / "parts").mkdir(parents=True)
    (folder / "models" / "slider.xml").write_text(MODEL)
    (folder / "models" / "parts" / "pole.xml").write_text(POLE)
    text = TASK.replace('"slider_trust"', '"slider_absolute"').replace('module = "terms.py"\n', "")
    (folder / "slider.toml").write_text(text.replace('"models/slider.xml"', f'"{folder / "models" / "slider.xml"}"'))
    env = forge_gpu.sim.make(str(folder / "slider.toml"), num_envs=2, device="cpu", seed=1)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(tmp_path / "run"), episodes=2)
    (folder / "slider.toml").rename(folder / "moved.toml")  # replay builds the run's stored copy
    report = forge_gpu.recording.replay(tmp_path / "run", tmp_path / "same", from_="actions")
    assert report["diverged"] == 0
    (folder / "models" / "slider.xml").write_text(MODEL.replace('mass="1"', 'mass="2"'))
    with pytest.raises(ValueError, match=r"read other files than it stored \(.*slider.xml is none of them"):
        forge_gpu.recording.replay(tmp_path / "run", tmp_path / "other", from_="actions")
    assert not (tmp_path / "other").exists()


def test_a_selected_and_a_converted_run_carry_the_task_and_replay_from_it(copied, tmp_path):
    """select (a curated run) and convert copy the source's task folder: each replays with its source gone."""
    selected, converted = tmp_path / "selected", tmp_path / "converted"
    forge_gpu.curation.select_run(copied, selected, "episode < 2")
    forge_gpu.curation.convert_run(copied, converted, to="packed", compression="zstd")
    shutil.rmtree(copied)
    for run in (selected, converted):
        listed = forge_gpu.formats.read_manifest(run)["scene_spec"]["stored"]
        assert sorted(p.relative_to(run / "task").as_posix() for p in (run / "task").rglob("*.*")) == STORED
        assert sorted(listed["files"]) == STORED
        report = forge_gpu.recording.replay(run, tmp_path / f"{run.name}-again", from_="actions", trust_code=True)
        assert report["episodes"] == len(forge_gpu.reading.open_run(run)) and report["diverged"] == 0
