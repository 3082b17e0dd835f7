"""The image decoder (core/codecs.py: ``decode_frames``, ``decode_into``, and mapped windows' per-batch decode): every
codec's frames decode bit for bit as the previous decoder gave them (one frame at a time, its words undone in int64:
kept below as the reference), on frames chosen to reach every bit (random words, NaN and infinite floats, the
quantized range's ends), a group of frames at a time and across groups, over a pool, into scattered places; and
mapped windows over runs of each codec, repeated and padded windows included, hold the frames that reference decodes
from the runs' own payloads. The tests of words wider than a byte run on both decoders: numpy's steps and the compiled
transforms (numba; skipped where it is not installed)."""

from __future__ import annotations

import concurrent.futures
import io
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers.synthetic import (
    SyntheticSim,
    downgrade_packed_run,
    make_batches,
    record,
    synthetic_description,
)

import forge_gpu._src.core.codecs as codecs
from forge_gpu._src.core.codecs import CodecSpec, decode_frames, decode_into, encode_frames
from forge_gpu.reading import Windows
from forge_gpu.recording import PackedRecorder


def previous_decode(spec: CodecSpec, payload, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """One payload decoded as the previous decoder did it: decompressed alone, its byte planes transposed to words,
    then (uint16, float32 and quantized) each word as int64, zigzag undone, summed along its row and wrapped to the
    words' width with ``%`` and ``where``; quantized ``q * step`` in float64, cast to float32. Images: Pillow."""
    import pyarrow as pa
    from PIL import Image

    dtype = np.dtype(dtype)
    if spec.name in ("png", "jpeg", "webp"):
        frame = np.asarray(Image.open(io.BytesIO(bytes(payload))))
        if frame.ndim == 3 and frame.shape[2] == 3 and len(shape) == 3 and shape[2] == 4:
            frame = np.concatenate([frame, np.full((*frame.shape[:2], 1), 255, np.uint8)], axis=2)
        return frame.reshape(shape)
    width = 4 if spec.name == "quantized" else dtype.itemsize
    size = int(np.prod(shape)) * width
    if spec.name == "lz4":
        data = pa.CompressedInputStream(pa.BufferReader(bytes(payload)), "lz4").read()
    else:
        data = pa.Codec("zstd").decompress(bytes(payload), decompressed_size=size, asbytes=True)
    planes = np.frombuffer(data, np.uint8)
    assert planes.size == size
    if width == 1:
        return planes.view(dtype).reshape(shape)
    unsigned = np.dtype(f"<u{width}")
    words = np.ascontiguousarray(planes.reshape(width, -1).T).view(unsigned).reshape(-1)
    bits = 8 * width
    z = words.astype(np.int64).reshape(shape[0], -1)
    r = (z >> 1) ^ -(z & 1)
    values = np.cumsum(r, axis=1) % (1 << bits)
    signed = np.where(values >= 1 << (bits - 1), values - (1 << bits), values).reshape(-1)
    if spec.name == "quantized":
        return (signed * (spec.param("step_um") * 1e-6)).astype(np.float32).reshape(shape)
    return (signed % (1 << bits)).astype(unsigned).view(dtype.newbyteorder("<")).astype(dtype).reshape(shape)


def previous_frames(spec: CodecSpec, encoded, shape, dtype) -> np.ndarray:
    frames = [previous_decode(spec, encoded.frame(i), tuple(shape), dtype) for i in range(len(encoded))]
    return np.stack(frames) if frames else np.zeros((0, *shape), dtype)


def bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(np.uint8)


def hard_frames(rng, shape: tuple, dtype, n: int = 7) -> np.ndarray:
    """``n`` frames that reach every bit of their words: random words (float32: NaNs, infinities and subnormals
    among them), a frame of each extreme, and a smooth one (small differences, as a rendered image has)."""
    dtype = np.dtype(dtype)
    frames = rng.integers(0, 256, (n, *shape, dtype.itemsize), dtype=np.uint8).view(dtype).reshape(n, *shape)
    if dtype.kind == "f":
        frames[1] = np.inf
        frames.reshape(n, -1)[2, ::3] = np.nan
        frames.reshape(n, -1)[2, 1::3] = -np.inf
    else:
        frames[1] = np.iinfo(dtype).max
        frames[2] = np.iinfo(dtype).min
    frames[3] = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    return frames


def quantized_frames(rng, shape: tuple, step_um: int, n: int = 6) -> np.ndarray:
    """Depth-like frames for ``quantized`` at ``step_um``: values near both ends of its range (2**31 steps),
    zeros, sign changes and jumps from one end to the other (differences that wrap 32 bits), and a smooth ramp."""
    top = (2**31 - 1024) * step_um * 1e-6  # float32 rounds to within 128 steps up there
    frames = rng.uniform(-top, top, (n, *shape)).astype(np.float32)
    frames[1] = np.float32(top) * np.where(np.arange(frames[1].size) % 2, 1, -1).reshape(shape)
    frames[2] = 0
    frames[3] = np.linspace(0.2, 3.5, frames[3].size, dtype=np.float32).reshape(shape)
    frames[4].reshape(-1)[::5] = 0
    return frames


@pytest.fixture(params=["numpy", "compiled"])
def decoder(request, monkeypatch):
    """Each decoder of the words in turn: numpy's steps (the compiled transforms off) and numba's compiled ones."""
    monkeypatch.setattr(codecs, "_COMPILED", request.param == "compiled")
    if request.param == "compiled" and codecs._kernels() is None:
        pytest.skip("numba is not installed: the compiled decode is not there to test")
    assert (codecs._kernels() is not None) == (request.param == "compiled")
    return request.param


CASES = [
    ("zstd", (5, 7), np.uint8),
    ("zstd", (6, 5, 3), np.uint8),
    ("zstd", (4, 3, 4), np.uint8),
    ("zstd", (5, 7), np.uint16),
    ("zstd", (3, 4, 3), np.uint16),
    ("zstd", (5, 7), np.float32),
    ("zstd", (4, 6, 2), np.float32),
    ("zstd", (1, 9), np.float32),
    ("zstd", (9, 1), np.float32),
    ("lz4", (5, 7), np.uint8),
    ("lz4", (5, 7), np.uint16),
    ("lz4", (6, 4, 3), np.float32),
]


@pytest.mark.parametrize("name,shape,dtype", CASES)
@pytest.mark.parametrize("group_bytes", [1, 300, None])
def test_zstd_and_lz4_frames_decode_bit_for_bit_as_before(name, shape, dtype, group_bytes, monkeypatch, decoder):
    """Every bit of every word back, as the previous decoder gave it: one frame per group, groups that split the
    frames unevenly, and the default group (every frame at once); over a pool of 3 too."""
    if group_bytes is not None:
        monkeypatch.setattr(codecs, "_GROUP_BYTES", group_bytes)
    frames = hard_frames(np.random.default_rng(len(shape) + np.dtype(dtype).itemsize), shape, dtype)
    spec = CodecSpec(name)
    encoded = encode_frames(spec, frames)
    expected = previous_frames(spec, encoded, shape, dtype)
    assert np.array_equal(bits(expected), bits(frames))  # the codec is lossless: the reference gives them back
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for use in (None, pool):
            got = decode_frames(spec, encoded, shape, dtype, pool=use)
            assert got.shape == frames.shape and got.dtype == frames.dtype
            assert np.array_equal(bits(got), bits(expected)), (name, shape, dtype, use)


@pytest.mark.parametrize("step_um", [1, 10, 7, 1_000_000])
@pytest.mark.parametrize("shape", [(5, 7), (6, 4, 1), (1, 8)])
@pytest.mark.parametrize("group_bytes", [1, 300, None])
def test_quantized_frames_decode_bit_for_bit_as_before(step_um, shape, group_bytes, monkeypatch, decoder):
    """Quantized depth gives the float32 the previous decoder gave, bit for bit (q * step rounded once from
    float64), across the range's ends and wrapping differences; within step / 2 of the frames, 0 at 0."""
    if group_bytes is not None:
        monkeypatch.setattr(codecs, "_GROUP_BYTES", group_bytes)
    frames = quantized_frames(np.random.default_rng(step_um), shape, step_um)
    spec = CodecSpec("quantized", (("step_um", step_um),))
    encoded = encode_frames(spec, frames)
    expected = previous_frames(spec, encoded, shape, np.float32)
    step = step_um * 1e-6
    assert np.abs(expected.astype(np.float64) - frames).max() <= step / 2 + np.spacing(np.abs(frames).max())
    assert (expected[frames == 0] == 0).all()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for use in (None, pool):
            got = decode_frames(spec, encoded, shape, np.float32, pool=use)
            assert got.dtype == np.float32 and np.array_equal(bits(got), bits(expected)), (step_um, shape, use)


@pytest.mark.parametrize(
    "name,shape", [("png", (6, 5, 3)), ("png", (6, 5)), ("jpeg", (16, 16, 3)), ("webp", (8, 8, 4))]
)
def test_image_codecs_decode_as_pillow_does(name, shape):
    frames = np.random.default_rng(3).integers(0, 256, (5, *shape), dtype=np.uint8)
    if name == "webp":
        frames[..., 3] = 255
    spec = CodecSpec(name)
    encoded = encode_frames(spec, frames)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = decode_frames(spec, encoded, shape, np.uint8, pool=pool)
    assert np.array_equal(got, previous_frames(spec, encoded, shape, np.uint8))


@pytest.mark.parametrize("name", ["zstd", "quantized", "lz4", "png"])
def test_decode_into_writes_exactly_the_places_given(name, monkeypatch, decoder):
    """Payload i lands in ``out[places[i]]``, from views of one buffer; every other row keeps what it held."""
    monkeypatch.setattr(codecs, "_GROUP_BYTES", 200)  # several groups
    rng = np.random.default_rng(5)
    shape, dtype = ((5, 6), np.float32) if name != "png" else ((5, 6, 3), np.uint8)
    frames = hard_frames(rng, shape, dtype) if name != "quantized" else quantized_frames(rng, shape, 10, 7)
    spec = CodecSpec(name)
    encoded = encode_frames(spec, frames)
    view = memoryview(encoded.payload)
    payloads = [view[encoded.offsets[i] : encoded.offsets[i + 1]] for i in range(len(frames))]
    places = np.array([9, 0, 4, 11, 2, 7, 5])
    out = np.full((12, *shape), 77, dtype)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        decode_into(spec, payloads, out, places=places, pool=pool)
    expected = previous_frames(spec, encoded, shape, dtype)
    assert np.array_equal(bits(out[places]), bits(expected))
    untouched = np.setdiff1d(np.arange(12), places)
    assert (out[untouched] == 77).all()
    with pytest.raises(ValueError, match="2 payloads for 3 places"):
        decode_into(spec, payloads[:2], out, places=places[:3])


def test_a_bad_payload_among_good_ones_is_refused_naming_its_codec(decoder):
    frames = quantized_frames(np.random.default_rng(1), (4, 4), 10)
    spec = CodecSpec("quantized")
    encoded = encode_frames(spec, frames)
    view = memoryview(encoded.payload)
    payloads = [view[encoded.offsets[i] : encoded.offsets[i + 1]] for i in range(len(frames))]
    payloads[3] = payloads[3][:-2]
    with pytest.raises(ValueError, match="a quantized frame does not decode"):
        decode_into(spec, payloads, np.zeros((len(frames), 4, 4), np.float32))


@pytest.mark.parametrize("spec", ["zstd", "quantized"])
def test_frames_decode_into_a_strided_out_and_refuse_a_place_outside_it(spec, decoder):
    """``out`` that is not one C-ordered block (every other column of a wider array) gets the same frames; a place
    outside ``out``'s rows is refused (IndexError) by either decoder, a negative one counts from the end."""
    spec = CodecSpec(spec)
    frames = quantized_frames(np.random.default_rng(4), (5, 6), 10)
    encoded = encode_frames(spec, frames)
    expected = previous_frames(spec, encoded, (5, 6), np.float32)
    wide = np.zeros((len(frames), 5, 12), np.float32)
    got = decode_frames(spec, encoded, (5, 6), np.float32, out=wide[:, :, ::2])
    assert np.array_equal(bits(np.ascontiguousarray(got)), bits(expected)) and (wide[:, :, 1::2] == 0).all()
    view = memoryview(encoded.payload)
    payloads = [view[encoded.offsets[i] : encoded.offsets[i + 1]] for i in range(2)]
    out = np.zeros((3, 5, 6), np.float32)
    decode_into(spec, payloads, out, places=np.array([-1, 0]))
    assert np.array_equal(bits(out[[2, 0]]), bits(expected[:2])) and (out[1] == 0).all()
    with pytest.raises(IndexError):
        decode_into(spec, payloads, out, places=np.array([0, 3]))


def test_the_compiled_decode_works_where_no_cache_directory_is_writable(tmp_path):
    """Where numba finds no directory to cache its compiled code in (an install directory and cache directory
    that cannot be written), the transforms compile for the process and decode as the reference does."""
    pytest.importorskip("numba", reason="numba is not installed: the compiled decode is not there to test")
    script = """
import numpy as np
import forge_gpu._src.core.codecs as codecs
from forge_gpu._src.core.codecs import CodecSpec, decode_frames, encode_frames
frames = np.linspace(0, 3, 5 * 6 * 3, dtype=np.float32).reshape(3, 5, 6)
spec = CodecSpec("quantized")
got = decode_frames(spec, encode_frames(spec, frames), (5, 6), np.float32)
assert codecs._kernels() is not None
codecs._COMPILED = False
expected = decode_frames(spec, encode_frames(spec, frames), (5, 6), np.float32)
assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))
print("decoded")
"""
    blocked = tmp_path / "file"
    blocked.write_text("")  # a cache directory below a file: never writable, whoever runs the test
    env = dict(
        os.environ, NUMBA_CACHE_DIR=str(blocked / "cache"), NUMBA_CACHE_LOCATOR_CLASSES="UserProvidedCacheLocator"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "decoded", done.stderr


RUNS = [
    {"rgb": "zstd", "depth": "quantized"},  # the default codecs
    {"rgb": "png", "depth": "zstd"},
    {"rgb": "jpeg:80", "depth": "lz4"},
    {"rgb": "lz4", "depth": "quantized:step_um=3"},
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Synthetic runs (3 envs, noise frames of 4 x 5) recorded with each codec pair of RUNS."""
    env = synthetic_description(num_envs=3, max_steps=6, images=True)
    batches = make_batches(SyntheticSim(env, seed=7), 30)
    out = []
    for k, asked in enumerate(RUNS):
        directory = tmp_path_factory.mktemp(f"run{k}")
        record(directory / "run", env, batches, recorder=PackedRecorder, codecs=asked)
        out.append(directory / "run")
    return out


def reference_batch(windows: Windows, indices: np.ndarray) -> dict[str, np.ndarray]:
    """The batch's encoded fields decoded payload by payload with the previous decoder, from the payloads the batch
    gathers undecoded (``batch(encoded=True)``)."""
    encoded = windows.batch(indices, encoded=True)
    out = {}
    for name, (shape, dtype) in windows.encoded_fields.items():
        frames = encoded[name]
        decoded = previous_frames(frames.spec, frames, shape, dtype)
        out[name] = decoded.reshape(len(indices), windows.history, *shape)
    return out


@pytest.mark.parametrize("k", range(len(RUNS)))
@pytest.mark.parametrize("pad", [False, True])
def test_mapped_windows_hold_the_frames_the_previous_decoder_gives(runs, k, pad, monkeypatch, decoder):
    """Mapped windows over a run of each codec pair: every window, windows repeated, padded windows (frames repeated
    within a window) and an empty batch give, bit for bit, the frames the previous decoder decodes from the payloads;
    the raw columns are those of the same windows read in memory, the arrays in the table's column order."""
    monkeypatch.setattr(codecs, "_GROUP_BYTES", 256)  # several groups per batch
    mapped = Windows(runs[k], history=3, horizon=2, pad=pad, mmap=True)
    loaded = Windows(runs[k], history=3, horizon=2, pad=pad)
    assert set(mapped.encoded_fields) == {"obs/rgb", "obs/depth"} and len(mapped) == len(loaded) > 10
    everything = np.arange(len(mapped))
    repeated = np.random.default_rng(k).integers(0, len(mapped), 40)
    for indices in (everything, repeated, everything[::-1], np.zeros(0, np.int64)):
        got = mapped.batch(indices)
        expected = reference_batch(mapped, indices)
        plain = loaded.batch(indices)
        assert list(got) == list(plain)
        for name, values in got.items():
            if name in expected:
                assert values.dtype == expected[name].dtype and values.shape == expected[name].shape
                assert np.array_equal(bits(values), bits(expected[name])), (RUNS[k], name)
            elif isinstance(values, np.ndarray):
                assert np.array_equal(values, plain[name]), name
            else:
                assert values == plain[name], name


def test_mapped_windows_decode_into_the_arrays_empty_makes(runs, decoder):
    """With ``empty`` (a DataLoader worker's shared buffer), the decoded frames are written into the arrays it
    makes."""
    made = []

    def empty(shape, dtype):
        made.append(np.empty(shape, dtype))
        return made[-1]

    mapped = Windows(runs[0], history=2, horizon=1, mmap=True)
    indices = np.array([3, 1, 3, 0])
    got = mapped.batch(indices, empty=empty)
    expected = reference_batch(mapped, indices)
    for name in ("obs/rgb", "obs/depth"):
        assert any(np.shares_memory(got[name], a) for a in made)
        assert np.array_equal(bits(got[name]), bits(expected[name]))


@pytest.mark.parametrize("version", [1, 2])
def test_windows_over_an_older_layout_read_as_before_mapped_or_not(tmp_path, version):
    """A run of an older layout (raw images) gives the same windows mapped and loaded: the encoded fields' path
    leaves raw columns as they were."""
    env = synthetic_description(num_envs=3, max_steps=5, images=True, state=version > 1, params=version > 1)
    record(
        tmp_path / "run",
        env,
        make_batches(SyntheticSim(env, seed=2), 20),
        recorder=PackedRecorder,
        codecs={"*": "none"},
    )
    run = tmp_path / "old"
    shutil.copytree(tmp_path / "run", run)
    downgrade_packed_run(run, version)
    mapped = Windows(run, history=2, horizon=2, pad=True, mmap=True)
    loaded = Windows(tmp_path / "run", history=2, horizon=2, pad=True)
    assert not mapped.encoded_fields and len(mapped) == len(loaded)
    indices = np.random.default_rng(0).integers(0, len(mapped), 30)
    got, expected = mapped.batch(indices), loaded.batch(indices)
    assert list(got) == list(expected)
    for name, values in got.items():
        assert np.array_equal(values, expected[name]) if isinstance(values, np.ndarray) else values == expected[name]


def test_mapped_windows_over_a_dataset_whose_runs_store_a_field_with_different_codecs(tmp_path, decoder):
    """A dataset root of two runs, one at the default codecs and one lossless (png rgb, zstd depth): each run's frames
    decode with its own codec, in one batch, as the previous decoder gives them."""
    from forge_gpu.recording import write_dataset_manifest

    env = synthetic_description(num_envs=3, max_steps=6, images=True)
    results = []
    for worker, asked in enumerate(({"rgb": "zstd", "depth": "quantized"}, {"rgb": "png", "depth": "zstd"})):
        name = f"worker-{worker:03d}"
        sim = SyntheticSim(env, seed=worker)
        record(tmp_path / "data" / name, env, make_batches(sim, 20), recorder=PackedRecorder, codecs=asked)
        results.append(
            {"path": name, "run_id": name, "worker": worker, "device": "cpu", "status": "closed"}
            | {"episodes": len(sim.completed), "seed": worker, "error": None}
        )
    write_dataset_manifest(tmp_path / "data", results)
    mapped = Windows(tmp_path / "data", history=2, horizon=1, mmap=True)
    assert len(mapped) > 10
    indices = np.random.default_rng(2).integers(0, len(mapped), 50)
    indices[:2] = [0, len(mapped) - 1]  # a window of each run
    got = mapped.batch(indices)
    for name, (shape, dtype) in mapped.encoded_fields.items():
        frames = np.concatenate(
            [previous_frames(f.spec, f, shape, dtype) for f in (mapped.batch([i], encoded=True)[name] for i in indices)]
        )
        assert np.array_equal(bits(got[name]), bits(frames.reshape(got[name].shape))), name
