"""Tasks from a model file and a TOML (tasks/taskfile/: spec, model, terms, codegen, task): a task written in
the test with a user @wp.func collects, reads back and replays --from actions bit for bit; the file-based ant equals
the hand-written one bit for bit; every bad config is refused in one line naming its key, with nothing created."""

import json

import numpy as np
import pytest
from helpers.reference_cartpole import register_handwritten

import forge_gpu
from forge_gpu.cli import main

USER_TERMS = '''
import warp as wp

from forge_gpu.kernels.terms import TF_ARGS, Frame


@wp.func
def hips_apart(f: Frame, worldid: int, t: int) -> float:
    """A user reward: the first two hip angles' difference, times args[0]."""
    return f.tf[t, TF_ARGS] * (f.joint_q[worldid, 7] - f.joint_q[worldid, 9])
'''

TASK = """
task = "walker_test"
instruction = "walk"
num_envs = 3
max_steps = 10
module = "user_terms.py"

[params]
hip_gain = 0.5

[solver]
iterations = 10
ls_iterations = 5

[model]
asset = "nv_ant.xml"
position = [0.0, 0.0, 0.6]
[model.pose]
"ankle_[14]" = 1.0
"ankle_[23]" = -1.0

[action]
joints = ["hip_*", "ankle_*"]
scale = 15.0

[reset]
joint_position = 0.1
joint_velocity = 0.1

[command]
names = ["vx", "vy"]
default = [1.0, 0.0]

[[observations]]
term = "root_height"
[[observations]]
term = "joint_pos"
joints = ["hip_*"]
[[observations]]
term = "body_pos"
body = "front_left_foot"
relative_to = "torso"
noise = 0.01
[[observations]]
term = "command"
[[observations]]
term = "last_action"
[[observations]]
term = "camera"
size = 16
position = [1.5, -1.5, 1.0]
look_at = [0.0, 0.0, 0.3]
follow = "torso"

[[rewards]]
term = "track_lin_vel"
sigma = 0.25
weight = 1.0
[[rewards]]
term = "action_rate_l2"
weight = -0.01
[[rewards]]
term = "hips_apart"
args = ["params.hip_gain"]
weight = 1.0

[[terminations]]
term = "root_below"
height = 0.3
[[success]]
term = "body_distance_below"
body = "front_left_foot"
other = "front_right_foot"
distance = 0.05

[randomize]
command = { low = [0.5, -0.2], high = [1.5, 0.2] }
[instruction_template]
text = "walk {speed}"
slots = { speed = { param = "command", names = ["slowly", "fast"], edges = [1.0] } }
"""


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("task")
    (folder / "user_terms.py").write_text(USER_TERMS)
    (folder / "walker.toml").write_text(TASK)
    return folder / "walker.toml"


@pytest.fixture(scope="module")
def run(task_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "walker"
    env = forge_gpu.sim.make(str(task_file), num_envs=3, device="cpu", seed=1)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(out), episodes=5)
    return out


