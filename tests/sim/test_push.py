"""The push task: a cube at rest until touched, success in the goal, the expert against the random policy, what the
drawn cube properties and colours change, determinism, replay, the per-episode instruction template."""

import dataclasses

import numpy as np
import pytest
import warp as wp
from helpers.envtools import DEVICES

import forge_gpu

COLOR_NAMES = ("red", "green", "blue", "yellow", "purple", "orange", "cyan", "magenta")
"""push's [palette] colours of the cube and the goal, in order."""

FAST = {"params.render": False}
# One fixed scene in every world (the cube at (0.3, 0), the goal at (0.43, 0), the arm at home), whose drawn mass,
# friction and colours a test sets per world with VectorEnv.restore.
FIXED = {
    "params.reset_noise": 0.0,
    "randomize.cube_position": {"low": [0.3, 0.0], "high": [0.3, 0.0]},
    "randomize.cube_yaw": [0.0, 0.0],
    "randomize.cube_size": [0.05, 0.05],
    "randomize.goal_position": {"low": [0.43, 0.0], "high": [0.43, 0.0]},
    "randomize.camera_position_offset": {"low": [0.0] * 3, "high": [0.0] * 3},
    "randomize.camera_look_at_offset": {"low": [0.0] * 3, "high": [0.0] * 3},
}


def _host(arrays: dict) -> dict:
    return {k: v.numpy().copy() for k, v in arrays.items()}


def arm_ik(tip, p) -> np.ndarray:
    """Joint targets [rad] that put the tip at ``tip`` with the hand pointing down (the arm's IK, in numpy)."""
    x, y, z = tip
    radial, up = np.hypot(x, y), z + p.hand_length - p.shoulder_height
    a, b = p.upper_arm_length, p.forearm_length
    elbow = np.arccos(np.clip((radial**2 + up**2 - a * a - b * b) / (2 * a * b), -1.0, 1.0))
    shoulder = np.arctan2(radial, up) - np.arctan2(b * np.sin(elbow), a + b * np.cos(elbow))
    return np.array([np.arctan2(y, x), shoulder, elbow, np.pi - shoulder - elbow], np.float32)


@pytest.fixture(params=DEVICES, scope="module")
def fixed(request):
    """Three worlds of the fixed scene, rendered at 64 x 64, and their reset frame (state and params)."""
    device = request.param
    env = forge_gpu.sim.make("push", num_envs=3, device=device, seed=4, **FIXED)
    result = env.reset()
    return env, _host(result.state), _host(result.params)


@pytest.fixture(params=DEVICES, scope="module")
def randomized(request):
    """Eight worlds of the default (randomized) config, without rendering."""
    device = request.param
    return forge_gpu.sim.make("push", num_envs=8, device=device, seed=21, **FAST)


@pytest.mark.parametrize("device", DEVICES)
def test_spec_fields_params_and_instruction_template(device):
    env = forge_gpu.sim.make("push", num_envs=3, device=device, seed=3, **{"params.image_size": 32})
    obs, params = _host(env.reset().observation), _host(env.result.params)
    for name, desc in env.spec["observation"].items():
        assert obs[name].shape == (3, *desc["shape"]) and obs[name].dtype == np.dtype(desc["dtype"]), name
    assert env.spec["observation"]["proprio"]["shape"] == [11] and env.spec["action_shape"] == [4]
    assert env.spec["state"]["joint_q"]["shape"] == [11] and env.spec["state"]["goal_pos"]["shape"] == [3]
    # The cube rests on the table at its drawn place, yaw and size; the goal is where it was drawn.
    np.testing.assert_allclose(obs["cube_pose"][:, :2], params["cube_position"], atol=1e-6)
    np.testing.assert_allclose(obs["cube_pose"][:, 2], 0.5 * params["cube_size"], atol=1e-6)
    np.testing.assert_allclose(obs["cube_pose"][:, 5], np.sin(0.5 * params["cube_yaw"]), atol=1e-6)
    np.testing.assert_allclose(obs["goal_position"][:, :2], params["goal_position"], atol=1e-6)
    # Palette indices: whole numbers, the cube's and the goal's never equal.
    for name in ("cube_color", "goal_color"):
        assert set(np.unique(params[name])) <= {0.0, 1.0, 2.0, 3.0}, params[name]
    assert (params["cube_color"] != params["goal_color"]).all()
    edges, sides = [-0.07, 0.07], ["on the right", "in the middle", "on the left"]
    assert env.spec["instruction_template"] == {
        "text": "push the {cube} cube to the {goal} square {side}",
        "slots": {
            "cube": {"param": "cube_color", "names": list(COLOR_NAMES)},
            "goal": {"param": "goal_color", "names": list(COLOR_NAMES)},
            "side": {"param": "goal_position", "component": 1, "edges": edges, "names": sides},
        },
    }
    config = forge_gpu.sim.task_config("push", device=device)
    assert forge_gpu.sim.TASKS["push"](dataclasses.replace(config, randomize=())).instruction_template() is None
    only_goal = tuple(r for r in config.randomize if r.name == "goal_position")
    template = forge_gpu.sim.TASKS["push"](dataclasses.replace(config, randomize=only_goal)).instruction_template()
    assert template["text"] == "push the red cube to the green square {side}" and list(template["slots"]) == ["side"]


