"""The teleoperation session without a browser (forge_gpu/_src/teleop/session.py): held inputs give the key map's
actions and move the end-effector that way; keep and discard put exactly the kept episodes in the run, marked
teleoperated, and verify calls it ok; a task without the end-effector action is refused in one line. On the CPU,
lift on the Panda's end-effector variant without cameras."""

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.reading.verify import verify_run
from forge_gpu._src.teleop.keys import load_keymap
from forge_gpu._src.teleop.session import TELEOPERATED, TeleopSession, check_end_effector, end_effector_variants

MAX_STEPS = 8


@pytest.fixture(scope="module")
def env():
    return forge_gpu.sim.make("lift", num_envs=1, device="cpu", seed=0, variant="ee", max_steps=MAX_STEPS,
                              **{"params.render": False})  # fmt: skip


def episodes_of(run):
    options = forge_gpu.reading.EpisodeReadOptions(state=True)
    return list(forge_gpu.reading.read_episodes(run, options=options))


def test_held_keys_give_the_key_maps_actions_and_move_the_end_effector_that_way(env, tmp_path):
    """Each step's recorded action is the held keys' map values times the speed, the gripper column open (the
    bound high) or closed (low) after Space; holding W moves the tcp along +x, F along -z."""
    keymap = load_keymap()
    session = TeleopSession(env, tmp_path / "run", keymap)
    start = session.frame().status["point"]
    for name in ("Digit3", "Enter"):  # speed 1, start
        session.press(name)
    held = [{"KeyW": 1.0}] * 3 + [{"KeyF": 1.0}] * 3 + [{"KeyA": 1.0, "KeyR": 1.0}, {}]
    points = []
    for i, keys in enumerate(held):
        if i == 6:
            session.press("Space")  # close the gripper
        session.step(keys)
        points.append(session.frame().status["point"])
    assert session.phase == "ended" and session.frame().status["outcome"] == "time limit"
    session.press("KeyK")
    session.close()
    (episode,) = episodes_of(tmp_path / "run")
    w, f, a_r = np.eye(7, dtype=np.float32)[0], -np.eye(7, dtype=np.float32)[2], np.float32([0, 1, 1, 0, 0, 0, 0])
    expected = np.stack([w] * 3 + [f] * 3 + [a_r, np.zeros(7, np.float32)])
    expected[:6, 6], expected[6:, 6] = 0.08, 0.0  # the gripper open, then closed
    np.testing.assert_array_equal(episode.action, expected)
    assert points[2][0] - start[0] > 0.01 and abs(points[2][1] - start[1]) < 0.005  # W: +x
    assert points[5][2] - points[2][2] < -0.01  # F: -z
    assert episode.params[TELEOPERATED] == 1.0


def test_keep_and_discard_put_exactly_the_kept_episodes_in_the_run(env, tmp_path):
    """Of four episodes (kept, discarded while running, discarded after its end, kept) the run holds the two kept,
    as episodes 0 and 1 in order, each marked teleoperated; keep before the end and start after it only leave a
    note; verify calls the run ok."""
    keymap = load_keymap()
    session = TeleopSession(env, tmp_path / "run", keymap)

    def episode(keys: dict, end: str):
        session.press("start")
        while session.phase == "running":
            if end == "discard" and session.frame().status["step"] == 3:
                break
            session.step(keys)
        session.press(end)

    episode({"KeyW": 1.0}, "keep")
    episode({"KeyS": 1.0}, "discard")
    session.press("start")
    session.press("keep")  # not ended: nothing kept
    assert session.kept == 1 and "has not ended" in session.note
    while session.phase == "running":
        session.step({"KeyD": 1.0})
    session.press("start")  # ended: neither kept nor restarted
    assert session.phase == "ended" and "keep or discard" in session.note
    session.press("discard")
    episode({"KeyA": 1.0}, "keep")
    assert (session.kept, session.discarded) == (2, 2)
    session.close()
    report = verify_run(tmp_path / "run")
    assert report["ok"], report
    episodes = episodes_of(tmp_path / "run")
    assert [e.episode_id for e in episodes] == [0, 1]
    assert [e.steps for e in episodes] == [MAX_STEPS, MAX_STEPS]
    assert episodes[0].action[0, 0] == 0.5 and episodes[1].action[0, 1] == 0.5  # W, then A, at speed 0.5
    assert all(e.params[TELEOPERATED] == 1.0 for e in episodes)
    assert "joint_target" in episodes[0].state and episodes[0].state["body_q"].shape[0] == MAX_STEPS + 1


def test_a_task_without_the_end_effector_action_is_refused_naming_what_it_needs():
    """lift (joint positions) is refused naming its ee variant; cartpole (efforts) naming the action it needs;
    lift's ee variant passes."""
    lift = forge_gpu.sim.task_config("lift")
    assert end_effector_variants("lift", {}) == ["ee"]
    with pytest.raises(ValueError, match=r"^task 'lift': teleop drives the end-effector action \(\[action\] kind = "
                       r"\"ee_delta\"\), and its action is kind = 'position'; its variant 'ee' has one: add "
                       r"--variant ee$"):  # fmt: skip
        check_end_effector("lift", lift, ["ee"])
    with pytest.raises(ValueError, match=r"kind = 'effort'; give a task file whose \[action\] has kind = \"ee_delta\""):
        check_end_effector("cartpole", forge_gpu.sim.task_config("cartpole"), [])
    check_end_effector("lift", forge_gpu.sim.task_config("lift", variant="ee"), [])


def test_a_session_of_more_than_one_world_is_refused(tmp_path):
    """The session steps one world: an env of two is refused before the run is made."""
    env = forge_gpu.sim.make("lift", num_envs=2, device="cpu", variant="ee", **{"params.render": False})
    with pytest.raises(ValueError, match="teleop steps one world; the env has num_envs = 2"):
        TeleopSession(env, tmp_path / "run", load_keymap())
    assert not (tmp_path / "run").exists()
