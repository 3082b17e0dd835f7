"""Tests of the reader: manifest, checked episodes, projection, sharding, windows and the torch dataset."""

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from helpers.synthetic import INSTRUCTION, synthetic_description

from forge_gpu._src.core.episode import episode_stem
from forge_gpu.formats import read_manifest
from forge_gpu.reading import EpisodeReadOptions, Windows, action_windows, read_episodes


@pytest.fixture(scope="module")
def run(synthetic_run):
    """A recorded run with images and deflate, and the generator that made it."""
    env = synthetic_description(num_envs=4, max_steps=7, images=True)
    return synthetic_run(env, 40, seed=11, end_prob=0.25, compression="deflate")


@pytest.fixture
def run_copy(run, tmp_path):
    """A private copy of the recorded run that a test may tamper with."""
    directory, sim = run
    copy = tmp_path / "run"
    copy.mkdir()
    for name in os.listdir(directory):
        (copy / name).write_bytes((directory / name).read_bytes())
    return copy, sim


def test_read_episodes_returns_every_episode_in_file_name_order(run):
    """All published episodes come back once, in sorted file-name order, equal to the generated data."""
    directory, sim = run
    episodes = list(read_episodes(directory))
    assert [(e.env_id, e.episode_id) for e in episodes] == sorted(sim.completed)
    for episode in episodes:
        expected = sim.completed[(episode.env_id, episode.episode_id)]
        assert episode.steps == len(expected["action"])
        assert episode.path.endswith(episode_stem(episode.env_id, episode.episode_id) + ".npz")
        for field, array in episode.obs.items():
            np.testing.assert_array_equal(array, expected[f"obs/{field}"])
            np.testing.assert_array_equal(episode.next[field], expected[f"next/{field}"])
        for key in ("action", "reward", "terminated", "truncated"):
            np.testing.assert_array_equal(getattr(episode, key), expected[key])


def test_projection_returns_only_the_requested_fields(run):
    """With fields=[...] only those observation fields are returned, with unchanged values."""
    directory, sim = run
    episodes = list(read_episodes(directory, options=EpisodeReadOptions(observation_keys=["proprio"])))
    assert len(episodes) == len(sim.completed) > 0
    for episode in episodes:
        assert list(episode.obs) == ["proprio"] and list(episode.next) == ["proprio"]
        expected = sim.completed[(episode.env_id, episode.episode_id)]
        np.testing.assert_array_equal(episode.obs["proprio"], expected["obs/proprio"])


def test_unknown_requested_field_is_an_error(run):
    """Asking for a field the episodes do not have raises ValueError naming it."""
    with pytest.raises(ValueError, match="'lidar'"):
        next(read_episodes(run[0], options=EpisodeReadOptions(observation_keys=["lidar"])))


@pytest.mark.parametrize("num_shards", [1, 2, 3, 5])
def test_shards_cover_every_episode_exactly_once(run, num_shards):
    """Shard k holds the counted episodes k, k + num_shards, ...; together the shards hold each once."""
    directory, _ = run
    everything = [
        (e.env_id, e.episode_id)
        for e in read_episodes(directory, options=EpisodeReadOptions(observation_keys=["time"]))
    ]
    shards = [
        [
            (e.env_id, e.episode_id)
            for e in read_episodes(
                directory, options=EpisodeReadOptions(observation_keys=["time"], shard_index=k, num_shards=num_shards)
            )
        ]
        for k in range(num_shards)
    ]
    for k, shard in enumerate(shards):
        assert shard == everything[k::num_shards]
    assert sorted(sum(shards, [])) == sorted(everything)


def test_bad_shard_arguments_are_refused(run):
    """shard outside [0, num_shards) or num_shards < 1 raise ValueError at the call."""
    with pytest.raises(ValueError, match="shard"):
        read_episodes(run[0], options=EpisodeReadOptions(shard_index=2, num_shards=2))
    with pytest.raises(ValueError, match="num_shards"):
        read_episodes(run[0], options=EpisodeReadOptions(num_shards=0))


def _first_stem(directory):
    return sorted(name[:-4] for name in os.listdir(directory) if name.endswith(".npz"))[0]


def _rewrite(directory, stem, mutate):
    path = os.path.join(directory, stem + ".npz")
    with np.load(path) as archive:
        arrays = {key: archive[key] for key in archive.files}
    mutate(arrays)
    np.savez(path, **arrays)


def _set(member, index, value):
    def mutate(arrays):
        arrays[member][index] = value

    return mutate


def _drop(member):
    def mutate(arrays):
        del arrays[member]

    return mutate


def _reshape_depth(arrays):
    arrays["obs/depth"] = arrays["obs/depth"][:, :2].copy()
    arrays["next/depth"] = arrays["next/depth"][:, :2].copy()


