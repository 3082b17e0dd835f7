"""Scale-out through Ray: several workers, one run each, read back as one dataset."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("ray")

from helpers.synthetic import downgrade_packed_run, published

from forge_gpu._src.collect.distributed import split_episodes, worker_seed
from forge_gpu.cli import main
from forge_gpu.formats import read_manifest
from forge_gpu.reading import EpisodeReadOptions, action_windows, read_episodes

SMALL = ["collect", "cartpole", "--envs", "2", "--set", "max_steps=20", "--device", "cpu"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A dataset of 2 workers x 2 envs, 9 episodes in all, collected through the command line."""
    root = tmp_path_factory.mktemp("distributed") / "data"
    assert main([*SMALL, "--workers", "2", "--episodes", "9", "--seed", "3", "--out", str(root)]) == 0
    return root


def runs_of(root):
    return [root / entry["path"] for entry in json.loads((root / "dataset.json").read_text())["runs"]]


def test_split_and_seeds_are_documented_formulas():
    """Episode targets split as E // K plus one for the first E % K workers; worker k uses seed + k."""
    assert split_episodes(9, 2) == [5, 4] and split_episodes(10, 3) == [4, 3, 3] and split_episodes(3, 3) == [1] * 3
    assert [worker_seed(7, k) for k in range(3)] == [7, 8, 9]


def test_two_workers_write_two_closed_runs_and_a_dataset_manifest(dataset):
    """dataset.json lists worker-000 and worker-001, each a closed run with its seed and episode count."""
    manifest = json.loads((dataset / "dataset.json").read_text())
    assert manifest["schema_version"] == 1 and manifest["kind"] == "forge_gpu.dataset"
    assert [r["path"] for r in manifest["runs"]] == ["worker-000", "worker-001"]
    for k, (entry, target) in enumerate(zip(manifest["runs"], [5, 4], strict=True)):
        run = read_manifest(dataset / entry["path"])
        assert entry["worker"] == k and entry["status"] == "closed" and entry["device"] == "cpu" and not entry["error"]
        assert run["status"] == "closed" and run["run_id"] == entry["run_id"] and run["seed"] == 3 + k
        assert entry["episodes"] == run["completed_episodes"] >= target
    assert manifest["failed_workers"] == []
    assert not [p for p in dataset.iterdir() if p.name.endswith(".tmp")]


def test_dataset_reads_back_whole_run_by_run(dataset):
    """read_episodes over the root yields every episode of worker-000, then of worker-001, in file order."""
    whole = list(read_episodes(dataset))
    expected = [ep for run in runs_of(dataset) for ep in read_episodes(run)]
    assert [ep.path for ep in whole] == [ep.path for ep in expected] and len(whole) >= 9
    for got, want in zip(whole, expected, strict=True):
        np.testing.assert_array_equal(got.action, want.action)
        np.testing.assert_array_equal(got.obs["proprio"], want.obs["proprio"])


@pytest.mark.parametrize("num_shards", [1, 2, 3])
def test_shards_over_the_dataset_cover_every_episode_once(dataset, num_shards):
    """The k-th episode over the whole dataset goes to shard k % num_shards; shards are disjoint and complete."""
    order = [ep.path for ep in read_episodes(dataset, options=EpisodeReadOptions(observation_keys=["time"]))]
    assert len(set(order)) == len(order) > num_shards  # distinct episodes, some in every shard
    for shard in range(num_shards):
        got = [
            ep.path
            for ep in read_episodes(
                dataset, options=EpisodeReadOptions(observation_keys=["time"], shard_index=shard, num_shards=num_shards)
            )
        ]
        assert got == order[shard::num_shards]


def test_windows_take_the_instruction_of_their_own_run(dataset, tmp_path):
    """action_windows and WindowDataset over a dataset: every run's windows, each with its episode's instruction
    (here, as in a run older than per-episode instructions, its run's)."""
    root = tmp_path / "data"
    shutil.copytree(dataset, root)
    manifest_path = root / "worker-001" / "run.json"
    manifest = downgrade_packed_run(root / "worker-001", 2)  # its episodes take the run's instruction
    manifest["env_spec"]["instruction"] = "balance it, worker one"
    manifest_path.write_text(json.dumps(manifest))
    windows = list(action_windows(root, history=2, horizon=3, options=EpisodeReadOptions(observation_keys=["proprio"])))
    per_run = [
        list(action_windows(run, history=2, horizon=3, options=EpisodeReadOptions(observation_keys=["proprio"])))
        for run in runs_of(root)
    ]
    assert len(windows) == sum(len(w) for w in per_run) > 0
    assert {w["instruction"] for w in per_run[1]} == {"balance it, worker one"}
    assert [w["instruction"] for w in windows] == [w["instruction"] for run in per_run for w in run]

    pytest.importorskip("torch")
    from forge_gpu.reading import WindowDataset

    items = list(WindowDataset(root, history=2, horizon=3, observation_keys=["proprio"]))
    assert len(items) == len(windows) and items[-1]["instruction"] == "balance it, worker one"
    mapped = list(WindowDataset(root, history=2, horizon=3, observation_keys=["proprio"], mmap=True))
    assert len(mapped) == len(items)
    for mine, theirs in zip(mapped, items, strict=True):  # the runs' rows follow one another in the mapped table
        assert mine["instruction"] == theirs["instruction"] and int(mine["t"]) == int(theirs["t"])
        assert all(np.array_equal(mine[k], theirs[k]) for k in ("obs/proprio", "action", "env_id", "episode_id"))


