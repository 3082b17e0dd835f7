"""Exports: LeRobot v3.0 checked against its rules with pyarrow and decoded with PyAV; robomimic read back with
h5py; both from packed and npz runs and from dataset roots; unclosed runs refused."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

from forge_gpu.cli import main
from forge_gpu.curation import run_statistics
from forge_gpu.export import export_lerobot, export_robomimic
from forge_gpu.reading import read_episodes
from forge_gpu.recording import NpzRecorder, PackedRecorder

SIZE = 16
#: Mean absolute error of decoded frames, in levels of 0..255, allowed per codec at its default CRF on the
#: smooth 16x16 test images. Measured: h264 2.5, av1 1.8; 1.7 of the h264 figure is the RGB -> YUV 4:2:0 -> RGB
#: conversion alone (chroma at half resolution), which no CRF removes.
MAE_BOUND = {"h264": 4.0, "av1": 6.0}


def smooth_images(n: int, step: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
    """[n, SIZE, SIZE, 3] uint8 gradients that move with the step and differ per env: what a codec sees."""
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    base = np.stack([x * 4 + 40, y * 4 + 60, np.full_like(x, 90)], axis=-1).astype(np.float64)
    shift = (step * 4 + env_ids * 20)[:, None, None, None]
    return (base[None] + shift).astype(np.uint8)  # 40..210: no wrap


def camera_run(directory, *, recorder=PackedRecorder, seed=1, num_envs=4, success=False, close=True, **kwargs):
    """A recorded run with a [16, 16, 3] camera of smooth images (and depth); returns the directory."""
    env = synthetic_description(num_envs=num_envs, max_steps=6, images=True)
    env.spec["observation"]["rgb"]["shape"] = [SIZE, SIZE, 3]
    env.spec["observation"]["depth"]["shape"] = [SIZE, SIZE]
    env.spec["has_success"] = success
    batches = make_batches(SyntheticSim(env, seed=seed), 30)
    for observation, _ in batches:
        observation["rgb"] = smooth_images(num_envs, observation["step_id"], observation["env_id"])
    if not close:
        rec = recorder(directory, env, **kwargs)
        for observation, result in batches:
            rec.append(observation, result)
        rec.flush()
        return directory, rec
    record(directory, env, batches, recorder=recorder, **kwargs)
    return directory


@pytest.fixture(scope="module")
def packed_run(tmp_path_factory):
    return camera_run(tmp_path_factory.mktemp("runs") / "packed", success=True)


def check_lerobot_v3(root, episodes, *, codec: str) -> float:
    """Check ``root`` against LeRobot v3.0's rules and against the source ``episodes`` (state and action
    bit-identical, frames decoded); return the mean absolute image error."""
    av = pytest.importorskip("av")
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    fps = info["fps"]
    assert fps == 20  # synthetic control_dt 0.05
    assert info["total_episodes"] == len(episodes)
    assert info["total_frames"] == sum(e.steps for e in episodes)
    assert info["total_tasks"] == 1 and info["splits"] == {"train": f"0:{len(episodes)}"}
    features = info["features"]
    assert features["observation.state"]["shape"] == [3] and features["action"]["shape"] == [2]
    assert features["observation.images.rgb"]["dtype"] == "video"
    assert features["observation.images.rgb"]["info"]["video.codec"] == codec
    assert "observation.images.depth" not in features  # left out, documented

    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert tasks.column("task").to_pylist() == ["push the red cube to the goal"]
    assert tasks.column("task_index").to_pylist() == [0]
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]

    meta = pa.concat_tables(
        pq.read_table(p) for p in sorted((root / "meta/episodes").glob("chunk-*/file-*.parquet"))
    ).to_pylist()
    assert [m["episode_index"] for m in meta] == list(range(len(episodes)))
    data_columns = [f for f, d in features.items() if d["dtype"] != "video"]
    row = 0
    errors, video_end = [], {}
    containers = {}
    for m, episode in zip(meta, episodes, strict=True):
        steps = episode.steps
        assert m["length"] == steps and m["tasks"] == ["push the red cube to the goal"]
        assert (m["dataset_from_index"], m["dataset_to_index"]) == (row, row + steps)
        path = root / info["data_path"].format(chunk_index=m["data/chunk_index"], file_index=m["data/file_index"])
        data = pq.ParquetFile(path)
        assert data.schema_arrow.names == data_columns
        # One row group per episode: find this episode's.
        groups = [data.read_row_group(g) for g in range(data.num_row_groups)]
        (table,) = [g for g in groups if g.column("episode_index")[0].as_py() == m["episode_index"]]
        assert set(table.column("episode_index").to_pylist()) == {m["episode_index"]}
        frame_index = table.column("frame_index").to_numpy()
        np.testing.assert_array_equal(frame_index, np.arange(steps))
        np.testing.assert_array_equal(table.column("timestamp").to_numpy(), (frame_index / fps).astype(np.float32))
        np.testing.assert_array_equal(table.column("index").to_numpy(), np.arange(row, row + steps))
        np.testing.assert_array_equal(table.column("task_index").to_numpy(), 0)
        state = np.stack(table.column("observation.state").to_numpy(zero_copy_only=False))
        action = np.stack(table.column("action").to_numpy(zero_copy_only=False))
        assert state.tobytes() == episode.obs["proprio"].tobytes()  # bit-identical
        assert action.tobytes() == episode.action.tobytes()
        assert table.column("next.reward").to_numpy().tobytes() == episode.reward.tobytes()
        done = table.column("next.done").to_numpy(zero_copy_only=False)
        np.testing.assert_array_equal(done, np.arange(steps) == steps - 1)
        np.testing.assert_array_equal(table.column("next.success").to_numpy(zero_copy_only=False), episode.terminated)

        key = "observation.images.rgb"
        video = root / info["video_path"].format(
            video_key=key, chunk_index=m[f"videos/{key}/chunk_index"], file_index=m[f"videos/{key}/file_index"]
        )
        start, stop = m[f"videos/{key}/from_timestamp"], m[f"videos/{key}/to_timestamp"]
        assert start == pytest.approx(video_end.get(video, 0.0))  # episodes follow each other in their file
        assert stop - start == pytest.approx(steps / fps)
        video_end[video] = stop
        if video not in containers:
            with av.open(str(video)) as container:
                containers[video] = [(f.time, f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
        decoded = [image for t, image in containers[video] if start - 1e-4 <= t < stop - 1e-4]
        assert len(decoded) == steps
        errors.append(np.abs(np.stack(decoded).astype(np.float64) - episode.obs["rgb"]).mean(axis=(1, 2, 3)))
        row += steps
    for video, end in video_end.items():
        assert len(containers[video]) == round(end * fps)  # nothing else in the file
    stats = json.loads((root / "meta/stats.json").read_text())
    assert {"observation.state", "action", "next.reward", "observation.images.rgb"} <= set(stats)
    assert np.asarray(stats["observation.images.rgb"]["mean"]).shape == (3, 1, 1)
    return float(np.concatenate(errors).mean())


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_lerobot_export_follows_v3_and_keeps_state_and_action_bit_identical(packed_run, tmp_path, codec):
    """A packed run exported to LeRobot v3.0 passes the format's rules; state, action and reward are
    bit-identical; decoded frames are within the stated mean absolute error; stats.json is the run's."""
    pytest.importorskip("av")
    report = export_lerobot(packed_run, tmp_path / "lerobot", codec=codec)
    episodes = list(read_episodes(packed_run))
    assert report["episodes"] == len(episodes) and report["left_out"] == ["depth"]
    mae = check_lerobot_v3(tmp_path / "lerobot", episodes, codec=codec)
    assert mae <= MAE_BOUND[codec], mae
    stats = json.loads((tmp_path / "lerobot/meta/stats.json").read_text())
    np.testing.assert_allclose(stats["observation.state"]["mean"], run_statistics(packed_run)["obs/proprio"]["mean"])
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_lerobot_export_of_an_npz_run_in_two_processes_splits_files(tmp_path):
    """A schema-1 run without stored statistics, exported by 2 processes with small file limits: several
    data and video files, every rule still holds, statistics computed while exporting."""
    pytest.importorskip("av")
    run = camera_run(tmp_path / "npz", recorder=NpzRecorder, success=True, statistics=False)
    progress = []
    report = export_lerobot(
        run, tmp_path / "lerobot", workers=2, data_file_mb=0.002, progress=lambda d, t: progress.append((d, t))
    )
    episodes = list(read_episodes(run))
    assert report["workers"] == 2 and report["files"] > 2
    assert report["statistics"] == "computed while exporting"
    assert progress[-1] == (sum(e.steps for e in episodes),) * 2
    check_lerobot_v3(tmp_path / "lerobot", episodes, codec="h264")


