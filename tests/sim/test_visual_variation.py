"""What a pixel policy's generalization table varies per world: palette draws restricted to a set of colours
(``choices``) that stay in it, the pair that must differ included; the table's colour drawn per world and
recorded per episode; distractor boxes on the table; bad entries refused in one line."""

import json

import numpy as np
import pytest
from helpers.envtools import DEVICES

import forge_gpu

FAST = {"params.render": False}


def _params(env, resets: int) -> dict[str, np.ndarray]:
    """The recorded params of ``resets`` resets of every world, stacked: name -> [resets * N, ...]."""
    out = {}
    for _ in range(resets):
        params = env.reset().params
        for name, value in params.items():
            out.setdefault(name, []).append(value.numpy().copy())
    return {name: np.concatenate(values) for name, values in out.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("cube", "goal"),
    [([0, 1], [0, 1]), ([4, 5, 6, 7], [4, 5, 6, 7]), ([2], [1, 2, 3])],
)
def test_a_restricted_draw_stays_in_its_set_where_the_colours_must_differ(device, cube, goal):
    """Over 64 worlds and 4 resets, cube and goal colours drawn with choices never leave their sets and never
    match: the goal moves to the next colour of its own set on a clash."""
    overrides = {"randomize.cube_color": {"choices": cube}, "randomize.goal_color": {"choices": goal}}
    env = forge_gpu.sim.make("push", num_envs=64, device=device, seed=5, **FAST, **overrides)
    params = _params(env, 4)
    assert set(np.unique(params["cube_color"])) == set(map(float, cube))
    assert set(np.unique(params["goal_color"])) <= set(map(float, goal))
    assert (params["cube_color"] != params["goal_color"]).all()
    assert env.config.to_dict()["randomize"]["goal_color"] == {"choices": goal}


@pytest.mark.parametrize("device", DEVICES)
def test_an_integer_range_resolves_its_clash_within_the_range(device):
    """{ low = 4, high = 5 } for both colours: every clash moves the goal to the other of 4, 5, never 6 (the old
    rule took the palette's next colour)."""
    both = {"low": 4, "high": 5, "dist": "integer"}
    env = forge_gpu.sim.make("push", num_envs=64, device=device, seed=2, **FAST,
                             **{"randomize.cube_color": both, "randomize.goal_color": both})  # fmt: skip
    params = _params(env, 2)
    assert set(np.unique(params["goal_color"])) == {4.0, 5.0}
    assert (params["cube_color"] != params["goal_color"]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_the_table_colour_differs_per_world_and_is_recorded_per_episode(device):
    """table_color drawn among the table tops: the worlds' recorded values differ, and each world's table pixels
    (the image's bottom corner, table only) take its palette colour."""
    overrides = {"randomize.table_color": {"choices": [8, 9, 10, 11]}, "params.image_size": 32}
    env = forge_gpu.sim.make("push", num_envs=8, device=device, seed=1, **overrides)
    result = env.reset()
    drawn = result.params["table_color"].numpy()
    assert env.spec["params"]["table_color"] == {"shape": [], "dtype": "float32"}
    assert len(np.unique(drawn)) > 1 and set(np.unique(drawn)) <= {8.0, 9.0, 10.0, 11.0}
    corner = result.observation["rgb"].numpy()[:, -2, 2].astype(float)  # the table top near the camera
    for a in range(8):
        for b in range(8):
            same = np.abs(corner[a] - corner[b]).max() < 3
            assert same == (drawn[a] == drawn[b]), (a, b, drawn, corner)


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (
            {"randomize.cube_color": {"choices": [0, 12]}},
            r"push.toml \(with overrides\): randomize.cube_color = "
            r"\{'choices': \[0.0, 12.0\]\}: an index into",
        ),
        ({"randomize.cube_color": {"choices": [0, 0.5]}}, "or { choices = .* } of such indices"),
        ({"randomize.cube_color": {"choices": []}}, r"randomize.cube_color.choices = \[\]: expected a non-empty"),
        ({"randomize.cube_color": {"choices": [1, 1]}}, r"choices = \[1, 1\]: each value once"),
        ({"randomize.cube_position": {"choices": [0.2, 0.3]}}, "choices draws single numbers; cube_position has 2"),
        (
            {"randomize.cube_color": {"choices": [2]}, "randomize.goal_color": {"choices": [2]}},
            r"randomize.goal_color = \{'choices': \[2.0\]\}: its one colour 'blue' can equal cube_color's",
        ),
        ({"randomize.goal_color": {"choices": [0]}}, "its one colour 'red' can equal cube_color's"),
    ],
)
def test_bad_restricted_draws_are_refused_in_one_line(overrides, words):
    """A choice out of the palette, not whole, empty, repeated, on a vector, or one colour with nowhere to move."""
    with pytest.raises(ValueError, match=words) as e:
        forge_gpu.sim.make("push", num_envs=1, device="cpu", **FAST, **overrides)
    assert "\n" not in str(e.value)


