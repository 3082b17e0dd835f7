"""Simulator state and randomized params: checked when recorded, stored (packed: state per frame, params per
episode in the commit log), read back bit for bit, windowed, converted, repaired, inspected and exported;
schema-1 runs and runs without them read as before."""

import itertools
import json
import shutil

import numpy as np
import pytest
from helpers.synthetic import (
    PARAMS,
    STATE,
    SyntheticSim,
    downgrade_packed_run,
    make_batches,
    record,
    standard_read,
    synthetic_description,
)

import forge_gpu
from forge_gpu._src.formats.packed.identity import COMMIT_LOG
from forge_gpu._src.reading.inspection import format_report
from forge_gpu.curation import convert_run, repair_run
from forge_gpu.reading import EpisodeReadOptions, Windows, inspect_run
from forge_gpu.recording import PackedRecorder


def episodes_by_id(run, **options):
    return {
        (e.env_id, e.episode_id): e for e in forge_gpu.reading.read_episodes(run, options=EpisodeReadOptions(**options))
    }


def assert_bits(found: np.ndarray, expected: np.ndarray) -> None:
    assert found.dtype == expected.dtype and found.shape == expected.shape and found.tobytes() == expected.tobytes()


def assert_state_and_params(episodes: dict, completed: dict, *, state=tuple(STATE)) -> None:
    """Every episode holds the generated state (every frame) and params (the episode's), bit for bit."""
    assert episodes.keys() == completed.keys() and episodes
    for key, episode in episodes.items():
        assert sorted(episode.state) == sorted(state) and sorted(episode.params) == sorted(PARAMS)
        for name in state:
            assert_bits(episode.state[name], completed[key][f"state/{name}"])
        for name in PARAMS:
            assert_bits(episode.params[name], completed[key][f"params/{name}"])