def test_lerobot_export_of_a_dataset_root_merges_its_runs(tmp_path):
    """forge-gpu export of a dataset root of two runs writes one dataset: episodes of both in dataset.json
    order, and the two runs' statistics merged."""
    pytest.importorskip("av")
    root = tmp_path / "dataset"
    root.mkdir()
    for k in range(2):
        camera_run(root / f"worker-{k:03d}", seed=k, success=True)
    runs = [{"path": f"worker-{k:03d}"} for k in range(2)]
    (root / "dataset.json").write_text(json.dumps({"schema_version": 1, "kind": "forge_gpu.dataset", "runs": runs}))
    assert main(["export", str(root), str(tmp_path / "lerobot"), "--to", "lerobot"]) == 0
    check_lerobot_v3(tmp_path / "lerobot", list(read_episodes(root)), codec="h264")
    stats = json.loads((tmp_path / "lerobot/meta/stats.json").read_text())
    counts = [run_statistics(root / r["path"])["action"]["count"] for r in runs]
    assert stats["action"]["count"] == [sum(counts)]


def test_an_unclosed_run_is_refused_and_nothing_is_left(tmp_path):
    """A run still recording is refused by both exports with a message naming repair; no output appears."""
    run, recorder = camera_run(tmp_path / "live", close=False)
    try:
        for export, out in ((export_lerobot, tmp_path / "out"), (export_robomimic, tmp_path / "out.hdf5")):
            with pytest.raises(ValueError, match="not closed.*repair"):
                export(run, out)
        assert main(["export", str(run), str(tmp_path / "out"), "--to", "lerobot"]) == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == ["live"]
    finally:
        recorder.close()
    with pytest.raises(FileExistsError):
        export_lerobot(run, tmp_path / "live")