TAMPERED = {
    "dropped member": _drop("next/proprio"),
    "dropped unrequested member": _drop("obs/rgb"),
    "nan": _set("obs/proprio", (0, 0), np.nan),
    "wrong step_id": _set("obs/step_id", 0, 3),
    "discontinuity": _set("next/proprio", (0, 0), 123.0),
    "wrong env_id": _set("next/env_id", 0, 77),
    "flag in the middle": _set("terminated", 0, True),
    "shape differs from run.json": _reshape_depth,
}


@pytest.mark.parametrize("fields", [None, ["proprio"]])
@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_tampered_episode_is_an_error_naming_the_file(run_copy, case, fields):
    """A file that breaks a rule raises ValueError naming it, with or without a projection."""
    directory, _ = run_copy
    stem = _first_stem(directory)
    _rewrite(directory, stem, TAMPERED[case])
    with pytest.raises(ValueError, match=stem + ".npz"):
        list(read_episodes(directory, options=EpisodeReadOptions(observation_keys=fields)))


def test_projection_skips_values_of_unrequested_fields(run_copy):
    """A projection does not decompress unrequested fields, so damage confined to their values is not read."""
    directory, sim = run_copy
    stem = _first_stem(directory)
    _rewrite(directory, stem, _set("obs/depth", (0, 0, 0), np.nan))
    assert len(list(read_episodes(directory, options=EpisodeReadOptions(observation_keys=["proprio"])))) == len(
        sim.completed
    )
    with pytest.raises(ValueError, match=stem):
        list(read_episodes(directory))


def test_marker_steps_mismatch_is_an_error(run_copy):
    """A marker whose steps differ from the file's T raises ValueError naming the file."""
    directory, _ = run_copy
    stem = _first_stem(directory)
    marker_path = directory / (stem + ".json")
    marker = json.loads(marker_path.read_text())
    marker["steps"] += 1
    marker_path.write_text(json.dumps(marker))
    with pytest.raises(ValueError, match=stem):
        list(read_episodes(directory))


@pytest.mark.parametrize("content", ["{not json", '{"schema_version": 1}', "[]"])
def test_invalid_marker_is_an_error(run_copy, content):
    """A marker that is not valid JSON, or lacks keys, raises ValueError naming the marker."""
    directory, _ = run_copy
    stem = _first_stem(directory)
    (directory / (stem + ".json")).write_text(content)
    with pytest.raises(ValueError, match=stem + ".json"):
        next(read_episodes(directory))


def test_marker_without_episode_file_is_an_error(run_copy):
    """A marker whose episode file is missing raises ValueError naming it."""
    directory, _ = run_copy
    stem = _first_stem(directory)
    os.remove(directory / (stem + ".npz"))
    with pytest.raises(ValueError, match=stem):
        next(read_episodes(directory))


def test_unmarked_episode_file_is_skipped_and_not_counted(run_copy):
    """An episode file without a marker is invisible: skipped, and not counted for sharding."""
    directory, sim = run_copy
    stem = _first_stem(directory)
    os.remove(directory / (stem + ".json"))
    (directory / (stem + ".npz.tmp")).write_bytes(b"half a file")
    with pytest.raises(ValueError, match="damaged: run.json says .* but its markers hold"):  # a closed run lost one
        read_episodes(directory)
    manifest = json.loads((directory / "run.json").read_text())  # never published, so never counted
    manifest["completed_episodes"] -= 1
    (directory / "run.json").write_text(json.dumps(manifest))
    episodes = [
        (e.env_id, e.episode_id)
        for e in read_episodes(directory, options=EpisodeReadOptions(observation_keys=["time"]))
    ]
    assert episodes == sorted(sim.completed)[1:]
    odd = [
        (e.env_id, e.episode_id)
        for e in read_episodes(
            directory, options=EpisodeReadOptions(observation_keys=["time"], shard_index=1, num_shards=2)
        )
    ]
    assert odd == episodes[1::2]


def test_corrupt_archive_is_an_error_naming_the_file(run_copy):
    """A truncated archive raises ValueError naming the file, not a zip or zlib error."""
    directory, _ = run_copy
    stem = _first_stem(directory)
    path = directory / (stem + ".npz")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match=stem):
        next(read_episodes(directory))


def test_read_manifest_checks_version_and_keys(run_copy):
    """read_manifest returns run.json, and refuses another schema version or a missing key naming it."""
    directory, _ = run_copy
    manifest = read_manifest(directory)
    assert manifest["env_spec"]["instruction"] == INSTRUCTION
    path = directory / "run.json"
    path.write_text(json.dumps({**manifest, "schema_version": 2}))
    with pytest.raises(ValueError, match="schema_version"):
        read_manifest(directory)
    del manifest["task"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="task"):
        read_manifest(directory)


