"""The reader treats a run directory as untrusted input: only ValueError comes out, memory stays bounded."""

import io
import json
import shutil
import struct
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers.synthetic import synthetic_description
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import forge_gpu


@pytest.fixture(scope="module")
def pristine(synthetic_run):
    """A small valid run (deflate), recorded once per module."""
    env = synthetic_description(num_envs=2, max_steps=5, images=True)
    directory, _ = synthetic_run(env, 12, seed=3, end_prob=0.4, compression="deflate")
    assert len(list(forge_gpu.reading.read_episodes(directory))) >= 2
    return directory


def copy_run(pristine, tmp_path) -> Path:
    target = tmp_path / "run"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(pristine, target)
    return target


def read_all(run, **kwargs):
    return [
        ep.steps for ep in forge_gpu.reading.read_episodes(run, options=forge_gpu.reading.EpisodeReadOptions(**kwargs))
    ]


def peak_bytes(fn) -> int:
    """The peak of Python's traced allocations, in bytes, while ``fn()`` runs."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def refused(run: Path, victim: Path):
    """A call that reads ``run`` and expects ValueError naming ``victim``."""

    def read() -> None:
        with pytest.raises(ValueError, match=victim.name):
            read_all(run)

    return read


def first_episode(run: Path) -> Path:
    return sorted(run.glob("env*.npz"))[0]


def rewrite_members(path: Path, edit) -> None:
    """Rewrite an episode archive member by member: ``edit(name, raw_bytes) -> (name, bytes) | None``."""
    with zipfile.ZipFile(path) as z:
        members = [(info.filename, z.read(info.filename)) for info in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, raw in members:
            out = edit(name, raw)
            if out is not None:
                z.writestr(out[0], out[1])


def patch_headers(path: Path, member_index: int, offset: int, value: int) -> None:
    """Set the 2-byte field at ``offset`` of the ``member_index``-th member's local header and at ``offset + 2``
    of its central-directory header (the central header has 2 more bytes before its common fields)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.infolist()[member_index]
    struct.pack_into("<H", data, info.header_offset + offset, value)
    central = [i for i in range(len(data) - 3) if data[i : i + 4] == b"PK\x01\x02"][member_index]
    struct.pack_into("<H", data, central + offset + 2, value)
    path.write_bytes(bytes(data))


#: The local-header offsets of a zip member's general-purpose flags and compression method.
FLAGS, METHOD = 6, 8


@pytest.mark.parametrize(
    "field, value",
    [
        (METHOD, 99),  # an unknown compression method: zipfile raises NotImplementedError
        (METHOD, 9),  # deflate64, which zipfile does not read
        (METHOD, 12),  # bzip2 over deflate data: OSError from bz2
        (FLAGS, 1),  # encrypted: zipfile raises RuntimeError
        (FLAGS, 1 << 5),  # compressed patched data: NotImplementedError
    ],
)
def test_unreadable_zip_members_are_value_errors(pristine, tmp_path, field, value):
    """Unknown compression methods, encryption and patched data in a member's headers are ValueError naming the file."""
    run = copy_run(pristine, tmp_path)
    victim = first_episode(run)
    patch_headers(victim, 1, field, value)
    with pytest.raises(ValueError, match=victim.name):
        read_all(run)


def test_bad_lzma_properties_are_a_value_error(pristine, tmp_path):
    """An lzma member whose properties do not decode (LZMAError inside zipfile) is a ValueError naming the file."""
    run = copy_run(pristine, tmp_path)
    victim = first_episode(run)
    rewrite_members(victim, lambda n, raw: (n, b"\x09\x04\x05\x00\xff\xff\xff\xff\xff" + raw))
    for k in range(len(zipfile.ZipFile(victim).infolist())):
        patch_headers(victim, k, METHOD, 14)
    with pytest.raises(ValueError, match=victim.name):
        read_all(run)


