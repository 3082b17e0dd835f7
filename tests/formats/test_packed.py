"""The packed layout: the recorder, the commit rule, repair, conversion, windows, and a standard reader."""

import json
import os
import shutil
import threading
import time

import numpy as np
import pytest
from helpers.synthetic import SyntheticSim, make_batches, record, standard_read, synthetic_description

import forge_gpu
from forge_gpu._src.formats.packed.identity import COMMIT_LOG
from forge_gpu._src.formats.packed.write import PackedWriter
from forge_gpu.curation import convert_run, repair_run
from forge_gpu.reading import Windows
from forge_gpu.recording import PackedRecorder

MEMBERS = ("action", "reward", "terminated", "truncated")


def record_packed(directory, env, batches, **kwargs):
    return record(directory, env, batches, recorder=PackedRecorder, **kwargs)


def episodes_by_id(run, **options):
    read = forge_gpu.reading.read_episodes(run, options=forge_gpu.reading.EpisodeReadOptions(**options))
    return {(e.env_id, e.episode_id): e for e in read}


def assert_same_episodes(a: dict, b: dict) -> None:
    """Two runs' episodes (by id) are equal bit for bit, dtypes included."""
    assert a.keys() == b.keys() and a
    for key, x in a.items():
        y = b[key]
        assert x.steps == y.steps and x.obs.keys() == y.obs.keys()
        for f in x.obs:
            for mine, theirs in ((x.obs[f], y.obs[f]), (x.next[f], y.next[f])):
                assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), f
        for m in MEMBERS:
            assert getattr(x, m).dtype == getattr(y, m).dtype and np.array_equal(getattr(x, m), getattr(y, m)), m


@pytest.fixture(scope="module")
def recorded(synthetic_run):
    """A packed run with cameras, several segments and blocks, and the simulation that made it."""
    env = synthetic_description(num_envs=5, max_steps=6, images=True)
    options = {"block_bytes": 3000, "segment_bytes": 11000}
    return synthetic_run(env, 40, seed=11, resets_at=(17,), recorder=PackedRecorder, **options)


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_recorded_episodes_equal_the_generated_ones(tmp_path, compression):
    """Every ended episode is published once, bit-identical; the manifest lists the incomplete ones."""
    env = synthetic_description(num_envs=4, max_steps=5, images=True)
    sim = SyntheticSim(env, seed=2)
    batches = make_batches(sim, 30, resets_at=(12,))
    recorder = record_packed(tmp_path / "run", env, batches, compression=compression, block_bytes=2000)
    episodes = episodes_by_id(tmp_path / "run")
    assert episodes.keys() == sim.completed.keys() and recorder.completed_episodes == len(episodes)
    for key, episode in episodes.items():
        expected = sim.completed[key]
        for f in episode.obs:
            assert np.array_equal(episode.obs[f], expected[f"obs/{f}"])
            assert np.array_equal(episode.next[f], expected[f"next/{f}"])
        for m in MEMBERS:
            assert np.array_equal(getattr(episode, m), expected[m])
    manifest = forge_gpu.formats.read_manifest(tmp_path / "run")
    assert manifest["schema_version"] == 2 and manifest["layout"] == "packed" and manifest["status"] == "closed"
    assert manifest["completed_episodes"] == len(episodes) and manifest["recorder"]["compression"] == compression
    incomplete = sorted((e["env_id"], e["episode_id"], e["steps"]) for e in manifest["incomplete_episodes"])
    expected_incomplete = sim.abandoned + sim.in_progress()
    assert incomplete == sorted((e["env_id"], e["episode_id"], e["steps"]) for e in expected_incomplete)


def test_segments_rotate_and_blocks_follow_the_commit_log(recorded):
    """Small limits give several segments and blocks; the log's blocks tile the rows without gaps."""
    directory, sim = recorded
    segments = sorted(p.name for p in directory.glob("segment-*.arrows"))
    lines = (directory / COMMIT_LOG).read_text().splitlines()
    commits = [json.loads(line) for line in lines]
    assert len(segments) >= 3 and len(commits) > len(segments)
    assert sum(c["rows"] for c in commits) == 5 * 41  # every batch of 5 envs, the reset batch included
    assert sum(len(c["episodes"]["steps"]) for c in commits) == len(sim.completed)


