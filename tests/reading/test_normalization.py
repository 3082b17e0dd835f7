"""Normalization for training from a run's statistics: equal to numpy over the published frames, a channel with no
spread centered and never divided by zero, bad arguments refused in one line."""

import numpy as np
import pytest
from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

from forge_gpu.reading import normalization, read_episodes
from forge_gpu.recording import PackedRecorder

CONSTANT = 0.25  # proprio channel 1 holds it in every frame (a goal height, say)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    env = synthetic_description(num_envs=4, max_steps=6, proprio_dim=3)
    batches = make_batches(SyntheticSim(env, seed=11), 33)
    for observation, _ in batches:
        observation["proprio"][:, 1] = CONSTANT
    directory = tmp_path_factory.mktemp("normalization") / "run"
    record(directory, env, batches, recorder=PackedRecorder)
    return directory


def published(run) -> tuple[np.ndarray, np.ndarray]:
    """Every published frame's proprio [F, 3] and every published action [T, 2]."""
    episodes = list(read_episodes(run))
    frames = np.concatenate([np.concatenate([e.obs["proprio"], e.next["proprio"][-1:]]) for e in episodes])
    return frames, np.concatenate([e.action for e in episodes])


def test_mean_and_std_of_the_published_frames_in_the_order_given(run):
    frames, actions = published(run)
    got = normalization(run, ["action", "obs/proprio"])
    assert got.channels == ("action[0]", "action[1]", "obs/proprio[0]", "obs/proprio[1]", "obs/proprio[2]")
    assert got.center.dtype == got.scale.dtype == np.float32
    std = np.concatenate([actions.std(axis=0), frames.std(axis=0)])
    np.testing.assert_allclose(got.center, np.concatenate([actions.mean(axis=0), frames.mean(axis=0)]), rtol=1e-6)
    moving = [0, 1, 2, 4]
    np.testing.assert_allclose(got.scale[moving], std[moving], rtol=1e-6)
    normalized = got.normalize(np.concatenate([actions, frames[: len(actions)]], axis=1))
    assert np.isfinite(normalized).all()
    np.testing.assert_allclose(
        got.denormalize(normalized), np.concatenate([actions, frames[: len(actions)]], axis=1), atol=1e-6
    )


def test_a_channel_without_spread_is_centered_with_scale_one_and_named(run):
    frames, _ = published(run)
    got = normalization(run, ["obs/proprio"])
    assert got.scale[1] == 1.0 and got.center[1] == np.float32(CONSTANT)
    assert len(got.notes) == 1 and got.notes[0].startswith("obs/proprio[1]: std 0 ")
    assert (got.normalize(frames)[:, 1] == 0).all()
    np.testing.assert_allclose(got.normalize(frames)[:, [0, 2]].std(axis=0), 1.0, rtol=1e-5)


def test_minmax_maps_the_recorded_range_to_minus_one_one(run):
    frames, _ = published(run)
    got = normalization(run, ["obs/proprio"], method="minmax")
    normalized = got.normalize(frames)
    np.testing.assert_allclose(normalized[:, [0, 2]].min(axis=0), -1.0, atol=1e-6)
    np.testing.assert_allclose(normalized[:, [0, 2]].max(axis=0), 1.0, atol=1e-6)
    assert got.scale[1] == 1.0 and "half of max - min" in got.notes[0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fields": ["obs/goal"]}, "field 'obs/goal' has no statistics in .*; it has: action, obs/proprio, reward"),
        ({"fields": "obs/proprio"}, "must be a non-empty list"),
        ({"fields": []}, "must be a non-empty list"),
        ({"fields": ["action", "action"]}, "names a field twice"),
        ({"fields": ["action"], "method": "z"}, "method='z' is not a normalization; use one of std, minmax"),
        ({"fields": ["action"], "floor": -1}, "floor=-1 must be a number >= 0"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(run, kwargs, message):
    with pytest.raises(ValueError, match=message):
        normalization(run, **kwargs)


def test_a_run_without_statistics_says_how_to_compute_them(tmp_path):
    env = synthetic_description(num_envs=2, max_steps=3)
    record(tmp_path / "run", env, make_batches(SyntheticSim(env), 8), recorder=PackedRecorder, statistics=False)
    with pytest.raises(LookupError, match="forge-gpu stats"):
        normalization(tmp_path / "run", ["obs/proprio"])