def test_the_cube_stays_at_rest_under_zero_actions(randomized):
    env = randomized
    start = _host(env.reset().observation)["cube_pose"]
    zero = np.zeros((env.num_envs, 4), np.float32)
    for _ in range(40):
        result = env.step(zero).numpy()
    assert (result.observation["episode_id"] == 0).all()
    moved = np.abs(result.observation["cube_pose"] - start).max()
    assert moved < 2e-3, moved
    assert np.abs(result.observation["cube_velocity"]).max() < 1e-2
    assert not result.terminated.any()


def test_success_and_termination_when_the_cube_is_in_the_goal(fixed):
    """Goals put (through restore) at half the tolerance from the cube in worlds 0 and 2, and beyond it in world 1:
    the first step ends worlds 0 and 2 terminated, with the bonus; world 1 goes on; the next step resets them."""
    env, state, params = fixed
    tol = env.config.params.tolerance
    goals = np.float32([[0.3 + 0.5 * tol, 0.0], [0.3 + tol + 0.01, 0.0], [0.3, 0.5 * tol]])
    state = {**state, "goal_pos": np.concatenate([goals, np.zeros((3, 1), np.float32)], axis=1)}
    episode = env.restore(state, {**params, "goal_position": goals}).numpy().observation["episode_id"].copy()
    zero = np.zeros((3, 4), np.float32)
    result = env.step(zero).numpy()
    assert result.terminated.tolist() == [True, False, True] and not result.truncated.any()
    assert result.reward[0] > result.reward[1] + 0.9 and result.reward[2] > result.reward[1] + 0.9  # the bonus
    after = env.step(zero).numpy()
    assert (after.observation["episode_id"] - episode).tolist() == [1, 0, 1]
    assert after.info["active"].tolist() == [False, True, False]


def _successes(env, policy, episodes_per_env: int = 1) -> int:
    """Successes in each env's first ``episodes_per_env`` episodes."""
    env.reset()
    ended = np.zeros(env.num_envs, np.int64)
    successes = 0
    while (ended < episodes_per_env).any():
        r = env.step(policy(env.observation)).numpy()
        done = r.info["active"] & (r.terminated | r.truncated) & (ended < episodes_per_env)
        successes += int(r.terminated[done].sum())
        ended += done
    return successes


def test_the_expert_succeeds_far_more_often_than_the_random_policy(randomized):
    env = randomized
    expert = _successes(env, forge_gpu.sim.make_policy("expert", env))
    random = _successes(env, forge_gpu.sim.make_policy("random", env))
    assert expert >= 6 and random <= 2, (expert, random)


def arm_tip(q, p) -> np.ndarray:
    """The tip's position for joint angles ``q`` (the arm's forward kinematics, in numpy; arm_ik's inverse)."""
    phi = np.cumsum(q[1:4])  # each pitch link's angle from vertical
    lengths = np.array([p.upper_arm_length, p.forearm_length, p.hand_length])
    radial, up = lengths @ np.sin(phi), p.shoulder_height + lengths @ np.cos(phi)
    return np.array([radial * np.cos(q[0]), radial * np.sin(q[0]), up])


