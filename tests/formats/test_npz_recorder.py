"""Tests of NpzRecorder: round trips, manifest, batch checks, memory budget, backpressure, failures."""

import copy
import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.blocking import wait_until_blocked
from helpers.synthetic import SyntheticSim, load_run, make_batches, record, slot_bytes, synthetic_description

import forge_gpu._src.formats.npz.write as recorder_module
from forge_gpu._src.core.episode import episode_stem
from forge_gpu._src.core.manifest import MANIFEST_KEYS
from forge_gpu.formats import validate_episode
from forge_gpu.reading import read_episodes
from forge_gpu.recording import NpzRecorder, PackedRecorder

JOIN_TIMEOUT = 10.0  # seconds; only bounds a hang, never asserted as a duration


def _read_manifest(directory):
    with open(os.path.join(directory, "run.json")) as f:
        return json.load(f)


def _published(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith("env"))


@pytest.mark.parametrize("compression", ["none", "deflate"])
@pytest.mark.parametrize("images", [False, True])
def test_recorded_episodes_equal_the_generated_ones(tmp_path, compression, images):
    """Every completed episode is published once, valid, and equal to what the batches described."""
    env = synthetic_description(num_envs=4, max_steps=6, images=images)
    sim = SyntheticSim(env, seed=1)
    batches = make_batches(sim, 40)
    recorder = record(tmp_path / "run", env, batches, compression=compression, writers=2)
    contents = load_run(tmp_path / "run")
    assert len(sim.completed) > 10
    expected_names = {episode_stem(*key) + ext for key in sim.completed for ext in (".npz", ".json")}
    assert set(contents) == expected_names
    for (env_id, episode_id), members in sim.completed.items():
        stem = episode_stem(env_id, episode_id)
        arrays, marker = contents[stem + ".npz"], contents[stem + ".json"]
        assert marker == {
            "schema_version": 1,
            "complete": True,
            "steps": len(members["action"]),
            "env_id": env_id,
            "episode_id": episode_id,
        }
        validate_episode(arrays, marker, name=stem)
        assert arrays.keys() == members.keys()
        for key, array in members.items():
            np.testing.assert_array_equal(arrays[key], array, err_msg=key)
            assert arrays[key].dtype == array.dtype
    assert recorder.completed_episodes == len(sim.completed)
    assert recorder.backlog == 0
    assert recorder.bytes_written == sum(
        os.path.getsize(tmp_path / "run" / name) for name in contents if name.endswith(".npz")
    )


def test_manifest_keys_while_recording_and_after_close(tmp_path):
    """run.json holds every FORMAT key at creation (status recording) and the final figures after close."""
    env = synthetic_description()
    sim = SyntheticSim(env, seed=2)
    recorder = NpzRecorder(tmp_path / "run", env, max_buffer_bytes=10**6)
    manifest = _read_manifest(tmp_path / "run")
    assert set(MANIFEST_KEYS) <= manifest.keys()
    assert manifest["status"] == "recording"
    assert manifest["schema_version"] == 1
    assert len(manifest["run_id"]) == 32 and int(manifest["run_id"], 16) >= 0
    assert manifest["transport"] == "host_snapshot"
    assert manifest["scene"] == "tabletop:v1"
    assert manifest["scene_spec"] == {"kind": "tabletop", "table_height": 0.4}
    assert manifest["task"] == "synthetic_push"
    assert manifest["seed"] == 7
    assert manifest["config"] == dict(env.config)
    assert manifest["env_spec"] == env.spec
    assert manifest["max_buffer_bytes"] == 10**6
    assert manifest["packages"]["numpy"] == np.__version__
    assert isinstance(manifest["dependency_sources"], dict)
    for observation, result in make_batches(sim, 20):
        recorder.append(observation, result)
    recorder.close()
    manifest = _read_manifest(tmp_path / "run")
    assert manifest["status"] == "closed"
    assert manifest["completed_episodes"] == len(sim.completed)
    assert manifest["transitions"] == sum(len(m["action"]) for m in sim.completed.values())
    assert manifest["incomplete_episodes"] == sim.in_progress()
    assert manifest["bytes_written"] == recorder.bytes_written


def test_reset_mid_episode_lists_abandoned_episodes_as_incomplete(tmp_path):
    """Episodes abandoned by reset() and those running at close are listed incomplete and never published."""
    env = synthetic_description(num_envs=3, max_steps=8)
    sim = SyntheticSim(env, seed=3, end_prob=0.1)
    batches = make_batches(sim, 30, resets_at=(5, 17))
    recorder = record(tmp_path / "run", env, batches)
    incomplete = sim.abandoned + sim.in_progress()
    assert len(sim.abandoned) >= 2
    assert _read_manifest(tmp_path / "run")["incomplete_episodes"] == incomplete
    assert recorder.incomplete_episodes == incomplete
    published = _published(tmp_path / "run")
    for entry in incomplete:
        assert episode_stem(entry["env_id"], entry["episode_id"]) + ".npz" not in published
    assert len(published) == 2 * len(sim.completed)