def npy_bytes(array, allow_pickle=False) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def test_object_and_pickled_members_are_refused(pristine, tmp_path):
    """A member with object dtype (pickled data) is refused with ValueError naming the file."""
    run = copy_run(pristine, tmp_path)
    victim = first_episode(run)
    payload = np.array([{"evil": 1}] * 3, dtype=object)
    rewrite_members(victim, lambda n, raw: (n, npy_bytes(payload, True)) if n == "reward.npy" else (n, raw))
    with pytest.raises(ValueError, match=victim.name):
        read_all(run)


def test_header_claiming_more_than_the_file_is_refused_before_allocation(pristine, tmp_path):
    """A member whose header claims a huge shape is refused from its header, allocating nothing big."""
    run = copy_run(pristine, tmp_path)
    victim = first_episode(run)

    def huge(name, raw):
        if name != "obs/proprio.npy":
            return name, raw
        header = {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)}
        buffer = io.BytesIO()
        np.lib.format.write_array_header_1_0(buffer, header)
        return name, buffer.getvalue() + raw[-64:]

    rewrite_members(victim, huge)
    assert peak_bytes(refused(run, victim)) < 32 << 20


def test_per_member_limit_is_configurable(pristine, tmp_path):
    """A member larger than max_member_bytes is refused; with a larger limit the run reads."""
    run = copy_run(pristine, tmp_path)
    assert read_all(run)
    with pytest.raises(ValueError, match="per-member limit"):
        read_all(run, max_member_bytes=64)


def test_decompression_bomb_is_refused(pristine, tmp_path):
    """A deflate member that expands beyond its declared size is refused, not decompressed whole."""
    run = copy_run(pristine, tmp_path)
    victim = first_episode(run)
    with zipfile.ZipFile(victim) as z:
        infos = z.infolist()
        members = {i.filename: z.read(i.filename) for i in infos}
    bomb = npy_bytes(np.zeros(1 << 22, np.float32))  # 16 MiB of zeros: deflates to ~16 KiB
    with zipfile.ZipFile(victim, "w", zipfile.ZIP_DEFLATED) as z:
        for name, raw in members.items():
            z.writestr(name, bomb if name == "reward.npy" else raw)
    # Lie in both the local header and the central directory: declare the original small size.
    data = bytearray(victim.read_bytes())
    small = len(members["reward.npy"])
    big = len(bomb)
    for offset in range(len(data) - 4):
        if data[offset : offset + 4] == struct.pack("<I", big):
            data[offset : offset + 4] = struct.pack("<I", small)
    victim.write_bytes(bytes(data))
    assert peak_bytes(refused(run, victim)) < 8 << 20


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda m: m.pop("seed"), ["seed"]),
        (lambda m: m.update(completed_episodes="many"), ["completed_episodes", "int"]),
        (lambda m: m.update(env_spec=[1, 2]), ["env_spec", "dict"]),
        (lambda m: m.update(status="paused"), ["status", "paused"]),
        (lambda m: m.update(schema_version=2), ["schema_version"]),
    ],
)
def test_manifest_errors_name_file_and_key(pristine, tmp_path, edit, words):
    """Missing manifest keys and wrong types become ValueError naming run.json and the key."""
    run = copy_run(pristine, tmp_path)
    manifest = json.loads((run / "run.json").read_text())
    edit(manifest)
    (run / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError) as info:
        read_all(run)
    for word in ["run.json", *words]:
        assert word in str(info.value)