def test_inspect_summarises_the_dataset_per_run_and_in_total(dataset, capsys):
    """forge-gpu inspect on a dataset root reports each run and the totals."""
    assert main(["inspect", str(dataset), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [os.path.basename(r["run"]) for r in report["runs"]] == ["worker-000", "worker-001"]
    assert report["total"]["episodes"] == sum(r["episodes"] for r in report["runs"]) >= 9
    assert main(["inspect", str(dataset)]) == 0
    text = capsys.readouterr().out
    assert "worker-000" in text and "worker-001" in text and "total" in text


def test_bad_dataset_manifest_is_an_error_naming_it(dataset, tmp_path):
    """A dataset.json whose run path leaves the root is refused with a ValueError naming the file."""
    root = tmp_path / "data"
    shutil.copytree(dataset, root)
    manifest = json.loads((root / "dataset.json").read_text())
    manifest["runs"][0]["path"] = "../elsewhere"
    (root / "dataset.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="dataset.json"):
        read_episodes(root)


@pytest.mark.parametrize("verbose", [True, False])
def test_a_worker_lets_warp_print_only_when_the_driver_is_verbose(verbose):
    """A worker built from a spec with verbose=True prints Warp's module loads; with False it stays quiet."""
    code = f"""
from forge_gpu._src.collect.distributed import WorkerSpec, _Worker
worker = _Worker(WorkerSpec(worker=0, task="cartpole", directory="unused", num_envs=2, seed=0, device="cpu",
                            verbose={verbose}))
worker.prepare()
assert worker._error is None, worker._error
worker._env.reset()
"""
    env = {k: v for k, v in os.environ.items() if k != "FORGE_GPU_VERBOSE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert ("load on device 'cpu'" in done.stdout + done.stderr) == verbose


def test_failing_worker_is_reported_and_the_others_close(tmp_path, monkeypatch, capsys):
    """One worker's policy raises mid-run: it is reported with its error, the other closes its run, exit 1."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("FORGE_GPU_TEST_FAIL_CLAIM", str(tmp_path / "claimed"))
    root = tmp_path / "data"
    policy = ["--policy", "helpers.torch_policies:fails_in_one_worker"]
    assert main([*SMALL, *policy, "--workers", "2", "--episodes", "6", "--out", str(root)]) == 1
    runs = json.loads((root / "dataset.json").read_text())["runs"]
    failed = [r for r in runs if r["status"] == "failed"]
    closed = [r for r in runs if r["status"] == "closed"]
    assert len(failed) == len(closed) == 1 and closed[0]["error"] is None
    assert "injected failure" in failed[0]["error"]
    assert f"worker {failed[0]['worker']} failed" in capsys.readouterr().err
    assert read_manifest(root / closed[0]["path"])["status"] == "closed"
    assert read_manifest(root / failed[0]["path"])["status"] != "recording"  # its manifest was closed
    assert len(list(read_episodes(root))) == sum(r["episodes"] for r in runs)


def test_sigint_stops_every_worker_cleanly(tmp_path):
    """Ctrl-C (SIGINT to the process group) mid-run: every manifest closed, episodes valid, exit 130."""
    root = tmp_path / "data"
    command = [sys.executable, "-m", "forge_gpu.cli", *SMALL, "--workers", "2", "--episodes", "1000000"]
    proc = subprocess.Popen(
        [*command, "--out", str(root)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        counts = []
        while time.monotonic() < deadline and proc.poll() is None:
            counts = [published(root / f"worker-00{k}") for k in range(2)]
            if all(counts):
                break
            time.sleep(0.5)
        assert counts and all(counts), "the workers published nothing within 120 s"
        os.killpg(proc.pid, signal.SIGINT)
        output = proc.communicate(timeout=120)[0].decode()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output
    runs = json.loads((root / "dataset.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["interrupted", "interrupted"]
    for entry in runs:
        manifest = read_manifest(root / entry["path"])
        assert manifest["status"] == "closed" and manifest["completed_episodes"] == entry["episodes"] >= 1
    assert len(list(read_episodes(root))) == sum(r["episodes"] for r in runs)


def test_without_ray_workers_is_a_usage_error(tmp_path, monkeypatch, capsys):
    """With ray not importable, --workers 2 exits 2, says how to install it, and creates nothing."""
    monkeypatch.setitem(sys.modules, "ray", None)
    root = tmp_path / "data"
    assert main([*SMALL, "--workers", "2", "--out", str(root)]) == 2
    assert "pip install 'forge-gpu[ray]'" in capsys.readouterr().err
    assert not root.exists()


def test_fewer_episodes_than_workers_is_a_usage_error(tmp_path, capsys):
    """--episodes below --workers exits 2 before Ray starts, and creates nothing."""
    root = tmp_path / "data"
    assert main([*SMALL, "--workers", "3", "--episodes", "2", "--out", str(root)]) == 2
    assert "fewer than --workers" in capsys.readouterr().err and not root.exists()