def test_close_is_idempotent_and_context_manager_closes(tmp_path):
    """Closing twice is harmless; leaving a with-block closes the recorder; append after close raises."""
    env = synthetic_description()
    sim = SyntheticSim(env)
    with NpzRecorder(tmp_path / "run", env) as recorder:
        for observation, result in make_batches(sim, 10):
            recorder.append(observation, result)
    assert _read_manifest(tmp_path / "run")["status"] == "closed"
    recorder.close()
    with pytest.raises(RuntimeError, match="closed"):
        recorder.append(*sim.step())


def test_existing_directory_is_refused(tmp_path):
    """The recorder never reuses an existing directory."""
    (tmp_path / "run").mkdir()
    with pytest.raises(FileExistsError, match="already exists"):
        NpzRecorder(tmp_path / "run", synthetic_description())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"writers": 0}, "writers"),
        ({"compression": "zstd"}, "compression"),
        ({"compression_level": 10}, "compression_level"),
        ({"compression_level": -1}, "compression_level"),
        ({"max_buffer_bytes": 0}, "max_buffer_bytes"),
        ({"spare_buffers": 0}, "spare_buffers"),
    ],
)
def test_bad_arguments_raise_and_create_nothing(tmp_path, kwargs, message):
    """Invalid arguments raise ValueError naming the argument, before anything is created on disk."""
    with pytest.raises(ValueError, match=message):
        NpzRecorder(tmp_path / "sub" / "run", synthetic_description(), **kwargs)
    assert not (tmp_path / "sub").exists()


def test_budget_too_small_is_refused_with_the_bytes_needed(tmp_path):
    """A budget that cannot hold every env plus one spare is refused, and the message says how many bytes."""
    env = synthetic_description(num_envs=5, max_steps=10, images=True)
    needed = 6 * slot_bytes(env)
    with pytest.raises(ValueError, match=str(needed)):
        NpzRecorder(tmp_path / "run", env, max_buffer_bytes=needed - 1)
    assert not (tmp_path / "run").exists()
    recorder = NpzRecorder(tmp_path / "run", env, max_buffer_bytes=needed)
    assert recorder.spare_buffers == 1
    recorder.close()


def test_spares_default_to_what_the_budget_allows(tmp_path):
    """With spare_buffers=None the recorder takes as many spares as fit, at most num_envs."""
    env = synthetic_description(num_envs=4)
    small = NpzRecorder(tmp_path / "a", env, max_buffer_bytes=6 * slot_bytes(env) + 1)
    large = NpzRecorder(tmp_path / "b", env, max_buffer_bytes=100 * slot_bytes(env))
    assert (small.spare_buffers, large.spare_buffers) == (2, 4)
    small.close()
    large.close()


def _find(batches, predicate):
    """Index of the first step batch (after the reset batch) whose (observation, result) satisfy predicate."""
    for index, (observation, result) in enumerate(batches):
        if index > 0 and predicate(observation, result):
            return index
    raise AssertionError("no batch fits")


def _any_active(observation, result):
    return result.info["active"].any()


def _has_reset_row(observation, result):
    return (~result.info["active"]).any()


def _mutate_obs(field, fn):
    def mutate(observation, result):
        observation[field] = fn(observation[field].copy(), result)

    return mutate


def _first_active(result):
    return int(np.flatnonzero(result.info["active"])[0])


def _first_reset(result):
    return int(np.flatnonzero(~result.info["active"])[0])


def _set_row(array, row, value):
    array[row] = value
    return array


def _set_active_row(field, value):
    return _mutate_obs(field, lambda a, r: _set_row(a, _first_active(r), value))


def _mutate_result(attribute, fn):
    def mutate(observation, result):
        if attribute in ("active", "executed_action"):
            result.info[attribute] = fn(result.info[attribute].copy(), result)
        else:
            setattr(result, attribute, fn(getattr(result, attribute).copy(), result))

    return mutate


def _drop_field(observation, result):
    del observation["proprio"]


def _extra_field(observation, result):
    observation["extra"] = observation["time"].copy()


def _both_flags(observation, result):
    row = _first_active(result)
    result.terminated = result.terminated.copy()
    result.truncated = result.truncated.copy()
    result.terminated[row] = result.truncated[row] = True