@pytest.mark.parametrize("device", DEVICES)
def test_the_expert_steers_a_tip_beside_the_line_back_onto_it_and_breaks_off_beyond_its_band(device):
    """The expert's tip target (its action through the forward kinematics, joint steps unclamped) for a tip at the
    pushing height behind a 5 cm cube, 0.3, 0.75 and 1.2 half sizes beside the line from the goal: the first pushes
    along the line, the second too but slower while it slides back toward the line, the third rises; with
    ``expert_band = 0.5`` (the expert before the steering) the second rises too."""
    p, h = forge_gpu.sim.task_config("push").params, 0.025
    cube, goal = np.array([0.3, 0.0]), np.array([0.43, 0.0])  # the line: +x through the cube's centre
    tips = np.array([[0.3 - 2 * h, side * h, h] for side in (0.3, 0.75, 1.2)])
    proprio = np.zeros((3, 11), np.float32)
    proprio[:, :4] = [arm_ik(tip, p) for tip in tips]
    proprio[:, 8:] = tips
    observation = {
        "proprio": proprio,
        "cube_pose": np.tile([*cube, h, 0.0, 0.0, 0.0, 1.0], (3, 1)),
        "goal_position": np.tile([*goal, 0.0], (3, 1)),
    }

    def moves(band: float) -> np.ndarray:  # each tip's target - the tip
        settings = {"params.expert_max_step": 3.0, "params.expert_band": band}
        env = forge_gpu.sim.make("push", num_envs=3, device=device, **FAST, **settings)
        arrays = {k: wp.array(v.astype(np.float32), device=env.device) for k, v in observation.items()}
        action = env.task.expert(env.world)(arrays).numpy()
        return np.array([arm_tip(a * env.world.action_scale.numpy(), p) for a in action]) - tips

    def rises(move) -> bool:  # straight up
        return move[2] > 0.02 and np.hypot(*move[:2]) < 1e-3

    on_line, steering, beside = moves(1.0)
    assert on_line[0] > 0.02 and abs(on_line[2]) < 1e-3, on_line  # forward, at the pushing height
    assert 0.0 < steering[0] < on_line[0] and abs(steering[2]) < 1e-3, steering  # forward, slower, still low
    assert abs(tips[1, 1] + steering[1]) < 0.2 * abs(tips[1, 1]), steering  # ... and (nearly) back on the line
    assert rises(beside), beside
    narrow = moves(0.5)
    np.testing.assert_allclose(narrow[0], on_line, atol=1e-6)
    assert rises(narrow[1]) and rises(narrow[2]), narrow