def test_memory_does_not_grow_with_episode_length(tmp_path):
    """The ring holds whole batches: its size depends on the budget and the batch, not on max_steps."""
    sizes = []
    for max_steps in (10, 10_000):
        env = synthetic_description(num_envs=8, max_steps=max_steps, images=True)
        recorder = PackedRecorder(tmp_path / f"run{max_steps}", env, max_buffer_bytes=1 << 20)
        sizes.append(recorder.buffer_bytes)
        recorder.close()
    assert sizes[0] == sizes[1] <= 1 << 20


def test_budget_below_two_batches_is_refused_and_creates_nothing(tmp_path):
    """A budget that cannot hold 2 batches names the bytes needed; no directory is made."""
    env = synthetic_description(num_envs=8, max_steps=5, images=True)
    with pytest.raises(ValueError, match="needs room for 2; raise it to at least"):
        PackedRecorder(tmp_path / "run", env, max_buffer_bytes=1000)
    for bad in ({"compression": "deflate"}, {"segment_bytes": 0}, {"block_bytes": -1}):
        with pytest.raises(ValueError):
            PackedRecorder(tmp_path / "run", env, **bad)
    assert not (tmp_path / "run").exists()


def test_bad_batch_raises_and_commits_nothing(tmp_path):
    """A batch that breaks the step semantics is refused whole; recording then goes on unchanged."""
    env = synthetic_description(num_envs=3, max_steps=6)
    sim = SyntheticSim(env, seed=4)
    batches = make_batches(sim, 20)
    recorder = PackedRecorder(tmp_path / "run", env)
    recorder.append(*batches[0])
    observation, result = batches[1]
    broken = dict(observation, step_id=observation["step_id"] + 5)
    with pytest.raises(ValueError, match="step_id"):
        recorder.append(broken, result)
    for observation, result in batches[1:]:
        recorder.append(observation, result)
    recorder.close()
    assert episodes_by_id(tmp_path / "run").keys() == sim.completed.keys()


def test_write_error_surfaces_and_wakes_a_blocked_append(tmp_path, monkeypatch):
    """A failing write fails the run: a blocked append wakes with RuntimeError, the manifest says failed."""
    release = threading.Event()
    calls = []

    def failing(self, columns, episodes):
        calls.append(1)
        release.wait(10)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(PackedWriter, "write", failing)
    env = synthetic_description(num_envs=2, max_steps=3)
    batches = make_batches(SyntheticSim(env, seed=5, end_prob=0.5), 12)
    batch_bytes = 2 * (4 * 4 + 3 * 4 + 2 * 4 + 4 + 2)
    recorder = PackedRecorder(tmp_path / "run", env, max_buffer_bytes=2 * batch_bytes)
    outcome = []

    def feed():
        try:
            for observation, result in batches:
                recorder.append(observation, result)
        except RuntimeError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=feed)
    thread.start()
    time.sleep(0.3)
    assert thread.is_alive(), "the full ring should hold append back"
    release.set()
    thread.join(10)
    assert not thread.is_alive() and outcome and "No space left" in str(outcome[0])
    with pytest.raises(RuntimeError, match="No space left"):
        recorder.close()
    manifest = forge_gpu.formats.read_manifest(tmp_path / "run")
    assert manifest["status"] == "failed" and "No space left" in manifest["error"]
    assert manifest["completed_episodes"] == 0 and "unwritten_episodes" in manifest


def test_a_live_run_shows_only_committed_episodes(tmp_path):
    """While recording, readers see exactly the published episodes; a torn last log line is ignored."""
    env = synthetic_description(num_envs=3, max_steps=4)
    sim = SyntheticSim(env, seed=6, end_prob=0.4)
    batches = make_batches(sim, 25)
    recorder = PackedRecorder(tmp_path / "run", env)
    for observation, result in batches[:15]:
        recorder.append(observation, result)
    recorder.flush()
    live = episodes_by_id(tmp_path / "run")
    assert len(live) == recorder.completed_episodes >= 1
    with open(tmp_path / "run" / COMMIT_LOG, "ab") as log:  # a line being written: not yet published
        log.write(b'{"segment": 0, "offs')
    assert episodes_by_id(tmp_path / "run").keys() == live.keys()
    assert forge_gpu.formats.read_manifest(tmp_path / "run")["status"] == "recording"
    recorder.close()


