"""Collection end to end: what the recorder publishes is exactly what the env produced."""

import threading

import numpy as np
import pytest
from helpers.blocking import wait_until_blocked
from helpers.envtools import DEVICES

import forge_gpu
from forge_gpu.curation import compute_statistics, run_statistics
from forge_gpu.formats import read_manifest
from forge_gpu.reading import read_episodes
from forge_gpu.recording import RecordingOptions, collect

HANG = 120.0  # seconds; only bounds a hang (the first collect compiles the kernels), never asserted


def expected_episodes(task, num_envs, seed, calls, *, device="cpu", **overrides):
    """Roll the env directly and cut its host results into episodes: (env, episode) -> arrays."""
    env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, seed=seed, **overrides)
    policy = forge_gpu.sim.make_policy("random", env)
    frames = [env.reset().numpy()]
    for _ in range(calls):
        frames.append(env.step(policy(env.observation)).numpy())
    episodes, start = {}, {i: 0 for i in range(num_envs)}
    for t in range(1, len(frames)):
        f = frames[t]
        for i in np.flatnonzero(f.terminated | f.truncated):
            s = start[i]
            rows = frames[s : t + 1]
            key = (i, int(f.observation["episode_id"][i]))
            episodes[key] = {
                "proprio": np.stack([r.observation["proprio"][i] for r in rows]),
                "action": np.stack([r.info["executed_action"][i] for r in rows[1:]]),
                "reward": np.array([r.reward[i] for r in rows[1:]]),
            }
        for i in np.flatnonzero(~f.info["active"]):
            start[i] = t
    return episodes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "format, compression", [("packed", "none"), ("packed", "lz4"), ("npz", "none"), ("npz", "deflate")]
)
def test_recorded_run_equals_direct_rollout(device, tmp_path, format, compression):
    """Every episode the env completed is published once, bit-identical to a direct rollout (both layouts)."""
    env = forge_gpu.sim.make("cartpole", num_envs=4, device=device, seed=5, max_steps=12)
    summary = collect(
        env,
        forge_gpu.sim.make_policy("random", env),
        str(tmp_path / "run"),
        steps=40,
        slots=2,
        options=RecordingOptions(format=format, compression=compression, max_buffer_bytes=1 << 20),
    )
    expected = expected_episodes("cartpole", 4, 5, 40, device=device, max_steps=12)
    episodes = list(read_episodes(tmp_path / "run"))
    assert summary.status == "closed" and summary.episodes == len(episodes) == len(expected)
    for ep in episodes:
        want = expected[(ep.env_id, ep.episode_id)]
        np.testing.assert_array_equal(np.concatenate([ep.obs["proprio"], ep.next["proprio"][-1:]]), want["proprio"])
        np.testing.assert_array_equal(ep.action, want["action"])
        np.testing.assert_array_equal(ep.reward, want["reward"])
    manifest = read_manifest(tmp_path / "run")
    assert manifest["status"] == "closed" and manifest["completed_episodes"] == len(episodes)
    assert manifest["transport"] == "host_snapshot" and manifest["task"] == "cartpole"
    assert "episodes_target" not in manifest  # stopped at a number of steps


@pytest.mark.parametrize("device", DEVICES)
def test_stop_event_closes_cleanly(device, tmp_path):
    """Setting the stop event ends stepping; completed episodes stay, the rest are listed incomplete."""
    env = forge_gpu.sim.make("cartpole", num_envs=3, device=device, max_steps=10)
    stop = threading.Event()
    seen = []

    def progress(c):
        seen.append(c)
        if c["steps"] >= 25:
            stop.set()

    summary = collect(
        env,
        forge_gpu.sim.make_policy("expert", env),
        str(tmp_path / "run"),
        episodes=10**6,
        stop=stop,
        progress=progress,
        progress_interval=0.0,
    )
    manifest = read_manifest(tmp_path / "run")
    assert summary.status == "interrupted" and manifest["status"] == "closed"
    assert len(list(read_episodes(tmp_path / "run"))) == manifest["completed_episodes"] == summary.episodes >= 3
    assert manifest["incomplete_episodes"] and all(e["steps"] >= 1 for e in manifest["incomplete_episodes"])
    assert manifest["episodes_target"] == 10**6  # inspect and report: the success rate counts published episodes
    stored, computed = run_statistics(tmp_path / "run"), compute_statistics(tmp_path / "run", write=False).summary()
    assert {k: v["count"] for k, v in stored.items()} == {k: v["count"] for k, v in computed.items()}