def record_run(directory, *, recorder=PackedRecorder, seed=3, **kwargs):
    env = synthetic_description(num_envs=4, max_steps=5, state=True, params=True)
    sim = SyntheticSim(env, seed=seed)
    record(directory, env, make_batches(sim, 30, resets_at=(11,)), recorder=recorder, **kwargs)
    return sim


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A packed run with state and params over several segments and blocks, and the simulation that made it (the
    run :func:`record_run` records, as the npz test's)."""
    directory = tmp_path_factory.mktemp("state") / "run"
    return directory, record_run(directory, block_bytes=1500, segment_bytes=4000)


def test_state_and_params_read_back_bit_for_bit(recorded):
    """Each episode's state at every frame and its params read back exactly; run.json, the commit log and
    stats.json hold them as docs/FORMAT.md says."""
    directory, sim = recorded
    assert_state_and_params(episodes_by_id(directory, state=True), sim.completed)
    manifest = forge_gpu.formats.read_manifest(directory)
    assert manifest["layout_version"] == 5
    assert manifest["env_spec"]["state"] == STATE and manifest["env_spec"]["params"] == PARAMS
    assert len(list(directory.glob("segment-*.arrows"))) > 1
    stats = json.loads((directory / "stats.json").read_text())["fields"]
    assert not [key for key in stats if key.startswith(("state/", "params/"))] and "obs/proprio" in stats


def test_a_reader_without_forge_gpu_gets_state_and_params(recorded):
    """pyarrow and json alone, following docs/FORMAT.md: the params of each episode from its commit line, its
    state from the segments' state/ columns at its rows."""
    directory, sim = recorded
    commits, table = standard_read(directory)
    body_q = table.column("state/body_q").combine_chunks().flatten().to_numpy().reshape(len(table), 2, 7)
    assert json.loads(table.schema.field("state/body_q").metadata[b"shape"]) == [2, 7]
    seen = 0
    for commit in commits:
        entry = commit["episodes"]
        for k, (env_id, episode_id) in enumerate(zip(entry["env_id"], entry["episode_id"], strict=True)):
            expected = sim.completed[(env_id, episode_id)]
            first, stride, steps = entry["first_row"][k], entry["stride"][k], entry["steps"][k]
            assert_bits(body_q[first : first + (steps + 1) * stride : stride], expected["state/body_q"])
            for name in PARAMS:
                assert_bits(np.array(entry["params"][name][k], np.float32), expected[f"params/{name}"])
            seen += 1
    assert seen == len(sim.completed)


def test_state_is_read_where_asked_and_params_always(recorded):
    """By default an episode has its params and no state; a list of names reads those; an unknown name is a
    ValueError naming it, and so are options that are not names."""
    directory, sim = recorded
    plain = episodes_by_id(directory)
    assert all(e.state == {} and sorted(e.params) == sorted(PARAMS) for e in plain.values())
    assert_state_and_params(episodes_by_id(directory, state=["body_q"]), sim.completed, state=("body_q",))
    with pytest.raises(ValueError, match="'lidar'"):
        episodes_by_id(directory, state=["lidar"])
    for bad in ("body_q", [1], 3):
        with pytest.raises(ValueError, match="state must be True, False or a sequence"):
            EpisodeReadOptions(state=bad)


def test_a_run_without_state_or_params_reads_as_before(tmp_path):
    """A run whose spec has neither writes no state/ column and no params in its commit lines, and reads with
    empty state and params; so does a run of layout 1 (before state was stored), whatever its env_spec says; a
    newer layout is refused in one line naming it, by readers and by repair (which then changes nothing)."""
    env = synthetic_description(num_envs=3, max_steps=5)
    sim = SyntheticSim(env, seed=2)
    record(tmp_path / "run", env, make_batches(sim, 20), recorder=PackedRecorder)
    commits = [json.loads(line) for line in (tmp_path / "run" / COMMIT_LOG).read_text().splitlines()]
    assert all("params" not in c["episodes"] for c in commits)
    manifest = downgrade_packed_run(tmp_path / "run", 1)  # as a recorder before layout 2 wrote it
    manifest["env_spec"].update(state=STATE, params=PARAMS)  # from an env with state and params
    (tmp_path / "run" / "run.json").write_text(json.dumps(manifest))
    episodes = episodes_by_id(tmp_path / "run", state=True)
    assert episodes.keys() == sim.completed.keys()
    assert all(e.state == {} and e.params == {} for e in episodes.values())
    assert len(Windows(tmp_path / "run", 2, 2, state=True, params=True)) > 0
    (tmp_path / "run" / "run.json").write_text(json.dumps(dict(manifest, layout_version=6, status="recording")))
    with pytest.raises(ValueError, match=r"run.json: layout_version 6 is newer than this reader reads \(up to 5\)"):
        forge_gpu.reading.open_run(tmp_path / "run")
    with open(tmp_path / "run" / COMMIT_LOG, "ab") as log:  # what a newer writer might be writing
        log.write(b'{"segment": 0, "checks')
    before = sorted((p.name, p.read_bytes()) for p in (tmp_path / "run").iterdir())
    with pytest.raises(ValueError, match="layout_version 6 is newer"):
        repair_run(tmp_path / "run")
    assert sorted((p.name, p.read_bytes()) for p in (tmp_path / "run").iterdir()) == before


def bad_results(result):
    """(what the error names, a broken copy of ``result``) for each way a batch's state or params can be wrong."""

    def changed(group, name, value):
        entries = dict(getattr(result, group), **{name: value})
        if value is None:
            del entries[name]
        return type(result)(**dict(vars(result), **{group: entries}))

    state, params = result.state, result.params
    yield "result.params: missing entry", changed("params", "mass_scale", None)
    yield "result.state.*joint_q.*float32", changed("state", "joint_q", state["joint_q"].astype(np.float64))
    yield "result.state.*body_q.*must be float32\\[4, 2, 7\\]", changed("state", "body_q", state["body_q"][:, :1])
    yield (
        "result.state\\['joint_q'\\] holds non-finite",
        changed("state", "joint_q", np.full((4, 2), np.inf, np.float32)),
    )
    yield "'extra'.*not described", changed("state", "extra", state["joint_q"])
    nan = np.full((4, 3), np.nan, np.float32)
    yield "result.params\\['target_color'\\] holds non-finite", changed("params", "target_color", nan)
    moved = params["target_color"] + 1
    yield "result.params\\['target_color'\\] changed within an episode", changed("params", "target_color", moved)


@pytest.mark.parametrize("recorder", ["packed", "npz"])
def test_a_bad_state_or_params_batch_is_refused_naming_it(tmp_path, recorder):
    """A batch whose state or params break the spec is refused whole, naming the entry; recording then goes on
    unchanged, and (packed) the run holds exactly the generated episodes."""
    env = synthetic_description(num_envs=4, max_steps=5, state=True, params=True)
    sim = SyntheticSim(env, seed=8)
    batches = make_batches(sim, 20)
    cls = PackedRecorder if recorder == "packed" else forge_gpu.recording.NpzRecorder
    rec = cls(tmp_path / "run", env)
    rec.append(*batches[0])
    observation, result = batches[1]
    assert result.info["active"].all()  # every row continues its episode: a changed param is a change
    cases = list(bad_results(result))
    for words, broken in cases:
        with pytest.raises(ValueError, match=words):
            rec.append(observation, broken)
    assert len(cases) == 7
    for observation, result in batches[1:]:
        rec.append(observation, result)
    rec.close()
    episodes = episodes_by_id(tmp_path / "run", state=True)
    assert episodes.keys() == sim.completed.keys()
    if recorder == "packed":
        assert_state_and_params(episodes, sim.completed)


def test_npz_runs_store_neither_and_read_with_empty_state_and_params(tmp_path):
    """Schema 1 keeps its members exactly (FORMAT-v1) and its env_spec describes no state or params; its episodes
    read with empty state and params; asking for a state entry names it."""
    sim = record_run(tmp_path / "npz", recorder=forge_gpu.recording.NpzRecorder)
    manifest = forge_gpu.formats.read_manifest(tmp_path / "npz")
    assert manifest["schema_version"] == 1 and not {"state", "params", "layout_version"} & {*manifest["env_spec"]}
    episodes = episodes_by_id(tmp_path / "npz", state=True)
    assert episodes.keys() == sim.completed.keys()
    assert all(e.state == {} and e.params == {} for e in episodes.values())
    path = next(iter(episodes.values())).path
    with np.load(path) as archive:
        assert not [m for m in archive.files if not m.startswith(("obs/", "next/")) and "/" in m]
    with pytest.raises(ValueError, match="'joint_q'"):
        episodes_by_id(tmp_path / "npz", state=["joint_q"])


def test_convert_keeps_state_and_params_in_packed_and_drops_them_in_npz(recorded, tmp_path):
    """packed -> packed keeps every frame's state and every episode's params bit for bit; packed -> npz stores
    neither (and says so in its env_spec), and converting that back gives a packed run without them."""
    directory, sim = recorded
    convert_run(directory, tmp_path / "copy", to="packed", compression="zstd")
    assert_state_and_params(episodes_by_id(tmp_path / "copy", state=True), sim.completed)
    copy = forge_gpu.formats.read_manifest(tmp_path / "copy")
    assert copy["layout_version"] == 5 and copy["env_spec"]["params"] == PARAMS
    convert_run(directory, tmp_path / "npz", to="npz")
    assert "state" not in forge_gpu.formats.read_manifest(tmp_path / "npz")["env_spec"]
    convert_run(tmp_path / "npz", tmp_path / "back", to="packed")
    back = episodes_by_id(tmp_path / "back", state=True)
    assert back.keys() == sim.completed.keys() and all(e.state == {} == e.params for e in back.values())


def test_repair_publishes_the_params_of_a_block_whose_line_was_lost(recorded, tmp_path):
    """A kill between a block's write and its commit line loses no params: repair takes them from the record
    batch's custom metadata, and the repaired run equals the recorded one."""
    directory, sim = recorded
    run = tmp_path / "run"
    shutil.copytree(directory, run)
    lines = (run / COMMIT_LOG).read_bytes().split(b"\n")[:-1]
    lost = next(k for k in range(len(lines) - 1, -1, -1) if json.loads(lines[k])["episodes"]["steps"])
    (run / COMMIT_LOG).write_bytes(b"".join(line + b"\n" for line in lines[:lost]))
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(dict(manifest, status="recording")))
    assert len(episodes_by_id(run)) < len(sim.completed)
    assert repair_run(run)["recovered_episodes"] == sum(
        len(json.loads(line)["episodes"]["steps"]) for line in lines[lost:]
    )
    assert_state_and_params(episodes_by_id(run, state=True), sim.completed)


