"""Terms for real robot models: a planar root (slide x, slide z, hinge y, one D6 joint in Newton), a body's velocity
as a reward, sites and offsets on bodies, contact with the ground and feet air time. Each term's value is checked
against numbers computed here with numpy from the recorded or current state; the shipped planar hopper
(configs/robots/hopper2d) collects through its task file with no user @wp.func and replays exactly; every mistake
is one line naming the file and the key."""

import itertools
from pathlib import Path

import numpy as np
import pytest

import forge_gpu
from forge_gpu.cli import main

HOPPER = Path(__file__).resolve().parents[2] / "configs" / "robots" / "hopper2d"
FOOT = (np.array([-0.13, 0.0, 0.0]), np.array([0.26, 0.0, 0.0]), 0.06)
"""The foot's capsule in its body's frame: both ends and the radius (hopper2d.xml)."""


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate ``v`` [..., 3] by the quaternions ``q`` [..., 4] (xyzw)."""
    u, w = q[..., :3], q[..., 3:4]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def _inverse(q: np.ndarray) -> np.ndarray:
    return np.concatenate([-q[..., :3], q[..., 3:]], axis=-1)


def _pitch(q: np.ndarray) -> np.ndarray:
    x = _rotate(q, np.broadcast_to([1.0, 0.0, 0.0], q[..., :3].shape))
    return np.arctan2(-x[..., 2], x[..., 0])


def _timers(touching: np.ndarray, dt: float) -> np.ndarray:
    """Air time, contact time and last flight per frame [T, 3] of one body, from its flags (frame 0: a reset)."""
    out = np.zeros((len(touching), 3))
    for i in range(1, len(touching)):
        air, touch, last = out[i - 1]
        if touching[i]:
            out[i] = (0.0, touch + dt, air if air > 0 else last)
        else:
            out[i] = (air + dt, 0.0, last)
    return out


@pytest.fixture(scope="module")
def hopper_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("hopper") / "run"
    env = forge_gpu.sim.make(str(HOPPER / "task.toml"), num_envs=3, device="cpu", seed=2, max_steps=25)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(out), episodes=4)
    return out


def _episodes(run):
    n = len(forge_gpu.reading.open_run(run))
    return list(forge_gpu.reading.open_run(run).read(list(range(n)), forge_gpu.reading.EpisodeReadOptions(state=True)))


def test_the_planar_hopper_collects_through_its_task_file_with_library_terms(hopper_run):
    """No module of user terms; the root terms read the torso (the body the D6 root moves); every column of
    proprio and every reward term equals numpy's value from the recorded state."""
    manifest = forge_gpu.formats.read_manifest(hopper_run)
    assert manifest["config"]["params"]["module"] == "" and manifest["env_spec"]["observation"]["proprio"]["shape"] == [
        18
    ]
    assert manifest["calibration"]["reward_terms"] == ["root_lin_vel", "alive", "feet_air_time", "action_l2"]
    dt = manifest["config"]["control_dt"]
    touched = flights = 0
    for e in _episodes(hopper_run):
        q, qd, body_q = e.state["joint_q"][1:], e.state["joint_qd"][1:], e.state["body_q"][1:].astype(np.float64)
        p, terms = e.next["proprio"], e.next["reward_terms"]
        torso, foot = body_q[:, 0], body_q[:, 3]
        assert np.allclose(p[:, 0], torso[:, 2], atol=1e-6)  # root_height: the torso's z
        assert np.allclose(p[:, 1], _pitch(torso[:, 3:]), atol=1e-5)  # root_pitch
        assert np.allclose(p[:, 1], q[:, 2], atol=1e-4)  # ... the root hinge's angle (the torso rests level)
        # root_lin_vel: the torso's origin moves at the slides' rates; root_ang_vel: about y at the hinge's.
        assert np.allclose(p[:, 2:5], np.stack([qd[:, 0], 0 * qd[:, 0], qd[:, 1]], 1), atol=2e-4)
        assert np.allclose(p[:, 5:8], np.stack([0 * qd[:, 2], qd[:, 2], 0 * qd[:, 2]], 1), atol=2e-4)
        assert np.array_equal(p[:, 8:11], q[:, 3:6]) and np.array_equal(p[:, 11:14], qd[:, 3:6])
        # body_pos of the site "toe" (0.26, 0, -0.06 on the foot) in the torso's frame.
        toe = _rotate(foot[:, 3:], np.array([0.26, 0.0, -0.06])) + foot[:, :3]
        assert np.allclose(p[:, 14:17], _rotate(_inverse(torso[:, 3:]), toe - torso[:, :3]), atol=1e-5)
        # body_contact: the foot's capsule reaches the ground exactly where the flag says so (up to the solver's
        # contact margin and one substep's motion).
        lowest = np.minimum(*(_rotate(foot[:, 3:], end)[:, 2] for end in FOOT[:2])) + foot[:, 2] - FOOT[2]
        flag = p[:, 17]
        assert set(np.unique(flag)) <= {0.0, 1.0}
        assert (lowest[flag == 1] < 0.02).all() and (lowest[flag == 0] > -0.005).all(), (lowest, flag)
        # The timers (recorded state) and feet_air_time follow from the flags alone.
        flags = np.concatenate([[0.0], flag])
        timers = _timers(flags == 1, dt)
        assert np.allclose(e.state["contact_timers"][:, 3], timers, atol=1e-5)
        # The torso, thigh and shin never touch the ground while the episode lasts: in the air since the reset.
        never = _timers(np.zeros(len(flags), bool), dt)
        assert np.allclose(e.state["contact_timers"][:, :3], never[:, None], atol=1e-5)
        down = (timers[1:, 1] > 0) & (timers[1:, 1] < 1.5 * dt)
        assert np.allclose(terms[:, 2], 0.5 * np.where(down, timers[1:, 2] - 0.1, 0.0), atol=1e-5)
        assert np.allclose(terms[:, 0], p[:, 2]) and np.all(terms[:, 1] == 1.0)
        touched += int(flag.sum())
        flights += int((down & (timers[1:, 2] > 0)).sum())
        # Terminations: the torso below 0.8 m or pitched beyond 30 degrees.
        assert np.array_equal(e.terminated, (p[:, 0] < 0.8) | (np.abs(p[:, 1]) > np.radians(30.0)))
    assert touched > 0 and flights > 0  # the checks above saw the foot land after a flight


