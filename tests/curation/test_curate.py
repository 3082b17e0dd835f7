"""Curation (forge_gpu._src.curation.curate, cli/_curate.py): select keeps exactly the episodes a numpy filter of
the same values keeps, merge reads back as the union of its runs, split is disjoint, covers the run and repeats for
a seed; every output is a closed run that inspect and verify pass, whose statistics are its own; bad expressions
are refused in one line naming the allowed names, and the expressions are never Python's eval."""

import dataclasses
import json
import shutil

import numpy as np
import pytest
from helpers.synthetic import PARAMS, STATE, SyntheticSim, make_batches, record, synthetic_description

import forge_gpu
from forge_gpu._src.curation.curate import split_keys
from forge_gpu._src.recording.stats import load_statistics
from forge_gpu.cli import main
from forge_gpu.curation import ExpressionError, compute_statistics, merge_runs, select_run, split_run
from forge_gpu.reading import EpisodeReadOptions, inspect_run, verify_run
from forge_gpu.recording import PackedRecorder, write_dataset_manifest


def description(**changes):
    """The synthetic description of a task with success, state and params; ``changes`` replace env_spec keys."""
    env = synthetic_description(num_envs=4, max_steps=7, state=True, params=True)
    return dataclasses.replace(env, spec={**env.spec, "has_success": True, **changes})