@pytest.mark.parametrize(
    "value, words",
    [("1.5", "must be a list"), ([[1.0, 2.0]], "must be a list"), (["a"], "must be a list"), ([1e39], "finite")],
)
def test_a_bad_params_entry_in_the_commit_log_is_refused_naming_the_line(recorded, tmp_path, value, words):
    """A commit line's params that are not one finite value of the described shape per episode: ValueError naming
    the log's line and the param."""
    directory, _ = recorded
    run = tmp_path / "run"
    shutil.copytree(directory, run)
    lines = (run / COMMIT_LOG).read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if json.loads(line)["episodes"]["steps"])
    commit = json.loads(lines[k])
    count = len(commit["episodes"]["steps"])  # the blocks' sizes follow the writer's timing
    commit["episodes"]["params"]["mass_scale"] = value * count if isinstance(value, list) else value
    lines[k] = json.dumps(commit)
    (run / COMMIT_LOG).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{COMMIT_LOG}:{k + 1}: episodes.params.mass_scale: .*{words}"):
        forge_gpu.reading.open_run(run)


@pytest.mark.parametrize("mmap", [False, True])
def test_windows_carry_state_history_and_episode_params(recorded, mmap):
    """state=True adds state/<S> [B, history, ...] at the observation's frames, params=True params/<P> of each
    window's episode; neither by default; action_windows and the torch datasets pass state (and params) through."""
    directory, _ = recorded
    history, horizon = 3, 2
    windows = Windows(directory, history, horizon, pad=True, state=True, params=True, mmap=mmap)
    episodes = list(forge_gpu.reading.read_episodes(directory, options=EpisodeReadOptions(state=True)))
    batch = windows.batch(np.arange(len(windows)))
    assert batch["state/body_q"].shape == (len(windows), history, 2, 7)
    assert batch["params/target_color"].shape == (len(windows), 3) and batch["params/mass_scale"].dtype == np.float32
    i = 0
    for episode in episodes:
        for t in range(episode.steps):
            frames = np.maximum(np.arange(t - history + 1, t + 1), 0)
            for name in STATE:
                assert_bits(batch[f"state/{name}"][i], episode.state[name][frames])
            for name in PARAMS:
                assert_bits(batch[f"params/{name}"][i], episode.params[name])
            i += 1
    assert i == len(windows)
    unpadded = Windows(directory, history, horizon, state=True, mmap=mmap).batch(np.arange(3))
    options = EpisodeReadOptions(state=["body_q"])
    walked = itertools.islice(forge_gpu.reading.action_windows(directory, history, horizon, options=options), 3)
    expected = [  # the unpadded windows' state, by a loop over the episodes
        episode.state["body_q"][t - history + 1 : t + 1]
        for episode in episodes
        for t in range(history - 1, episode.steps - horizon + 1)
    ][:3]
    for k, window in enumerate(walked):  # action_windows' windows alike
        assert_bits(unpadded["state/body_q"][k], expected[k])
        assert_bits(window["state/body_q"], expected[k])
    assert k == 2
    assert not [k for k in Windows(directory, history, horizon).batch([0]) if k.startswith(("state/", "params/"))]
    dataset = forge_gpu.reading.WindowMapDataset(directory, history=2, horizon=2, state=["joint_q"], params=True)
    item = dataset[[0, 1]]
    assert tuple(item["state/joint_q"].shape) == (2, 2, 2) and tuple(item["params/target_color"].shape) == (2, 3)
    assert "state/body_q" not in item