def test_dtype_disagreeing_with_run_json_is_an_error(run_copy):
    """Episode fields are checked against run.json's observation description."""
    directory, _ = run_copy
    manifest = read_manifest(directory)
    manifest["env_spec"]["observation"]["proprio"]["dtype"] = "float64"
    (directory / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="proprio"):
        next(read_episodes(directory))


@pytest.mark.parametrize(("history", "horizon"), [(1, 1), (2, 3), (3, 2), (8, 1)])
def test_action_windows_count_and_content(run, history, horizon):
    """There are max(0, T-H-h+2) windows per episode, each the right slices of its episode."""
    directory, sim = run
    windows = list(
        action_windows(
            directory, history=history, horizon=horizon, options=EpisodeReadOptions(observation_keys=["proprio", "rgb"])
        )
    )
    lengths = [len(m["action"]) for m in sim.completed.values()]
    assert len(windows) == sum(max(0, T - horizon - history + 2) for T in lengths)
    for window in windows:
        expected = sim.completed[(window["env_id"], window["episode_id"])]
        t = window["t"]
        assert history - 1 <= t <= len(expected["action"]) - horizon
        assert set(window) == {"obs/proprio", "obs/rgb", "action", "instruction", "env_id", "episode_id", "t"}
        np.testing.assert_array_equal(window["obs/proprio"], expected["obs/proprio"][t - history + 1 : t + 1])
        np.testing.assert_array_equal(window["obs/rgb"], expected["obs/rgb"][t - history + 1 : t + 1])
        np.testing.assert_array_equal(window["action"], expected["action"][t : t + horizon])
        assert window["instruction"] == INSTRUCTION


def test_action_windows_refuse_bad_lengths(run):
    """history or horizon below 1 raise ValueError at the call."""
    with pytest.raises(ValueError, match="history"):
        action_windows(run[0], history=0, horizon=1)
    with pytest.raises(ValueError, match="horizon"):
        action_windows(run[0], history=1, horizon=0)


def test_the_torch_datasets_are_classes_of_torch_datasets(run):
    """WindowDataset and WindowMapDataset are classes: what they make is an instance of them and of torch's
    IterableDataset or Dataset, and so is a pickled copy (a DataLoader worker's), which loads its own windows."""
    torch = pytest.importorskip("torch")
    from forge_gpu.reading import WindowDataset, WindowMapDataset

    directory, _ = run
    iterable = WindowDataset(directory, history=2, horizon=3, observation_keys=["proprio"], shuffle=True)
    mapped = WindowMapDataset(directory, history=2, horizon=3, observation_keys=["proprio"])
    assert isinstance(iterable, WindowDataset) and isinstance(iterable, torch.utils.data.IterableDataset)
    assert isinstance(mapped, WindowMapDataset) and isinstance(mapped, torch.utils.data.Dataset)
    assert not isinstance(mapped, torch.utils.data.IterableDataset)
    count = len(mapped)  # from the run's index: no windows loaded in this process
    assert mapped._windows is None and count == len(mapped.windows)
    copy = pickle.loads(pickle.dumps(mapped))
    assert type(copy) is WindowMapDataset and copy._windows is None and len(copy) == count
    iterable.set_epoch(3)
    again = pickle.loads(pickle.dumps(iterable))
    assert type(again) is WindowDataset and (again.epoch, again.shuffle, again.spec.history) == (3, True, 2)
    with pytest.raises(ValueError, match="history"):
        WindowMapDataset(directory, history=0)


@pytest.mark.parametrize("history,horizon,pad", [(1, 1, False), (2, 3, False), (3, 5, False), (2, 8, True)])
def test_a_map_datasets_length_is_read_from_the_index_as_its_windows_count(run, history, horizon, pad):
    """len(WindowMapDataset) before its windows are loaded (a loader's main process) is len(Windows) of the same
    spec, with and without padding, and with windows longer than some episodes (none of theirs)."""
    pytest.importorskip("torch")
    from forge_gpu.reading import WindowMapDataset

    directory, _ = run
    mapped = WindowMapDataset(directory, history=history, horizon=horizon, pad=pad, observation_keys=["proprio"])
    count = len(mapped)
    assert mapped._windows is None
    assert count == len(Windows(directory, history=history, horizon=horizon, pad=pad)) == len(mapped.windows)
    steps = [len(e.action) for e in read_episodes(directory)]
    assert count == sum(s if pad else max(s - horizon - history + 2, 0) for s in steps)


