"""The scripted pick-and-place expert (``forge_gpu.sim:pick_expert``): it lifts the cube at 4 envs (lift's joint
targets through its own IK), restarts its state machine at each episode start, puts the cube down at a point and
stacks it on a second cube on the end-effector action, and refuses a bad setting in one line naming the file and
the key."""

from pathlib import Path

import numpy as np
import pytest
from forge_gpu.kernels.pick import APPROACH, DONE

import forge_gpu

ROOT = Path(__file__).parents[2]
PLACE = Path(__file__).parent / "ik_files" / "place_ee.toml"
STACK = Path(__file__).parent / "ik_files" / "stack_ee.toml"


@pytest.fixture(scope="module")
def lift():
    return forge_gpu.sim.make(str(ROOT / "configs" / "lift.toml"), num_envs=4, device="cpu", seed=2,
                              **{"params.render": False})  # fmt: skip


def test_the_expert_lifts_the_cube_at_four_envs_and_restarts_each_episode(lift):
    """Every world lifts its cube (lift's success: 13 cm up, between the fingers, for 1 s) within 200 steps; a
    world that starts a new episode starts the machine again from its approach."""
    env = lift
    policy = forge_gpu.sim.make_policy("expert", env)
    env.reset()
    succeeded = np.zeros(env.num_envs, bool)
    restarted = np.zeros(env.num_envs, bool)
    for _ in range(200):
        action = policy(env.observation)
        first = env.observation["step_id"].numpy() == 0
        assert (policy.phase.numpy()[first] == APPROACH).all()
        restarted |= first & succeeded
        result = env.step(action).numpy()
        succeeded |= result.observation["success"]
    assert succeeded.all(), succeeded
    assert restarted.any()  # a world that succeeded began again, its machine at the approach


def test_the_expert_puts_the_cube_down_at_a_point_on_the_end_effector_action():
    """On the end-effector action (pose changes and the gripper's width) the expert carries each cube to the place
    point, opens and retreats: every world done, its cube at rest on the table within 1.5 cm of the point."""
    env = forge_gpu.sim.make(str(PLACE), num_envs=4, device="cpu", seed=2)
    policy = forge_gpu.sim.make_policy("expert", env)
    start = env.reset().numpy().observation["cube_pose"]
    for _ in range(200):
        result = env.step(policy(env.observation)).numpy()
    cube = result.observation["cube_pose"]
    assert (policy.phase.numpy() == DONE).all(), policy.phase.numpy()
    error = np.linalg.norm(cube[:, :2] - np.array([0.45, 0.2]), axis=1)
    print(f"placed: the cubes rest {np.round(error * 1000, 1).tolist()} mm from the point")
    assert error.max() < 0.015  # measured 8.2-11.7 mm: the fingers drag it 3-8 mm as they open
    assert np.abs(cube[:, 2] - start[:, 2]).max() < 0.005  # resting on the table at its own height
    assert (result.observation["proprio"][:, 7:9] > 0.035).all()  # the fingers open


def test_the_expert_stacks_the_cube_on_a_body():
    """With ``place`` a body (a second cube, 5 cm), the expert leaves each red cube resting on it: centred within
    1.5 cm, its centre at the base's top plus its own half edge (within 5 mm), the machine done, the fingers open."""
    env = forge_gpu.sim.make(str(STACK), num_envs=4, device="cpu", seed=2)
    policy = forge_gpu.sim.make_policy("expert", env)
    start = env.reset().numpy().observation["cube_pose"]
    for _ in range(200):
        result = env.step(policy(env.observation)).numpy()
    names = env.task.plan.body_names
    body_q = result.state["body_q"].reshape(env.num_envs, len(names), 7)
    cube, base = body_q[:, names.index("cube"), :3], body_q[:, names.index("base"), :3]
    assert (policy.phase.numpy() == DONE).all(), policy.phase.numpy()
    assert np.linalg.norm(cube[:, :2] - base[:, :2], axis=1).max() < 0.015
    assert np.abs(cube[:, 2] - (2 * base[:, 2] + start[:, 2])).max() < 0.005
    assert (result.observation["proprio"][:, 7:9] > 0.035).all()


BAD = [
    ({"object": "mug"}, r"expert\.object = 'mug': expected a body of the model \("),
    ({"place": [0.4, 0.2]}, r"expert\.place = \[0\.4, 0\.2\]: expected a body's name or \[x, y, z\] \[m\]$"),
    ({"gain": -1.0}, r"expert\.gain = -1\.0: expected a number >= 0\.001$"),
    ({"speed": 1.0}, r"expert\.speed: unknown key; pick_expert takes object, site, place, gripper, approach_height"),
    ({"gripper_open": None}, r"expert: pick_expert needs gripper_open \(the gripper column's value, action units\)$"),
    ({"site": "nose"}, r"expert\.site = 'nose': no such site; the model's sites are tcp$"),
    ({"gripper": "joint7"}, r"expert\.gripper = 'joint7': expected the action joint of the gripper's column, one of "),
]


@pytest.mark.parametrize(("change", "expected"), BAD)
def test_a_bad_setting_is_refused_in_one_line_naming_the_file_and_key(lift, change, expected):
    from forge_gpu._src.tasks.pick import pick_expert

    settings = {k: v for k, v in lift.task.file.expert.items() if k != "factory"}
    settings.update(change)
    settings = {k: v for k, v in settings.items() if v is not None}
    with pytest.raises(ValueError) as raised:
        pick_expert(lift.task, lift.world, settings)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(str(ROOT / "configs" / "lift.toml")), message
    assert __import__("re").search(expected, message), message