@pytest.mark.parametrize("recorder", [PackedRecorder, NpzRecorder])
def test_robomimic_export_reads_back_episode_by_episode(tmp_path, recorder):
    """The robomimic file holds every episode as data/demo_N (obs, next_obs, actions, rewards, dones,
    num_samples) equal to the run's, chunked and gzip-compressed, with train/valid/successful masks,
    env_args and the run's statistics."""
    h5py = pytest.importorskip("h5py")
    run = camera_run(tmp_path / "run", recorder=recorder, success=True)
    out = tmp_path / "demo.hdf5"
    assert main(["export", str(run), str(out), "--to", "robomimic"]) == 0
    episodes = list(read_episodes(run))
    with h5py.File(out, "r") as f:
        data = f["data"]
        assert len(data) == len(episodes) and data.attrs["total"] == sum(e.steps for e in episodes)
        env_args = json.loads(data.attrs["env_args"])
        assert env_args["env_name"] == "forge_gpu/synthetic_push" and isinstance(env_args["env_kwargs"], dict)
        for n, episode in enumerate(episodes):
            demo = data[f"demo_{n}"]
            assert demo.attrs["num_samples"] == episode.steps
            assert (demo.attrs["forge_gpu_env_id"], demo.attrs["forge_gpu_episode_id"]) == (
                episode.env_id,
                episode.episode_id,
            )
            assert sorted(demo["obs"]) == ["depth", "proprio", "rgb"]
            for field in ("proprio", "rgb", "depth"):
                np.testing.assert_array_equal(demo["obs"][field][()], episode.obs[field])
                np.testing.assert_array_equal(demo["next_obs"][field][()], episode.next[field])
            np.testing.assert_array_equal(demo["actions"][()], episode.action)
            np.testing.assert_array_equal(demo["rewards"][()], episode.reward)
            np.testing.assert_array_equal(demo["dones"][()], np.arange(episode.steps) == episode.steps - 1)
            assert demo["obs/rgb"].chunks is not None and demo["obs/rgb"].compression == "gzip"
        train = {n.decode() for n in f["mask/train"][()]}
        valid = {n.decode() for n in f["mask/valid"][()]}
        assert not train & valid and train | valid == set(data) and len(valid) == round(0.1 * len(episodes))
        successful = {n.decode() for n in f["mask/successful"][()]}
        assert successful == {f"demo_{n}" for n, e in enumerate(episodes) if e.terminated[-1]}
        stats = run_statistics(run)
        np.testing.assert_array_equal(f["forge_gpu/stats/obs.proprio/mean"][()], stats["obs/proprio"]["mean"])