def record_run(directory, seed, env=None, steps=50):
    env = env or description()
    record(directory, env, make_batches(SyntheticSim(env, seed=seed, end_prob=0.3), steps), recorder=PackedRecorder)
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of one task (different draws), written in small blocks."""
    root = tmp_path_factory.mktemp("curate")
    return record_run(root / "a", seed=1), record_run(root / "b", seed=2)


def read_all(path):
    return list(forge_gpu.reading.read_episodes(path, options=EpisodeReadOptions(state=True)))


def assert_same_episode(found, expected, env_offset=0):
    """Equal bit for bit: ids (env moved by ``env_offset``), every observation field, transition, state and param."""
    assert (found.env_id, found.episode_id, found.steps) == (
        expected.env_id + env_offset,
        expected.episode_id,
        expected.steps,
    )
    for name in expected.obs:
        shift = env_offset if name == "env_id" else 0
        for side in ("obs", "next"):
            a, b = getattr(found, side)[name], getattr(expected, side)[name]
            assert a.dtype == b.dtype and np.array_equal(a, b + np.asarray(shift, b.dtype)), (side, name)
    for name in ("action", "reward", "terminated", "truncated"):
        assert getattr(found, name).tobytes() == getattr(expected, name).tobytes(), name
    assert sorted(found.state) == sorted(STATE) and sorted(found.params) == sorted(PARAMS)
    for group in ("state", "params"):
        for name, value in getattr(expected, group).items():
            assert getattr(found, group)[name].tobytes() == value.tobytes(), (group, name)


def assert_closed_run_with_own_statistics(path, episodes):
    """inspect and verify pass; run.json is closed with the episode count; stats.json is what the episodes give."""
    report = inspect_run(path)
    assert report["status"] == "closed" and report["episodes"] == episodes and report["format"] == "packed"
    assert verify_run(path)["ok"]
    stored = load_statistics(path).summary()
    recomputed = compute_statistics(path, write=False).summary()
    for key, figures in recomputed.items():
        assert stored[key]["count"] == figures["count"]
        np.testing.assert_allclose(stored[key]["mean"], figures["mean"], rtol=1e-9)


def numpy_values(episodes):
    """The per-episode values, computed here from the read episodes."""
    return {
        "success": np.array([bool(e.terminated[-1]) for e in episodes]),
        "return": np.array([e.reward.astype(np.float64).sum() for e in episodes]),
        "length": np.array([e.steps for e in episodes]),
        "env": np.array([e.env_id for e in episodes]),
        "episode": np.array([e.episode_id for e in episodes]),
        "mass_scale": np.array([e.params["mass_scale"] for e in episodes]),
        "target_color": np.stack([e.params["target_color"] for e in episodes]),
    }


FILTERS = {
    "success and length < 4": lambda v: v["success"] & (v["length"] < 4),
    "not success or return > 0.5": lambda v: ~v["success"] | (v["return"] > 0.5),
    "mass_scale > 1.1 and target_color[2] <= 0.9": lambda v: (v["mass_scale"] > 1.1) & (v["target_color"][:, 2] <= 0.9),
    "env in (0, 3) and episode % 2 == 1": lambda v: np.isin(v["env"], [0, 3]) & (v["episode"] % 2 == 1),
    'instruction == "push the red cube to the goal" and 2 <= length <= 5': lambda v: (
        (v["length"] >= 2) & (v["length"] <= 5)
    ),
}


@pytest.mark.parametrize("where", list(FILTERS))
def test_select_keeps_exactly_the_episodes_a_numpy_filter_keeps(runs, tmp_path, where):
    source = read_all(runs[0])
    values = numpy_values(source)
    found = forge_gpu.curation.episode_values(runs[0])
    for name, expected in values.items():  # the values the expression sees are those computed here
        assert found[name].shape == expected.shape and np.array_equal(found[name], expected), name
    assert found["instruction"].tolist() == [forge_gpu.formats.read_manifest(runs[0])["env_spec"]["instruction"]] * len(
        source
    )
    kept = np.flatnonzero(FILTERS[where](values))
    assert 0 < kept.size < len(source), "the filter must keep some episodes and drop others"
    report = select_run(runs[0], tmp_path / "out", where)
    assert report["episodes"] == kept.size and report["of"] == len(source)
    found = read_all(tmp_path / "out")
    assert len(found) == kept.size
    for episode, k in zip(found, kept, strict=True):
        assert_same_episode(episode, source[k])
    manifest = json.loads((tmp_path / "out/run.json").read_text())
    assert manifest["curated"]["op"] == "select" and manifest["curated"]["where"] == where
    (entry,) = manifest["curated"]["sources"]
    assert entry["run_id"] == json.loads((runs[0] / "run.json").read_text())["run_id"] and entry["env_offset"] == 0
    assert manifest["env_spec"]["instruction"] == forge_gpu.formats.read_manifest(runs[0])["env_spec"]["instruction"]
    assert_closed_run_with_own_statistics(tmp_path / "out", kept.size)


def test_a_selection_of_a_selection_is_the_selection_of_both(runs, tmp_path):
    select_run(runs[0], tmp_path / "one", "length >= 3")
    select_run(tmp_path / "one", tmp_path / "two", "return < 0.3")
    select_run(runs[0], tmp_path / "both", "length >= 3 and return < 0.3")
    twice, once = read_all(tmp_path / "two"), read_all(tmp_path / "both")
    assert len(twice) == len(once) > 0
    for a, b in zip(twice, once, strict=True):
        assert_same_episode(a, b)
    history = json.loads((tmp_path / "two/run.json").read_text())["curated"]["sources"][0]["curated"]
    assert history["where"] == "length >= 3"  # the chain back to the recorded run


def test_an_empty_selection_is_a_closed_run_without_episodes(runs, tmp_path):
    assert select_run(runs[0], tmp_path / "none", "length < 0")["episodes"] == 0
    assert inspect_run(tmp_path / "none")["episodes"] == 0 and not read_all(tmp_path / "none")
    assert not (tmp_path / "none/stats.json").exists()  # statistics of nothing: none written


@pytest.mark.parametrize(
    "where, words",
    [
        ("lenght < 80", "unknown name 'lenght'"),
        ("__import__('os')", "the only call is abs(x)"),
        ("__import__('os').system('true')", "Attribute"),
        ("length.bit_length() > 1", "Attribute"),
        ("[e for e in env]", "ListComp"),
        ("target_color > 1", "index it"),
        ('instruction > "a"', "strings compare with == and != only"),
        ("success and length", "'length' is not true/false"),
        ("length +", "does not parse"),
        ("mass_scale[0] > 1", "index a vector param"),
    ],
)
def test_a_bad_expression_is_one_line_naming_the_allowed_names_and_writes_nothing(runs, tmp_path, where, words):
    with pytest.raises(ExpressionError) as error:
        select_run(runs[0], tmp_path / "out", where)
    message = str(error.value)
    assert words in message and "\n" not in message
    assert "allowed names: success, return, length, env, episode, instruction, mass_scale, target_color[3]" in message
    assert not list(tmp_path.iterdir())


def test_success_is_refused_for_a_task_without_it(tmp_path):
    env = synthetic_description(num_envs=2, max_steps=4)
    record_run(tmp_path / "run", seed=0, env=env, steps=12)
    with pytest.raises(ExpressionError, match="'success': task 'synthetic_push' defines no success"):
        select_run(tmp_path / "run", tmp_path / "out", "success")
    assert select_run(tmp_path / "run", tmp_path / "out", "length > 0")["episodes"] > 0


def test_merge_reads_back_as_the_union_with_env_offsets_that_trace_each_episode(runs, tmp_path):
    a, b = read_all(runs[0]), read_all(runs[1])
    report = merge_runs([runs[0], runs[1]], tmp_path / "merged")
    assert report["episodes"] == len(a) + len(b)
    merged = read_all(tmp_path / "merged")
    offset = max(e.env_id for e in a) + 1
    for found, (expected, moved) in zip(merged, [(e, 0) for e in a] + [(e, offset) for e in b], strict=True):
        assert_same_episode(found, expected, env_offset=moved)
    sources = json.loads((tmp_path / "merged/run.json").read_text())["curated"]["sources"]
    assert [(s["env_offset"], s["envs"], s["episodes"]) for s in sources] == [(0, offset, len(a)), (offset, 4, len(b))]
    for episode in merged:  # each episode traced back: the source whose env range holds it, its original ids
        source = next(s for s in sources if s["env_offset"] <= episode.env_id < s["env_offset"] + s["envs"])
        original = {(e.env_id, e.episode_id) for e in (a if source["path"] == str(runs[0]) else b)}
        assert (episode.env_id - source["env_offset"], episode.episode_id) in original
    assert_closed_run_with_own_statistics(tmp_path / "merged", len(a) + len(b))
    # A dataset root of the same two runs merges to the same episodes, and a run merges with itself.
    root = tmp_path / "root"
    root.mkdir()
    for name, run in (("a", runs[0]), ("b", runs[1])):
        shutil.copytree(run, root / name)
    keys = ("path", "run_id", "worker", "device", "status", "episodes", "seed", "error")
    write_dataset_manifest(root, [dict.fromkeys(keys) | {"path": "a"}, dict.fromkeys(keys) | {"path": "b"}])
    merge_runs([root], tmp_path / "from-root")
    for x, y in zip(read_all(tmp_path / "from-root"), merged, strict=True):
        assert_same_episode(x, y)
    assert merge_runs([runs[0], runs[0]], tmp_path / "twice")["episodes"] == 2 * len(a)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"instruction": "stack the blocks"}, "env_spec.instruction differs"),
        ({"params": {"mass_scale": PARAMS["mass_scale"]}}, "env_spec.params.target_color differs"),
    ],
)
def test_merge_refuses_runs_that_differ_naming_the_difference(runs, tmp_path, change, words):
    other = record_run(tmp_path / "other", seed=5, env=description(**change), steps=10)
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        merge_runs([runs[0], other], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_split_is_disjoint_covers_the_run_and_repeats_for_a_seed(runs, tmp_path):
    source = read_all(runs[0])
    report = split_run(runs[0], tmp_path / "s1", val=0.25, seed=7)
    assert report["val"] == round(0.25 * len(source)) and report["train"] + report["val"] == len(source)
    parts = {part: read_all(tmp_path / "s1" / part) for part in ("train", "val")}
    ids = {part: [(e.env_id, e.episode_id) for e in episodes] for part, episodes in parts.items()}
    assert not set(ids["train"]) & set(ids["val"])
    assert sorted(ids["train"] + ids["val"]) == sorted((e.env_id, e.episode_id) for e in source)
    by_id = {(e.env_id, e.episode_id): e for e in source}
    for episodes in parts.values():  # each part in the run's order, every episode whole
        order = [list(by_id).index((e.env_id, e.episode_id)) for e in episodes]
        assert order == sorted(order)
        for episode in episodes:
            assert_same_episode(episode, by_id[(episode.env_id, episode.episode_id)])
    split_run(runs[0], tmp_path / "s2", val=0.25, seed=7)
    split_run(runs[0], tmp_path / "s3", val=0.25, seed=8)
    again = [(e.env_id, e.episode_id) for e in read_all(tmp_path / "s2/val")]
    other = [(e.env_id, e.episode_id) for e in read_all(tmp_path / "s3/val")]
    assert again == ids["val"] and other != ids["val"]
    for part, episodes in parts.items():
        assert_closed_run_with_own_statistics(tmp_path / "s1" / part, len(episodes))
    # Either part is an ordinary run: windows read it.
    windows = forge_gpu.reading.Windows(tmp_path / "s1/val", history=2, horizon=2, state=True, params=True)
    assert len(windows) == sum(max(e.steps - 2, 0) for e in parts["val"]) and len(windows) > 0
    assert set(windows.batch(np.arange(len(windows)))["episode_id"].tolist()) <= {i for _, i in ids["val"]}


def test_split_keys_depend_on_the_ids_and_the_seed_alone():
    rng = np.random.default_rng(0)
    env, episode = rng.integers(0, 2**31, 500), rng.integers(0, 2**31, 500)
    keys = split_keys(env, episode, 3)
    order = rng.permutation(500)
    assert np.array_equal(split_keys(env[order], episode[order], 3), keys[order])
    assert not np.array_equal(split_keys(env, episode, 4), keys)
    assert np.unique(keys).size == 500 and keys.dtype == np.uint64


def test_the_curation_commands(runs, tmp_path, capsys):
    out = tmp_path / "sel"
    assert main(["select", str(runs[0]), str(out), "--where", "success and length < 80", "--compression", "zstd"]) == 0
    assert "episodes to" in capsys.readouterr().out
    assert json.loads((out / "run.json").read_text())["recorder"]["compression"] == "zstd"
    assert main(["select", str(runs[0]), str(tmp_path / "bad"), "--where", "sucess"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("forge-gpu: --where 'sucess': unknown name 'sucess'; allowed names: success,")
    assert "\n" not in err and not (tmp_path / "bad").exists()
    assert main(["merge", str(runs[0]), str(runs[1]), str(tmp_path / "m")]) == 0
    assert main(["split", str(tmp_path / "m"), str(tmp_path / "s"), "--val", "0.1", "--seed", "3"]) == 0
    assert "to " + str(tmp_path / "s" / "val") in capsys.readouterr().out
    assert main(["split", str(runs[0]), str(tmp_path / "s2"), "--val", "1.5"]) == 2
    assert main(["merge", str(runs[0]), str(tmp_path / "m"), str(tmp_path / "m")]) == 2  # out exists


def test_either_part_of_a_split_feeds_the_torch_datasets_and_both_exports(runs, tmp_path):
    """train and val are ordinary closed runs: the torch datasets hold their windows, and LeRobot and robomimic
    export their episodes, ids and params as read."""
    pytest.importorskip("torch")
    pytest.importorskip("av")  # the LeRobot export writes its videos with PyAV
    h5py = pytest.importorskip("h5py")
    import pyarrow.parquet as pq

    split_run(runs[0], tmp_path / "s", val=0.3, seed=1)
    for part in ("train", "val"):
        path = tmp_path / "s" / part
        episodes = read_all(path)
        dataset = forge_gpu.reading.WindowMapDataset(path, history=1, horizon=1, params=True)
        assert len(dataset) == sum(e.steps for e in episodes)
        assert sum(1 for _ in forge_gpu.reading.WindowDataset(path, history=1, horizon=1)) == len(dataset)
        forge_gpu.export.export_robomimic(path, tmp_path / f"{part}.hdf5")
        with h5py.File(tmp_path / f"{part}.hdf5") as f:
            demos = [f[f"data/demo_{k}"] for k in range(len(episodes))]
            assert [(d.attrs["forge_gpu_env_id"], d.attrs["forge_gpu_episode_id"]) for d in demos] == [
                (e.env_id, e.episode_id) for e in episodes
            ]
        report = forge_gpu.export.export_lerobot(path, tmp_path / f"{part}-lerobot")
        assert report["episodes"] == len(episodes)
        meta = pq.read_table(tmp_path / f"{part}-lerobot/meta/episodes/chunk-000/file-000.parquet")
        assert meta.column("forge_gpu/episode_id").to_pylist() == [e.episode_id for e in episodes]
