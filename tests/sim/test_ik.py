"""The end-effector action (``[action] kind = "ee_delta"``): repeated IK steps bring the Panda's tcp to a pose
from random reachable starts, the joint targets stay within the limits and are the recorded state, replay from
the state and from the actions is exact, and a bad value is refused in one line naming the file and the key."""

from pathlib import Path

import newton
import numpy as np
import pytest
import warp as wp

import forge_gpu

FILE = Path(__file__).parent / "ik_files" / "panda_ee.toml"
SCALE = np.array([0.02, 0.02, 0.02, 0.1, 0.1, 0.1], np.float32)
"""The file's pose columns' scale [m, rad per action unit]."""


def _quat_mul(a, b):
    """xyzw quaternion products, row by row."""
    ax, ay, az, aw = np.moveaxis(a, -1, 0)
    bx, by, bz, bw = np.moveaxis(b, -1, 0)
    return np.stack([aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz], -1)  # fmt: skip


def _rotation_error(current, goal):
    """The rotation vector that turns ``current`` into ``goal`` (world frame), per row."""
    d = _quat_mul(goal, current * np.array([-1, -1, -1, 1], np.float32))
    d = np.where(d[:, 3:] < 0, -d, d)
    s = np.linalg.norm(d[:, :3], axis=1, keepdims=True)
    angle = 2 * np.arctan2(s[:, 0], d[:, 3])
    return d[:, :3] * np.where(s > 1e-9, angle[:, None] / np.maximum(s, 1e-9), 2.0)