@pytest.mark.parametrize("device", DEVICES)
def test_collect_without_recording_counts_episodes(device):
    """directory=None steps and transports without writing; episodes are still counted."""
    env = forge_gpu.sim.make("cartpole", num_envs=4, device=device, max_steps=5)
    summary = collect(env, forge_gpu.sim.make_policy("expert", env), None, episodes=8)
    assert summary.episodes >= 8 and summary.bytes_written == 0


@pytest.mark.parametrize("device", DEVICES)
def test_bad_target_is_refused(device, tmp_path):
    """Neither or both of episodes/steps, or a non-positive target, raise ValueError and create nothing."""
    env = forge_gpu.sim.make("cartpole", num_envs=2, device=device)
    for kwargs in ({}, {"episodes": 1, "steps": 1}, {"episodes": 0}):
        with pytest.raises(ValueError):
            collect(env, forge_gpu.sim.make_policy("random", env), str(tmp_path / "run"), **kwargs)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("device", DEVICES)
def test_policy_failure_marks_run_failed_and_keeps_episodes(device, tmp_path):
    """A policy that raises mid-run: the error reaches the caller, the manifest says failed, episodes stay."""
    env = forge_gpu.sim.make("cartpole", num_envs=3, device=device, max_steps=4)
    inner = forge_gpu.sim.make_policy("expert", env)
    calls = []

    def flaky(observation):
        calls.append(1)
        if len(calls) > 12:
            raise RuntimeError("policy server went away")
        return inner(observation)

    with pytest.raises(RuntimeError, match="went away"):
        collect(env, flaky, str(tmp_path / "run"), episodes=100)
    manifest = read_manifest(tmp_path / "run")
    assert manifest["status"] == "failed" and "went away" in manifest["error"]
    assert len(list(read_episodes(tmp_path / "run"))) == manifest["completed_episodes"] >= 3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("format", ["packed", "npz"])
def test_held_writer_throttles_stepping_without_loss(device, tmp_path, monkeypatch, format):
    """A held writer and a tight budget make stepping wait (stall: at least as long as the test held the writer
    once both append and publish were waiting on it), yet every ended episode is published."""
    import time

    import forge_gpu._src.formats.npz.write as recorder_module
    from forge_gpu._src.formats.packed.write import PackedWriter

    owner, name = (PackedWriter, "write") if format == "packed" else (recorder_module, "write_episode_file")
    real = getattr(owner, name)
    gate, held = threading.Event(), {}

    def gated(*args, **kwargs):
        if not gate.wait(HANG):
            raise AssertionError("the writer was never let go")
        return real(*args, **kwargs)

    def hold(stepping):
        """Once the recorder thread waits in append (on the held writer: it can free no slot) and then the
        stepping thread waits in publish (on those slots), hold them a while, then let the writer go."""
        try:
            wait_until_blocked("append", timeout=HANG)
            held["since"] = wait_until_blocked("publish", stepping, timeout=HANG)
            gate.wait(0.2)  # any length: only the span measured here is asserted
            held["until"] = time.perf_counter()
        except BaseException as exc:
            held["error"] = exc
        finally:
            gate.set()

    monkeypatch.setattr(owner, name, gated)
    env = forge_gpu.sim.make("cartpole", num_envs=4, device=device, max_steps=3)
    if format == "packed":  # a ring of 2 batches of 4 env rows: 5 fields (4 + 16 bytes), the state, a transition
        state = sum(4 * int(np.prod(e["shape"])) for e in env.spec.get("state", {}).values())  # float32 entries
        budget = 2 * 4 * (4 * 4 + 4 * 4 + state + 4 + 4 + 2)
    else:  # every env's episode buffer plus one spare: frames (4 steps x 5 fields) and transitions
        budget = (4 + 1) * (4 * (4 * 4 + 4 * 4) + 3 * (4 + 4 + 2))
    holder = threading.Thread(target=hold, args=(threading.current_thread(),), daemon=True)
    holder.start()
    summary = collect(
        env,
        forge_gpu.sim.make_policy("expert", env),
        str(tmp_path / "run"),
        steps=30,
        slots=2,
        options=RecordingOptions(format=format, writers=1, max_buffer_bytes=budget),
    )
    holder.join(HANG)
    assert "error" not in held, held.get("error")
    assert summary.stall_seconds >= held["until"] - held["since"] > 0, "the held writer should hold stepping back"
    # Each env ends an episode every 4 calls (3 steps, then the reset row): 7 in 30 calls.
    assert summary.episodes == summary.episodes_ended == len(list(read_episodes(tmp_path / "run"))) == 4 * 7
    assert read_manifest(tmp_path / "run")["recorder"]["buffer_bytes"] <= budget
