"""Every model as MuJoCo reads it, or one line that says what differs (tasks/taskfile/mujoco_check.py, model.py,
modelfile.py, stored.py): ``forge-gpu check-model`` against MuJoCo itself on small model files written here, and
each silent difference closed: includes' compiler settings and worldbodies, settotalmass, tendons on joints Newton
merges, height-field floors, reset noise within the joint ranges, a default pose outside a range, tendon actuators
under an explicit [action], ignore_names leaving a massless body, Newton's own warnings."""

import shutil
import struct
import warnings
import zlib
from pathlib import Path

import mujoco
import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.sim.newton_notes import BuildWarning, lines
from forge_gpu._src.tasks.taskfile.modelfile import ModelWarning
from forge_gpu._src.tasks.taskfile.mujoco_check import check_model
from forge_gpu.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

ARM = """<mujoco model="arm">
  <compiler angle="degree"{compiler}/>
  <option timestep="0.005"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="upper" pos="0 0 0.3">
      <joint name="shoulder" type="hinge" axis="0 1 0" range="-90 90"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
      <body name="fore" pos="0.3 0 0">
        <joint name="elbow" type="hinge" axis="0 1 0" range="{elbow}"/>
        <geom type="capsule" fromto="0.05 0 0 0.25 0 0" size="0.025" mass="0.5"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="m_shoulder" joint="shoulder" gear="10" ctrlrange="-1 1"/>
    <position name="p_elbow" joint="elbow" kp="20" ctrlrange="-1 2"/>
  </actuator>
</mujoco>
"""

HOPPER = """<mujoco model="chain">
  <worldbody>
    <body name="torso" pos="0 0 1">
      <joint name="rootx" type="slide" axis="1 0 0"/>
      <joint name="rootz" type="slide" axis="0 0 1"/>
      <geom type="box" size="0.1 0.1 0.1" mass="2"/>
      <body name="thigh" pos="0 0 -0.15">
        <joint name="hip" type="hinge" axis="0 1 0" range="-1 1"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03"/>
        <body name="shin" pos="0 0 -0.3">
          <joint name="knee" type="hinge" axis="0 1 0" range="-2 0"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03"/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <fixed name="couple"><joint joint="hip" coef="1"/><joint joint="knee" coef="-0.5"/></fixed>
    <fixed name="lift"><joint joint="rootz" coef="1"/><joint joint="hip" coef="0.2"/></fixed>
  </tendon>
  <actuator>
    <position name="lift_servo" tendon="lift" kp="50"/>
    <motor name="knee_motor" joint="knee" gear="3"/>
  </actuator>
</mujoco>
"""


def _task(folder: Path, model: str, extra: str = "", reset: str = "") -> Path:
    """A task file of its own id in ``folder`` on the model file ``model``, every joint an effort action."""
    task = folder / "task.toml"
    unique = f"t_{zlib.crc32(str(task).encode()):08x}"
    task.write_text(f'task = "{unique}"\ninstruction = "hold"\nmax_steps = 8\n\n[model]\nfile = "{model}"\n{extra}\n'
                    f'[action]\nkind = "effort"\njoints = ["*"]\n\n[reset]\n{reset}\n\n[[observations]]\n'
                    'term = "joint_pos"\n')  # fmt: skip
    return task