def _reactivate_reset_row(observation, result):
    # An env whose transition just ended must come back with a reset frame, not another transition.
    row = _first_reset(result)
    result.info["active"] = result.info["active"].copy()
    result.info["active"][row] = True
    observation["step_id"] = observation["step_id"].copy()
    observation["episode_id"] = observation["episode_id"].copy()
    observation["episode_id"][row] -= 1


BAD_BATCHES = {
    "missing field": (_drop_field, _any_active, "missing field"),
    "undescribed field": (_extra_field, _any_active, "not described"),
    "wrong dtype": (_mutate_obs("proprio", lambda a, r: a.astype(np.float64)), _any_active, "proprio"),
    "wrong shape": (_mutate_obs("proprio", lambda a, r: a[:, :2].copy()), _any_active, "proprio"),
    "nan observation": (_set_active_row("proprio", np.nan), _any_active, "non-finite"),
    "env ids": (_mutate_obs("env_id", lambda a, r: a[::-1].copy()), _any_active, "arange"),
    "step id skips": (_set_active_row("step_id", 99), _any_active, "step_id"),
    "episode id changes": (_set_active_row("episode_id", 42), _any_active, "episode_id"),
    "time goes back": (_set_active_row("time", -1.0), _any_active, "time"),
    "reset row with reward": (
        _mutate_result("reward", lambda a, r: _set_row(a, _first_reset(r), 1.0)),
        _has_reset_row,
        "inactive",
    ),
    "reset row with flag": (
        _mutate_result("terminated", lambda a, r: _set_row(a, _first_reset(r), True)),
        _has_reset_row,
        "inactive",
    ),
    "reset row wrong episode": (
        _mutate_obs("episode_id", lambda a, r: _set_row(a, _first_reset(r), a[_first_reset(r)] + 3)),
        _has_reset_row,
        "episode_id",
    ),
    "both flags": (_both_flags, _any_active, "both terminated and truncated"),
    "action shape": (_mutate_result("executed_action", lambda a, r: a[:, :1].copy()), _any_active, "executed"),
    "nan action": (
        _mutate_result("executed_action", lambda a, r: _set_row(a, _first_active(r), np.nan)),
        _any_active,
        "non-finite",
    ),
    "reward dtype": (_mutate_result("reward", lambda a, r: a.astype(np.float64)), _any_active, "reward"),
    "active after episode end": (_reactivate_reset_row, _has_reset_row, "ended"),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_bad_batch_raises_and_commits_nothing(tmp_path, case):
    """A bad batch raises ValueError naming the problem; retrying the good batch gives the clean run's output."""
    mutate, where, message = BAD_BATCHES[case]
    env = synthetic_description(num_envs=4, max_steps=5)
    batches = make_batches(SyntheticSim(env, seed=4, end_prob=0.3), 25)
    record(tmp_path / "clean", env, batches)

    index = _find(batches, where)
    recorder = NpzRecorder(tmp_path / "run", env)
    for k, (observation, result) in enumerate(batches):
        if k == index:
            bad_observation, bad_result = copy.deepcopy((observation, result))
            mutate(bad_observation, bad_result)
            with pytest.raises(ValueError, match=message):
                recorder.append(bad_observation, bad_result)
        recorder.append(observation, result)
    recorder.close()
    clean, retried = load_run(tmp_path / "clean"), load_run(tmp_path / "run")
    assert clean.keys() == retried.keys()
    for name, content in clean.items():
        if name.endswith(".npz"):
            for key, array in content.items():
                np.testing.assert_array_equal(retried[name][key], array)
        else:
            assert retried[name] == content
    assert (
        _read_manifest(tmp_path / "run")["incomplete_episodes"]
        == _read_manifest(tmp_path / "clean")["incomplete_episodes"]
    )


def test_active_rows_before_the_first_reset_are_refused(tmp_path):
    """A step batch before any reset batch is refused."""
    env = synthetic_description()
    sim = SyntheticSim(env)
    sim.reset()
    with NpzRecorder(tmp_path / "run", env) as recorder, pytest.raises(ValueError, match="first reset"):
        recorder.append(*sim.step())


def test_episode_longer_than_max_steps_is_refused(tmp_path):
    """An env that steps past max_steps without truncation is refused rather than overflowing its buffer."""
    env = synthetic_description(num_envs=2, max_steps=3)
    sim = SyntheticSim(env, end_prob=0.0)
    sim.env = synthetic_description(num_envs=2, max_steps=10)  # the generator truncates late
    recorder = NpzRecorder(tmp_path / "run", env)
    batches = make_batches(sim, 4)
    for observation, result in batches[:4]:
        recorder.append(observation, result)
    with pytest.raises(ValueError, match="max_steps"):
        recorder.append(*batches[4])
    recorder.close()


def _gated_writer(gate, calls):
    real = recorder_module.write_episode_file

    def write(*args, **kwargs):
        calls.append(args[0])
        if not gate.wait(JOIN_TIMEOUT):
            raise AssertionError("the gate was never opened")
        return real(*args, **kwargs)

    return write


def test_backpressure_blocks_append_until_a_writer_frees_a_buffer(tmp_path, monkeypatch):
    """With the writer held and one spare, append waits instead of dropping data (counted as stall: at least as
    long as the test held the writer once append was waiting), then finishes losslessly."""
    gate, calls = threading.Event(), []
    monkeypatch.setattr(recorder_module, "write_episode_file", _gated_writer(gate, calls))
    env = synthetic_description(num_envs=3, max_steps=6)
    sim = SyntheticSim(env, seed=5, end_prob=0.4)
    batches = make_batches(sim, 30)
    recorder = NpzRecorder(tmp_path / "run", env, writers=1, spare_buffers=1)
    progress = []

    def feed():
        for batch in batches:
            recorder.append(*batch)
            progress.append(1)

    thread = threading.Thread(target=feed)
    thread.start()
    since = wait_until_blocked("append", thread, JOIN_TIMEOUT)
    thread.join(0.5)
    # Held writer: at most one completed episode's env got the spare, so the feeder is stuck.
    assert thread.is_alive()
    assert len(progress) < len(batches)
    until = time.perf_counter()
    gate.set()
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive()
    recorder.close()
    assert recorder.stall_seconds >= until - since > 0  # append waited at least as long as the writer was held
    assert recorder.completed_episodes == len(sim.completed)
    assert len(_published(tmp_path / "run")) == 2 * len(sim.completed)


def _failing_writer(path, *args, **kwargs):
    with open(str(path) + ".tmp", "wb") as f:
        f.write(b"partial")
    raise OSError(errno.ENOSPC, "No space left on device")


def _marker_and_file_pairs(directory):
    names = set(os.listdir(directory))
    assert not [name for name in names if name.endswith(".tmp")]
    stems = {name.rsplit(".", 1)[0] for name in names if name.startswith("env")}
    for stem in stems:
        assert stem + ".npz" in names, f"marker without file: {stem}"


def test_write_error_surfaces_at_the_next_call_and_fails_the_manifest(tmp_path, monkeypatch):
    """A disk-full error reaches the caller chained from the OSError; the manifest says failed; nothing dangles."""
    monkeypatch.setattr(recorder_module, "write_episode_file", _failing_writer)
    env = synthetic_description(num_envs=3, max_steps=5)
    batches = make_batches(SyntheticSim(env, seed=6, end_prob=0.4), 40)
    recorder = NpzRecorder(tmp_path / "run", env, writers=2, spare_buffers=1)
    with pytest.raises(RuntimeError, match="run") as info:
        for batch in batches:
            recorder.append(*batch)
        recorder.flush()
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENOSPC
    with pytest.raises(RuntimeError):
        recorder.flush()
    with pytest.raises(RuntimeError, match="No space left"):
        recorder.close()
    recorder.close()  # idempotent after a failure too
    manifest = _read_manifest(tmp_path / "run")
    assert manifest["status"] == "failed"
    assert "No space left" in manifest["error"]
    assert manifest["completed_episodes"] == 0
    _marker_and_file_pairs(tmp_path / "run")
    assert _published(tmp_path / "run") == []
    assert not any(thread.is_alive() for thread in recorder._threads)


def test_write_error_wakes_an_append_blocked_on_backpressure(tmp_path, monkeypatch):
    """An append waiting for a buffer is woken by a writer failure and raises instead of hanging."""
    gate, calls = threading.Event(), []

    def held_then_failing(path, *args, **kwargs):
        calls.append(path)
        gate.wait(JOIN_TIMEOUT)
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(recorder_module, "write_episode_file", held_then_failing)
    env = synthetic_description(num_envs=3, max_steps=6)
    batches = make_batches(SyntheticSim(env, seed=5, end_prob=0.4), 30)
    recorder = NpzRecorder(tmp_path / "run", env, writers=1, spare_buffers=1)
    errors = []

    def feed():
        try:
            for batch in batches:
                recorder.append(*batch)
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=feed)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # blocked on backpressure
    gate.set()
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0].__cause__, PermissionError)
    with pytest.raises(RuntimeError):
        recorder.close()
    assert _read_manifest(tmp_path / "run")["status"] == "failed"
    assert not any(thread.is_alive() for thread in recorder._threads)