def test_inspect_reports_the_params_and_state(recorded):
    """inspect lists the state recorded and each param's shape and min, mean and max over the episodes."""
    directory, _ = recorded
    report = inspect_run(directory)
    assert report["state"] == STATE
    values = np.stack([e.params["target_color"] for e in forge_gpu.reading.read_episodes(directory)]).astype(np.float64)
    color = report["params"]["target_color"]
    assert color["shape"] == [3] and report["params"]["mass_scale"]["shape"] == []
    assert np.allclose(color["min"], values.min(0)) and np.allclose(color["max"], values.max(0))
    assert np.allclose(color["mean"], values.mean(0))
    text = format_report(report)
    assert "state (every frame):" in text and "  body_q" in text and "  mass_scale   []  min " in text


def test_exports_carry_each_episodes_params(recorded, tmp_path):
    """LeRobot's meta/episodes holds params/<P> columns, robomimic's demos params/<P> attributes, each equal bit
    for bit to the episode's params; neither holds the state."""
    import pyarrow.parquet as pq

    h5py = pytest.importorskip("h5py")
    pytest.importorskip("av")
    directory, _ = recorded
    episodes = list(forge_gpu.reading.read_episodes(directory))
    forge_gpu.export.export_lerobot(directory, tmp_path / "lerobot")
    meta = pq.read_table(tmp_path / "lerobot/meta/episodes/chunk-000/file-000.parquet")
    assert not [name for name in meta.column_names if "state/" in name]
    for name in PARAMS:
        column = np.array(meta.column(f"params/{name}").to_pylist(), np.float32)
        assert_bits(column, np.stack([e.params[name] for e in episodes]))
    forge_gpu.export.export_robomimic(directory, tmp_path / "demo.hdf5")
    with h5py.File(tmp_path / "demo.hdf5") as f:
        for number, episode in enumerate(episodes):
            demo = f[f"data/demo_{number}"]
            assert not [key for key in demo.keys() if "state" in key]
            for name in PARAMS:
                assert_bits(np.asarray(demo.attrs[f"params/{name}"]), episode.params[name])


def test_format_md_documents_the_encoding():
    """docs/FORMAT.md names the state columns, the params encoding and the layout version rule."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md").read_text()
    for words in ("`state/<name>`", '"params"', "`layout_version`", "custom metadata", "newer than this reader"):
        assert words in text, words
