"""Robot files and task files (tasks/taskfile/compose.py): a task names its robot, extends another file, offers
variants; observation groups are fields of their own; a user term declares named parameters (forge_gpu.sim.terms)
checked by ``forge-gpu tasks`` in one line before any kernel compiles; the moved quadruped and humanoid equal their
single files bit for bit; servo_dog walks the quadruped's task from a three-line file, collected and replayed."""

import re
from pathlib import Path

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.tasks.taskfile.spec import read_task_file
from forge_gpu.cli import main

HERE = Path(__file__).parent / "robot_files"
CONFIGS = Path(__file__).resolve().parents[2] / "configs"

ROBOT = """
[model]
builder = "forge_gpu.sim:cartpole_model"
ground = false
contacts = false
[model.args]
cart_mass = "params.cart_mass"
pole_mass = 0.1
pole_length = 1.0

[params]
cart_mass = 1.0

[action]
kind = "effort"
joints = ["slider"]
scale = 20.0
"""

TASK = """
task = "{id}"
robot = "{robot}"
instruction = "balance"
num_envs = 2
max_steps = 20
module = "terms.py"

[reset]
joint_position = 0.05

[[observations]]
term = "joint_pos"
[[observations]]
term = "joint_vel"
group = "critic"
[[observations]]
term = "joint_pos"
joints = ["hinge"]
group = "critic"

[[rewards]]
term = "alive"
[[rewards]]
term = "hinge_cost"
params = {{ std = 0.5 }}

[[terminations]]
term = "joint_pos_beyond"
joints = ["hinge"]
params = {{ limit = 0.4 }}

[variants.play]
max_steps = 40
[variants.play.reset]
joint_position = 0.0
"""

TERMS = '''
import warp as wp

from forge_gpu.sim import terms


@terms.term(params={"std": float, "scale": 2.0})
def hinge_cost(f: terms.Frame, worldid: int, t: int) -> float:
    """scale * (hinge angle / std)^2."""
    x = f.joint_q[worldid, 1] / terms.param(f, t, 0)
    return terms.param(f, t, 1) * x * x


@wp.func
def plain(f: terms.Frame, worldid: int, t: int) -> float:
    return 1.0


@terms.term(params={"k": int})
def wrong(f: terms.Frame, worldid: int) -> float:
    return 0.0
'''


def _write(folder: Path, task_id: str, robot: str = "pole") -> Path:
    (folder / "robots").mkdir(parents=True, exist_ok=True)
    (folder / "robots" / "pole.toml").write_text(ROBOT)
    (folder / "terms.py").write_text(TERMS)
    path = folder / f"{task_id}.toml"
    path.write_text(TASK.format(id=task_id, robot=robot))
    return path