def test_the_planar_hopper_replays_from_state_and_from_actions_exactly(hopper_run, tmp_path):
    """The contact timers are recorded state: --from state re-observes every frame equal (the contact flags, air
    time and rewards included), --from actions diverges nowhere."""
    report = forge_gpu.recording.replay(hopper_run, tmp_path / "state", batch=2)
    for a, b in zip(_episodes(hopper_run), _episodes(tmp_path / "state"), strict=True):
        for name in ("proprio", "reward_terms"):
            assert np.array_equal(a.obs[name], b.obs[name]) and np.array_equal(a.next[name], b.next[name]), name
        assert np.array_equal(a.reward, b.reward) and np.array_equal(a.terminated, b.terminated)
    again = forge_gpu.recording.replay(hopper_run, tmp_path / "actions", from_="actions", batch=2)
    assert again["episodes"] == report["episodes"] >= 4 and again["diverged"] == 0


TERMS = """
task = "hopper_terms"
instruction = "hop"
num_envs = 2
max_steps = 40
control_dt = 0.02
substeps = 4

[solver]
iterations = 10
ls_iterations = 5

[model]
file = "hopper.xml"
position = [0.0, 0.0, 1.23]

[action]
joints = ["hip", "knee", "ankle"]
scale = 60.0

[[observations]]
term = "root_pos"
[[observations]]
term = "root_quat"
[[observations]]
term = "root_lin_vel_base"
[[observations]]
term = "root_ang_vel_base"
[[observations]]
term = "projected_gravity"
[[observations]]
term = "body_lin_vel"
body = "shin"
offset = [0.0, 0.0, -0.25]
[[observations]]
term = "body_quat"
site = "heel"
[[observations]]
term = "body_pos"
site = "heel"
[[observations]]
term = "air_time"
bodies = ["foot", "torso"]

[[rewards]]
term = "body_lin_vel"
site = "toe"
axis = "z"
relative_to = "torso"
[[rewards]]
term = "body_ang_vel"
body = "thigh"
axis = "y"
[[rewards]]
term = "body_distance"
site = "toe"
other = "torso"
other_offset = [0.0, 0.0, 0.2]
[[rewards]]
term = "upright"
[[rewards]]
term = "root_pitch_l2"
[[rewards]]
term = "track_height"
sigma = 0.1
height = 1.2
[[rewards]]
term = "body_contact"
bodies = ["foot", "shin"]
[[rewards]]
term = "root_lin_vel_z_l2"
[[rewards]]
term = "root_ang_vel_xy_l2"

[[terminations]]
term = "tilt"
max_angle = 60
"""
HEEL = '<site name="heel" pos="-0.13 0 -0.06" euler="0 0 90"/>'
"""A site turned 90 degrees about its body's z: its orientation is the foot's times that turn."""