@pytest.mark.parametrize("device", DEVICES)
def test_a_heavier_or_rougher_cube_moves_less_under_the_same_push(device):
    """A compliant arm (joint stiffness 20 instead of 400) gives the same slow push (the tip's target ramped from
    behind the cube through its place) to a 1 kg cube of friction 0.3, a 3 kg one and one of friction 0.9, drawn
    per world: the heavier and the rougher cube move less. The solver holds each world's drawn mass and friction."""
    soft = {"params.joint_stiffness": 20.0, "params.joint_damping": 4.0}
    env = forge_gpu.sim.make("push", num_envs=3, device=device, seed=4, **{**FIXED, **FAST, **soft})
    reset = env.reset()
    state, params = _host(reset.state), _host(reset.params)
    values = {**params, "cube_mass": np.float32([1.0, 3.0, 1.0]), "cube_friction": np.float32([0.3, 0.3, 0.9])}
    start = env.restore(state, values).numpy().observation["cube_pose"][:, :2].copy()
    mjw = env.solver.mjw_model
    np.testing.assert_allclose(mjw.body_mass.numpy()[:, -1], [1.0, 3.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(mjw.geom_friction.numpy()[:, -1, 0], [0.3, 0.3, 0.9], rtol=1e-6)
    p = env.config.params
    path = [(0.2, 0.0, 0.12)] * 25 + [(0.2, 0.0, 0.03)] * 20 + [(x, 0.0, 0.03) for x in np.linspace(0.2, 0.33, 30)]
    for tip in path + [(0.33, 0.0, 0.03)] * 20:
        result = env.step(np.repeat(arm_ik(tip, p)[None], 3, axis=0))
    moved = np.linalg.norm(result.observation["cube_pose"].numpy()[:, :2] - start, axis=1)
    assert moved[0] > 0.02, moved
    assert moved[1] < 0.6 * moved[0] and moved[2] < 0.6 * moved[0], moved


def test_colours_change_the_pixels_of_the_cube_and_the_goal_only(fixed):
    env, state, params = fixed
    values = {**params, "cube_color": np.float32([0, 2, 0]), "goal_color": np.float32([1, 3, 1])}
    obs = _host(env.restore(state, values).observation)
    assert np.array_equal(obs["depth"][0], obs["depth"][1])
    changed = (obs["rgb"][0] != obs["rgb"][1]).any(axis=-1)
    assert 0 < changed.mean() < 0.1
    c = [obs["rgb"][i][changed].astype(int) for i in (0, 1)]
    red = (c[0][:, 0] > c[0][:, 1] + 40) & (c[0][:, 0] > c[0][:, 2] + 40)
    green = (c[0][:, 1] > c[0][:, 0] + 30) & (c[0][:, 1] > c[0][:, 2] + 30)
    blue = (c[1][:, 2] > c[1][:, 0] + 40) & (c[1][:, 2] > c[1][:, 1] + 40)
    yellow = (c[1][:, 0] > c[1][:, 2] + 60) & (c[1][:, 1] > c[1][:, 2] + 60)
    assert red.any() and green.any() and blue.any() and yellow.any()
    assert (red | green).mean() > 0.8 and (blue | yellow).mean() > 0.8


@pytest.mark.parametrize("device", DEVICES)
def test_determinism_and_independence_of_env_count(device):
    """Env i's episodes (drawn values, physics, images) are the same with 2 envs as with 3; another seed differs."""
    a, b = (forge_gpu.sim.make("push", num_envs=n, device=device, seed=7, **{"params.image_size": 32}) for n in (2, 3))
    pa, pb = forge_gpu.sim.make_policy("random", a), forge_gpu.sim.make_policy("random", b)
    ra, rb = a.reset().numpy(), b.reset().numpy()
    for step in range(6):
        for name in ("proprio", "cube_pose", "cube_velocity", "goal_position", "rgb", "depth"):
            np.testing.assert_array_equal(ra.observation[name], rb.observation[name][:2], err_msg=f"{name} {step}")
        for name, value in ra.params.items():
            np.testing.assert_array_equal(value, rb.params[name][:2])
        ra, rb = a.step(pa(a.observation)).numpy(), b.step(pb(b.observation)).numpy()
    c = forge_gpu.sim.make("push", num_envs=2, device=device, seed=8, **FAST)
    assert not np.array_equal(c.reset().numpy().observation["cube_pose"], a.reset().numpy().observation["cube_pose"])


@pytest.mark.parametrize("device", DEVICES)
def test_replay_from_actions_reproduces_a_push_run_and_its_instructions(device, tmp_path):
    import pyarrow.parquet as pq

    pytest.importorskip("av", reason="the LeRobot export is the export extra: pip install 'forge-gpu[export]'")
    env = forge_gpu.sim.make("push", num_envs=3, device=device, seed=5, max_steps=12, **{"params.image_size": 32})
    forge_gpu.recording.collect(env, forge_gpu.sim.make_policy("expert", env), str(tmp_path / "run"), episodes=4)
    report = forge_gpu.recording.replay(tmp_path / "run", tmp_path / "again", from_="actions", batch=2)
    assert report["episodes"] >= 4 and report["diverged"] == 0
    assert all(d["max_error"] == 0.0 for d in report["divergence"]), report["divergence"]
    manifest = forge_gpu.formats.read_manifest(tmp_path / "run")
    assert manifest["env_spec"]["instruction_template"]["slots"]["cube"]["param"] == "cube_color"
    # Each episode's instruction names its drawn colours and goal side, and survives replay, windows and export.
    episodes = list(forge_gpu.reading.read_episodes(tmp_path / "run"))
    sides = ["on the right", "in the middle", "on the left"]
    for e in episodes:
        cube, goal = (COLOR_NAMES[int(e.params[k].item())] for k in ("cube_color", "goal_color"))
        side = sides[int(np.digitize(e.params["goal_position"][1], [-0.07, 0.07]))]
        assert e.instruction == f"push the {cube} cube to the {goal} square {side}"
    wanted = [e.instruction for e in episodes]
    assert len(set(wanted)) >= 2, wanted
    assert [e.instruction for e in forge_gpu.reading.read_episodes(tmp_path / "again")][: len(wanted)] == wanted
    windows = forge_gpu.reading.Windows(tmp_path / "run", 2, 4)
    batch = windows.batch(np.arange(len(windows)))
    by_episode = {(e.env_id, e.episode_id): e.instruction for e in episodes}
    keys = zip(batch["env_id"].tolist(), batch["episode_id"].tolist(), strict=True)
    assert batch["instruction"] == [by_episode[k] for k in keys]
    forge_gpu.export.export_lerobot(tmp_path / "run", tmp_path / "lerobot")
    tasks = pq.read_table(tmp_path / "lerobot/meta/tasks.parquet").to_pydict()
    assert sorted(tasks["task"]) == sorted(set(wanted)) and tasks["task_index"] == list(range(len(tasks["task"])))
    frames = pq.read_table(tmp_path / "lerobot/data").to_pydict()
    task_of = {k: tasks["task"][t] for k, t in zip(frames["episode_index"], frames["task_index"], strict=True)}
    assert [task_of[k] for k in range(len(wanted))] == wanted


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"randomize.cube_color": [0, 3]}, r"cube_color .*an index into \(0 red, 1 green, 2 blue, 3 yellow, 4 pur"),
        ({"randomize.goal_color": {"low": 0, "high": 12, "dist": "integer"}}, "0 <= low <= high <= 11"),
        ({"randomize.cube_color": {"low": 0.5, "high": 2, "dist": "integer"}}, "an integer range needs whole"),
        ({"params.cube_color": "grey"}, "allowed values are 'red', 'green', 'blue', 'yellow', 'purple'"),
        ({"randomize.friction": [0.2, 0.4]}, "task 'push' cannot randomize it"),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(device, overrides, words):
    with pytest.raises(ValueError, match=words):
        forge_gpu.sim.make("push", num_envs=1, device=device, **overrides)


