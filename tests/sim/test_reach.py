"""The reach task (a task file, ``configs/reach.toml``): RGB-D observations, camera calibration, determinism, the IK
expert, recording."""

import json

import numpy as np
import pytest
from helpers.envtools import DEVICES, assert_graph, rollout

import forge_gpu
from forge_gpu.formats import read_manifest
from forge_gpu.reading import read_episodes
from forge_gpu.recording import collect

SMALL = {"params.image_size": 32}


def red_mask(rgb):
    """Pixels of the red target: red well above green and blue, [..., H, W] bool."""
    c = rgb.astype(np.int32)
    return (c[..., 0] > 2 * c[..., 1] + 30) & (c[..., 0] > 2 * c[..., 2] + 30)


def project(calibration, points):
    """Pixel coordinates (u, v) and camera depth z of world points [K, 3] through the recorded calibration."""
    camera = calibration["cameras"]["front"]
    k, pose = camera["intrinsics"], np.asarray(camera["camera_to_world"])
    local = (np.asarray(points) - pose[:3, 3]) @ pose[:3, :3]  # world -> camera: R^T (p - t)
    u = k["fx"] * local[:, 0] / local[:, 2] + k["cx"]
    v = k["fy"] * local[:, 1] / local[:, 2] + k["cy"]
    return u, v, local[:, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_shapes_dtypes_and_spec(device):
    """rgb is uint8 [N, H, W, 3], depth float32 [N, H, W] in metres, and the spec and calibration say so."""
    env = forge_gpu.sim.make("reach", num_envs=3, device=device)
    frames = rollout(env, forge_gpu.sim.make_policy("random", env), 2)
    for r in frames:
        obs = r.observation
        assert set(obs) == set(env.spec["observation"])
        for name, desc in env.spec["observation"].items():
            assert obs[name].shape == (3, *desc["shape"]) and obs[name].dtype == np.dtype(desc["dtype"])
        assert obs["rgb"].shape == (3, 64, 64, 3) and obs["depth"].shape == (3, 64, 64)
        assert np.isfinite(obs["depth"]).all() and (obs["depth"] >= 0).all()
        # Not blank: the table, the arm and the background differ, and the target shows in red.
        assert len(np.unique(obs["rgb"].reshape(-1, 3), axis=0)) > 10
        assert (obs["depth"] > 0).mean() > 0.3
        assert red_mask(obs["rgb"]).sum(axis=(1, 2)).min() > 0
    assert env.spec["action_shape"] == [4] and env.spec["has_success"] is True
    assert env.spec["instruction"] == "move the gripper to the red target"
    json.dumps(env.calibration)  # JSON-serializable as it is
    k = env.calibration["cameras"]["front"]["intrinsics"]
    assert (k["model"], k["width"], k["height"]) == ("pinhole", 64, 64)
    # The proprio carries the target; it lies in the sampled workspace.
    target = frames[0].observation["proprio"][:, 11:14]
    radius = np.hypot(target[:, 0], target[:, 1])
    p = env.config.params
    assert (radius >= p.target_radius[0] - 1e-5).all() and (radius <= p.target_radius[1] + 1e-5).all()


@pytest.mark.parametrize("device", DEVICES)
def test_calibration_projects_target_onto_its_pixels(device):
    """The target's world position, projected with the recorded calibration, lands on its red blob and depth."""
    env = forge_gpu.sim.make("reach", num_envs=4, device=device, seed=3)
    frames = rollout(env, forge_gpu.sim.make_policy("random", env), 3)
    radius = env.config.params.target_radius_m
    fx = env.calibration["cameras"]["front"]["intrinsics"]["fx"]
    checked = 0
    for r in frames:
        obs = r.observation
        u, v, z = project(env.calibration, obs["proprio"][:, 11:14])
        for i in range(env.num_envs):
            mask = red_mask(obs["rgb"][i])
            # Only a fully visible target has its centroid at the projected centre (the arm may cover it).
            if mask.sum() < 0.8 * np.pi * (fx * radius / z[i]) ** 2:
                continue
            rows, cols = np.nonzero(mask)
            assert abs(cols.mean() - u[i]) < 1.0 and abs(rows.mean() - v[i]) < 1.0
            depth = obs["depth"][i, int(round(v[i])), int(round(u[i]))]
            assert z[i] - radius - 0.01 <= depth <= z[i] + 0.01
            checked += 1
    assert checked >= 8


def test_image_size_128_and_unsupported_sizes():
    """128 x 128 renders; a size outside 32, 64, 128, 256 is refused naming the value and the allowed ones."""
    env = forge_gpu.sim.make("reach", num_envs=1, device="cpu", **{"params.image_size": 128})
    obs = env.reset().numpy().observation
    assert obs["rgb"].shape == (1, 128, 128, 3) and obs["depth"].shape == (1, 128, 128)
    assert env.spec["observation"]["rgb"]["shape"] == [128, 128, 3]
    assert red_mask(obs["rgb"]).sum() > 0
    assert env.calibration["cameras"]["front"]["intrinsics"]["cx"] == 63.5
    for bad in (100, 0, 512):
        with pytest.raises(ValueError, match=rf"image_size = {bad}: allowed values are 32, 64, 128, 256"):
            forge_gpu.sim.make("reach", num_envs=1, device="cpu", **{"params.image_size": bad})


@pytest.mark.parametrize("device", DEVICES)
def test_determinism_and_independence_of_env_count(device):
    """Same seed, same frames (images included); env i's frames do not depend on how many envs run."""
    a = forge_gpu.sim.make("reach", num_envs=2, device=device, seed=7, **SMALL)
    b = forge_gpu.sim.make("reach", num_envs=3, device=device, seed=7, **SMALL)
    fa = rollout(a, forge_gpu.sim.make_policy("random", a), 4)
    fb = rollout(b, forge_gpu.sim.make_policy("random", b), 4)
    for x, y in zip(fa, fb, strict=True):
        for name in ("proprio", "rgb", "depth"):
            np.testing.assert_array_equal(x.observation[name], y.observation[name][:2])
    c = forge_gpu.sim.make("reach", num_envs=2, device=device, seed=8, **SMALL)
    assert not np.array_equal(c.reset().numpy().observation["proprio"], fa[0].observation["proprio"])


@pytest.mark.parametrize("device", DEVICES)
def test_rendering_inside_the_captured_step_graph(device):
    """The replayed step graph renders the same frames as eager stepping, across auto-resets."""

    def frames(capture_graph):
        env = forge_gpu.sim.make(
            "reach", num_envs=3, device=device, seed=2, max_steps=4, capture_graph=capture_graph, **SMALL
        )
        out = rollout(env, forge_gpu.sim.make_policy("random", env), 10)
        if capture_graph:
            assert_graph(env)
        else:
            assert env.step_mode == "eager: capture_graph = false in the config"
        return out

    replayed, eager = frames(True), frames(False)
    assert (replayed[-1].observation["episode_id"] == 2).all()
    for x, y in zip(replayed, eager, strict=True):
        for name in ("proprio", "rgb", "depth"):
            np.testing.assert_array_equal(x.observation[name], y.observation[name])
    assert len({f.observation["rgb"].tobytes() for f in replayed}) == len(replayed)


def test_expert_reaches_the_target():
    """The IK expert ends at least 90% of 40 fixed-seed episodes within tolerance (rendering off: same physics)."""
    env = forge_gpu.sim.make("reach", num_envs=20, device="cpu", seed=11, **{"params.render": False})
    policy = forge_gpu.sim.make_policy("expert", env)
    env.reset()
    ended = np.zeros(env.num_envs, np.int64)
    successes = 0
    for _ in range(2 * env.config.max_steps + 2):
        r = env.step(policy(env.observation)).numpy()
        done = r.info["active"] & (r.terminated | r.truncated) & (ended < 2)
        successes += int(r.terminated[done].sum())
        ended += done
        if (ended == 2).all():
            break
    assert ended.sum() == 40
    assert successes >= 36, f"expert succeeded in {successes} of 40 episodes"
    # Success is within tolerance of the target, as proprio shows.
    tol = env.config.params.tolerance
    last = r.observation["proprio"]
    hit = r.terminated & r.info["active"]
    assert (np.linalg.norm(last[hit, 8:11] - last[hit, 11:14], axis=1) <= tol + 1e-6).all()


def test_collection_reads_back_with_images(tmp_path):
    """An expert collection reads back through read_episodes with rgb equal to the direct frames and depth within
    the default codec's stated bound."""
    overrides = {**SMALL, "max_steps": 30}
    env = forge_gpu.sim.make("reach", num_envs=2, device="cpu", seed=5, **overrides)
    summary = collect(env, forge_gpu.sim.make_policy("expert", env), str(tmp_path / "run"), episodes=2)
    episodes = list(read_episodes(tmp_path / "run"))
    assert summary.status == "closed" and len(episodes) == summary.episodes >= 2
    manifest = read_manifest(tmp_path / "run")
    assert manifest["calibration"] == json.loads(json.dumps(env.calibration))
    assert manifest["env_spec"]["observation"]["rgb"] == {"shape": [32, 32, 3], "dtype": "uint8"}

    direct = forge_gpu.sim.make("reach", num_envs=2, device="cpu", seed=5, **overrides)
    frames = rollout(direct, forge_gpu.sim.make_policy("expert", direct), 31)
    for ep in episodes:
        assert ep.obs["rgb"].dtype == np.uint8 and ep.obs["rgb"].shape[1:] == (32, 32, 3)
        assert ep.obs["depth"].dtype == np.float32 and ep.obs["depth"].shape[1:] == (32, 32)
        if ep.episode_id != 0:
            continue  # the direct rollout covers each env's first episode
        steps = len(ep.action)
        for name in ("rgb", "depth", "proprio"):
            want = np.stack([f.observation[name][ep.env_id] for f in frames[: steps + 1]])
            got = np.concatenate([ep.obs[name], ep.next[name][-1:]])
            if name == "depth":  # the default codec quantizes depth to a 10 um step: within 5 um, 0 kept
                assert (
                    np.abs(got - want).max() <= 5e-6 + np.spacing(np.float32(want.max()))
                    and (got[want == 0] == 0).all()
                )
            else:
                np.testing.assert_array_equal(got, want)
