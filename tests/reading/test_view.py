"""forge-gpu view: an episode saved as an .rrd file holds, read back with Rerun's own reader, its frames, its series,
its instruction, its drawn values and its bodies' poses, each on the episode's own timeline."""

import sys

import numpy as np
import pytest
from helpers.synthetic import INSTRUCTION, synthetic_description

import forge_gpu
from forge_gpu.cli import main
from forge_gpu.recording import PackedRecorder

rr_chunk = pytest.importorskip("rerun.chunk", reason="rerun-sdk is the view extra: pip install 'forge-gpu[view]'")


@pytest.fixture(scope="module")
def run(synthetic_run):
    env = synthetic_description(num_envs=3, max_steps=8, images=True, state=True, params=True)
    directory, sim = synthetic_run(env, 30, seed=5, end_prob=0.25, recorder=PackedRecorder)
    return directory, sim.completed


def chunks(path) -> dict:
    """entity path -> (static columns, timelines, record batch rows) of every chunk, merged per entity."""
    out = {}
    for chunk in rr_chunk.RrdReader(path).stream().collect().stream():
        batch = chunk.to_record_batch()
        entry = out.setdefault(chunk.entity_path, {"static": {}, "timelines": set(), "columns": {}})
        for name in batch.schema.names:
            if name == "rerun.controls.RowId":
                continue
            if chunk.is_static:
                entry["static"][name] = batch.column(name).to_pylist()
            elif name in chunk.timeline_names:
                entry["timelines"].add(name)
                entry["columns"][name] = batch.column(name).to_pylist()
            else:
                entry["columns"][name] = batch.column(name).to_pylist()
    return out


def test_view_saves_an_episodes_frames_and_series(run, tmp_path):
    directory, completed = run
    key = sorted(completed)[1]
    save = tmp_path / "episode.rrd"
    assert main(["view", str(directory), "--episode", f"{key[0]}:{key[1]}", "--save", str(save)]) == 0
    members = completed[key]
    stem = f"env{key[0]:05d}-episode{key[1]:08d}"
    root = f"/episodes/{stem}"
    found = chunks(save)
    assert {e for e in found if e.startswith("/episodes/")} >= {f"{root}/{n}" for n in ("proprio", "action", "reward")}
    assert not any(e.startswith("/episodes/") and not e.startswith(root) for e in found)  # that episode only
    steps = len(members["reward"])
    rgb = found[f"{root}/world/camera/rgb"]
    assert rgb["timelines"] == {stem} and rgb["columns"][stem] == list(range(steps + 1))
    frames = np.concatenate([members["obs/rgb"], members["next/rgb"][-1:]])
    assert np.array_equal(np.asarray(rgb["columns"]["Image:buffer"], np.uint8).reshape(frames.shape), frames)
    depth = found[f"{root}/world/camera/depth"]["columns"]["DepthImage:buffer"]
    depths = np.concatenate([members["obs/depth"], members["next/depth"][-1:]])
    assert np.array_equal(np.asarray(depth, np.uint8).view(np.float32).reshape(depths.shape), depths)

    def scalars(name):
        return np.asarray(found[f"{root}/{name}"]["columns"]["Scalars:scalars"], np.float64)

    assert np.array_equal(scalars("reward").ravel(), members["reward"].astype(np.float64))
    assert np.array_equal(scalars("action"), members["action"].astype(np.float64))
    flags = np.stack([members["terminated"], members["truncated"]], axis=1)
    assert np.array_equal(scalars("flags"), flags.astype(np.float64))
    proprio = np.concatenate([members["obs/proprio"], members["next/proprio"][-1:]])
    assert np.array_equal(scalars("proprio"), proprio.astype(np.float64))
    assert found[f"{root}/instruction"]["static"]["TextDocument:text"] == [[INSTRUCTION]]
    (params,) = found[f"{root}/params"]["static"]["TextDocument:text"][0]
    assert f"| mass_scale | {float(members['params/mass_scale'])} |" in params
    body = found[f"{root}/world/bodies/body_1"]["columns"]
    body_q = members["state/body_q"][:, 1]
    assert np.allclose(np.asarray(body["Transform3D:translation"]).reshape(-1, 3), body_q[:, :3])
    assert np.allclose(np.asarray(body["Transform3D:quaternion"]).reshape(-1, 4), body_q[:, 3:])


def test_view_without_episodes_takes_the_first_ones(run, tmp_path):
    directory, completed = run
    result = forge_gpu.reading.view_run(directory, save=tmp_path / "first.rrd", limit=2)
    assert result["episodes"] == 2
    timelines = set().union(*(e["timelines"] for e in chunks(tmp_path / "first.rrd").values()))
    assert len(timelines) == 2 and all(t.startswith("env") for t in timelines)


def test_view_bad_input(run, tmp_path, capsys, monkeypatch):
    directory, _ = run
    assert main(["view", str(directory), "--episode", "9:99", "--save", str(tmp_path / "x.rrd")]) == 2
    assert "holds no published episode 9:99" in capsys.readouterr().err
    assert main(["view", str(directory), "--episode", "nine", "--save", str(tmp_path / "x.rrd")]) == 2
    assert "expected ENV:EPISODE" in capsys.readouterr().err
    assert not (tmp_path / "x.rrd").exists()
    monkeypatch.setitem(sys.modules, "rerun", None)  # as if the extra were not installed
    assert main(["view", str(directory), "--save", str(tmp_path / "x.rrd")]) == 1
    assert "pip install 'forge-gpu[view]'" in capsys.readouterr().err