def test_the_torch_datasets_refuse_what_loading_would_where_they_are_made(run, tmp_path):
    """A field or state entry the run lacks, and a mapping the run cannot take (compressed packed segments, an npz
    run), are one-line ValueErrors naming the run when the dataset is made, as loading its windows says them, not
    later in a worker."""
    pytest.importorskip("torch")
    from forge_gpu.curation import convert_run
    from forge_gpu.reading import WindowDataset, WindowMapDataset

    directory, _ = run  # npz
    convert_run(directory, tmp_path / "lz4", to="packed", compression="lz4")
    wrong = [
        (directory, {"observation_keys": ["proprio", "sonar"]}, r"requested field\(s\) \['sonar'\] are not there"),
        (tmp_path / "lz4", {"observation_keys": ["sonar"]}, r"requested field\(s\) \['sonar'\] are not there"),
        (directory, {"state": ["wind"]}, r"requested state entry\(s\) \['wind'\] are not there"),
        (tmp_path / "lz4", {"state": ["wind"]}, r"requested state entry\(s\) \['wind'\] are not there"),
        (directory, {"mmap": True}, r"schema-1 \(npz\) run cannot be memory-mapped.*convert"),
        (tmp_path / "lz4", {"mmap": True}, "lz4-compressed and cannot be memory-mapped.*convert"),
    ]
    for where, keywords, message in wrong:
        with pytest.raises(ValueError, match=message):
            Windows(where, history=2, horizon=3, **keywords)
        for dataset in (WindowMapDataset, WindowDataset):
            with pytest.raises(ValueError, match=message) as made:
                dataset(where, history=2, horizon=3, **keywords)
            assert str(made.value).startswith(str(where)) and "\n" not in str(made.value), made.value


def test_reading_loads_torch_only_for_the_torch_datasets(run):
    """In a fresh interpreter, episodes, Windows and action_windows load no torch; the first use of a torch dataset
    does."""
    pytest.importorskip("torch")
    directory, _ = run
    code = f"""
import sys
import forge_gpu.reading as reading
directory = {os.fspath(directory)!r}
next(reading.read_episodes(directory)), next(reading.action_windows(directory)), reading.Windows(directory)[0]
print("torch" in sys.modules)
reading.WindowMapDataset(directory)
print("torch" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


def test_window_dataset_with_dataloader(run):
    """WindowDataset feeds a DataLoader batches of tensors matching action_windows, with the instruction."""
    import torch

    from forge_gpu.reading import WindowDataset

    directory, _ = run
    expected = list(
        action_windows(directory, history=2, horizon=3, options=EpisodeReadOptions(observation_keys=["proprio"]))
    )
    dataset = WindowDataset(directory, history=2, horizon=3, observation_keys=["proprio"])
    assert isinstance(dataset, torch.utils.data.IterableDataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=0)
    batches = list(loader)
    assert sum(len(b["t"]) for b in batches) == len(expected)
    first = batches[0]
    assert first["obs/proprio"].shape == (4, 2, 3) and first["obs/proprio"].dtype == torch.float32
    assert first["action"].shape == (4, 3, 2)
    assert first["instruction"] == [INSTRUCTION] * 4
    torch.testing.assert_close(first["action"][1], torch.tensor(expected[1]["action"]))
    assert first["env_id"].dtype == torch.int64


def test_window_dataset_splits_episodes_across_workers(run):
    """With two DataLoader workers every window is yielded exactly once, and the dataset pickles."""
    import pickle

    import torch

    from forge_gpu.reading import WindowDataset

    directory, _ = run
    dataset = WindowDataset(directory, history=1, horizon=2, observation_keys=["time"])
    assert pickle.loads(pickle.dumps(dataset)).spec.horizon == 2
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    seen = sorted((int(w["env_id"]), int(w["episode_id"]), int(w["t"])) for w in loader)
    expected = sorted(
        (w["env_id"], w["episode_id"], w["t"])
        for w in action_windows(directory, history=1, horizon=2, options=EpisodeReadOptions(observation_keys=["time"]))
    )
    assert seen == expected


def test_window_dataset_shuffles_by_seed_and_epoch(run):
    """Shuffled epochs still yield every window once; the order depends on (seed, epoch) alone."""
    import torch

    from forge_gpu.reading import WindowDataset

    directory, _ = run

    def keys(dataset, workers=0):
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
        return [(int(w["env_id"]), int(w["episode_id"]), int(w["t"])) for w in loader]

    plain = keys(WindowDataset(directory, history=1, horizon=2))
    shuffled = WindowDataset(directory, history=1, horizon=2, shuffle=True, seed=5)
    first = keys(shuffled)
    assert sorted(first) == sorted(plain) and first != plain
    assert keys(WindowDataset(directory, history=1, horizon=2, shuffle=True, seed=5)) == first
    shuffled.set_epoch(1)
    second = keys(shuffled)
    assert sorted(second) == sorted(plain) and second != first
    assert sorted(keys(shuffled, workers=2)) == sorted(plain)
