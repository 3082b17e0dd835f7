"""The Minari export (export/minari.py), read back by the real ``minari``."""

import json

import numpy as np
import pytest
from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

from forge_gpu.cli import main
from forge_gpu.export import export_minari
from forge_gpu.reading import read_episodes
from forge_gpu.recording import PackedRecorder


def _run(directory):
    env = synthetic_description(num_envs=3, max_steps=6, images=True, params=True)
    record(directory, env, make_batches(SyntheticSim(env, seed=2), 25), recorder=PackedRecorder)
    return directory


def test_minari_reads_back_the_run(tmp_path, monkeypatch):
    minari = pytest.importorskip("minari", reason="minari is not installed: pip install 'forge-gpu[export]'")
    run = _run(tmp_path / "run")
    root = tmp_path / "minari"
    out = root / "forge-gpu" / "synthetic-v0"
    assert main(["export", str(run), str(out), "--to", "minari"]) == 0
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    dataset = minari.load_dataset("forge-gpu/synthetic-v0")
    episodes = list(read_episodes(run))
    assert len(episodes) > 3 and dataset.total_episodes == len(episodes)
    assert dataset.total_steps == sum(e.steps for e in episodes)
    assert set(dataset.observation_space.spaces) == {"proprio", "rgb", "depth"}
    assert dataset.action_space.shape == (2,)
    assert dataset.spec.env_spec is None  # no registered gymnasium id: see metadata["forge_gpu"]
    meta = dataset.storage.metadata["forge_gpu"]
    assert meta["task"] == "synthetic_push" and meta["env_spec"]["action_shape"] == [2]
    assert meta["config"]["max_steps"] == 6
    saw_params = False
    for expected, got in zip(episodes, dataset.iterate_episodes(), strict=True):
        t = expected.steps
        assert len(got) == t
        for field in ("proprio", "rgb", "depth"):
            np.testing.assert_array_equal(got.observations[field][:t], expected.obs[field])
            np.testing.assert_array_equal(got.observations[field][t], expected.next[field][-1])
            np.testing.assert_array_equal(got.observations[field][1:], expected.next[field])
        np.testing.assert_array_equal(got.actions, expected.action)
        np.testing.assert_array_equal(got.rewards, expected.reward)
        np.testing.assert_array_equal(got.terminations, expected.terminated)
        np.testing.assert_array_equal(got.truncations, expected.truncated)
        assert {x.decode() for x in got.infos["instruction"]} == {expected.instruction}
        np.testing.assert_array_equal(got.infos["env_id"], np.full(t + 1, expected.env_id))
        np.testing.assert_array_equal(got.infos["episode_id"], np.full(t + 1, expected.episode_id))
        for name, value in expected.params.items():
            np.testing.assert_array_equal(got.infos["params"][name], np.repeat(np.asarray(value)[None], t + 1, 0))
            saw_params = True
    assert saw_params
    json.dumps(dataset.storage.metadata["forge_gpu"])  # plain JSON


def test_bad_directory_name_and_existing_output_are_refused(tmp_path):
    pytest.importorskip("minari", reason="minari is not installed: pip install 'forge-gpu[export]'")
    run = _run(tmp_path / "run")
    with pytest.raises(ValueError, match="named NAME-vN"):
        export_minari(run, tmp_path / "dataset")
    assert not (tmp_path / "dataset").exists()
    (tmp_path / "taken-v0").mkdir()
    with pytest.raises(FileExistsError):
        export_minari(run, tmp_path / "taken-v0")
    assert main(["export", str(run), str(tmp_path / "plain"), "--to", "minari"]) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