DISTRACTED = {
    "params.distractor_count": 3,
    "randomize.distractor_position": {"low": [0.15, -0.25], "high": [0.55, 0.25]},
    "randomize.distractor_color": {"choices": [4, 5, 6, 7]},
}


@pytest.mark.parametrize("device", DEVICES)
def test_distractors_keep_clear_of_the_cube_and_the_goal_and_take_other_colours(device):
    """Over 64 worlds and 3 resets every distractor rests on the table at least the clearance from the cube's start
    and the goal, apart from the others, in a colour of its draw that is neither the cube's nor the goal's; the
    recorded values are where the boxes are."""
    overrides = {**DISTRACTED, "randomize.cube_color": {"choices": [4, 5]}, "randomize.goal_color": {"choices": [6, 7]}}
    env = forge_gpu.sim.make("push", num_envs=64, device=device, seed=3, **FAST, **overrides)
    clearance = env.config.params.distractor_clearance
    assert env.spec["params"]["distractor_position"]["shape"] == [3, 2]
    for _ in range(3):
        result = env.reset()
        p = {k: v.numpy() for k, v in result.params.items()}
        where = p["distractor_position"]
        for point in ("cube_position", "goal_position"):
            assert (np.linalg.norm(where - p[point][:, None], axis=-1) >= clearance - 1e-6).all()
        for a, b in ((0, 1), (0, 2), (1, 2)):
            assert (np.linalg.norm(where[:, a] - where[:, b], axis=-1) >= 1.5 * env.config.params.distractor_size).all()
        colors = p["distractor_color"]
        assert set(np.unique(colors)) <= {4.0, 5.0, 6.0, 7.0}
        assert (colors != p["cube_color"][:, None]).all() and (colors != p["goal_color"][:, None]).all()
        labels = np.array([str(s).rsplit("/", 1)[-1] for s in env.world.model.shape_label])
        shapes = np.stack([np.flatnonzero(labels == f"distractor_{d}") for d in range(3)], axis=1)
        placed = env.world.model.shape_transform.numpy()[shapes]
        np.testing.assert_allclose(placed[..., :2], where, atol=1e-6)
        assert (placed[..., 2] > 0).all()
    # A restored episode (replay --from state) stands its distractors where they were, in their colours.
    state = {k: v.numpy().copy() for k, v in result.state.items()}
    env.reset()
    again = env.restore(state, p)
    np.testing.assert_array_equal(again.params["distractor_position"].numpy(), p["distractor_position"])
    np.testing.assert_array_equal(again.params["distractor_color"].numpy(), p["distractor_color"])
    np.testing.assert_allclose(env.world.model.shape_transform.numpy()[shapes][..., :2], where, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_distractors_appear_in_the_image_where_they_were_placed(device):
    """The same worlds with and without two distractors: the frames differ, only in a small part, and the changed
    pixels hold the distractors' colours; the cube's and the goal's draws are the same in both."""
    fixed = {"params.image_size": 32, "randomize.camera_position_offset": {"low": [0.0] * 3, "high": [0.0] * 3},
             "randomize.camera_look_at_offset": {"low": [0.0] * 3, "high": [0.0] * 3}}  # fmt: skip
    two = {**DISTRACTED, "params.distractor_count": 2, "randomize.distractor_color": {"choices": [6]},
           "params.distractor_size": 0.05}  # fmt: skip
    plain = forge_gpu.sim.make("push", num_envs=4, device=device, seed=8, **fixed).reset()
    busy = forge_gpu.sim.make("push", num_envs=4, device=device, seed=8, **fixed, **two).reset()
    for name in ("cube_position", "goal_position", "cube_color", "goal_color"):
        np.testing.assert_array_equal(plain.params[name].numpy(), busy.params[name].numpy())
    a, b = plain.observation["rgb"].numpy().astype(int), busy.observation["rgb"].numpy().astype(int)
    changed = (a != b).any(axis=-1)
    assert changed.any(axis=(1, 2)).all() and changed.mean() < 0.1
    cyan = (b[..., 1] > b[..., 0] + 40) & (b[..., 2] > b[..., 0] + 40)  # palette 6 (0.08, 0.75, 0.8)
    assert (cyan & changed).sum() > 0.5 * changed.sum()


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"params.distractor_count": 2}, "distractors.count = 2: their places are drawn per episode: .*distractor_pos"),
        ({**DISTRACTED, "distractors.count": 9}, r"distractors.count = 9: expected a whole number in 0 \.\. 8"),
        ({**DISTRACTED, "distractors.away_from": ["cube"]}, "distractors.away_from: 'cube' is not a place"),
        ({**DISTRACTED, "distractors.differs_from": ["table"]}, "distractors.differs_from: 'table' is not a"),
        ({**DISTRACTED, "distractors.color": "teal"}, r"distractors.color = \"teal\": not a \[palette\] colour"),
        ({**DISTRACTED, "distractors.shape": "ball"}, "unknown key distractors.shape; allowed keys are count"),
        ({"randomize.distractor_position": [0.1, 0.2]}, "task 'push' cannot randomize it"),
        ({**DISTRACTED, "randomize.distractor_position": [0.1, 0.2]}, r"expected 6 value\(s\) \(or 2, one row's"),
    ],
)
def test_bad_distractor_entries_are_refused_in_one_line(overrides, words):
    """A count without drawn places or beyond 8, a point or colour the task lacks, an unknown key or colour, a
    range of the wrong size."""
    with pytest.raises(ValueError, match=words) as e:
        forge_gpu.sim.make("push", num_envs=1, device="cpu", **FAST, **overrides)
    assert "push.toml" in str(e.value) and "\n" not in str(e.value)