def test_garbage_json_is_a_value_error(pristine, tmp_path):
    """Invalid JSON in the manifest or a marker is a ValueError naming the file."""
    run = copy_run(pristine, tmp_path)
    marker = sorted(run.glob("env*.json"))[0]
    marker.write_text("{not json")
    with pytest.raises(ValueError, match=marker.name):
        read_all(run)
    (run / "run.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="run.json"):
        read_all(run)


MUTATIONS = [
    *["flip", "truncate", "swap", "drop", "dtype", "nan", "huge_shape", "manifest_key", "manifest_bytes"],
    *["method", "flags", "npy_header"],
]
#: Broken .npy header texts (each padded to the original header's length).
NPY_HEADERS = [
    b"{'descr': 5, 'fortran_order': False, 'shape': (3,), }",
    b"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }",
    b"{'descr': '<f4', 'fortran_order': False, 'shape': (3.5,), }",
    b"{'descr': '<f4', 'fortran_order': False, 'shape': (" + b"(" * 150 + b")" * 150 + b",), }",
    b"{'descr': '<f4', 'fortran_order': 1, 'shape': (-3,), }",
    b"{'descr': '<M8[s]', 'fortran_order': False, 'shape': (3,), }",
    b"{'descr' '<f4', 'fortran_order': False}",
    b"\xff\xfe{'descr'}",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(MUTATIONS), seed=st.integers(0, 2**31 - 1))
def test_fuzzed_runs_only_raise_value_error(pristine, tmp_path, kind, seed):
    """Mutated episode files and manifests give valid episodes or ValueError, never another error."""
    rng = np.random.default_rng(seed)
    run = copy_run(pristine, tmp_path)
    victim = sorted(run.glob("env*.npz"))[rng.integers(2)]
    names = zipfile.ZipFile(victim).namelist()
    pick = names[rng.integers(len(names))]
    if kind == "flip":
        data = bytearray(victim.read_bytes())
        for _ in range(1 + rng.integers(8)):
            data[rng.integers(len(data))] ^= 1 << rng.integers(8)
        victim.write_bytes(bytes(data))
    elif kind == "truncate":
        data = victim.read_bytes()
        victim.write_bytes(data[: rng.integers(len(data))])
    elif kind == "swap":
        other = names[rng.integers(len(names))]
        rewrite_members(victim, lambda n, raw: ({pick: other, other: pick}.get(n, n), raw))
    elif kind == "drop":
        rewrite_members(victim, lambda n, raw: None if n == pick else (n, raw))
    elif kind in ("dtype", "nan", "huge_shape"):

        def edit(n, raw):
            if n != pick:
                return n, raw
            array = np.load(io.BytesIO(raw), allow_pickle=False)
            if kind == "dtype":
                array = array.astype(rng.choice(["<f8", "<i2", "|b1", "<U3"]))
            elif kind == "nan":
                array = array.astype(np.float32)
                array.reshape(-1)[rng.integers(max(array.size, 1))] = np.nan if array.size else 0
            else:
                buffer = io.BytesIO()
                shape = tuple(int(rng.integers(1, 10**9)) for _ in range(1 + rng.integers(4)))
                np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
                return n, buffer.getvalue() + raw[-16:]
            return n, npy_bytes(array)

        rewrite_members(victim, edit)
    elif kind in ("method", "flags"):
        value = int(rng.choice([1, 6, 9, 12, 14, 19, 97, 99, 255])) if kind == "method" else int(rng.integers(1 << 16))
        patch_headers(victim, names.index(pick), METHOD if kind == "method" else FLAGS, value)
    elif kind == "npy_header":
        text = NPY_HEADERS[rng.integers(len(NPY_HEADERS))]

        def replace_header(n, raw):
            if n != pick:
                return n, raw
            end = raw.index(b"}") + 1  # magic, version and length take 10 bytes; the header dict ends at "}"
            return n, raw[:10] + text.ljust(end - 10) + raw[end:]

        rewrite_members(victim, replace_header)
    elif kind == "manifest_key":
        manifest = json.loads((run / "run.json").read_text())
        key = sorted(manifest)[rng.integers(len(manifest))]
        manifest[key] = [None, "x", 1.5, {}, -1][rng.integers(5)]
        (run / "run.json").write_text(json.dumps(manifest))
    else:
        data = bytearray((run / "run.json").read_bytes())
        data[rng.integers(len(data))] = int(rng.integers(256))
        (run / "run.json").write_bytes(bytes(data))

    def read() -> None:
        try:
            for episode in forge_gpu.reading.read_episodes(run):
                assert episode.steps >= 1
        except ValueError:
            pass

    assert peak_bytes(read) < 64 << 20