def test_an_expert_band_below_half_a_cube_size_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"params.expert_band = 0.3: allowed range is \[0.5, 2.0\]"):
        forge_gpu.sim.make("push", num_envs=1, device="cpu", **FAST, **{"params.expert_band": 0.3})
    env = forge_gpu.sim.make("push", num_envs=1, device="cpu", **FAST, **{"expert.band": 0.3})  # the file's own key
    with pytest.raises(ValueError, match=r"push.toml: \[expert\] band = 0.3: expected a number >= 0.5"):
        forge_gpu.sim.make_policy("expert", env)


def test_equal_fixed_colours_are_refused():
    config = forge_gpu.sim.task_config("push", **{"params.goal_color": "red"})
    with pytest.raises(ValueError, match="params.cube_color and params.goal_color are both 'red'"):
        forge_gpu.sim.TASKS["push"](dataclasses.replace(config, randomize=()))


def test_the_recorded_ranges_load_back_over_the_files_list_form():
    """configs/push.toml writes ranges as [low, high]; the recorded config's tables (what replay passes back as
    overrides) replace them, integer ranges included."""
    config = forge_gpu.sim.task_config("push")
    again = forge_gpu.sim.task_config("push", randomize=config.to_dict()["randomize"])
    assert again.randomize == config.randomize
    assert {r.name: r.dist for r in again.randomize}["cube_color"] == "integer"
