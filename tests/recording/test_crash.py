"""Crash consistency of the packed layout (tests/helpers/crashsim.py): for every crash state of a small recording, the
reader gives exactly the episodes of a prefix of its commits or refuses with ValueError, never other values;
repair then closes a readable run; at durability "machine" no episode whose commit returned is lost."""

import numpy as np
import pytest
from helpers.crashsim import build, crash_states, remove, trace_recording
from helpers.synthetic import SyntheticSim, make_batches, synthetic_description

import forge_gpu
from forge_gpu.curation import repair_run
from forge_gpu.recording import PackedRecorder


def _episodes(path):
    run = forge_gpu.reading.open_run(path)
    return list(run.read(list(range(len(run))), forge_gpu.reading.EpisodeReadOptions(state=True)))


def _same(a, b) -> bool:
    return (
        (a.env_id, a.episode_id, a.steps) == (b.env_id, b.episode_id, b.steps)
        and all(
            np.array_equal(x, y)
            for x, y in [
                *((a.obs[k], b.obs[k]) for k in a.obs),
                *((a.next[k], b.next[k]) for k in a.next),
                *((a.state[k], b.state[k]) for k in a.state),
                *((a.params[k], b.params[k]) for k in a.params),
                (a.action, b.action),
                (a.reward, b.reward),
                (a.terminated, b.terminated),
                (a.truncated, b.truncated),
            ]
        )
        and a.params.keys() == b.params.keys()
        and a.state.keys() == b.state.keys()
    )


def _is_subset(found, recorded) -> bool:
    """``found`` is some of ``recorded``'s episodes, in its order, each equal to the recorded one."""
    index = {(e.env_id, e.episode_id): k for k, e in enumerate(recorded)}
    at = [index.get((e.env_id, e.episode_id), -1) for e in found]
    return (
        all(k >= 0 for k in at)
        and at == sorted(at)
        and all(_same(e, recorded[k]) for e, k in zip(found, at, strict=True))
    )


def _is_prefix(found, recorded) -> bool:
    return len(found) <= len(recorded) and all(_same(a, b) for a, b in zip(found, recorded, strict=False))


@pytest.mark.parametrize("durability", ["process", "machine"])
def test_every_crash_state_reads_a_prefix_or_refuses(tmp_path, monkeypatch, durability):
    env = synthetic_description(num_envs=3, max_steps=5, state=True, params=True)
    batches = make_batches(SyntheticSim(env, seed=1, end_prob=0.3), 9)
    final = tmp_path / "final"

    def record():
        recorder = PackedRecorder(final, env, block_bytes=1, max_buffer_bytes=1 << 20, durability=durability)
        for observation, result in batches:
            recorder.append(observation, result)
            recorder.flush()  # one block per batch: many blocks, many crash points
        recorder.close()

    ops = trace_recording(final, record, monkeypatch)
    recorded = _episodes(final)
    blocks = sum(op.name == "commits.jsonl" and op.kind == "write" for op in ops)
    syncs = sum(op.kind == "sync" for op in ops)
    assert (syncs > 2 * blocks) if durability == "machine" else syncs == 0  # a pair per block, and the names
    assert blocks >= 10 and len(recorded) >= 4
    states = crash_states(ops)
    outcomes = {"prefix": 0, "refused": 0, "no run": 0, "salvaged": 0}
    for number, state in enumerate(states):
        where = tmp_path / f"state{number}"
        build(state, ops, final, where)
        if not (where / "run.json").exists():  # the crash came before the run's first manifest: nothing to read
            outcomes["no run"] += 1
            remove(where)
            continue
        try:
            found = _episodes(where)
        except ValueError:
            outcomes["refused"] += 1
        else:
            assert _is_prefix(found, recorded), (state, len(found))
            outcomes["prefix"] += 1
        salvaged = False
        try:
            repair_run(where)
        except ValueError as exc:  # a closed run whose data a crash lost: repair keeps what checks only when asked
            assert "repair --salvage" in str(exc), (state, exc)
            repair_run(where, salvage=True)
            outcomes["salvaged"] += 1
            salvaged = True
        try:
            after = _episodes(where)
        except Exception as exc:
            raise AssertionError(f"{state} after repair: {exc}") from exc
        assert forge_gpu.formats.read_manifest(where)["status"] in ("closed", "failed"), state
        # Repair keeps a prefix; salvage keeps every episode whose blocks check, wherever they are.
        assert (_is_subset if salvaged else _is_prefix)(after, recorded), (state, len(after))
        if durability == "machine":  # every episode whose commit returned survives
            returned = sum(len(c) for c in _committed_episodes(final, state.durable(ops)))
            assert len(after) >= returned, (state, len(after), returned)
        remove(where)
    print(f"{durability}: {len(ops)} operations, {blocks} blocks, {len(states)} crash states: {outcomes}")
    assert outcomes["prefix"] and outcomes["refused"] and len(states) > 100


def _committed_episodes(run, lines: int) -> list[list]:
    """The episodes each of the first ``lines`` commit lines of ``run`` publishes."""
    import json

    text = (run / "commits.jsonl").read_bytes().split(b"\n")[:lines]
    return [json.loads(line)["episodes"]["env_id"] for line in text]


def test_durability_is_checked_and_recorded(tmp_path):
    from forge_gpu._src.formats.registry import OptionError
    from forge_gpu.recording import RecordingOptions

    with pytest.raises(OptionError, match="durability='machine': the npz format takes process"):
        RecordingOptions(format="npz", durability="machine")
    with pytest.raises(OptionError, match="durability='disk': the packed format takes process, machine"):
        RecordingOptions(durability="disk")
    env = synthetic_description(num_envs=2, max_steps=4)
    recorder = PackedRecorder(tmp_path / "run", env, durability="machine")
    for observation, result in make_batches(SyntheticSim(env, seed=2), 9):
        recorder.append(observation, result)
    recorder.close()
    manifest = forge_gpu.formats.read_manifest(tmp_path / "run")
    assert manifest["recorder"]["durability"] == "machine" and manifest["status"] == "closed"
    assert len(_episodes(tmp_path / "run")) == manifest["completed_episodes"] > 0


def test_cli_collect_takes_durability(tmp_path):
    from forge_gpu.cli import main

    out = tmp_path / "run"
    args = ["collect", "cartpole", "--envs", "2", "--episodes", "2", "--out", str(out), "--set", "max_steps=5"]
    assert main([*args, "--durability", "machine"]) == 0
    assert forge_gpu.formats.read_manifest(out)["recorder"]["durability"] == "machine"
    assert main([*args[:-4], "--out", str(tmp_path / "npz"), "--format", "npz", "--durability", "machine"]) == 2