def _tcp(env, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward kinematics of the joint coordinates ``q`` [N, coords]: the bodies' poses [N, B, 7] and the tcp's
    pose [N, 7] (position, quaternion xyzw)."""
    model, n = env.world.model, env.num_envs
    state = model.state()
    qd = wp.zeros(model.joint_dof_count, dtype=float, device=env.device)
    newton.eval_fk(model, wp.array(q.reshape(-1), dtype=float, device=env.device), qd, state)
    body_q = state.body_q.numpy().reshape(n, -1, 7)
    ik = env.task.plan.ik
    offset = wp.transform(wp.vec3(*ik["point_offset"][:3]), wp.quat(*ik["point_offset"][3:]))
    tcp = [np.array(wp.transform_multiply(wp.transform(*b[ik["point_body"]]), offset)) for b in body_q]
    return body_q, np.asarray(tcp, np.float32)


def _start(env, q: np.ndarray):
    """Restore every world at rest at the joint coordinates ``q`` (its targets there too)."""
    body_q, _ = _tcp(env, q)
    arm = env.task.plan.ik["coords"] + env.task.plan.ik["gripper_coords"]
    state = {"joint_q": q, "joint_qd": np.zeros(env.state_fields["joint_qd"].shape, np.float32), "body_q": body_q,
             "joint_target": q[:, arm]}  # fmt: skip
    return env.restore(state).numpy()


@pytest.fixture(scope="module")
def env():
    return forge_gpu.sim.make(str(FILE), num_envs=4, device="cpu", seed=3)


def test_repeated_ik_steps_reach_a_pose_from_random_starts_within_the_limits(env):
    """From four random reachable starts, a proportional policy of pose changes brings the tcp within 2 mm and
    0.02 rad of four random reachable poses (each the tcp of random joint angles), the gravity's sag included."""
    rng = np.random.default_rng(7)
    plan, n = env.task.plan, env.num_envs
    arm = plan.ik["coords"]
    lower, upper = np.asarray(plan.lower)[arm], np.asarray(plan.upper)[arm]
    home = env.world.model.joint_q.numpy().reshape(n, -1)

    def random_q():
        q = home.copy()
        q[:, arm] = np.clip(q[:, arm] + rng.uniform(-0.35, 0.35, (n, len(arm))), lower + 0.05, upper - 0.05)
        return q.astype(np.float32)

    _, goal = _tcp(env, random_q())
    result = _start(env, random_q())
    pose = result.observation["proprio"][:, 9:16]
    assert np.linalg.norm(pose[:, :3] - goal[:, :3], axis=1).min() > 0.02  # the starts are away from the goals
    for _ in range(120):
        pose = result.observation["proprio"][:, 9:16]
        error = np.concatenate([goal[:, :3] - pose[:, :3], _rotation_error(pose[:, 3:], goal[:, 3:])], axis=1)
        action = np.concatenate([np.clip(0.5 * error / SCALE, -1, 1), np.full((n, 1), 0.08)], axis=1)
        result = env.step(wp.array(action.astype(np.float32), device=env.device)).numpy()
        targets = result.state["joint_target"][:, : len(arm)]
        assert ((targets >= lower - 1e-6) & (targets <= upper + 1e-6)).all()
    pose = result.observation["proprio"][:, 9:16]
    position = np.linalg.norm(pose[:, :3] - goal[:, :3], axis=1)
    angle = np.linalg.norm(_rotation_error(pose[:, 3:], goal[:, 3:]), axis=1)
    assert (position < 0.002).all(), position
    assert (angle < 0.02).all(), angle


def test_targets_stop_at_the_joint_limits_and_are_the_applied_ones(env):
    """Pushed toward an unreachable point, the targets stop at the limits (some joint reaches one); the targets
    the state records are the ones the drives were given; the gripper column sets the fingers (width 0: closed)."""
    plan, n = env.task.plan, env.num_envs
    arm, fingers = plan.ik["coords"], plan.ik["gripper_coords"]
    lower, upper = np.asarray(plan.lower)[arm], np.asarray(plan.upper)[arm]
    env.reset()
    action = np.tile(np.array([1.0, 1.0, -1.0, 1.0, 0.0, 1.0, 0.0], np.float32), (n, 1))
    hit = False
    for _ in range(80):
        result = env.step(wp.array(action, device=env.device)).numpy()
        targets = result.state["joint_target"]
        assert ((targets[:, : len(arm)] >= lower - 1e-6) & (targets[:, : len(arm)] <= upper + 1e-6)).all()
        hit |= bool(np.isclose(targets[:, : len(arm)], lower).any() or np.isclose(targets[:, : len(arm)], upper).any())
    assert hit
    applied = env.world.control.joint_target_q.numpy().reshape(n, -1)
    np.testing.assert_array_equal(applied[:, arm + fingers], targets)
    follower = env.task.plan.follow[0][0]
    np.testing.assert_array_equal(applied[:, follower], targets[:, -1])  # finger_joint2 follows finger_joint1
    np.testing.assert_allclose(targets[:, len(arm) :], 0.0, atol=1e-7)  # width 0: closed
    np.testing.assert_array_equal(result.info["executed_action"], action)  # the recorded action: the policy's


def test_replay_from_state_and_from_actions_is_exact(tmp_path, capsys):
    """A recorded run of random pose changes replays with zero divergence from its actions, and from its state
    observes every frame as recorded."""
    from forge_gpu.cli import main

    run = tmp_path / "run"
    argv = ["collect", str(FILE), "--policy", "random", "--envs", "2", "--episodes", "2", "--out", str(run)]
    assert main(argv + ["--device", "cpu", "--seed", "5", "--set", "max_steps=25"]) == 0
    capsys.readouterr()
    assert main(["replay", str(run), str(tmp_path / "actions"), "--from", "actions", "--device", "cpu"]) == 0
    assert "divergence: 0 of 2 episodes beyond 1e-05; largest state error 0\n" in capsys.readouterr().out
    assert main(["replay", str(run), str(tmp_path / "state"), "--from", "state", "--device", "cpu"]) == 0
    options = forge_gpu.reading.EpisodeReadOptions(state=["joint_target"])
    recorded, replayed = (
        forge_gpu.reading.read_episodes(tmp_path / name, options=options) for name in ("run", "state")
    )
    pairs = list(zip(sorted(recorded, key=_key), sorted(replayed, key=_key), strict=True))
    assert len(pairs) == 2
    for a, b in pairs:
        np.testing.assert_array_equal(a.obs["proprio"], b.obs["proprio"])
        np.testing.assert_array_equal(a.next["proprio"], b.next["proprio"])
        np.testing.assert_array_equal(a.state["joint_target"], b.state["joint_target"])
        assert np.abs(np.diff(a.state["joint_target"][:, :7], axis=0)).max() > 1e-3  # the targets moved


def _key(episode):
    return episode.env_id, episode.episode_id


BAD = [
    ('site = "tcp"', 'site = "nose"', r"action\.site = 'nose': no such site; the model's sites are tcp$"),
    (
        'joints = ["joint*", "finger_joint1"]',
        'joints = ["finger_joint1"]',
        r"action\.joints: none of finger_joint1 moves site 'tcp'$",
    ),
    ('site = "tcp"', 'site = "tcp"\nik_damping = -1.0', r"action\.ik_damping = -1\.0: expected a number >= 0$"),
    ('site = "tcp"', 'site = "tcp"\nmax_lag = "far"', r"action\.max_lag = 'far': expected a number >= 1e-09$"),
    ('site = "tcp"', 'site = "tcp"\nframe = "tool"', r"action\.frame = 'tool': allowed values are 'world', 'base'$"),
    ('site = "tcp"', 'site = "tcp"\nbody = "hand"', 'action: kind = "ee_delta" needs site'),
    ('kind = "ee_delta"', 'kind = "position"', r"action\.site: only kind = 'ee_delta' takes it$"),
]


@pytest.mark.parametrize(("old", "new", "expected"), BAD)
def test_bad_values_are_refused_in_one_line_naming_the_file_and_key(tmp_path, old, new, expected):
    text = FILE.read_text().replace('file = "../../../configs', f'file = "{FILE.parents[3]}/configs')
    assert old in text
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ValueError) as raised:
        forge_gpu.sim.task_config(str(path))
    message = str(raised.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert __import__("re").search(expected, message), message