def test_a_task_on_a_robot_file_with_groups_named_parameters_and_a_variant(tmp_path):
    path = _write(tmp_path, "pole_groups")
    config = read_task_file(path)
    assert config.params.robot == "robots/pole.toml" and config.params.values == {"cart_mass": 1.0}
    assert config.params.model["builder"].endswith("cartpole_model") and config.max_steps == 20
    play = forge_gpu.sim.task_config(str(path), variant="play")
    assert play.max_steps == 40 and play.params.variant == "play" and play.params.reset == {"joint_position": 0.0}
    assert play.to_dict()["params"]["variant"] == "play"  # run.json's config records it
    env = forge_gpu.sim.make(str(path), num_envs=2, device="cpu", seed=1)
    assert env.spec["observation"]["proprio"]["shape"] == [2]
    assert env.spec["observation"]["critic"]["shape"] == [3]
    result = env.reset()
    for _ in range(3):
        result = env.step(np.full((2, 1), 0.3, np.float32))
    proprio, critic = result.observation["proprio"].numpy(), result.observation["critic"].numpy()
    q, qd = env.joint_q.numpy(), env.joint_qd.numpy()
    assert np.array_equal(proprio, q) and np.array_equal(critic[:, :2], qd) and np.array_equal(critic[:, 2], q[:, 1])
    terms = result.observation["reward_terms"].numpy()
    assert np.allclose(terms[:, 1], 2.0 * (q[:, 1] / 0.5) ** 2, rtol=1e-5) and terms[:, 1].max() > 0


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("params = {{ std = 0.5 }}", "params = {{ sdt = 0.5 }}",
         r"rewards\[1\]\.params\.sdt: unknown parameter of hinge_cost; it takes std \(a number\), scale"),
        ("params = {{ std = 0.5 }}", 'params = {{ std = "wide" }}',
         r'rewards\[1\]\.params\.std = "wide": hinge_cost takes a number$'),
        ("params = {{ std = 0.5 }}", "params = {{ scale = 1.0 }}", r"rewards\[1\]\.params: hinge_cost needs std"),
        ('term = "hinge_cost"\nparams = {{ std = 0.5 }}', 'term = "wrong"\nparams = {{ k = 1 }}',
         r"rewards\[1\]\.term = 'wrong': .*wrong has signature \(f: Frame, worldid: int\) -> float; a reward term"),
        ('term = "hinge_cost"\nparams = {{ std = 0.5 }}', 'term = "plain"\nparams = {{ k = 1 }}',
         r"rewards\[1\]\.params: .*plain declares no parameters; declare them with @forge_gpu.sim.terms.term"),
        ("params = {{ limit = 0.4 }}", "params = {{ limt = 0.4 }}",
         r"terminations\[0\]\.params\.limt: unknown parameter of joint_pos_beyond; it takes limit"),
        ('group = "critic"\n[[observations]]', 'group = "reward"\n[[observations]]',
         r'observations\[1\]\.group = "reward": expected a group name'),
        ('robot = "{robot}"', 'robot = "nobody"', r"robot = 'nobody': no robots/nobody.toml beside the task file"),
        ('task = "{id}"', 'extends = "gone.toml"\ntask = "{id}"', r"extends = 'gone.toml': no such file"),
    ],
)  # fmt: skip
def test_forge_gpu_tasks_refuses_a_bad_term_in_one_line_naming_the_file_and_key(tmp_path, capsys, old, new, expected):
    """Checked when the file is read, before any kernel compiles: the message names the file and the key."""
    path = _write(tmp_path, "pole_bad")
    template = TASK.replace(old, new)
    assert template != TASK
    path.write_text(template.format(id="pole_bad", robot="pole"))
    assert main(["tasks", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0], err
    assert re.search(expected, err[0]), err[0]


def test_an_unknown_variant_and_a_variant_of_a_code_task_are_refused(tmp_path):
    path = _write(tmp_path, "pole_variants")
    with pytest.raises(ValueError, match=r"variant 'fast': no such variant; the task's variants are play$"):
        forge_gpu.sim.task_config(str(path), variant="fast")
    from helpers.reference_cartpole import register_handwritten

    register_handwritten(tmp_path)  # a task of code, registered as a user's would be
    with pytest.raises(ValueError, match=r"variant 'play': task 'cartpole_handwritten' is code"):
        forge_gpu.sim.task_config("cartpole_handwritten", variant="play")


def test_extends_merges_tables_key_by_key_and_replaces_lists(tmp_path):
    base = _write(tmp_path, "pole_base")
    child = tmp_path / "sub" / "child.toml"
    child.parent.mkdir()
    child.write_text(
        'extends = "../pole_base.toml"\ntask = "pole_child"\n[params]\ncart_mass = 2.0\n'
        '[[observations]]\nterm = "joint_vel"\n'
    )
    config = read_task_file(child)
    parent = read_task_file(base)
    assert config.task == "pole_child" and config.params.values == {"cart_mass": 2.0}
    assert config.params.observations == [{"term": "joint_vel"}]  # a list of tables is replaced whole
    assert config.params.rewards == parent.params.rewards and config.params.module == "../terms.py"  # rebased
    assert config.params.robot == "../robots/pole.toml" and config.params.model == parent.params.model
    assert config.params.action == parent.params.action
    loop = tmp_path / "loop.toml"
    loop.write_text('extends = "loop.toml"\ntask = "x"\n')
    with pytest.raises(ValueError, match="extends: a cycle"):
        read_task_file(loop)


@pytest.mark.parametrize("task", ["quadruped", "humanoid"])
def test_the_moved_task_equals_its_single_file_bit_for_bit(task):
    """configs/<task>.toml on configs/robots/<task>.toml steps as the single file it was (kept in
    tests/sim/robot_files): the same config sections, the same proprio, rewards, flags and joints."""
    moved, single = read_task_file(CONFIGS / f"{task}.toml"), read_task_file(HERE / f"{task}_single.toml")
    from forge_gpu._src.tasks.taskfile.spec import resolved

    a, b = resolved(moved.params, moved.params.file), resolved(single.params, single.params.file)
    for name in ("model", "action", "reset", "command", "observations", "rewards", "terminations", "expert"):
        assert getattr(a, name) == getattr(b, name), name
    assert moved.solver == single.solver and moved.randomize == single.randomize
    envs = [forge_gpu.sim.make(str(p), num_envs=2, device="cpu", seed=5, max_steps=8)
            for p in (CONFIGS / f"{task}.toml", HERE / f"{task}_single.toml")]  # fmt: skip
    r = [e.reset() for e in envs]
    rng = np.random.default_rng(0)
    for _ in range(10):
        for name in ("reward", "terminated", "truncated"):
            assert np.array_equal(getattr(r[0], name).numpy(), getattr(r[1], name).numpy()), name
        for name in ("proprio", "reward_terms"):
            assert np.array_equal(r[0].observation[name].numpy(), r[1].observation[name].numpy()), name
        assert np.array_equal(envs[0].joint_q.numpy(), envs[1].joint_q.numpy())
        action = rng.uniform(-1.2, 1.2, (2, envs[0].spec["action_shape"][0])).astype(np.float32)
        r = [e.step(action) for e in envs]


def test_a_second_robot_walks_the_quadrupeds_task_collected_and_replayed(tmp_path):
    """configs/robots/servo_dog/velocity.toml: three lines put servo_dog (configs/robots/servo_dog.toml) on the
    quadruped's task; the run stores the task, the file it extends, the robot and its model, and replays."""
    path = CONFIGS / "robots" / "servo_dog" / "velocity.toml"
    assert len([line for line in path.read_text().splitlines() if line and not line.startswith("#")]) == 3
    out = tmp_path / "run"
    argv = ["collect", str(path), "--out", str(out), "--episodes", "2", "--envs", "2", "--device", "cpu"]
    assert main([*argv, "--set", "max_steps=6"]) == 0
    manifest = forge_gpu.formats.read_manifest(out)
    assert manifest["task"] == "servo_dog_velocity" and manifest["config"]["params"]["robot"] == "../servo_dog.toml"
    stored = manifest["scene_spec"]["stored"]
    assert set(stored["files"]) == {"robots/servo_dog/velocity.toml", "quadruped.toml", "robots/servo_dog.toml",
                                    "robots/servo_dog/servo_dog.xml"}  # fmt: skip
    assert manifest["env_spec"]["observation"]["proprio"]["shape"] == [36]  # 3+3+3+8+8+3 (command)+8 (action)
    report = forge_gpu.recording.replay(out, tmp_path / "again", from_="actions", batch=2)
    assert report["episodes"] >= 2 and report["diverged"] == 0


def test_a_variant_switches_observation_noise_off_and_a_bad_switch_is_refused(tmp_path):
    path = _write(tmp_path, "pole_noise")
    text = path.read_text().replace(
        'term = "joint_pos"\n[[observations]]', 'term = "joint_pos"\nnoise = 0.2\n[[observations]]', 1
    )
    path.write_text(text.replace("[variants.play]\n", "[variants.play]\nobservation_noise = false\n"))
    observed = {}
    for variant in ("", "play"):
        env = forge_gpu.sim.make(str(path), num_envs=2, device="cpu", seed=1, variant=variant)
        env.reset()
        result = env.step(np.full((2, 1), 0.3, np.float32))
        observed[variant] = (result.observation["proprio"].numpy(), env.joint_q.numpy(), set(env.spec["state"]))
    proprio, q, state = observed[""]
    assert np.abs(proprio - q).max() > 1e-3 and "observation_noise_key" in state  # noise on: proprio is not q
    proprio, q, state = observed["play"]
    assert np.array_equal(proprio, q) and "observation_noise_key" not in state
    path.write_text(text.replace("num_envs = 2\n", 'num_envs = 2\nobservation_noise = "off"\n'))
    with pytest.raises(ValueError, match=r'pole_noise\.toml: observation_noise = "off": expected true or false$'):
        read_task_file(path)


def test_a_negated_reference_to_a_text_parameter_is_refused_in_one_line(tmp_path):
    path = _write(tmp_path, "pole_text")
    text = path.read_text().replace('term = "alive"\n', 'term = "alive"\nweight = "-params.look"\n', 1)
    path.write_text(text + '\n[params]\nlook = { value = "red", choices = ["red", "blue"] }\n')
    with pytest.raises(ValueError, match=r"rewards\[0\]\.weight = '-params\.look': params\.look is 'red', which cannot "
                       r"be negated$"):  # fmt: skip
        read_task_file(path)