def test_marker_failure_unpublishes_the_episode(tmp_path, monkeypatch):
    """If the marker cannot be written, the episode file is removed: no half-published episode remains."""

    def no_marker(path, obj):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(recorder_module, "write_marker_atomic", no_marker)
    env = synthetic_description(num_envs=2, max_steps=4)
    batches = make_batches(SyntheticSim(env, seed=8, end_prob=0.5), 12)
    recorder = NpzRecorder(tmp_path / "run", env, writers=1)
    with pytest.raises(RuntimeError):
        for batch in batches:
            recorder.append(*batch)
        recorder.flush()
    with pytest.raises(RuntimeError):
        recorder.close()
    assert _published(tmp_path / "run") == []
    assert _read_manifest(tmp_path / "run")["status"] == "failed"


def test_data_side_imports_neither_warp_newton_nor_torch(tmp_path):
    """The data side (formats, both recorders, reader, windows, inspect, verify, report, view, conversion, curation,
    statistics, exports; all but the torch datasets' module) loads without warp, newton or torch, and reads a packed
    run that way: the episodes it reads are those read here."""
    env = synthetic_description(num_envs=3, max_steps=6)
    sim = SyntheticSim(env, seed=4, end_prob=0.3)
    record(tmp_path / "run", env, make_batches(sim, 25), recorder=PackedRecorder)
    expected = [[e.env_id, e.episode_id, e.steps, e.action.tolist()] for e in read_episodes(tmp_path / "run")]
    assert len(expected) == len(sim.completed) > 0
    root = str(Path(__file__).resolve().parents[2])
    code = f"""
import sys, types
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('warp', 'newton', 'torch'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
# Stand-in packages: the data side must load without the package's own __init__ (the sim side's).
for name, sub in (('forge_gpu', 'forge_gpu'), ('forge_gpu._src', 'forge_gpu/_src')):
    module = types.ModuleType(name)
    module.__path__ = [{root!r} + '/' + sub]
    sys.modules[name] = module
import forge_gpu._src.formats.npz.files
import forge_gpu._src.formats.npz.write
import forge_gpu._src.formats.npz.zipwriter
import forge_gpu._src.reading.runs
import forge_gpu._src.reading.shared_batches
import forge_gpu._src.reading.verify
import forge_gpu._src.reading.report
import forge_gpu._src.reading.charts
import forge_gpu._src.reading.view
import forge_gpu._src.formats.packed.write
import forge_gpu._src.formats.packed.read
import forge_gpu._src.formats.packed.repair
import forge_gpu._src.reading.windows
import forge_gpu._src.curation.convert
import forge_gpu._src.curation.repair
import forge_gpu._src.curation.curate
import forge_gpu._src.formats.packed.recorder
import forge_gpu._src.reading.inspection
import forge_gpu._src.core.manifest
import forge_gpu._src.formats.registry
import forge_gpu._src.formats.npz.read
import forge_gpu._src.formats.packed.read
import forge_gpu._src.recording.stats
import forge_gpu._src.export.lerobot
import forge_gpu._src.export.robomimic
import json
from forge_gpu._src.reading.runs import read_episodes
episodes = read_episodes({str(tmp_path / "run")!r})
print(json.dumps([[e.env_id, e.episode_id, e.steps, e.action.tolist()] for e in episodes]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == expected


@pytest.mark.parametrize("writers", [1, 4])
def test_one_spare_buffer_and_many_ends_still_publish_every_episode_once(tmp_path, writers):
    """Many envs ending together with a single spare buffer: append waits until the writers have freed as
    many buffers as it needs, and every completed episode is published once, equal to the batches."""
    env = synthetic_description(num_envs=16, max_steps=5)
    sim = SyntheticSim(env, seed=3, end_prob=0.5)
    batches = make_batches(sim, 30)
    recorder = NpzRecorder(tmp_path / "run", env, writers=writers, spare_buffers=1)
    for observation, result in batches:
        recorder.append(observation, result)
    recorder.close()
    contents = load_run(tmp_path / "run")
    assert set(contents) == {episode_stem(*key) + ext for key in sim.completed for ext in (".npz", ".json")}
    for (env_id, episode_id), members in sim.completed.items():
        arrays = contents[episode_stem(env_id, episode_id) + ".npz"]
        for key, array in members.items():
            np.testing.assert_array_equal(arrays[key], array, err_msg=key)
    assert recorder.completed_episodes == len(sim.completed) > 50
    assert _read_manifest(tmp_path / "run")["status"] == "closed"
