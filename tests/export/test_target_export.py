"""Exports of a labelled run (``collect --label expert``): ``target`` (``--target``) writes a label field as the
dataset's action, LeRobot's default environment state leaves label fields out, and a target that is not a label field
is refused in one line before anything is written. On a synthetic packed run whose spec marks a label field."""

import dataclasses
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
from forge_gpu.recording import PackedRecorder

LABEL = "expert_action"
ENV_STATE = "observation.environment_state"


@pytest.fixture(scope="module")
def labelled_run(tmp_path_factory):
    """push's object fields beside proprio, and the label field ``expert_action`` [4] marked in ``labels``."""
    env = synthetic_description(num_envs=3, max_steps=5, action_dim=4)
    spec = dict(env.spec)
    spec["observation"] = {
        **spec["observation"],
        "cube_pose": {"shape": [7], "dtype": "float32"},
        LABEL: {"shape": [4], "dtype": "float32"},
    }
    spec["labels"] = {LABEL: "expert"}
    env = dataclasses.replace(env, spec=spec)
    directory = tmp_path_factory.mktemp("labelled") / "run"
    record(directory, env, make_batches(SyntheticSim(env, seed=9), 20), recorder=PackedRecorder)
    return directory


def _table(root) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted((root / "data").glob("chunk-*/file-*.parquet"))])


def test_lerobot_export_with_a_label_target_writes_the_label_as_action(labelled_run, tmp_path):
    pytest.importorskip("av")
    episodes = list(read_episodes(labelled_run))
    report = export_lerobot(labelled_run, tmp_path / "label", target=LABEL)
    assert report["target"] == LABEL and report["environment_state"] == ["cube_pose"]  # the label is no input
    table = _table(tmp_path / "label")
    action = np.stack(table.column("action").to_numpy(zero_copy_only=False))
    labels = np.concatenate([e.obs[LABEL] for e in episodes])  # frames 0..T-1: each transition's first frame
    assert action.dtype == np.float32 and action.tobytes() == labels.tobytes()
    environment = np.stack(table.column(ENV_STATE).to_numpy(zero_copy_only=False))
    assert environment.tobytes() == np.concatenate([e.obs["cube_pose"] for e in episodes]).tobytes()
    stats = json.loads((tmp_path / "label/meta/stats.json").read_text())
    np.testing.assert_array_equal(stats["action"]["mean"], run_statistics(labelled_run)[f"obs/{LABEL}"]["mean"])

    export_lerobot(labelled_run, tmp_path / "plain")  # the default: the executed actions
    plain = np.stack(_table(tmp_path / "plain").column("action").to_numpy(zero_copy_only=False))
    assert plain.tobytes() == np.concatenate([e.action for e in episodes]).tobytes()
    info = json.loads((tmp_path / "plain/meta/info.json").read_text())
    assert info["features"][ENV_STATE]["shape"] == [7]
    with pytest.raises(ValueError, match=r"environment_state field 'expert_action' .* allowed: cube_pose$"):
        export_lerobot(labelled_run, tmp_path / "leak", environment_state=[LABEL])
    assert not (tmp_path / "leak").exists()


def test_robomimic_export_with_a_label_target_writes_the_label_as_actions(labelled_run, tmp_path):
    h5py = pytest.importorskip("h5py")
    episodes = list(read_episodes(labelled_run))
    export_robomimic(labelled_run, tmp_path / "label.hdf5", target=LABEL)
    with h5py.File(tmp_path / "label.hdf5", "r") as f:
        assert f["data"].attrs["forge_gpu_target"] == LABEL
        for number, episode in enumerate(episodes):
            demo = f[f"data/demo_{number}"]
            assert demo["actions"][()].tobytes() == episode.obs[LABEL].tobytes()
            assert demo["obs/proprio"][()].tobytes() == episode.obs["proprio"].tobytes()


def test_a_bad_target_is_refused_in_one_line_and_nothing_is_written(labelled_run, tmp_path, capsys):
    unlabelled = tmp_path / "unlabelled"
    env = synthetic_description(num_envs=2, max_steps=4)
    record(unlabelled, env, make_batches(SyntheticSim(env, seed=2), 10), recorder=PackedRecorder)
    for run, target in ((unlabelled, LABEL), (labelled_run, "cube_pose")):
        with pytest.raises(ValueError, match=r"run.json: target .* is not a label field .*proprio"):
            export_robomimic(run, tmp_path / "bad.hdf5", target=target)
        with pytest.raises(ValueError, match="is not a label field"):
            export_lerobot(run, tmp_path / "bad", target=target)
        for to, out in (("robomimic", tmp_path / "cli.hdf5"), ("lerobot", tmp_path / "cli")):
            assert main(["export", str(run), str(out), "--to", to, "--target", target]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"--target {target}: " in err and "is not a label field" in err
            assert not out.exists()
    assert not (tmp_path / "bad.hdf5").exists() and not (tmp_path / "bad").exists()
    out = tmp_path / "cli-label.hdf5"
    assert main(["export", str(labelled_run), str(out), "--to", "robomimic", "--target", LABEL]) == 0