def _stl(path: Path, size: float) -> None:
    """A tetrahedron of edge ``size`` [m] as a binary STL."""
    v = np.array([[0, 0, 0], [size, 0, 0], [0, size, 0], [0, 0, size]], np.float32)
    faces = [(0, 2, 1), (0, 1, 3), (0, 3, 2), (1, 2, 3)]
    data = b"\0" * 80 + struct.pack("<I", len(faces))
    for a, b, c in faces:
        data += struct.pack("<12fH", 0, 0, 0, *v[a], *v[b], *v[c], 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_check_model_names_a_tendon_that_loses_a_merged_joint_and_exits_1(tmp_path, capsys):
    """The chain's root slides are one joint of two axes in Newton: the tendon over one of them and the hip keeps
    only the hip; check-model names it in one line and exits 1, and building the task names it too (not Newton's
    raw ``Skipping joint entry`` warning)."""
    (tmp_path / "chain.xml").write_text(HOPPER)
    found = check_model(str(tmp_path / "chain.xml"), steps=20)
    assert found.differences == ["tendon 'lift': couples 1 of its 2 joints (a joint merged with another of its body "
                                 "is dropped)"], found.differences  # fmt: skip
    assert any("'rootx', 'rootz'" in note for note in found.notes)
    assert main(["check-model", str(tmp_path / "chain.xml"), "--steps", "20"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 difference(s)" and sum(line.startswith("  differs: ") for line in out) == 1, out
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        forge_gpu.sim.make(str(_task(tmp_path, "chain.xml")), num_envs=2, device="cpu")
    said = [str(w.message) for w in record if issubclass(w.category, ModelWarning | BuildWarning)]
    assert any("tendon 'lift' loses joint 'rootz'" in m for m in said), said
    assert not any("Skipping joint entry" in str(w.message) for w in record)


def test_check_model_names_a_pose_outside_a_range_and_a_contact_mujoco_makes(tmp_path):
    """An elbow whose default 0 lies outside its range [5, 150] degrees, and a body welded to the world whose
    child rests on it (MuJoCo keeps that contact, Newton filters it, so the arm falls through it): each is one line,
    and the rollout that follows is said with its largest distance."""
    (tmp_path / "arm.xml").write_text(ARM.format(compiler="", elbow="5 150"))
    found = check_model(str(tmp_path / "arm.xml"), steps=50)
    assert any(line.startswith("its default pose is outside a joint's range: 'elbow' at 0 against [0.08727, 2.618]")
               for line in found.differences), found.differences  # fmt: skip
    assert all("\n" not in line for line in found.differences)
    welded = ARM.format(compiler="", elbow="-150 150").replace('<body name="upper" pos="0 0 0.3">',
        '<body name="base" pos="0 0 0.3"><geom type="box" pos="0.15 0 -0.05" size="0.15 0.05 0.03" mass="1"/>'
        '<body name="upper">').replace(
        "</body>\n    </body>\n  </worldbody>", "</body>\n    </body></body>\n  </worldbody>")  # fmt: skip
    (tmp_path / "welded.xml").write_text(welded)
    found = check_model(str(tmp_path / "welded.xml"), steps=50)
    assert "contacts at the first frame that MuJoCo makes and forge_gpu does not: 'base' with 'upper'" in (
        found.differences
    ), found.differences
    assert found.rollout.startswith("zero-control rollout of 50 steps (0.25 s at 0.005 s): largest body distance")


@pytest.mark.parametrize(
    "target",
    ["ant.toml", "robots/servo_dog.toml", "robots/panda.toml", "robots/hopper2d/task.toml",
     "robots/quadruped.toml", "robots/mesh_arm/task.toml", "lift.toml"],
)  # fmt: skip
def test_check_model_says_nothing_on_the_shipped_models(target):
    """The shipped robots' models (the ant's and the quadruped's Newton assets, servo_dog, the Panda, hopper2d, the
    mesh arm's URDF) have no difference from MuJoCo's load of the same file, their rollouts agree within 1 mm; a
    task file's model too (lift's: its [model.scene] names params, and is the task's, left out)."""
    if target.startswith("robots/mesh_arm"):
        pytest.importorskip("trimesh")
    found = check_model(str(CONFIGS / target), steps=60)
    assert found.differences == [], found.differences
    assert "largest body distance" in found.rollout


def test_settotalmass_gives_the_mass_mujoco_gives(tmp_path):
    """``<compiler settotalmass="6">``: the bodies' masses and inertias scaled as MuJoCo scales them (1.5 kg as
    written, 6 kg built), said at build; check-model finds no mass or inertia difference."""
    (tmp_path / "arm.xml").write_text(ARM.format(compiler=' settotalmass="6"', elbow="-150 150"))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        env = forge_gpu.sim.make(str(_task(tmp_path, "arm.xml")), num_envs=2, device="cpu")
    reference = mujoco.MjModel.from_xml_path(str(tmp_path / "arm.xml"))
    masses = env.model.body_mass.numpy().reshape(2, -1)[0]
    assert np.isclose(masses.sum(), 6.0) and np.isclose(masses.sum(), reference.body_mass.sum())
    assert np.allclose(np.sort(masses), np.sort(reference.body_mass[1:]), rtol=1e-5)
    assert any("settotalmass" in str(w.message) and "scaled by 4" in str(w.message) for w in record)
    found = check_model(str(tmp_path / "arm.xml"), steps=20)
    assert not [line for line in found.differences if "mass" in line or "inertia" in line], found.differences


@pytest.mark.parametrize("later", [False, True])
def test_meshdir_set_in_an_included_file_replays_from_the_run_alone(tmp_path, later):
    """The mesh folder set by ``<compiler meshdir>`` in an included file (and, ``later``, a top-level
    ``<compiler>`` after the include naming another folder, which MuJoCo takes): the build reads the meshes MuJoCo
    reads, the run's task/ folder stores them, and the run replays after the model's folder is deleted."""
    pytest.importorskip("trimesh")
    folder = tmp_path / "robot"
    _stl(folder / "meshes" / "link.stl", 0.05)
    _stl(folder / "assets" / "link.stl", 0.08)
    (folder / "parts").mkdir()
    (folder / "parts" / "body.xml").write_text("""<mujoco>
  <compiler meshdir="meshes" angle="radian"/>
  <asset><mesh name="link" file="link.stl"/></asset>
  <worldbody>
    <body name="link" pos="0 0 0.3">
      <joint name="swing" type="hinge" axis="0 1 0" range="-1 1"/>
      <geom type="mesh" mesh="link" mass="1"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/>
    </body>
  </worldbody>
</mujoco>
""")
    top = '<compiler meshdir="assets"/>' if later else ""
    main_file = f'<mujoco model="robot">\n  <include file="parts/body.xml"/>\n  {top}\n</mujoco>\n'
    (folder / "robot.xml").write_text(main_file)
    task = _task(folder, "robot.xml")
    found = check_model(str(folder / "robot.xml"), steps=10)
    assert found.differences == [], found.differences
    env = forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    import newton

    mesh = next(s for s, t in zip(env.model.shape_source, env.model.shape_type.numpy(), strict=True)
                if int(t) == int(newton.GeoType.MESH))  # fmt: skip
    assert np.isclose(np.abs(mesh.vertices).max(), 0.08 if later else 0.05)
    run = tmp_path / "run"
    assert main(["collect", str(task), "--out", str(run), "--envs", "2", "--episodes", "2", "--device", "cpu"]) == 0
    wanted = "assets/link.stl" if later else "meshes/link.stl"
    stored = sorted(p.relative_to(run / "task").as_posix() for p in (run / "task").rglob("*") if p.is_file())
    assert wanted in stored and "parts/body.xml" in stored and len(stored) == 4, stored  # and robot.xml, task.toml
    shutil.rmtree(folder)
    assert main(["replay", str(run), str(tmp_path / "again"), "--from", "actions"]) == 0


def test_a_tendon_actuator_model_collects_with_an_explicit_action(tmp_path):
    """A model with a tendon servo: the default action refuses it in one line; an explicit [action] switches it off
    (its gains zeroed, as the joint servos' are) and the task builds and steps."""
    (tmp_path / "chain.xml").write_text(HOPPER)
    task = _task(tmp_path, "chain.xml")
    env = forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    assert env.task.plan.action_kind == "effort"
    gains = env.solver.mjw_model.actuator_gainprm.numpy().reshape(-1, 10)
    assert not gains[0].any()  # the tendon servo is off
    env.reset()
    env.step(np.zeros((2, env.task.spec.action_dim), np.float32))
    default = tmp_path / "default"
    default.mkdir()
    (default / "chain.xml").write_text(HOPPER.replace('<motor name="knee_motor" joint="knee" gear="3"/>', ""))
    text = _task(default, "chain.xml").read_text().replace('kind = "effort"\njoints = ["*"]\n', "")
    (default / "task.toml").write_text(text)
    with pytest.raises(ValueError, match=r"model actuator 'lift_servo' drives a tendon; the default action") as e:
        forge_gpu.sim.make(str(default / "task.toml"), num_envs=2, device="cpu")
    assert "\n" not in str(e.value)


def test_a_height_field_floor_is_refused_in_one_line(tmp_path):
    """A floor of ``type="hfield"`` is refused naming it and the key that stands the robot on the ground plane
    instead; that key builds."""
    hfield = ARM.format(compiler="", elbow="-150 150").replace(
        '<geom name="floor" type="plane" size="2 2 0.1"/>', '<geom name="terrain" type="hfield" hfield="bumps"/>'
    ).replace("<worldbody>", '<asset><hfield name="bumps" nrow="3" ncol="3" size="1 1 0.1 0.1" '
              'elevation="0 0 0 0 1 0 0 0 0"/></asset>\n  <worldbody>', 1)  # fmt: skip
    (tmp_path / "arm.xml").write_text(hfield)
    task = _task(tmp_path, "arm.xml")
    with pytest.raises(ValueError, match=r"its floor 'terrain' is a height field .* model.ignore_names") as e:
        forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    assert "\n" not in str(e.value)
    task.write_text(task.read_text().replace('file = "arm.xml"', 'file = "arm.xml"\nignore_names = ["terrain"]'))
    forge_gpu.sim.make(str(task), num_envs=2, device="cpu")


def test_reset_noise_stays_within_the_joint_ranges(tmp_path):
    """``[reset] joint_position = 3`` on hinges of ranges [-90, 90] and [5, 150] degrees: every drawn position is
    within its range; the elbow's default 0 (outside its range, said once at build) is where its draws start."""
    (tmp_path / "arm.xml").write_text(ARM.format(compiler="", elbow="5 150"))
    task = _task(tmp_path, "arm.xml", reset="joint_position = 3.0")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        env = forge_gpu.sim.make(str(task), num_envs=16, device="cpu", seed=3)
    said = [str(w.message) for w in record if "outside a joint's range" in str(w.message)]
    assert len(said) == 1 and "'elbow' at 0 against [0.08727, 2.618]" in said[0], said
    q = env.reset().observation["proprio"].numpy()
    assert np.all(np.abs(q[:, 0]) <= np.pi / 2 + 1e-6) and np.any(np.abs(q[:, 0]) > 1.5)  # clipped, not all inside
    assert np.all(q[:, 1] >= 0.0) and np.all(q[:, 1] <= np.radians(150) + 1e-6), q[:, 1]


def test_ignore_names_that_leave_a_moving_body_massless_are_refused(tmp_path):
    """``ignore_names`` that removes the fore arm's only geom keeps the body, which MuJoCo refuses: refused in one
    line naming the body and the way out."""
    arm = ARM.format(compiler="", elbow="-150 150").replace(
        '<geom type="capsule" fromto="0.05 0 0 0.25 0 0"', '<geom name="fore_geom" type="capsule" '
        'fromto="0.05 0 0 0.25 0 0"')  # fmt: skip
    (tmp_path / "arm.xml").write_text(arm)
    task = _task(tmp_path, "arm.xml", extra='ignore_names = ["fore_geom"]')
    with pytest.raises(ValueError, match=r"removes every geom of body 'fore', which moves .* \('fore\$'\)") as e:
        forge_gpu.sim.make(str(task), num_envs=2, device="cpu")
    assert "\n" not in str(e.value)


def test_a_keyframe_counts_the_coordinates_of_every_worldbody(tmp_path):
    """A scene file included first (its worldbody holds a free box) and the arm's worldbody after it: the keyframe
    gives both's 9 coordinates and is the default pose; one value short is refused naming what was compared."""
    (tmp_path / "scene.xml").write_text('<mujoco><worldbody><body name="box" pos="0.5 0 0.1"><freejoint/>'
                                        '<geom type="box" size="0.05 0.05 0.05" mass="0.2"/></body></worldbody>'
                                        "</mujoco>")  # fmt: skip
    arm = ARM.format(compiler="", elbow="-150 150").replace("<worldbody>", '<include file="scene.xml"/>\n  <worldbody>')
    key = "0.5 0 0.1 1 0 0 0 0.3 0.6"
    arm = arm.replace("</mujoco>", f'  <keyframe><key name="home" qpos="{key}"/></keyframe>\n</mujoco>')
    (tmp_path / "arm.xml").write_text(arm)
    env = forge_gpu.sim.make(str(_task(tmp_path, "arm.xml", extra='pose = "home"')), num_envs=2, device="cpu")
    q = env.model.joint_q.numpy().reshape(2, -1)[0]
    assert np.allclose(q[-2:], [0.3, 0.6]) and np.allclose(q[:3], [0.5, 0, 0.1])
    (tmp_path / "arm.xml").write_text(arm.replace(key, key[:-4]))
    other = tmp_path / "short"
    other.mkdir()
    shutil.copy(tmp_path / "scene.xml", other / "scene.xml")
    (other / "arm.xml").write_text(arm.replace(key, key[:-4]))
    with pytest.raises(ValueError, match=r"the keyframe has 8 qpos values; the model file's joints have 9 and the "
                                         r"model as built has 9 coordinates") as e:  # fmt: skip
        forge_gpu.sim.make(str(_task(other, "arm.xml", extra='pose = "home"')), num_envs=2, device="cpu")
    assert "\n" not in str(e.value)


def test_newtons_warnings_become_one_line_each_in_forge_gpus_words(tmp_path, capsys):
    """A body whose inertia is below Newton's minimum: Newton corrects it and warns in its own words with advice a
    task file cannot follow; forge_gpu says it once as one line naming the model file's part to check, no
    site-packages path. The margin warnings of many geoms count as one line."""
    bad = ARM.format(compiler="", elbow="-150 150").replace(
        '<geom type="capsule" fromto="0.05 0 0 0.25 0 0" size="0.025" mass="0.5"/>',
        '<inertial pos="0.1 0 0" mass="0.5" diaginertia="1e-12 1e-12 1e-12"/>'
        '<geom type="capsule" fromto="0.05 0 0 0.25 0 0" size="0.025" mass="0"/>')  # fmt: skip
    (tmp_path / "arm.xml").write_text(bad)
    assert main(["check-model", str(tmp_path / "arm.xml"), "--steps", "5"]) == 1  # the corrected inertia differs
    out, err = capsys.readouterr()
    assert "  differs: body 'fore': principal inertia" in out, out
    err = err.splitlines()
    said = [line for line in err if "inertia of" in line]
    assert len(said) == 1 and said[0].startswith("forge-gpu: warning: ") and "<inertial>" in said[0], err
    assert not any("site-packages" in line or "validate_inertia_detailed" in line for line in err), err
    margins = [f"Geom g{i}: authored margin=0.001 zeroed for NATIVECCD/MULTICCD compatibility (#2106)." for i in
               range(52)]  # fmt: skip
    assert lines(margins) == [
        "the contact margin of 52 geom(s) or pair(s) set to 0: MuJoCo Warp's convex collision takes none, so their "
        "contacts start at touch (a model's margin has no effect here)"
    ]


def test_tasks_takes_set_as_collect_does(tmp_path, capsys):
    """``forge-gpu tasks FILE --set KEY=VALUE`` describes the task with the change; an unknown key is one line
    naming the file; ``--set`` without a task is refused; an unknown ``[randomize]`` entry's line names the file."""
    (tmp_path / "arm.xml").write_text(ARM.format(compiler="", elbow="-150 150"))
    task = _task(tmp_path, "arm.xml")
    assert main(["tasks", str(task), "--set", "max_steps=77", "--set", "reset.joint_position=0.5"]) == 0
    assert main(["tasks", str(task), "--set", "bogus=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(task) in err[0] and "unknown key bogus" in err[0], err
    assert main(["tasks", "--set", "max_steps=5"]) == 2
    capsys.readouterr()
    assert main(["tasks", str(task), "--set", "variant=ee"]) == 2  # as collect: the option, not a --set
    assert capsys.readouterr().err == "forge-gpu: --set variant=...: use the --variant option instead\n"
    task.write_text(task.read_text() + "\n[randomize]\nbogus_key = [0.1, 0.2]\n")
    assert main(["tasks", str(task)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"forge-gpu: {task}: randomize.bogus_key: "), err


def test_collect_and_tasks_say_the_checks_differences_once_and_keep_the_check(tmp_path, capfd, monkeypatch):
    """``collect`` of a task file whose model differs from MuJoCo's load of it (a tendon that loses a merged joint)
    prints that difference as one ``forge-gpu: warning:`` line before it steps, once; ``tasks FILE`` lists it. The
    check runs once: a second command reads it from the cache (keyed by the model's files), and a changed model
    file is checked again."""
    from forge_gpu._src.tasks.taskfile import check_cache, mujoco_check

    monkeypatch.setattr(check_cache, "cache_folder", lambda name: str(tmp_path / "cache" / name))
    computed = []
    real = mujoco_check.check_table
    monkeypatch.setattr(mujoco_check, "check_table", lambda *a, **k: computed.append(1) or real(*a, **k))
    (tmp_path / "chain.xml").write_text(HOPPER)
    task = _task(tmp_path, "chain.xml")
    line = ("forge-gpu: warning: chain.xml differs from MuJoCo's load of it: tendon 'lift': couples 1 of its 2 "
            "joints (a joint merged with another of its body is dropped)")  # fmt: skip
    for k in range(2):
        run = tmp_path / f"run{k}"
        assert main(["collect", str(task), "--envs", "2", "--steps", "2", "--device", "cpu", "--out", str(run)]) == 0
        out, err = capfd.readouterr()
        assert err.splitlines().count(line) == 1 and (out + err).count("couples 1 of its 2") == 1, err
        assert err.count("loses joint 'rootz'") == 1, err  # the build's own note, not said again by the check
        assert len(computed) == 1  # the second command read the kept check
    assert len(list((tmp_path / "cache" / "model_check").glob("*.json"))) == 1
    assert main(["tasks", str(task)]) == 0
    out = capfd.readouterr().out.splitlines()
    listed = [row for row in out if "MuJoCo" in row]
    assert listed.count(f"    {line.removeprefix('forge-gpu: warning: chain.xml ')}") == 1, out
    assert all(row.startswith("    differs from MuJoCo's load of it: ") for row in listed), listed  # and the rollout
    (tmp_path / "chain.xml").write_text(HOPPER.replace('name="lift"><joint joint="rootz"', 'name="lift"><joint '
                                                       'joint="knee"'))  # fmt: skip
    assert main(["tasks", str(task)]) == 0
    out = capfd.readouterr().out.splitlines()
    assert len(computed) == 2 and [row for row in out if "MuJoCo" in row] == [
        "    checked against MuJoCo's load of it: no differences"
    ], out


def test_a_shipped_task_says_no_difference(capfd):
    """The shipped tasks' models have no difference from MuJoCo's (docs/robots.md): ``tasks`` says so in one line
    and lists none."""
    assert main(["tasks", "ant"]) == 0
    out = capfd.readouterr().out.splitlines()
    assert [row for row in out if "MuJoCo" in row] == ["    checked against MuJoCo's load of it: no differences"], out