_IDS = itertools.count()
"""A task id per task file a test writes (an id names one file per process)."""


def _terms_env(tmp_path, text=TERMS, **overrides):
    xml = (HOPPER / "hopper2d.xml").read_text().replace('<site name="heel" pos="-0.13 0 -0.06"/>', HEEL)
    assert HEEL in xml
    (tmp_path / "hopper.xml").write_text(xml)
    (tmp_path / "terms.toml").write_text(text.replace('task = "hopper_terms"', f'task = "hopper_terms_{next(_IDS)}"'))
    return forge_gpu.sim.make(str(tmp_path / "terms.toml"), num_envs=2, device="cpu", seed=4, **overrides)


def _cross(a, b):
    return np.cross(a, b)


def test_root_body_point_velocity_and_contact_terms_equal_numpy(tmp_path):
    """Root terms on a planar root, a point's velocity (the centre of mass's plus w x r), sites with their frame,
    offsets on ``body`` and ``other``, body velocity rewards along an axis, contact counts."""
    env = _terms_env(tmp_path)
    rng = np.random.default_rng(0)
    env.reset()
    checked = 0
    for step in range(14):
        r = env.step(rng.uniform(-1, 1, (2, 3)).astype(np.float32))
        if r.terminated.numpy().any() or step < 2:
            continue
        world = env.world
        body_q = world.state_0.body_q.numpy().reshape(2, -1, 7).astype(np.float64)
        body_qd = world.state_0.body_qd.numpy().reshape(2, -1, 6).astype(np.float64)
        com = world.model.body_com.numpy().reshape(2, -1, 3).astype(np.float64)
        p, terms = r.observation["proprio"].numpy(), r.observation["reward_terms"].numpy()
        pos, rot = body_q[..., :3], body_q[..., 3:]

        def point_velocity(b, local, body_q=body_q, body_qd=body_qd, com=com):
            pos, rot, w = body_q[:, b, :3], body_q[:, b, 3:], body_qd[:, b, 3:]
            com_w = _rotate(rot, com[:, b]) + pos
            return body_qd[:, b, :3] + _cross(w, _rotate(rot, np.asarray(local, float)) + pos - com_w)

        torso = rot[:, 0]
        v_root = point_velocity(0, [0, 0, 0])
        assert np.allclose(v_root[:, [0, 2]], env.joint_qd.numpy()[:, :2], atol=1e-4)
        expect = [pos[:, 0], torso, _rotate(_inverse(torso), v_root), _rotate(_inverse(torso), body_qd[:, 0, 3:])]
        expect += [_rotate(_inverse(torso), np.broadcast_to([0.0, 0.0, -1.0], (2, 3)))]
        expect += [point_velocity(2, [0, 0, -0.25])]
        turn = np.array([0.0, 0.0, np.sin(np.pi / 4), np.cos(np.pi / 4)])
        heel = rot[:, 3]
        x, y, z, w = heel.T
        a, b, c, d = turn
        heel_site = np.stack(
            [w * a + x * d + y * c - z * b, w * b - x * c + y * d + z * a, w * c + x * b - y * a + z * d,
             w * d - x * a - y * b - z * c], 1)  # fmt: skip
        expect += [heel_site, _rotate(heel, np.array([-0.13, 0.0, -0.06])) + pos[:, 3]]
        timers = env.task.contacts.timers.numpy()
        expect += [timers[:, [0, 3], 0]]  # model order: torso, foot
        got = np.split(p, np.cumsum([3, 4, 3, 3, 3, 3, 4, 3]), axis=1)
        for e, g in zip(expect, got, strict=True):
            sign = np.sign(e[:, -1:] * g[:, -1:]) if e.shape[1] == 4 else 1.0  # a quaternion and its negative
            assert np.allclose(g, e * sign, atol=2e-5), (e, g)
        toe_v = point_velocity(3, [0.26, 0.0, -0.06])
        assert np.allclose(terms[:, 0], _rotate(_inverse(torso), toe_v)[:, 2], atol=2e-5)
        assert np.allclose(terms[:, 1], body_qd[:, 1, 4], atol=1e-6)
        toe = _rotate(rot[:, 3], np.array([0.26, 0.0, -0.06])) + pos[:, 3]
        top = _rotate(torso, np.array([0.0, 0.0, 0.2])) + pos[:, 0]
        assert np.allclose(terms[:, 2], np.linalg.norm(toe - top, axis=1), atol=1e-5)
        assert np.allclose(terms[:, 3], _rotate(torso, np.broadcast_to([0.0, 0.0, 1.0], (2, 3)))[:, 2], atol=1e-6)
        assert np.allclose(terms[:, 4], _pitch(torso) ** 2, atol=1e-6)
        assert np.allclose(terms[:, 5], np.exp(-((pos[:, 0, 2] - 1.2) ** 2) / 0.1), atol=1e-6)
        assert np.array_equal(terms[:, 6], (timers[:, [2, 3], 1] > 0).sum(1).astype(np.float32))
        assert np.allclose(terms[:, 7], v_root[:, 2] ** 2, rtol=1e-4, atol=1e-6)
        assert np.allclose(terms[:, 8], (body_qd[:, 0, 3:5] ** 2).sum(1), rtol=1e-4, atol=1e-6)
        checked += 1
    assert checked >= 6


