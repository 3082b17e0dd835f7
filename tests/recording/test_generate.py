"""generate: source episodes cut at the frames their subtasks' conditions first hold, segments moved into the frame
of the object where it is now, attempts keyed by index whatever the number of envs, every generated episode traced
to its source, failures kept out of the run, and bad arguments refused in one line."""

from pathlib import Path

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.generate.follower import Follower, Motion, lead_chain, task_arm
from forge_gpu._src.generate.sources import Sources, compose, cut_sources, inverse, joint_lead, quat_multiply
from forge_gpu._src.tasks.taskfile.model import probe, sites
from forge_gpu.cli import main

ALL = forge_gpu.reading.EpisodeReadOptions(state=True)
SMALL = {"params.render": False, "max_steps": 250}


def _episodes(path):
    run = forge_gpu.reading.open_run(path)
    return list(run.read(list(range(len(run))), ALL))


@pytest.fixture(scope="module")
def lift_source(tmp_path_factory):
    """Four lift demonstrations of the scripted expert (the source), without cameras, at most 250 steps."""
    path = tmp_path_factory.mktemp("lift") / "source"
    env = forge_gpu.sim.make("lift", num_envs=4, device="cpu", seed=1, **SMALL)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("expert", env), str(path), episodes=4)
    return path


@pytest.fixture(scope="module")
def generated(lift_source, tmp_path_factory):
    """Three lift demonstrations generated from the source at 4 envs, as generation does by default (the nearest
    source's segments, followed by their commands)."""
    out = tmp_path_factory.mktemp("gen") / "run"
    summary = forge_gpu.recording.generate(lift_source, out, episodes=3, num_envs=4, seed=3, device="cpu")
    return out, summary


RANDOM_POSE = {"select": "random", "motion": Motion(follow="pose")}
"""The other way to generate: each segment drawn uniformly per attempt, followed by a share of the pose error."""


@pytest.fixture(scope="module")
def generated_pose(lift_source, tmp_path_factory):
    """Three generated the other way (:data:`RANDOM_POSE`)."""
    out = tmp_path_factory.mktemp("gen-pose") / "run"
    summary = forge_gpu.recording.generate(lift_source, out, episodes=3, num_envs=4, seed=3, device="cpu",
                                           **RANDOM_POSE)  # fmt: skip
    return out, summary


def _tcp_and_cube(episode):
    """The tcp's world pose and the cube's at every frame of ``episode`` (from its recorded body state)."""
    task = forge_gpu.sim.make("lift", num_envs=1, device="cpu", **SMALL).task
    body, offset = sites(probe(task.file.model, task.file.file))["tcp"]
    body_q = episode.state["body_q"].astype(np.float64)
    tcp = compose(body_q[:, body], np.broadcast_to(np.asarray(offset, np.float64), body_q[:, body].shape))
    return tcp, body_q[:, task.plan.body_names.index("cube")]


def test_a_source_episode_is_cut_where_its_conditions_first_hold(generated, lift_source):
    """Each source episode's grasp ends at the first frame the cube's centre has been above 4.5 cm for 0.1 s
    (lift.toml's condition, computed here from the recorded state), lift at the episode's last frame (the task's
    success); the run records where it cut each of its sources."""
    out, summary = generated
    manifest = forge_gpu.reading.open_run(out).manifest
    assert summary.sources == 4 and not summary.skipped
    frames = {}  # (source, subtask) -> the frames its segment spans
    for e in _episodes(out):
        for s, (ids, cut) in enumerate(zip(e.params["generate_source"], e.params["generate_frames"], strict=True)):
            frames.setdefault((*ids.astype(int).tolist(), s), []).append(cut.astype(int).tolist())
    assert frames
    assert manifest["generated_from"]["source_episodes"] == [0, 1, 2, 3]
    for e in _episodes(lift_source):
        _, cube = _tcp_and_cube(e)
        above = cube[:, 2] > 0.045
        run = np.zeros(len(above), int)
        for f in range(len(above)):
            run[f] = (run[f - 1] + 1 if f else 1) if above[f] else 0
        grasp = int(np.flatnonzero(run * 0.02 >= 0.1 - 0.01)[0])
        for s, expected in enumerate([[0, grasp], [grasp, e.steps]]):
            assert all(cut == expected for cut in frames.get((e.env_id, e.episode_id, s), []))