def kill_after_write(run):
    """What a SIGKILL between a block's write and its commit line leaves: drop the log's last 2 lines,
    leave a torn line, and torn bytes after the last block."""
    log = run / COMMIT_LOG
    lines = log.read_bytes().split(b"\n")[:-1]
    log.write_bytes(b"\n".join(lines[:-2]) + b"\n" + lines[-1][:10])
    segment = sorted(run.glob("segment-*.arrows"))[-1]
    data = segment.read_bytes()
    segment.write_bytes(data[:-8] + b"\xff\xff\xff\xff\x10\x00\x00\x00torn")  # no end marker, a torn message
    manifest = json.loads((run / "run.json").read_text())
    manifest["status"] = "recording"
    (run / "run.json").write_text(json.dumps(manifest))


def test_repair_recovers_every_whole_block_and_is_idempotent(recorded, tmp_path):
    """After a kill between write and commit, repair publishes the whole blocks and cuts the torn bytes."""
    directory, _ = recorded
    run = tmp_path / "run"
    shutil.copytree(directory, run)
    kill_after_write(run)
    visible = episodes_by_id(run)
    original = episodes_by_id(directory)
    assert len(visible) < len(original)
    report = repair_run(run)
    assert report["recovered_episodes"] == len(original) - len(visible)
    assert_same_episodes(episodes_by_id(run), original)
    manifest = forge_gpu.formats.read_manifest(run)
    assert manifest["status"] == "closed" and manifest["completed_episodes"] == len(original)
    before = sorted((p.name, p.read_bytes()) for p in run.iterdir())
    assert repair_run(run)["recovered_episodes"] == 0
    assert sorted((p.name, p.read_bytes()) for p in run.iterdir()) == before
    import pyarrow as pa

    for segment in sorted(run.glob("segment-*.arrows")):  # every segment is a whole stream again
        pa.ipc.open_stream(pa.memory_map(str(segment))).read_all()


def test_repair_cuts_a_block_whose_body_is_torn(recorded, tmp_path):
    """A block whose message body was cut short (a disk that filled up mid-write) is cut off by repair; the
    published episodes stay and the segment is a whole stream again."""
    import pyarrow as pa

    directory, _ = recorded
    run = tmp_path / "run"
    shutil.copytree(directory, run)
    lines = (run / COMMIT_LOG).read_bytes().split(b"\n")[:-1]
    last = json.loads(lines[-1])
    (run / COMMIT_LOG).write_bytes(b"\n".join(lines[:-1]) + b"\n")
    segment = run / f"segment-{last['segment']:06d}.arrows"
    segment.write_bytes(segment.read_bytes()[: last["offset"] + last["length"] - 8])
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(dict(manifest, status="recording")))
    visible = episodes_by_id(run)
    assert repair_run(run)["recovered_episodes"] == 0
    assert_same_episodes(episodes_by_id(run), visible)
    rows = sum(json.loads(line)["rows"] for line in lines[:-1] if json.loads(line)["segment"] == last["segment"])
    if rows == 0:  # the torn block began its segment (the writer's blocks depend on timing): nothing is left of it
        assert not segment.exists()
    else:
        assert pa.ipc.open_stream(pa.memory_map(str(segment))).read_all().num_rows == rows


@pytest.mark.parametrize("compression", [("none", "none"), ("zstd", "deflate")])
def test_convert_both_ways_reads_back_bit_identical(recorded, tmp_path, compression):
    """packed -> npz -> packed: every episode reads back equal, bit for bit, in both directions."""
    directory, _ = recorded
    original = episodes_by_id(directory)
    convert_run(directory, tmp_path / "npz", to="npz", compression=compression[1])
    assert forge_gpu.formats.read_manifest(tmp_path / "npz")["schema_version"] == 1
    assert len(list((tmp_path / "npz").glob("env*.npz"))) == len(original)
    assert_same_episodes(episodes_by_id(tmp_path / "npz"), original)
    convert_run(tmp_path / "npz", tmp_path / "packed", to="packed", compression=compression[0])
    assert_same_episodes(episodes_by_id(tmp_path / "packed"), original)
    assert forge_gpu.formats.read_manifest(tmp_path / "packed")["converted_from"]["format"] == "npz"