BAD = [
    ('term = "upright"', 'term = "track_yaw_rate"\nsigma = 0.1', "rewards[3].term", "use root_ang_vel"),
    ('term = "root_pos"', 'term = "root_lin_vel_heading"', "observations[0].term", "no heading"),
    ('site = "heel"\n[[observations]]', 'site = "ankle"\n[[observations]]', "observations[6].site", "head, toe, heel"),
    ("offset = [0.0, 0.0, -0.25]", "offset = [0.0, -0.25]", "observations[5].offset", "[x, y, z]"),
    ("offset = [0.0, 0.0, -0.25]", 'offset = [0.0, 0.0, -0.25]\nsite = "toe"', "observations[5]", "not both"),
    ('body = "thigh"', 'body = "thigh"\nsite = "toe"', "rewards[1].site", "is not on body 'thigh'"),
    ('bodies = ["foot", "shin"]', 'bodies = ["toe*"]', "rewards[6].bodies", "matches no body"),
    ("max_angle = 60", "max_angle = 60\nsite = 1", "terminations[0].site", "unknown key"),
]


@pytest.mark.parametrize(("old", "new", "key", "says"), BAD, ids=[b[2] for b in BAD])
def test_a_term_mistake_is_one_line_naming_the_file_and_key(tmp_path, capsys, old, new, key, says):
    text = TERMS.replace(old, new, 1)
    assert new in text
    with pytest.raises(ValueError) as error:
        _terms_env(tmp_path, text)
    message = str(error.value)
    assert "\n" not in message and key in message and says in message and "terms.toml" in message, message
    assert main(["tasks", str(tmp_path / "terms.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0], err


PENDULUM = """<mujoco model="pendulum">
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="swing" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.03"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_a_root_term_on_a_fixed_base_names_the_body_terms_instead(tmp_path):
    (tmp_path / "pendulum.xml").write_text(PENDULUM)
    text = TERMS.replace('file = "hopper.xml"', 'file = "pendulum.xml"').replace(
        'joints = ["hip", "knee", "ankle"]', ""
    )
    (tmp_path / "p.toml").write_text(
        text[: text.index("[[observations]]")] + '[[observations]]\nterm = "root_height"\n'
    )
    says = (
        r"p.toml: observations\[0\].term = 'root_height' reads the root; the model's base is fixed \(its first "
        r"joint 'swing' neither is free nor slides\): use body_pos"
    )
    with pytest.raises(ValueError, match=says):
        forge_gpu.sim.make(str(tmp_path / "p.toml"), num_envs=1, device="cpu")


def test_a_contact_term_without_mujoco_contacts_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError) as error:
        _terms_env(tmp_path, TERMS.replace("[solver]", '[solver]\nname = "featherstone"').replace(
            "position = [0.0, 0.0, 1.23]", "position = [0.0, 0.0, 1.23]\ncontacts = false"))  # fmt: skip
    message = str(error.value)
    assert "\n" not in message and "terms.toml" in message and "name = 'mujoco'" in message, message


USER = """
import warp as wp

from forge_gpu.kernels.terms import Frame


@wp.func
def two_args(f: Frame, worldid: int) -> float:
    return 1.0


@wp.func
def vector_valued(f: Frame, worldid: int, t: int) -> wp.vec3:
    return wp.vec3(0.0, 0.0, 0.0)


def plain(f, worldid, t):
    return 1.0


@wp.func
def fine(f: Frame, worldid: int, t: int) -> float:
    return 1.0
"""


@pytest.mark.parametrize(
    ("stage", "name", "says"),
    [
        ("rewards", "two_args", "two_args has signature (f: Frame, worldid: int) -> float; a reward term is a @wp.func "
         "(f: Frame, worldid: int, t: int) -> float"),
        ("rewards", "vector_valued", "vector_valued has signature (f: Frame, worldid: int, t: int) -> vec3f"),
        ("terminations", "fine", "a termination term is a @wp.func (f: Frame, worldid: int, t: int) -> bool"),
        ("observations", "fine", "(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int"),
        ("rewards", "plain", "plain is not a @wp.func"),
    ],
)  # fmt: skip
def test_a_user_term_of_the_wrong_signature_is_refused_when_the_file_is_read(tmp_path, capsys, stage, name, says):
    """``forge-gpu tasks`` (and collect) refuse it in one line naming the file, the key and the signature, before
    any kernel is generated."""
    (tmp_path / "user.py").write_text(USER)
    head = TERMS[: TERMS.index("[[observations]]")].replace('task = "hopper_terms"', 'task = "hopper_user"')
    text = 'module = "user.py"\n' + head.replace('file = "hopper.xml"', f'file = "{HOPPER / "hopper2d.xml"}"')
    text += '[[observations]]\nterm = "root_pos"\n' + f'[[{stage}]]\nterm = "{name}"\n'
    (tmp_path / "user.toml").write_text(text)
    assert main(["tasks", str(tmp_path / "user.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    index = 1 if stage == "observations" else 0
    assert len(err) == 1 and f"user.toml: {stage}[{index}].term = '{name}'" in err[0] and says in err[0], err


DOCS = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"


def test_the_docs_term_tables_list_every_library_term():
    from forge_gpu._src.tasks.taskfile import terms

    text = DOCS.read_text()
    tables = text[text.index("### The term library") : text.index("**Roots.**")]
    parts = tables.split("Rewards (each")
    stages = {"observations": parts[0], "rewards": parts[1].split("Terminations and success")[0]}
    stages["conditions"] = parts[1].split("Terminations and success")[1]
    for stage, library in (("observations", terms.OBSERVATIONS), ("rewards", terms.REWARDS),
                           ("conditions", terms.CONDITIONS)):  # fmt: skip
        rows = [line.split("|")[1] for line in stages[stage].splitlines() if line.startswith("| `")]
        named = {name.strip(" `") for row in rows for name in row.split(",")}
        assert named == set(library), (stage, named ^ set(library))


def test_the_docs_worked_example_of_a_term_runs(tmp_path):
    """docs/tasks.md "Writing a term": its module and entries, on the hopper, give the torso's height above the
    foot (numpy, from body_q) and end the episodes where it is below args[0]."""
    text = DOCS.read_text()
    section = text[text.index("## Writing a term") :]
    python = section.split("```python\n")[1].split("```")[0]
    toml = section.split("```toml\n")[1].split("```")[0]
    (tmp_path / "my_terms.py").write_text(python)
    head = (HOPPER / "task.toml").read_text()
    head = head[: head.index("[[observations]]")].replace(
        'file = "hopper2d.xml"', f'file = "{HOPPER / "hopper2d.xml"}"'
    )
    task = toml.split("\n", 1)[0] + "\n" + head + toml.split("\n", 1)[1].replace("0.6", "1.0")
    (tmp_path / "task.toml").write_text(task.replace('task = "hopper2d"', 'task = "hopper_docs"'))
    env = forge_gpu.sim.make(str(tmp_path / "task.toml"), num_envs=2, device="cpu", seed=0)
    env.reset()
    rng = np.random.default_rng(1)
    for _ in range(5):
        r = env.step(rng.uniform(-1, 1, (2, 3)).astype(np.float32))
        body_q = env.world.state_0.body_q.numpy().reshape(2, -1, 7)
        height = body_q[:, 0, 2] - body_q[:, 3, 2]
        assert np.allclose(r.observation["proprio"].numpy()[:, 0], height, atol=1e-6)
        assert np.array_equal(r.terminated.numpy(), height < 1.0)