def test_readme_training_example_runs_on_an_export(tmp_path):
    """docs/reading.md's Python block that trains from a LeRobot export (pyarrow, PyAV, torch) runs as written."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("av")
    pytest.importorskip("torch")
    page = (Path(__file__).resolve().parents[2] / "docs" / "reading.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if 'root = "runs/reach-lerobot"' in b]
    run = camera_run(tmp_path / "runs" / "reach-demo")
    export_lerobot(run, tmp_path / "runs" / "reach-lerobot")
    (tmp_path / "example.py").write_text(block)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    episodes = len(list(read_episodes(run)))
    assert done.stdout.startswith(f"{episodes} episodes, ")


def test_lerobot_export_without_camera_writes_one_dim_action_as_a_scalar(tmp_path):
    """A run without camera exports with no video (video_path null); an action of shape [1] is a float32
    column, as LeRobot reads shape (1,) features, and equals the recorded action bit for bit."""
    pytest.importorskip("av")
    env = synthetic_description(num_envs=3, max_steps=5, action_dim=1)
    record(tmp_path / "run", env, make_batches(SyntheticSim(env, seed=5), 20), recorder=PackedRecorder)
    export_lerobot(tmp_path / "run", tmp_path / "lerobot")
    info = json.loads((tmp_path / "lerobot/meta/info.json").read_text())
    assert info["video_path"] is None and not (tmp_path / "lerobot/videos").exists()
    assert info["features"]["action"]["shape"] == [1]
    table = pq.read_table(tmp_path / "lerobot/data/chunk-000/file-000.parquet")
    assert table.schema.field("action").type == pa.float32()
    expected = np.concatenate([e.action[:, 0] for e in read_episodes(tmp_path / "run")])
    assert table.column("action").to_numpy().tobytes() == expected.tobytes()


def object_run(directory, *, recorder=PackedRecorder):
    """A run without camera whose spec has push's object and goal fields beside proprio, and a scalar one."""
    env = synthetic_description(num_envs=3, max_steps=5, action_dim=4)
    observation = env.spec["observation"]
    observation["cube_pose"] = {"shape": [7], "dtype": "float32"}
    observation["cube_velocity"] = {"shape": [6], "dtype": "float32"}
    observation["goal_position"] = {"shape": [3], "dtype": "float32"}
    observation["contact"] = {"shape": [], "dtype": "float32"}
    record(directory, env, make_batches(SyntheticSim(env, seed=8), 24), recorder=recorder)
    return directory


def environment_columns(root) -> tuple[dict, np.ndarray, np.ndarray]:
    """info.json's features, and the data files' observation.state and observation.environment_state columns."""
    info = json.loads((root / "meta/info.json").read_text())
    tables = [pq.read_table(p) for p in sorted((root / "data").glob("chunk-*/file-*.parquet"))]
    table = pa.concat_tables(tables)
    columns = [np.stack(table.column(n).to_numpy(zero_copy_only=False)) for n in ("observation.state", ENV_STATE)]
    return info["features"], *columns


ENV_STATE = "observation.environment_state"