def test_a_segment_moved_into_the_objects_frame_lands_on_the_object(generated, lift_source):
    """A segment that holds the tcp 3 cm above the source's cube, moved into the frame of each world's cube (placed
    elsewhere at every reset), brings the tcp within 3 mm of that pose above the cube once the IK has settled; the
    generated run's recorded transforms are the cube's pose now against its pose at the segment's start. The
    synthetic segment was never commanded by a controller (it has no lead to carry), so it is followed as ``pose``
    (integrating the error: the drives' sag under gravity is taken up as well)."""
    out, _ = generated
    source = _episodes(lift_source)[0]
    s_tcp, s_cube = _tcp_and_cube(source)
    hover = s_tcp[0].copy()
    hover[:3] = s_cube[0, :3] + [0.0, 0.0, 0.03]
    frames = 60
    sources = Sources(run="synthetic", indices=[0], ids=np.zeros((1, 2), np.int64),
                      cuts=np.array([[0, frames - 1, frames]]), starts=np.zeros(1, np.int64),
                      poses=np.tile(hover, (frames + 1, 1)).astype(np.float32),
                      grip=np.full(frames + 1, 0.08, np.float32),
                      objects=np.stack([s_cube[0], s_cube[0]])[None].astype(np.float32),
                      held=np.zeros((1, 2, 3), np.float32), lead=np.zeros((frames + 1, 6), np.float32))  # fmt: skip
    env = forge_gpu.sim.make("lift", num_envs=4, device="cpu", seed=5, **SMALL)
    follower = Follower(env, sources, task_arm(env.task), attempts=4, select="random", interpolation_steps=20,
                        action_noise=0.0, motion=Motion(follow="pose"))  # fmt: skip
    env.reset()
    for _ in range(2 * frames):  # the segment, then its last pose held while the drives settle
        env.step(follower(env.observation))
    task = env.task
    body, offset = sites(probe(task.file.model, task.file.file))["tcp"]
    body_q = task.frame.body_q.numpy().astype(np.float64)
    tcp = compose(body_q[:, body], np.broadcast_to(np.asarray(offset, np.float64), (4, 7)))
    cube = body_q[:, task.plan.body_names.index("cube")]
    goal = compose(compose(cube, np.broadcast_to(inverse(s_cube[0]), (4, 7))), np.broadcast_to(hover, (4, 7)))
    assert np.ptp(cube[:, 0]) > 0.02  # the cubes are in different places
    assert np.linalg.norm(tcp[:, :3] - goal[:, :3], axis=1).max() < 0.003
    sources_by_id = {(e.env_id, e.episode_id): e for e in _episodes(lift_source)}
    for e in _episodes(out):
        _, g_cube = _tcp_and_cube(e)
        _, their_cube = _tcp_and_cube(sources_by_id[tuple(int(v) for v in e.params["generate_source"][0])])
        expected = compose(g_cube[0], inverse(their_cube[0]))
        np.testing.assert_allclose(e.params["generate_transform"][0][:3], expected[:3], atol=1e-4)


def test_nearest_takes_the_source_whose_object_started_nearest(lift_source, tmp_path):
    """With ``select = "nearest"`` each attempt's grasp follows the source whose cube, at its segment's first frame,
    was nearest the attempt's cube (the distance in metres plus ``angle_weight`` metres a radian of rotation)."""
    out = tmp_path / "run"
    forge_gpu.recording.generate(lift_source, out, episodes=4, num_envs=4, seed=5, device="cpu", select="nearest")
    sources = _episodes(lift_source)
    start = np.stack([_tcp_and_cube(e)[1][0] for e in sources])  # the grasp segment starts at frame 0
    ids = [(e.env_id, e.episode_id) for e in sources]
    weight = Motion().angle_weight
    chosen_sources = set()
    for e in _episodes(out):
        cube = _tcp_and_cube(e)[1][0]
        turn = quat_multiply(start[:, 3:], np.broadcast_to(inverse(cube)[3:], (len(start), 4)))
        angle = 2.0 * np.arctan2(np.linalg.norm(turn[:, :3], axis=1), np.abs(turn[:, 3]))
        distance = np.linalg.norm(start[:, :3] - cube[:3], axis=1) + weight * angle
        chosen = ids.index(tuple(int(v) for v in e.params["generate_source"][0]))
        assert distance[chosen] <= distance.min() + 1e-4, (chosen, distance)
        chosen_sources.add(chosen)
    assert len(chosen_sources) > 1  # the cubes were in different places, nearest to different sources


