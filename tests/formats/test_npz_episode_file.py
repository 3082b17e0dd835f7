"""Tests of the episode format: names, atomic JSON, episode files and the FORMAT.md invariants."""

import json
import os
import struct
import zipfile

import numpy as np
import pytest
from helpers.synthetic import make_episode

from forge_gpu._src.core.episode import episode_stem, parse_episode_stem
from forge_gpu._src.core.files import write_json_atomic
from forge_gpu._src.formats.npz import zipwriter as npz_writer
from forge_gpu._src.formats.npz.files import encode_marker, make_marker, validate_marker
from forge_gpu._src.formats.npz.zipwriter import write_episode_file
from forge_gpu.formats import validate_episode


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


def _write_synthetic(path, steps, compression="none"):
    """Write a synthetic episode of ``steps`` transitions at ``path``; its arrays, marker and file size."""
    arrays, marker = make_episode(steps=steps)
    frames = {
        member[4:]: np.concatenate([array, arrays["next/" + member[4:]][-1:]])
        for member, array in arrays.items()
        if member.startswith("obs/")
    }
    transitions = (arrays["action"], arrays["reward"], arrays["terminated"], arrays["truncated"])
    size = write_episode_file(path, frames, *transitions, compression=compression)
    return arrays, marker, size


@pytest.mark.parametrize("compression", ["none", "deflate"])
def test_episode_file_round_trips(tmp_path, compression):
    """Episodes written from frame buffers read back with np.load, valid and equal, in the chosen codec,
    with every member's CRC-32 right; episodes of two lengths alternate (one header layout each)."""
    for k, steps in enumerate([5, 1, 5, 1]):
        path = tmp_path / f"env00002-episode{k:08d}.npz"
        arrays, marker, size = _write_synthetic(path, steps, compression)
        assert size == os.path.getsize(path)
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
            assert archive.testzip() is None  # every CRC-32 matches its member
    assert sorted(os.listdir(tmp_path)) == [f"env00002-episode{k:08d}.npz" for k in range(4)]


@pytest.mark.parametrize("compression", ["none", "deflate"])
def test_episode_file_is_whole_after_short_writes_and_many_buffers(tmp_path, monkeypatch, compression):
    """A writev cut short (a signal) and more buffers than one writev takes still give the same bytes."""
    _write_synthetic(tmp_path / "whole.npz", 6, compression)
    real_write = os.write

    def short_writev(fd, buffers):
        return real_write(fd, bytes(memoryview(buffers[0]).cast("B")[:7]))

    monkeypatch.setattr(os, "writev", short_writev)
    _write_synthetic(tmp_path / "short.npz", 6, compression)
    monkeypatch.undo()
    monkeypatch.setattr(npz_writer, "_IOV_MAX", 2)
    _write_synthetic(tmp_path / "many.npz", 6, compression)
    whole = (tmp_path / "whole.npz").read_bytes()
    assert (tmp_path / "short.npz").read_bytes() == whole
    assert (tmp_path / "many.npz").read_bytes() == whole


def test_marker_encoding_is_the_indented_json():
    """Markers are laid out exactly as json.dumps(indent=2) would, and other dicts fall back to it."""
    for marker in (make_marker(0, 0, 1), make_marker(99999, 12345678, 500)):
        assert encode_marker(marker) == (json.dumps(marker, indent=2) + "\n").encode()
        assert json.loads(encode_marker(marker)) == marker
    odd = {**make_marker(1, 2, 3), "note": "x"}
    assert json.loads(encode_marker(odd)) == odd


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


def zip64_members(path) -> dict[str, tuple[int, int]]:
    """The members whose local header carries a zip64 extra field (header id 1), read from the file's raw
    bytes: member -> (size, compressed size) as that field records them."""
    raw = open(path, "rb").read()
    found = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            header = struct.unpack_from("<4s2B4HL2L2H", raw, info.header_offset)
            assert header[0] == b"PK\x03\x04", info.filename
            start = info.header_offset + struct.calcsize("<4s2B4HL2L2H") + header[10]
            extra = raw[start : start + header[11]]
            while extra:
                kind, length = struct.unpack_from("<HH", extra)
                if kind == 1:
                    assert header[8] == header[9] == 0xFFFFFFFF, "a zip64 member's 32-bit sizes point to the field"
                    found[info.filename] = struct.unpack_from("<QQ", extra, 4)
                extra = extra[4 + length :]
    return found


@pytest.mark.parametrize("compression", ["none", "deflate"])
def test_episode_file_past_the_zip64_threshold_reads_back(tmp_path, monkeypatch, compression):
    """Episodes too large for plain zip headers go through zipfile with zip64 members and read back equal
    (the threshold is lowered to 64 bytes so that a small episode takes that path: its members over 64 bytes
    are written with zip64 headers, the others with plain ones)."""
    monkeypatch.setattr(npz_writer, "_ZIP64_THRESHOLD", 64)
    calls = []
    real = npz_writer._write_large_npz
    monkeypatch.setattr(npz_writer, "_write_large_npz", lambda *a: calls.append(a[0]) or real(*a))
    path = tmp_path / "env00001-episode00000002.npz"
    arrays, marker, size = _write_synthetic(path, 20, compression)
    assert calls == [str(path) + ".tmp"]
    assert size == os.path.getsize(path)
    large = {key + ".npy" for key, array in arrays.items() if array.nbytes > 64}
    assert large and large != {key + ".npy" for key in arrays}  # both kinds of member are in the file
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
        sizes = {info.filename: (info.file_size, info.compress_size) for info in archive.infolist()}
    zip64 = zip64_members(path)
    assert set(zip64) == large
    assert zip64 == {name: sizes[name] for name in large}
    with np.load(path, allow_pickle=False) as archive:
        loaded = {key: archive[key] for key in archive.files}
    validate_episode(loaded, marker, name=str(path))
    for key, array in arrays.items():
        np.testing.assert_array_equal(loaded[key], array, err_msg=key)


def test_zip64_members_reads_only_zip64_headers(tmp_path):
    """The zip64 check above sees a member forced to zip64 and no other (so it cannot pass on plain files)."""
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("plain", b"x" * 100)
        with archive.open("forced", "w", force_zip64=True) as f:
            f.write(b"y" * 10)
    assert zip64_members(path) == {"forced": (10, 10)}