@pytest.mark.parametrize("recorder", [PackedRecorder, NpzRecorder])
def test_lerobot_export_writes_the_object_and_goal_state_as_environment_state(tmp_path, recorder):
    """Every vector observation field but proprio goes, in the spec's order, to observation.environment_state: bit for
    bit the episodes' fields concatenated, one name per channel in info.json, its statistics the fields' in order."""
    pytest.importorskip("av")
    run = object_run(tmp_path / "run", recorder=recorder)
    report = export_lerobot(run, tmp_path / "lerobot")
    assert report["environment_state"] == ["cube_pose", "cube_velocity", "goal_position", "contact"]
    features, state, environment = environment_columns(tmp_path / "lerobot")
    names = [f"cube_pose_{i}" for i in range(7)] + [f"cube_velocity_{i}" for i in range(6)]
    names += [f"goal_position_{i}" for i in range(3)] + ["contact"]
    assert features[ENV_STATE] == {"dtype": "float32", "shape": [17], "names": names, "fps": 20}
    assert list(features)[:3] == ["observation.state", ENV_STATE, "action"]
    episodes = list(read_episodes(run))
    fields = ("cube_pose", "cube_velocity", "goal_position")
    expected = np.concatenate(
        [np.concatenate([*(e.obs[f] for f in fields), e.obs["contact"][:, None]], axis=1) for e in episodes]
    )
    assert environment.dtype == np.float32 and environment.tobytes() == expected.tobytes()
    assert state.tobytes() == np.concatenate([e.obs["proprio"] for e in episodes]).tobytes()
    stats = json.loads((tmp_path / "lerobot/meta/stats.json").read_text())
    recorded = run_statistics(run)
    for figure in ("mean", "std", "min", "max"):
        want = np.concatenate([recorded[f"obs/{f}"][figure] for f in (*fields, "contact")])
        np.testing.assert_array_equal(stats[ENV_STATE][figure], want)
    assert stats[ENV_STATE]["count"] == [recorded["obs/cube_pose"]["count"]]


def test_lerobot_export_environment_state_follows_the_list_given(tmp_path, capsys):
    """environment_state (--environment-state) chooses the fields and their order; [] leaves the feature out; a
    field that is not a vector field other than proprio is refused in one line naming it and the allowed ones."""
    pytest.importorskip("av")
    run = object_run(tmp_path / "run")
    export_lerobot(run, tmp_path / "goal-first", environment_state=["goal_position", "cube_pose"])
    features, _, environment = environment_columns(tmp_path / "goal-first")
    assert features[ENV_STATE]["names"][:4] == ["goal_position_0", "goal_position_1", "goal_position_2", "cube_pose_0"]
    episodes = list(read_episodes(run))
    expected = np.concatenate([np.concatenate([e.obs["goal_position"], e.obs["cube_pose"]], axis=1) for e in episodes])
    assert environment.tobytes() == expected.tobytes()
    stats = json.loads((tmp_path / "goal-first/meta/stats.json").read_text())
    assert len(stats[ENV_STATE]["mean"]) == 10

    export_lerobot(run, tmp_path / "none", environment_state=[])
    info = json.loads((tmp_path / "none/meta/info.json").read_text())
    assert ENV_STATE not in info["features"]
    assert ENV_STATE not in json.loads((tmp_path / "none/meta/stats.json").read_text())
    assert ENV_STATE not in pq.read_table(tmp_path / "none/data/chunk-000/file-000.parquet").column_names

    for bad, message in [
        (["proprio"], "environment_state field 'proprio' is not a vector observation field of .* other than 'proprio'"),
        (["time"], "allowed: cube_pose, cube_velocity, goal_position, contact"),
        (["cube_pose", "cube_pose"], "names a field twice"),
        ("cube_pose", "must be a list of observation fields"),
    ]:
        with pytest.raises(ValueError, match=message):
            export_lerobot(run, tmp_path / "bad", environment_state=bad)
        assert not (tmp_path / "bad").exists()
    out = tmp_path / "cli"
    assert main(["export", str(run), str(out), "--to", "lerobot", "--environment-state", "goal_position"]) == 0
    assert json.loads((out / "meta/info.json").read_text())["features"][ENV_STATE]["shape"] == [3]
    code = main(["export", str(run), str(tmp_path / "cli-bad"), "--to", "lerobot", "--environment-state", "rgb"])
    assert code == 1 and "environment_state field 'rgb'" in capsys.readouterr().err
    code = main(["export", str(run), str(tmp_path / "x.hdf5"), "--to", "robomimic", "--environment-state", "cube_pose"])
    assert code == 2 and "--environment-state apply to --to lerobot only" in capsys.readouterr().err