def test_a_task_file_collects_with_state_params_per_term_rewards_and_instructions(run):
    manifest = forge_gpu.formats.read_manifest(run)
    spec = manifest["env_spec"]
    assert spec["task"] == "walker_test" and spec["action_shape"] == [8]
    assert spec["observation"]["proprio"]["shape"] == [1 + 4 + 3 + 2 + 8]
    assert spec["observation"]["reward_terms"]["shape"] == [3] and spec["has_success"]
    assert manifest["calibration"]["reward_terms"] == ["track_lin_vel", "action_rate_l2", "hips_apart"]
    assert spec["observation"]["rgb"]["shape"] == [16, 16, 3] and spec["observation"]["depth"]["shape"] == [16, 16]
    front = manifest["calibration"]["cameras"]["front"]
    assert front["intrinsics"]["width"] == 16 and "torso" in front["follows"]
    episodes = list(
        forge_gpu.reading.open_run(run).read(list(range(5)), forge_gpu.reading.EpisodeReadOptions(state=True))
    )
    for e in episodes:
        command = e.params["command"]
        assert command.shape == (2,) and 0.5 <= command[0] <= 1.5 and -0.2 <= command[1] <= 0.2
        assert e.instruction == ("walk slowly" if command[0] < 1.0 else "walk fast")
        assert np.array_equal(e.next["proprio"][:, 8:10], np.broadcast_to(command, (e.steps, 2)))
        assert np.array_equal(e.next["proprio"][:, 10:], e.action)  # last_action: the executed action
        assert e.state["joint_q"].shape == (e.steps + 1, 15) and e.state["body_q"].shape == (e.steps + 1, 9, 7)
        # The reward is the sum of the recorded per-term values, in order.
        terms = e.next["reward_terms"].astype(np.float32)
        total = (np.float32(0) + terms[:, 0]) + terms[:, 1] + terms[:, 2]
        assert np.array_equal(total, e.reward)
        assert np.allclose(terms[:, 2], 0.5 * (e.state["joint_q"][1:, 7] - e.state["joint_q"][1:, 9]))
        # The camera follows the torso: the ground fills the lower rows, at depths the camera's height allows.
        depth = e.next["depth"]
        assert e.next["rgb"].shape == (e.steps, 16, 16, 3) and (depth[:, -4:] > 0).all() and depth.max() < 1e3
        assert len(np.unique(e.next["rgb"].reshape(-1, 3), axis=0)) > 4
    assert len({e.params["command"][0] for e in episodes}) == len(episodes)


def test_a_task_file_replays_from_actions_with_zero_divergence(run, tmp_path):
    report = forge_gpu.recording.replay(run, tmp_path / "again", from_="actions", batch=2)
    assert report["episodes"] == len(forge_gpu.reading.open_run(run)) >= 5 and report["diverged"] == 0
    assert all(d["max_error"] == 0.0 for d in report["divergence"])


def test_a_task_file_run_replays_from_state_reports_and_exports(run, tmp_path):
    """--from state re-observes every frame equal (proprio's noise included: its key is recorded state); the
    report and the robomimic export take the run like any other."""
    report = forge_gpu.recording.replay(run, tmp_path / "again", batch=2)
    options = forge_gpu.reading.EpisodeReadOptions(state=True)
    recorded = list(forge_gpu.reading.open_run(run).read(list(range(report["episodes"])), options))
    again = list(forge_gpu.reading.open_run(tmp_path / "again").read(list(range(report["episodes"])), options))
    for a, b in zip(recorded, again, strict=True):
        for name in ("proprio", "reward_terms", "success", "rgb", "depth"):  # proprio: noise on body_pos, last_action
            assert np.array_equal(a.obs[name], b.obs[name]) and np.array_equal(a.next[name], b.next[name]), name
        assert np.array_equal(a.reward, b.reward) and np.array_equal(a.terminated, b.terminated)
    assert forge_gpu.reading.report(run, tmp_path / "report.html")["episodes"] == len(recorded)
    assert forge_gpu.export.export_robomimic(run, tmp_path / "run.hdf5")["episodes"] == len(recorded)


def _same_task_bit_for_bit(hand, file, action_dim: int, steps: int) -> int:
    """Step both envs with the same random actions (some beyond the bounds); every frame's proprio, reward,
    flags and joint state equal. Returns the episodes that ended."""
    a, b = hand.reset(), file.reset()
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(steps):
        assert np.array_equal(a.observation["proprio"].numpy(), b.observation["proprio"].numpy())
        for name in ("reward", "terminated", "truncated"):
            assert np.array_equal(getattr(a, name).numpy(), getattr(b, name).numpy()), name
        assert np.array_equal(hand.joint_q.numpy(), file.joint_q.numpy())
        ended += int(a.terminated.numpy().sum() + a.truncated.numpy().sum())
        action = rng.uniform(-1.3, 1.3, (hand.num_envs, action_dim)).astype(np.float32)
        a, b = hand.step(action), file.step(action)
    return ended