def test_convert_refuses_bad_input_and_leaves_nothing(recorded, tmp_path):
    """Converting to an existing directory, to an unknown format, or a recording run is refused."""
    directory, _ = recorded
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError):
        convert_run(directory, tmp_path / "taken", to="npz")
    with pytest.raises(ValueError, match="to must be one of"):
        convert_run(directory, tmp_path / "out", to="parquet")
    with pytest.raises(ValueError, match="takes none, deflate"):
        convert_run(directory, tmp_path / "out", to="npz", compression="zstd")
    live = tmp_path / "live"
    shutil.copytree(directory, live)
    manifest = json.loads((live / "run.json").read_text())
    (live / "run.json").write_text(json.dumps(dict(manifest, status="recording")))
    with pytest.raises(ValueError, match="forge-gpu repair"):
        convert_run(live, tmp_path / "out", to="npz")
    assert not (tmp_path / "out").exists() and sorted(os.listdir(tmp_path)) == ["live", "taken"]


def windows_by_loop(directory, history: int, horizon: int) -> list[dict]:
    """The training windows of a run as docs/FORMAT-v1.md defines them, by a plain loop over its episodes: one per
    ``t`` in ``[history-1, T-horizon]``, the frames ``t-history+1 .. t`` and the actions ``t .. t+horizon-1``."""
    windows = []
    for episode in forge_gpu.reading.read_episodes(directory):
        for t in range(history - 1, episode.steps - horizon + 1):
            window = {f"obs/{name}": values[t - history + 1 : t + 1] for name, values in episode.obs.items()}
            window["action"] = episode.action[t : t + horizon]
            window.update(env_id=episode.env_id, episode_id=episode.episode_id, t=t, instruction=episode.instruction)
            windows.append(window)
    return windows


@pytest.mark.parametrize("history, horizon", [(1, 1), (2, 3), (3, 1)])
def test_windows_equal_a_loop_over_the_episodes_on_both_layouts(recorded, tmp_path, history, horizon):
    """Windows (a batch of all, and one by one) and action_windows give the windows of a plain loop over the
    episodes, in its order, for packed and npz runs."""
    directory, _ = recorded
    npz = tmp_path / "npz"
    convert_run(directory, npz, to="npz")
    for run in (directory, npz):
        expected = windows_by_loop(run, history, horizon)
        windows = Windows(run, history, horizon)
        assert len(windows) == len(expected) > 0
        batch = windows.batch(np.arange(len(windows)))
        walked = list(forge_gpu.reading.action_windows(run, history, horizon))
        assert len(walked) == len(expected)
        for i, window in enumerate(expected):
            assert set(walked[i]) == set(window) and set(batch) == set(window)
            for key, value in window.items():
                if isinstance(value, np.ndarray):
                    assert np.array_equal(batch[key][i], value) and np.array_equal(walked[i][key], value), key
                    assert walked[i][key].dtype == value.dtype, key
                else:
                    assert batch[key][i] == value and walked[i][key] == value, key
                    assert type(walked[i][key]) is type(value), key
        last = windows[-1]  # one window by index
        assert all(np.array_equal(last[k], v) if isinstance(v, np.ndarray) else last[k] == v for k, v in window.items())


def test_padded_windows_repeat_the_edges_and_flag_them(recorded):
    """pad=True gives a window per transition; frames before and actions after the episode are padding."""
    directory, _ = recorded
    history, horizon = 3, 4
    windows = Windows(directory, history, horizon, pad=True)
    episodes = list(forge_gpu.reading.read_episodes(directory))
    assert len(windows) == sum(e.steps for e in episodes)
    batch = windows.batch(np.arange(len(windows)))
    i = 0
    for episode in episodes:
        for t in range(episode.steps):
            frames = np.arange(t - history + 1, t + 1)
            steps = np.arange(t, t + horizon)
            assert np.array_equal(batch["obs/rgb"][i], episode.obs["rgb"][np.maximum(frames, 0)])
            assert np.array_equal(batch["action"][i], episode.action[np.minimum(steps, episode.steps - 1)])
            assert np.array_equal(batch["obs_is_pad"][i], frames < 0)
            assert np.array_equal(batch["action_is_pad"][i], steps >= episode.steps)
            i += 1


@pytest.mark.parametrize("history, horizon, pad", [(1, 1, False), (2, 3, False), (3, 4, True)])
def test_mapped_windows_equal_the_loaded_ones(recorded, history, horizon, pad):
    """mmap=True serves the same windows as the loaded table, from read-only views of the segment files."""
    directory, _ = recorded
    loaded = Windows(directory, history, horizon, pad=pad)
    mapped = Windows(directory, history, horizon, pad=pad, mmap=True)
    assert len(mapped) == len(loaded) > 0 and len(mapped._obs) > 1  # several blocks, across segments
    order = np.random.default_rng(0).permutation(len(loaded))
    mine, theirs = mapped.batch(order), loaded.batch(order)
    assert mine.keys() == theirs.keys()
    for key, value in theirs.items():
        assert key == "instruction" or (mine[key].dtype == value.dtype and np.array_equal(mine[key], value)), key
    assert mine["instruction"] == theirs["instruction"]
    for _, columns in mapped._obs:  # no block was copied into memory
        assert all(not c.flags.owndata and not c.flags.writeable for c in columns.values())