def test_the_camera_is_fixed_by_default_and_jittered_per_world_by_the_visual_variant():
    """push draws no camera offset (every world renders from params' pose); variant visual draws one per world and
    episode, within 3 cm (position) and 2 cm (aim), alongside the table's colour and the distractors."""
    fixed = forge_gpu.sim.make("push", num_envs=4, device="cpu", seed=2, **FAST)
    assert "camera_position_offset" not in fixed.spec["params"] and "camera_look_at_offset" not in fixed.spec["params"]
    visual = forge_gpu.sim.make("push", num_envs=4, device="cpu", seed=2, variant="visual", **FAST)
    drawn = _params(visual, 2)
    for name, bound in (("camera_position_offset", 0.03), ("camera_look_at_offset", 0.02)):
        offsets = drawn[name].reshape(8, 3)
        assert (np.abs(offsets) <= bound + 1e-6).all() and len(np.unique(offsets[:, 0])) == 8, (name, offsets)
    assert "table_color" in drawn and "distractor_position" in drawn


def test_an_evaluation_alone_sets_the_camera_beyond_its_training_range_and_records_it(tmp_path):
    """``forge-gpu evaluate --set`` a camera offset of 5 to 6 cm (push's camera is fixed, its variant visual jitters it
    within 3): the recorded run's config
    holds the evaluation's range, and each episode the offset it drew, inside it; held-out colours alike."""
    from forge_gpu.cli import main

    run = tmp_path / "far"
    far = "randomize.camera_position_offset={low=[0.05, 0.05, 0.05], high=[0.06, 0.06, 0.06]}"
    held_out = "randomize.cube_color={choices=[4, 5, 6, 7]}"
    args = ["evaluate", "push", "--policy", "expert", "--episodes", "3", "--envs", "3", "--device", "cpu"]
    sets = ["--set", "max_steps=3", "--set", "params.render=false", "--set", far, "--set", held_out]
    assert main([*args, *sets, "--record", str(run)]) == 0
    episodes = list(forge_gpu.reading.read_episodes(str(run)))
    assert len(episodes) == 3
    for e in episodes:
        offset = np.asarray(e.params["camera_position_offset"]).reshape(-1)
        assert ((offset >= 0.05 - 1e-6) & (offset <= 0.06 + 1e-6)).all(), offset
        assert float(np.asarray(e.params["cube_color"]).reshape(-1)[0]) in (4.0, 5.0, 6.0, 7.0)
    config = forge_gpu.formats.read_manifest(run)
    text = json.dumps(config)
    assert '"choices": [4.0, 5.0, 6.0, 7.0]' in text and "0.06" in text