def test_the_file_based_ant_equals_the_hand_written_one_bit_for_bit(tmp_path):
    register_handwritten(tmp_path)
    hand = forge_gpu.sim.make("ant_handwritten", num_envs=4, device="cpu", seed=3, max_steps=25)
    file = forge_gpu.sim.make("ant", num_envs=4, device="cpu", seed=3, max_steps=25)
    # The flags were compared where they are set, not only while all are false.
    assert _same_task_bit_for_bit(hand, file, 8, 60) >= 4


def test_the_file_based_cartpole_equals_the_hand_written_one_bit_for_bit(tmp_path):
    """Same observations, rewards (0 on a terminating step), flags and state columns, for the same seed and
    actions; also with params overridden (the same key changes both) and a randomized mass."""
    register_handwritten(tmp_path)
    for overrides in ({}, {"params.angle_cost": 2.5, "params.cart_limit": 0.5, "params.pole_length": 0.7,
                           "randomize.mass_scale": [0.5, 2.0]}):  # fmt: skip
        hand = forge_gpu.sim.make("cartpole_handwritten", num_envs=6, device="cpu", seed=5, max_steps=30, **overrides)
        file = forge_gpu.sim.make("cartpole", num_envs=6, device="cpu", seed=5, max_steps=30, **overrides)
        assert file.config.params.angle_cost == hand.config.params.angle_cost
        assert _same_task_bit_for_bit(hand, file, 1, 90) >= 12
        # The same fields and state columns (the README's quick start prints them).
        assert hand.spec["observation"] == file.spec["observation"] and hand.spec["state"] == file.spec["state"]


BAD = [
    ('[action]\njoints = ["hip_*", "ankle_*"]', '[action]\njoints = ["knee_*"]', "action.joints"),
    ('relative_to = "torso"', 'relative_to = "head"', "observations[2].relative_to"),
    ('term = "root_height"', 'term = "root_heigth"', "observations[0].term"),
    ("sigma = 0.25", "sigma = 0.25\nsigmaa = 1.0", "rewards[0].sigmaa"),
    ("scale = 15.0", "scale = [15.0, 15.0]", "action.scale"),
    ('asset = "nv_ant.xml"', 'asset = "nv_robot.xml"', "model.asset"),
    ('term = "hips_apart"', 'term = "hips_close"', "rewards[2].term"),
    ('"ankle_[14]" = 1.0', '"toe_*" = 1.0', "model.pose.toe_*"),
    ('param = "command"', 'param = "cmd"', "instruction_template"),
    ("sigma = 0.25", 'sigma = 0.25\ncommand = ["vz"]', "rewards[0].command"),
    ("height = 0.3", 'height = "low"', "terminations[0].height"),
    ("low = [0.5, -0.2], high = [1.5, 0.2]", "low = [0.5, -0.2, 0], high = [1.5, 0.2, 0]", "randomize.command"),
    ('asset = "nv_ant.xml"', 'file = "robot.urdf"', "model.file"),
    ('module = "user_terms.py"', 'module = "no_terms.py"', "module"),
    ('follow = "torso"', 'follow = "tail"', "observations[5].follow"),
    ("size = 16", "size = 4", "observations[5].size"),
    ("look_at = [0.0, 0.0, 0.3]", "look_at = [1.5, -1.5, 0.2]", "observations[5].position"),
    ('args = ["params.hip_gain"]', 'args = ["params.hip_gian"]', "rewards[2].args[0]"),
    ("hip_gain = 0.5", 'hip_gain = "high"', "params.hip_gain"),
    ("[reset]\njoint_position = 0.1", "[reset]\njoint_position = -0.1", "reset.joint_position"),
    (
        "[reset]\njoint_position = 0.1\njoint_velocity = 0.1",
        '[[reset.joints]]\njoints = ["toe_*"]\nposition = 0.1',
        "reset.joints[0].joints",
    ),
    (
        '[[rewards]]\nterm = "track_lin_vel"',
        '[reward]\nterms = "yes"\n[[rewards]]\nterm = "track_lin_vel"',
        "reward.terms",
    ),
    ('asset = "nv_ant.xml"', 'asset = "nv_ant.xml"\nrandomizable = ["gravity"]', "model.randomizable"),
    ('asset = "nv_ant.xml"', 'builder = "no_such_module:build"', "model.builder"),
    # A boolean is not a weight of 1 (a cost would become a bonus), nor a misspelt number a weight at all.
    ("weight = -0.01", "weight = true", "rewards[1].weight = true"),
    ("weight = -0.01", 'weight = "-0.1x"', 'rewards[1].weight = "-0.1x"'),
    ('[action]\njoints = ["hip_*", "ankle_*"]', '[action]\njoints = "hip_*"', 'action.joints = "hip_*"'),
    ("weight = -0.01", "weight = -0.01\nnoise = 0.1", "rewards[1].noise"),
    ("noise = 0.01", 'noise = "0.01"', "observations[2].noise"),
    ('args = ["params.hip_gain"]', "args = [true]", "rewards[2].args"),
    ("weight = -0.01", "weight = -0.01\nname = 3", "rewards[1].name"),
    ("default = [1.0, 0.0]", 'default = [1.0, "fast"]', "command.default[1]"),
    ("max_steps = 10", 'max_steps = 10\nenvironment_state = ["goal"]', "environment_state field 'goal'"),
]


