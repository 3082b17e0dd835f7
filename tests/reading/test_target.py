"""Training on a label: ``Windows``, ``action_windows`` and the torch datasets with ``target`` a label field of the run
(``collect --label expert``'s ``expert_action``): the window's action sequence is the label of the frames t..t+H-1,
where the recorded action of transition t is stored on frame t+1. Checked against the episodes as read, on a
synthetic packed run whose spec marks a label field (no simulator)."""

import dataclasses

import numpy as np
import pytest
from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

from forge_gpu._src.core.labels import target_column
from forge_gpu.reading import Windows, action_windows, read_episodes
from forge_gpu.recording import PackedRecorder

LABEL = "expert_action"


def labelled_description(num_envs=3, max_steps=6):
    """A synthetic run's description with the label field ``expert_action`` [A], marked in ``labels``."""
    env = synthetic_description(num_envs=num_envs, max_steps=max_steps, params=True)
    spec = dict(env.spec)
    width = spec["action_shape"][0]
    spec["observation"] = {**spec["observation"], LABEL: {"shape": [width], "dtype": "float32"}}
    spec["labels"] = {LABEL: "expert"}
    return dataclasses.replace(env, spec=spec)


@pytest.fixture(scope="module")
def labelled_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("labelled") / "run"
    env = labelled_description()
    record(directory, env, make_batches(SyntheticSim(env, seed=3, end_prob=0.3), 40), recorder=PackedRecorder)
    return directory


@pytest.fixture(scope="module")
def unlabelled_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("unlabelled") / "run"
    env = synthetic_description(num_envs=2, max_steps=5)
    record(directory, env, make_batches(SyntheticSim(env, seed=4), 12), recorder=PackedRecorder)
    return directory


def _episodes(directory) -> dict:
    return {(e.env_id, e.episode_id): e for e in read_episodes(directory)}


def _expected(episodes, batch, horizon, values):
    """Each window's ``values(episode)`` rows t..t+H-1 (clamped to the episode's last transition, as padding
    repeats it) and its pad mask."""
    rows, pads = [], []
    for env_id, episode_id, t in zip(batch["env_id"], batch["episode_id"], batch["t"], strict=True):
        episode = episodes[(int(env_id), int(episode_id))]
        steps = np.arange(t, t + horizon)
        rows.append(values(episode)[np.minimum(steps, episode.steps - 1)])
        pads.append(steps > episode.steps - 1)
    return np.stack(rows), np.stack(pads)


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("mmap", [False, True])
def test_a_label_target_gives_the_label_of_the_frames_t_to_t_plus_h_minus_1(labelled_run, pad, mmap):
    episodes = _episodes(labelled_run)
    assert any(e.steps >= 3 for e in episodes.values()) and any(e.steps < 3 for e in episodes.values())
    for history, horizon in ((1, 1), (2, 3)):
        label = Windows(labelled_run, history, horizon, pad=pad, mmap=mmap, target=LABEL)
        action = Windows(labelled_run, history, horizon, pad=pad, mmap=mmap)
        assert len(label) == len(action) > 0
        got, plain = label.batch(np.arange(len(label))), action.batch(np.arange(len(action)))
        want, want_pad = _expected(episodes, got, horizon, lambda e: e.obs[LABEL])
        np.testing.assert_array_equal(got["action"], want)
        recorded, _ = _expected(episodes, plain, horizon, lambda e: e.action)
        np.testing.assert_array_equal(plain["action"], recorded)  # the oracle agrees with the default target
        assert not np.array_equal(got["action"], plain["action"])  # the label is not the recorded action
        for key, values in plain.items():  # everything else as with the recorded actions
            if key != "action":
                np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(values), err_msg=key)
        if pad:
            np.testing.assert_array_equal(got["action_is_pad"], want_pad)
            assert want_pad.any() == (horizon > 1)


def test_the_label_is_read_when_observation_keys_leave_it_out_and_shown_only_where_they_name_it(labelled_run):
    episodes = _episodes(labelled_run)
    only = Windows(labelled_run, 1, 2, observation_keys=["proprio"], pad=True, target=LABEL)
    batch = only.batch(np.arange(len(only)))
    assert sorted(k for k in batch if k.startswith("obs/")) == ["obs/proprio"] and only.fields == ["proprio"]
    np.testing.assert_array_equal(batch["action"], _expected(episodes, batch, 2, lambda e: e.obs[LABEL])[0])
    named = Windows(labelled_run, 1, 2, observation_keys=["proprio", LABEL], target=LABEL)
    assert sorted(k for k in named.batch([0]) if k.startswith("obs/")) == ["obs/expert_action", "obs/proprio"]


def test_action_windows_take_the_target(labelled_run):
    episodes = _episodes(labelled_run)
    windows = list(action_windows(labelled_run, 2, 2, target=LABEL))
    assert windows
    for w in windows:
        episode = episodes[(w["env_id"], w["episode_id"])]
        np.testing.assert_array_equal(w["action"], episode.obs[LABEL][w["t"] : w["t"] + 2])


def test_the_torch_datasets_take_the_target(labelled_run):
    torch = pytest.importorskip("torch")
    from forge_gpu.reading import WindowDataset, WindowMapDataset

    windows = Windows(labelled_run, 1, 2, pad=True, target=LABEL)
    expected = windows.batch(np.arange(len(windows)))["action"]
    mapped = WindowMapDataset(labelled_run, horizon=2, pad=True, target=LABEL)
    assert torch.equal(mapped[list(range(len(mapped)))]["action"], torch.from_numpy(expected))
    iterated = torch.stack([item["action"] for item in WindowDataset(labelled_run, horizon=2, pad=True, target=LABEL)])
    assert torch.equal(iterated, torch.from_numpy(expected))


def test_a_target_that_is_not_a_label_field_is_refused_in_one_line_naming_the_run_and_its_fields(
    labelled_run, unlabelled_run
):
    for directory, target in ((unlabelled_run, LABEL), (labelled_run, "proprio"), (labelled_run, "bogus")):
        with pytest.raises(ValueError, match=r"target .* is not a label field") as caught:
            Windows(directory, target=target)
        message = str(caught.value)
        assert "\n" not in message and str(directory) in message and "proprio" in message
    with pytest.raises(ValueError, match="not a label field"):
        action_windows(unlabelled_run, target=LABEL)
    with pytest.raises(ValueError, match="target must be 'action' or the name of a label field"):
        Windows(labelled_run, target=3)
    torch_data = pytest.importorskip("forge_gpu._src.reading.torch_data")
    for dataset in (torch_data.WindowMapDataset, torch_data.WindowDataset):
        with pytest.raises(ValueError, match="not a label field"):
            dataset(unlabelled_run, target=LABEL)


def test_target_column_reads_run_json_labels():
    spec = labelled_description().spec
    assert target_column(spec, "action", name="r") == "action"
    assert target_column(spec, LABEL, name="r") == f"obs/{LABEL}"
    with pytest.raises(ValueError, match=r"r: target 'proprio' is not a label field .*its labels: expert_action"):
        target_column(spec, "proprio", name="r")