def test_mapped_windows_refuse_compressed_and_npz_runs(tmp_path):
    """mmap=True needs uncompressed packed runs: an lz4 run and an npz run are refused, naming the fix."""
    env = synthetic_description(num_envs=3, max_steps=5)
    batches = make_batches(SyntheticSim(env, seed=4), 20)
    record_packed(tmp_path / "lz4", env, batches, compression="lz4")
    record(tmp_path / "npz", env, batches)
    with pytest.raises(ValueError, match="lz4-compressed and cannot be memory-mapped.*convert"):
        Windows(tmp_path / "lz4", 2, 2, mmap=True)
    with pytest.raises(ValueError, match="mmap=True reads packed runs.*--to packed"):
        Windows(tmp_path / "npz", 2, 2, mmap=True)
    with pytest.raises(ValueError, match="mmap must be True or False"):
        Windows(tmp_path / "lz4", 2, 2, mmap="yes")
    assert len(Windows(tmp_path / "lz4", 2, 2)) == len(Windows(tmp_path / "npz", 2, 2)) > 0


def test_window_datasets_shuffle_globally_and_load_batches(recorded):
    """WindowMapDataset serves batches by index lists; WindowDataset's shuffle mixes episodes."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    directory, _ = recorded
    mapped = forge_gpu.reading.WindowMapDataset(directory, history=2, horizon=2)
    sampler = BatchSampler(RandomSampler(mapped, generator=torch.Generator().manual_seed(0)), 16, drop_last=False)
    batches = list(DataLoader(mapped, sampler=sampler, batch_size=None))
    assert sum(len(b["t"]) for b in batches) == len(mapped)
    assert batches[0]["obs/proprio"].shape == (16, 2, 3) and len(batches[0]["instruction"]) == 16
    assert mapped[0]["action"].shape == (2, 2)
    mmapped = forge_gpu.reading.WindowMapDataset(directory, history=2, horizon=2, mmap=True)
    indices = [int(i) for i in sampler.sampler][:16]
    assert all(torch.equal(mmapped[indices][k], mapped[indices][k]) for k in ("obs/rgb", "action", "t"))
    shuffled = list(forge_gpu.reading.WindowDataset(directory, history=2, horizon=2, shuffle=True, seed=1))
    first = {(int(w["env_id"]), int(w["episode_id"])) for w in shuffled[:10]}
    assert len(shuffled) == len(mapped) and len(first) >= 5  # in order, 10 windows span ~3 episodes


def test_a_standard_arrow_reader_opens_the_segments(recorded):
    """pyarrow alone, following docs/FORMAT.md, reads the same frames the reader returns."""
    directory, _ = recorded
    commits, table = standard_read(directory)
    proprio = table.column("obs/proprio").combine_chunks().flatten().to_numpy().reshape(len(table), -1)
    entry = commits[-1]["episodes"]
    first, stride, steps = entry["first_row"][0], entry["stride"][0], entry["steps"][0]
    episode = episodes_by_id(directory)[(entry["env_id"][0], entry["episode_id"][0])]
    assert np.array_equal(proprio[first : first + steps * stride : stride], episode.obs["proprio"])


@pytest.mark.parametrize("key, value", [("first_row", 2**63), ("steps", 2**63), ("stride", 2**62), ("env_id", 2**31)])
def test_commit_values_past_int64_are_value_errors(recorded, tmp_path, key, value):
    """An episode value in the commit log too large for int64 arithmetic is a ValueError naming the log."""
    directory, _ = recorded
    run = tmp_path / "run"
    shutil.copytree(directory, run)
    lines = (run / COMMIT_LOG).read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if json.loads(line)["episodes"]["steps"])
    commit = json.loads(lines[k])
    commit["episodes"][key][0] = value
    lines[k] = json.dumps(commit)
    (run / COMMIT_LOG).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"{COMMIT_LOG}:{k + 1}: episodes.{key}"):
        list(forge_gpu.reading.read_episodes(run))