@pytest.mark.parametrize(("old", "new", "key"), BAD, ids=[b[2] for b in BAD])
def test_a_bad_task_file_is_refused_in_one_line_naming_the_key(tmp_path, capsys, old, new, key):
    """... with nothing created: no run directory, no task registered."""
    text = TASK.replace(old, new, 1).replace('task = "walker_test"', 'task = "walker_bad"')
    assert new in text
    (tmp_path / "user_terms.py").write_text(USER_TERMS)
    (tmp_path / "bad.toml").write_text(text)
    out = tmp_path / "out"
    with pytest.raises(ValueError) as error:
        forge_gpu.sim.make(str(tmp_path / "bad.toml"), num_envs=2, device="cpu")
    message = str(error.value)
    assert "\n" not in message and key in message, message
    assert main(["collect", str(tmp_path / "bad.toml"), "--out", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0], err
    assert not out.exists()
    assert all(getattr(cls, "path", "") != str(tmp_path / "bad.toml") for cls in forge_gpu.sim.TASKS.values())


def test_a_user_term_reading_a_field_a_frame_lacks_is_refused_when_the_file_is_read(tmp_path, monkeypatch):
    """A term whose source reads ``f.joint_pos`` (a Frame has ``joint_q``) is refused in one line naming the entry,
    the field and the Frame's fields, before any kernel is built."""
    import forge_gpu._src.sim.env as env_module

    (tmp_path / "user_terms.py").write_text(USER_TERMS.replace("f.joint_q[worldid, 9]", "f.joint_pos[worldid, 9]"))
    (tmp_path / "bad.toml").write_text(TASK.replace('task = "walker_test"', 'task = "walker_frame"'))
    monkeypatch.setattr(env_module.wp, "launch", lambda *a, **k: pytest.fail("a kernel launched"))
    with pytest.raises(ValueError) as error:
        forge_gpu.sim.make(str(tmp_path / "bad.toml"), num_envs=2, device="cpu")
    message = str(error.value)
    assert "\n" not in message and "rewards[2].term = 'hips_apart'" in message, message
    assert "hips_apart reads f.joint_pos, which a Frame does not have; its fields: joint_q, joint_qd" in message


def test_a_params_override_reaches_every_use_and_an_unknown_one_is_refused(task_file):
    """``params.hip_gain`` set on make is the user term's argument; a name the file's [params] lacks is refused."""
    env = forge_gpu.sim.make(str(task_file), num_envs=2, device="cpu", **{"params.hip_gain": 2.0})
    assert env.config.params.hip_gain == 2.0
    assert [r.floats[2] for r in env.task.plan.rows if r.name == "hips_apart"] == [2.0]
    with pytest.raises(ValueError, match=r"params.hip_gian: no such parameter; the file's \[params\] are hip_gain"):
        forge_gpu.sim.make(str(task_file), num_envs=2, device="cpu", **{"params.hip_gian": 2.0})


def test_a_bounded_param_refuses_an_override_outside_its_range(tmp_path, capsys):
    """cartpole's [params] carry the ranges its hand-written config had: an override outside one is refused in one
    line naming the key and the range, by make and by collect (which creates nothing); one inside is taken."""
    with pytest.raises(ValueError, match=r"params.pole_angle_limit = 3.0: allowed range is \[0.01, 1.5\]"):
        forge_gpu.sim.make("cartpole", num_envs=2, device="cpu", **{"params.pole_angle_limit": 3.0})
    out = tmp_path / "run"
    assert main(["collect", "cartpole", "--set", "params.cart_mass=0", "--out", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "params.cart_mass = 0: allowed range is [0.001, 1000.0]" in err[0], err
    assert not out.exists()
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu", **{"params.pole_angle_limit": 1.2})
    assert env.config.params.pole_angle_limit == 1.2
    bad = tmp_path / "bad.toml"
    bad.write_text(TASK.replace("hip_gain = 0.5", "hip_gain = { value = 0.5, lo = 0 }"))
    with pytest.raises(ValueError, match=r"params.hip_gain = .*: a parameter is a number or \{ value = V"):
        forge_gpu.sim.make(str(bad), num_envs=2, device="cpu")


def test_forge_gpu_tasks_lists_and_describes(capsys, task_file):
    assert main(["tasks"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in ("ant", "cartpole", "push", "reach"))
    assert main(["tasks", str(task_file)]) == 0
    described = capsys.readouterr().out
    assert "hips_apart (user @wp.func)" in described and "proprio[10:18]: last_action" in described
    assert "reward_terms [3] float32" in described and "front_left_foot" in described
    assert "rgb and depth: a 16x16 camera following torso" in described and "rgb [16, 16, 3] uint8" in described


def test_forge_gpu_collect_takes_a_task_file(task_file, tmp_path):
    out = tmp_path / "run"
    assert main(["collect", str(task_file), "--out", str(out), "--episodes", "3", "--device", "cpu"]) == 0
    manifest = forge_gpu.formats.read_manifest(out)
    assert manifest["task"] == "walker_test" and manifest["config"]["params"]["file"] == str(task_file.resolve())
    assert (
        manifest["scene"] == "task_file:v1"
        and manifest["scene_spec"]["model"].endswith("nv_ant.xml")
        and manifest["completed_episodes"] >= 3
    )


@pytest.mark.parametrize(("task", "proprio", "terms"), [("quadruped", 48, 8), ("humanoid", 59, 5)])
def test_the_shipped_robots_step_with_their_terms_and_experts(task, proprio, terms):
    env = forge_gpu.sim.make(task, num_envs=2, device="cpu", seed=0)
    assert env.spec["observation"]["proprio"]["shape"] == [proprio]
    assert env.spec["observation"]["reward_terms"]["shape"] == [terms]
    for name in ("random", "expert"):
        policy = forge_gpu.sim.make_policy(name, env)
        r = env.reset()
        for _ in range(3):
            r = env.step(policy(env.observation))
            parts = r.observation["reward_terms"].numpy()
            total = np.zeros(2, np.float32)
            for k in range(terms):
                total = total + parts[:, k]
            assert np.array_equal(total, r.reward.numpy()) and np.isfinite(parts).all()
    if task == "quadruped":  # a command drawn per episode, in proprio and in the instruction's params
        command = env.randomizer.values["command"].numpy()
        assert np.array_equal(r.observation["proprio"].numpy()[:, 33:36], command)
        assert (command[:, 0] >= 0.0).all() and (command[:, 0] <= 1.0).all()


def _heading_vx(env) -> np.ndarray:
    q, qd = env.joint_q.numpy(), env.joint_qd.numpy()
    x, y, z, w = q[:, 3], q[:, 4], q[:, 5], q[:, 6]
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return np.cos(yaw) * qd[:, 0] + np.sin(yaw) * qd[:, 1]


def test_the_quadrupeds_gait_walks_forward_and_out_earns_random_and_standing():
    """At a commanded 0.5 m/s the expert's trot (sinusoid targets, amplitude from the command) moves the base
    forward in its heading frame and earns more of the task's reward than the random policy and than standing."""
    from forge_gpu._src.tasks.taskfile.gaits import hold_pose

    fixed = {"randomize.command": {"low": [0.5, 0.0, 0.0], "high": [0.5, 0.0, 0.0]}}
    earned, speed = {}, {}
    for name in ("random", "stand", "expert"):
        env = forge_gpu.sim.make("quadruped", num_envs=4, device="cpu", seed=0, max_steps=200, **fixed)
        policy = hold_pose(env.task, env.world, {}) if name == "stand" else forge_gpu.sim.make_policy(name, env)
        env.reset()
        total, vx = 0.0, []
        for step in range(100):
            total += float(env.step(policy(env.observation)).reward.numpy().mean())
            if step >= 25:
                vx.append(_heading_vx(env).mean())
        earned[name], speed[name] = total, float(np.mean(vx))
    assert speed["expert"] > 0.1 > abs(speed["stand"]), speed
    assert earned["expert"] > earned["stand"] > earned["random"], earned


def test_evaluation_takes_success_from_the_success_terms_not_from_any_termination(task_file, tmp_path):
    """A walker whose every episode ends by a fall (``root_below`` above its start height) at its first transition,
    its success term still true where the feet are close: the evaluation counts an episode a success only where the
    recorded ``success`` flag of its frames says so, not at every termination."""
    (tmp_path / "user_terms.py").write_text(USER_TERMS)
    falls = tmp_path / "falls.toml"
    text = TASK.replace("height = 0.3", "height = 5.0").replace("distance = 0.05", "distance = 0.0")
    falls.write_text(text.replace('task = "walker_test"', 'task = "walker_falls"'))
    env = forge_gpu.sim.make(str(falls), num_envs=3, device="cpu", seed=1)
    run = str(tmp_path / "r")
    result = forge_gpu.recording.evaluate(env, forge_gpu.sim.load_policy("random", env), episodes=6, record=run)
    episodes = {(e.env_id, e.episode_id): e for e in forge_gpu.reading.read_episodes(run)}
    assert sorted(episodes) == sorted(zip(result.worlds.tolist(), result.episode_ids.tolist(), strict=True))
    for episode in episodes.values():
        assert episode.terminated[-1] and not episode.next["success"].any()
    assert not result.success_once.any() and not result.success_at_end.any()
    assert result.metrics()["pc_success"] == 0.0


def test_the_shipped_robots_give_lerobot_no_environment_state(tmp_path):
    """ant records its reward terms as an observation field; its task file declares no environment state, so the
    LeRobot export writes proprio alone (reward terms are not state)."""
    env = forge_gpu.sim.make("ant", num_envs=2, device="cpu", seed=0, max_steps=5)
    assert "reward_terms" in env.spec["observation"] and env.spec["environment_state"] == []
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(tmp_path / "run"), episodes=2)
    report = forge_gpu.export.export_lerobot(str(tmp_path / "run"), str(tmp_path / "lerobot"))
    features = json.loads((tmp_path / "lerobot" / "meta" / "info.json").read_text())["features"]
    assert report["environment_state"] == [] and "observation.environment_state" not in features
    assert "observation.state" in features
