"""Tests of the episode format: names, atomic JSON, episode files and the FORMAT.md invariants."""

import json
import os
import zipfile

import numpy as np
import pytest
from synthetic import make_episode

from forge_gpu._src.episode_format import (
    episode_stem,
    make_marker,
    parse_episode_stem,
    validate_episode,
    validate_marker,
    write_episode_file,
    write_json_atomic,
)


def test_episode_stem_follows_the_file_name_pattern():
    """Episode names are env{E:05d}-episode{K:08d} and parse back to their ids."""
    assert episode_stem(3, 12) == "env00003-episode00000012"
    assert parse_episode_stem("env00003-episode00000012") == (3, 12)
    assert parse_episode_stem("run") is None


def test_write_json_atomic_leaves_only_the_final_file(tmp_path):
    """write_json_atomic writes readable JSON (numpy-free) and leaves no temporary file behind."""
    path = tmp_path / "run.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": 2, "b": [1, 2]})
    assert json.loads(path.read_text()) == {"a": 2, "b": [1, 2]}
    assert os.listdir(tmp_path) == ["run.json"]


@pytest.mark.parametrize("compression", ["none", "deflate"])
def test_episode_file_round_trips(tmp_path, compression):
    """An episode written from frame buffers reads back with np.load, valid and equal, in the chosen codec."""
    arrays, marker = make_episode(steps=5)
    frames = {
        member[4:]: np.concatenate([array, arrays["next/" + member[4:]][-1:]])
        for member, array in arrays.items()
        if member.startswith("obs/")
    }
    path = tmp_path / "env00002-episode00000005.npz"
    size = write_episode_file(
        path,
        frames,
        arrays["action"],
        arrays["reward"],
        arrays["terminated"],
        arrays["truncated"],
        compression=compression,
    )
    assert size == os.path.getsize(path)
    assert os.listdir(tmp_path) == [path.name]
    with np.load(path, allow_pickle=False) as archive:
        loaded = {key: archive[key] for key in archive.files}
    assert loaded.keys() == arrays.keys()
    for key, array in arrays.items():
        np.testing.assert_array_equal(loaded[key], array)
        assert loaded[key].dtype == array.dtype
    validate_episode(loaded, marker, name=str(path))
    expected = zipfile.ZIP_STORED if compression == "none" else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path) as archive:
        assert {info.compress_type for info in archive.infolist()} == {expected}


def test_valid_episode_passes():
    """A well-formed synthetic episode satisfies every invariant."""
    arrays, marker = make_episode()
    validate_episode(arrays, marker, name="ok.npz")


def _drop(member):
    def mutate(arrays, marker):
        del arrays[member]

    return mutate


def _set(member, index, value):
    def mutate(arrays, marker):
        arrays[member] = arrays[member].copy()
        arrays[member][index] = value

    return mutate


def _retype(members, dtype):
    def mutate(arrays, marker):
        for member in members.split():
            arrays[member] = arrays[member].astype(dtype)

    return mutate


def _marker(key, value):
    def mutate(arrays, marker):
        marker[key] = value

    return mutate


BROKEN = {
    "missing obs member": (_drop("obs/proprio"), "missing member"),
    "missing next member": (_drop("next/time"), "missing member"),
    "missing action": (_drop("action"), "missing member"),
    "nan proprio": (_set("obs/proprio", (1, 0), np.nan), "non-finite"),
    "inf reward": (_set("reward", 0, np.inf), "non-finite"),
    "nan action": (_set("action", (0, 1), np.nan), "non-finite"),
    "flag before the end": (_set("truncated", 0, True), "last transition only"),
    "no flag at the end": (_set("terminated", 3, False), "last transition only"),
    "both flags": (_set("truncated", 3, True), "both terminated and truncated"),
    "obs step ids": (_set("obs/step_id", 2, 7), "obs/step_id"),
    "next step ids": (_set("next/step_id", 3, 9), "next/step_id"),
    "env id": (_set("obs/env_id", 1, 0), "obs/env_id"),
    "episode id vs marker": (_marker("episode_id", 6), "episode_id"),
    "time not advancing": (_set("next/time", 2, 0.0), "next/time"),
    "discontinuity": (_set("next/proprio", (0, 1), 5.0), "continuity"),
    "obs/next dtype mismatch": (_retype("next/proprio", np.float64), "must match"),
    "integer action": (_retype("action", np.int32), "action must be floating"),
    "non-numeric field": (_retype("obs/proprio next/proprio", "U3"), "non-numeric"),
    "marker steps": (_marker("steps", 5), "first dim must be T=5"),
    "float step ids": (_retype("obs/step_id next/step_id", np.float32), "integers"),
    "float flags": (_retype("terminated", np.float32), "terminated must be bool"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_episode_is_rejected_naming_file_and_rule(case):
    """Each broken invariant raises ValueError naming the file and the rule it breaks."""
    mutate, expected = BROKEN[case]
    arrays, marker = make_episode()
    mutate(arrays, marker)
    with pytest.raises(ValueError, match="bad.npz") as info:
        validate_episode(arrays, marker, name="bad.npz")
    assert expected in str(info.value)


@pytest.mark.parametrize(
    "marker",
    [
        [],
        {"schema_version": 1, "complete": True, "steps": 3, "env_id": 0},
        {"schema_version": 2, "complete": True, "steps": 3, "env_id": 0, "episode_id": 0},
        {"schema_version": 1, "complete": False, "steps": 3, "env_id": 0, "episode_id": 0},
        {"schema_version": 1, "complete": True, "steps": 0, "env_id": 0, "episode_id": 0},
        {"schema_version": 1, "complete": True, "steps": "3", "env_id": 0, "episode_id": 0},
        {"schema_version": 1, "complete": True, "steps": 3, "env_id": 1, "episode_id": 0},
    ],
)
def test_bad_markers_are_rejected(marker):
    """Markers with missing keys, wrong values, or ids not matching the file name raise ValueError."""
    with pytest.raises(ValueError, match="m.json"):
        validate_marker(marker, name="m.json", env_id=0, episode_id=0)


def test_marker_round_trip():
    """make_marker builds a marker that validate_marker accepts, returning its steps."""
    assert validate_marker(make_marker(4, 2, 9), name="m.json", env_id=4, episode_id=2) == 9