def test_a_sources_lead_is_where_its_joint_targets_put_the_tcp(lift_source):
    """The lead of a source frame (the tcp's Jacobian times the joint targets minus the measured joints) is, to
    first order, the pose change from the tcp's measured pose to its pose at the targets (forward kinematics of the
    targets): within a fifth of the lead and 3 mm, over frames whose lead is over a centimetre."""
    import newton
    import warp as wp

    env = forge_gpu.sim.make("lift", num_envs=1, device="cpu", **SMALL)
    arm = task_arm(env.task)
    chain = lead_chain(env, arm)
    episode = _episodes(lift_source)[0]
    body_q = episode.state["body_q"][:-1].astype(np.float32)
    joint_q = episode.state["joint_q"][:-1].astype(np.float32)
    tcp = compose(body_q[:, arm.point_body], np.broadcast_to(np.asarray(arm.offset, np.float32), (len(body_q), 7)))
    lead = joint_lead(body_q, joint_q, episode.action.astype(np.float32), tcp[:, :3], chain)
    moving = np.flatnonzero(np.linalg.norm(lead[:, :3], axis=1) > 0.01)
    assert moving.size > 10  # the expert's targets lead its joints by more than a centimetre at the tcp
    state = env.model.state()
    for f in moving[:: max(1, moving.size // 12)]:
        q = joint_q[f].copy()
        for coord, column in zip(chain["coords"], chain["columns"], strict=True):
            q[coord] = chain["origin"][coord] + episode.action[f, column] * chain["scale"][column]
        newton.eval_fk(env.model, wp.array(q, dtype=float), wp.zeros(env.model.joint_dof_count, dtype=float), state)
        at_targets = compose(state.body_q.numpy()[arm.point_body], np.asarray(arm.offset, np.float32))
        moved = at_targets[:3] - tcp[f, :3]
        assert np.linalg.norm(moved - lead[f, :3]) < 0.2 * np.linalg.norm(lead[f, :3]) + 0.003
        turn = quat_multiply(at_targets[3:], inverse(tcp[f])[3:])
        turned = 2.0 * np.sign(turn[3]) * turn[:3]  # the small rotation's vector
        assert np.linalg.norm(turned - lead[f, 3:]) < 0.2 * np.linalg.norm(lead[f, 3:]) + 0.02
    reader = forge_gpu.reading.open_run(lift_source)
    sources = cut_sources(env, reader, str(lift_source), [0], arm.gripper_column, (arm.point_body, arm.offset), chain)
    np.testing.assert_allclose(sources.lead[:-1], lead, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(sources.lead[-1], lead[-1])  # no action at the last frame: the lead that reached it


@pytest.mark.parametrize("follow", ["command", "pose"])
def test_the_trace_reproduces_the_path(generated, generated_pose, lift_source, follow):
    """A generated episode's recorded source, frames and transform give the path its tcp followed: the source's tcp
    poses moved by the transform, within 2 cm at the median step of each segment (the drives lag the commanded
    poses, most right after the interpolation), whichever way the follower makes its joint targets."""
    out, _ = generated if follow == "command" else generated_pose
    assert forge_gpu.reading.open_run(out).manifest["generated_from"]["follow"] == follow
    sources = {(e.env_id, e.episode_id): e for e in _episodes(lift_source)}
    for e in _episodes(out):
        tcp, _ = _tcp_and_cube(e)
        at = 0
        np.testing.assert_array_equal(e.params["generate_hold"], 0.0)  # lift carries nothing: no correction
        trace = zip(e.params["generate_source"], e.params["generate_frames"].astype(int),
                    e.params["generate_transform"].astype(np.float64), strict=True)  # fmt: skip
        for ids, (first, last), transform in trace:
            s_tcp, _ = _tcp_and_cube(sources[tuple(int(v) for v in ids)])
            path = compose(np.broadcast_to(transform, (last - first + 1, 7)), s_tcp[first : last + 1])
            steps = min(last - first, e.steps - at - 5)
            followed = tcp[at + 5 : at + 5 + steps + 1, :3]
            error = np.linalg.norm(followed - path[: steps + 1, :3], axis=1)
            assert np.median(error) < 0.02
            at += 5 + last - first


def test_a_selection_of_a_run_is_a_source(lift_source, tmp_path):
    """A run ``select`` wrote from the source serves as one: every generated episode's segments come from the
    selected episodes alone."""
    picked = tmp_path / "picked"
    forge_gpu.curation.select_run(lift_source, picked, "env < 2")
    kept = {(e.env_id, e.episode_id) for e in _episodes(picked)}
    assert len(kept) == 2
    summary = forge_gpu.recording.generate(picked, tmp_path / "run", episodes=2, num_envs=2, seed=3, device="cpu")
    assert summary.sources == 2 and summary.episodes == 2
    used = {tuple(int(v) for v in ids) for e in _episodes(tmp_path / "run") for ids in e.params["generate_source"]}
    assert used and used <= kept


def test_the_same_seed_gives_the_same_episodes_at_4_and_16_envs(generated_pose, lift_source, tmp_path):
    """The run holds the first N successful attempts by index, each keyed by (seed, its index), its draws of
    segments too: at 16 envs the episodes are those of 4 envs, action for action."""
    out, summary = generated_pose
    other = forge_gpu.recording.generate(lift_source, tmp_path / "wide", episodes=3, num_envs=16, seed=3, device="cpu",
                                         **RANDOM_POSE)  # fmt: skip
    assert (other.attempts, other.successes) == (summary.attempts, summary.successes)
    for a, b in zip(_episodes(out), _episodes(tmp_path / "wide"), strict=True):
        assert (a.env_id, a.episode_id, a.steps) == (b.env_id, b.episode_id, b.steps)
        np.testing.assert_array_equal(a.action, b.action)
        for name in a.params:
            np.testing.assert_array_equal(a.params[name], b.params[name])


def _same_statistics(run):
    """The run's stats.json against its episodes counted again: every field's figures equal."""
    stored = forge_gpu.curation.run_statistics(run)
    counted = forge_gpu.curation.compute_statistics(run, write=False).summary()
    assert set(stored) == set(counted) and "action" in stored
    for name, figures in counted.items():
        for key, value in figures.items():
            np.testing.assert_allclose(stored[name][key], value, rtol=1e-6, err_msg=f"{name} {key}")


def test_a_generated_run_carries_its_statistics(generated):
    """A generated run has the stats.json a recorder writes (normalization reads it), equal to its episodes'
    statistics counted again."""
    out, _ = generated
    _same_statistics(out)
    norm = forge_gpu.reading.normalization(out, ["action"])
    assert norm.center.shape == norm.scale.shape and np.isfinite(norm.scale).all()


def test_failed_attempts_never_reach_the_run(lift_source, tmp_path):
    """With noisy actions some attempts fail: the run holds only successes, in attempt order, the failures run the
    others before the last success, and together they are every attempt counted."""
    out, failures = tmp_path / "run", tmp_path / "failures"
    summary = forge_gpu.recording.generate(lift_source, out, episodes=3, num_envs=4, seed=0, device="cpu",
                                           action_noise=0.02, keep_failures=failures)  # fmt: skip
    kept, failed = _episodes(out), _episodes(failures)
    assert len(kept) == 3 and summary.successes == 3 and failed, "noise this large fails some attempts"
    assert all(e.next["success"][-1] for e in kept)
    assert not any(e.next["success"].any() for e in failed)
    attempts = sorted(int(e.params["generate_attempt"]) for e in kept + failed)
    assert attempts == list(range(summary.attempts))
    assert [int(e.params["generate_attempt"]) for e in kept] == sorted(int(e.params["generate_attempt"]) for e in kept)
    assert sum(summary.failed_in) == len(failed)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--episodes", "0"], "--episodes 0: must be >= 1"),
        (["--interpolation-steps", "-1"], "--interpolation-steps -1: must be >= 0"),
        (["--action-noise", "-0.1"], "--action-noise -0.1: must be a number >= 0"),
        (["--gain", "0"], "--gain 0.0: expected a number in (0, 1]"),
        (["--follow", "pose", "--gain", "nan"], "--gain nan: expected a number in (0, 1]"),
        (["--follow", "lead"], "argument --follow: invalid choice: 'lead'"),
        (["--follow", "command", "--gain", "0.3"], "--gain 0.3: the command follower (the default for a joint-target "
         "action) takes no gain; --follow pose does"),
        (["--gain", "0.3"], "gain = 0.3: the command follower (the default for a joint-target action) takes no gain"),
        (["--source-episodes", "a,b"], "--source-episodes 'a,b': expected indices"),
        (["--source-episodes", "9"], "source episode 9: the run"),
        (["--select", "best"], "argument --select: invalid choice"),
        (["--task", "stack"], "the run is of task 'lift', not 'stack'"),
        (["--set", "seed=3"], "--set seed: give --envs or --seed"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(lift_source, tmp_path, capsys, args, message):
    """Every bad argument, and a source run of another task, exits 2 with one line naming it; nothing is written."""
    out = tmp_path / "out"
    base = ["generate", str(lift_source), "--out", str(out), "--device", "cpu", "--envs", "2"]
    if "--episodes" not in args:
        base += ["--episodes", "1"]
    assert main([*base, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize(
    ("motion", "message"),
    [
        (Motion(follow="lead"), "follow = 'lead': expected one of command, pose"),
        (Motion(gain=1.5), "gain = 1.5: expected a number in (0, 1]"),
        (Motion(gain=0.3), "gain = 0.3: the command follower (the default for a joint-target action) takes no gain; "
         "follow = 'pose' does"),
    ],
)
def test_bad_motions_are_refused_by_the_api(lift_source, tmp_path, motion, message):
    """The API refuses a bad follower before anything is written, naming the field."""
    with pytest.raises(ValueError) as refused:
        forge_gpu.recording.generate(lift_source, tmp_path / "out", episodes=1, num_envs=2, device="cpu", motion=motion)
    assert str(refused.value) == message
    assert not (tmp_path / "out").exists()


def test_the_same_seed_gives_the_same_episodes_with_1_and_2_ray_workers(generated, lift_source, tmp_path):
    """On Ray, blocks of attempts handed out in index order and merged: with 1 worker and with 2 (2 envs each, blocks
    of 3) the run is the one process's, episode for episode."""
    ray = pytest.importorskip("ray")
    out, summary = generated
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for workers in (1, 2):
            path = tmp_path / f"workers-{workers}"
            other = forge_gpu.recording.generate(lift_source, path, episodes=3, num_envs=2, seed=3, device="cpu",
                                                 workers=workers, chunk=3)  # fmt: skip
            assert (other.attempts, other.successes, other.episodes) == (summary.attempts, summary.successes, 3)
            for a, b in zip(_episodes(out), _episodes(path), strict=True):
                assert (a.episode_id, a.steps) == (b.episode_id, b.steps)
                np.testing.assert_array_equal(a.action, b.action)
                np.testing.assert_array_equal(a.params["generate_transform"], b.params["generate_transform"])
            _same_statistics(path)  # the merged run counts its episodes as one process's run does
    finally:
        ray.shutdown()


def test_an_ee_delta_task_records_its_pose_changes_and_they_replay(tmp_path):
    """On a task whose action is the tcp's pose change (``kind = "ee_delta"``), the generated run's action is that
    change (within the action's bounds) and the gripper's width, and replaying the run from its actions gives back
    its states bit for bit: the run is in the task's own action space."""
    task = Path(__file__).parent / "generate_files" / "lift_ee.toml"
    env = forge_gpu.sim.make(str(task), num_envs=2, device="cpu", seed=1)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("expert", env), str(tmp_path / "source"), episodes=2)
    summary = forge_gpu.recording.generate(tmp_path / "source", tmp_path / "run", episodes=2, num_envs=2, device="cpu")
    assert summary.episodes == 2
    assert forge_gpu.reading.open_run(tmp_path / "run").manifest["generated_from"]["follow"] == "pose"  # its default
    for e in _episodes(tmp_path / "run"):
        assert e.action.shape[1] == 7 and np.abs(e.action[:, :6]).max() <= 1.0
        assert np.isin(e.action[:, 6], np.float32([0.0, 0.08])).all() and e.next["success"][-1]
    report = forge_gpu.recording.replay(tmp_path / "run", tmp_path / "replayed", from_="actions", device="cpu")
    assert report["episodes"] == 2 and report["diverged"] == 0
    with pytest.raises(ValueError, match=r"^follow = 'command': .*lift_ee\.toml's action is the end-effector's pose "
                                         r"change, with no joint targets to lead; follow = 'pose' follows it$"):
        forge_gpu.recording.generate(tmp_path / "source", tmp_path / "command", episodes=2, num_envs=2, device="cpu",
                                     motion=Motion(follow="command"))  # fmt: skip
    assert not (tmp_path / "command").exists()
