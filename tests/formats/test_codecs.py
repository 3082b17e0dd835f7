"""Image codecs (layout 5, docs/FORMAT.md "Encoded fields"): every codec round-trips real rendered frames within its
stated bound; a run's frames decode with pyarrow, Pillow and numpy alone as the format page says; a damaged payload
is refused by its block's checksum; the recorder takes frames the producer encoded; convert re-encodes both ways;
bad codec options are refused and create nothing."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

import forge_gpu
from forge_gpu._src.core.codecs import (
    CODECS,
    CodecSpec,
    EncodedFrames,
    decode_frames,
    encode_frames,
)
from forge_gpu.curation import convert_run
from forge_gpu.reading import EpisodeReadOptions, Windows
from forge_gpu.recording import PackedRecorder


@pytest.fixture(scope="module")
def rendered():
    """Real frames of the reach task's camera at 32 x 32 (2 envs, a few steps of the expert): rgb and depth."""
    env = forge_gpu.sim.make("reach", num_envs=2, device="cpu", seed=4, **{"params.image_size": 32})
    policy = forge_gpu.sim.make_policy("expert", env)
    env.reset()
    rgb, depth = [], []
    for _ in range(6):
        env.step(policy(env.observation))
        rgb.append(np.array(env.observation["rgb"]))
        depth.append(np.array(env.observation["depth"]))
    return np.concatenate(rgb), np.concatenate(depth)


def psnr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each frame's PSNR [dB], peak 255."""
    mse = ((a.astype(np.float64) - b) ** 2).reshape(len(a), -1).mean(axis=1)
    return 10 * np.log10(255.0**2 / np.maximum(mse, 1e-12))


def test_every_codec_round_trips_real_rendered_frames(rendered):
    """Lossless codecs give every bit back; jpeg and webp keep every frame's PSNR above their stated bound (at the
    default quality and at 75); quantized keeps every value within step_um / 2 and 0 at 0. Over a thread pool too."""
    import concurrent.futures

    rgb, depth = rendered
    assert rgb.dtype == np.uint8 and depth.dtype == np.float32 and (depth > 0).any() and rgb.std() > 0
    tried = set()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for name, codec in CODECS.items():
            if name == "none":
                continue
            for frames in (rgb, depth):
                spec = CodecSpec(name)
                try:
                    spec.check(frames.shape[1:], frames.dtype, field="f")
                except ValueError:
                    continue
                tried.add(name)
                encoded = encode_frames(spec, frames, pool=pool)
                assert len(encoded) == len(frames) and encoded.nbytes < frames.nbytes
                back = decode_frames(spec, encoded, frames.shape[1:], frames.dtype, pool=pool)
                assert back.shape == frames.shape and back.dtype == frames.dtype
                if codec.lossless:
                    assert np.array_equal(back.view(np.uint8), frames.view(np.uint8)), name
                elif name == "quantized":
                    step = spec.param("step_um") * 1e-6
                    assert np.abs(back - frames).max() <= step / 2 + np.spacing(np.abs(frames).max()), name
                    assert (back[frames == 0] == 0).all()
                else:
                    for quality in (spec.param("quality"), 75):
                        at = CodecSpec(name, (("quality", quality),))
                        out = decode_frames(at, encode_frames(at, frames), frames.shape[1:], frames.dtype)
                        assert psnr(out, frames).min() >= codec.min_psnr, (name, quality)
    assert tried == set(CODECS) - {"none"}


def format_page_decode():
    """The ``decode`` function of docs/FORMAT.md "Encoded fields" (its code block, run without its last line, which
    needs a table): numpy, pyarrow and Pillow, no forge_gpu."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md").read_text()
    section = page[page.index("## Encoded fields") : page.index("## The commit log")]
    code = next(block for block in section.split("```python\n")[1:] if "def decode(" in block).split("```")[0]
    names: dict = {}
    exec(compile(code.rsplit("\nframes = ", 1)[0], "docs/FORMAT.md", "exec"), names)
    return names["decode"]


def independent_frames(run: Path) -> dict[str, np.ndarray]:
    """Every committed row of every column, decoded as docs/FORMAT.md "Encoded fields" decodes a frame (its own
    code), without forge_gpu: column -> [rows, ...] array."""
    import pyarrow as pa

    decode = format_page_decode()
    manifest = json.loads((run / "run.json").read_text())
    lines = [json.loads(line) for line in (run / "commits.jsonl").read_text().splitlines()]
    out: dict[str, list] = {}
    for segment in sorted({c["segment"] for c in lines}):
        reader = pa.ipc.open_stream(pa.memory_map(str(run / f"segment-{segment:06d}.arrows")))
        for _ in (c for c in lines if c["segment"] == segment):
            batch = reader.read_next_batch()
            for field in batch.schema:
                shape = json.loads(field.metadata[b"shape"])
                column = batch.column(field.name)
                if field.name not in manifest["codecs"]:
                    values = column.flatten() if shape else column
                    out.setdefault(field.name, []).append(values.to_numpy(zero_copy_only=False).reshape(-1, *shape))
                    continue
                codec = manifest["codecs"][field.name]
                assert json.loads(field.metadata[b"codec"]) == codec
                assert set(field.metadata) == {b"shape", b"dtype", b"codec"}
                dtype = np.dtype(field.metadata[b"dtype"].decode())
                frames = [decode(payload, codec, tuple(shape), dtype) for payload in column.to_pylist()]
                out.setdefault(field.name, []).append(np.stack(frames))
    return {name: np.concatenate(parts) for name, parts in out.items()}


@pytest.mark.parametrize("codecs", [{}, {"rgb": "png", "depth": "lz4"}, {"rgb": "jpeg:80", "depth": "zstd"}])
def test_an_independent_decode_of_a_collected_run_agrees_with_forge_gpus(tmp_path, codecs):
    """A reach run (real frames, 32 px) collected with the default codecs and with others reads the same through
    forge_gpu and through the independent decoder of the format page."""
    env = forge_gpu.sim.make("reach", num_envs=2, device="cpu", seed=1, max_steps=6, **{"params.image_size": 32})
    policy = forge_gpu.sim.make_policy("expert", env)
    forge_gpu.recording.collect(
        env, policy, str(tmp_path / "run"), episodes=2, options=forge_gpu.recording.RecordingOptions(codecs=codecs)
    )
    manifest = forge_gpu.formats.read_manifest(tmp_path / "run")
    assert manifest["layout_version"] == 5 and set(manifest["codecs"]) == {"obs/rgb", "obs/depth"}
    expected = {"obs/rgb": codecs.get("rgb", "zstd"), "obs/depth": codecs.get("depth", "quantized")}
    assert {c: CodecSpec.from_json(s, name="run.json") for c, s in manifest["codecs"].items()} == {
        c: CodecSpec.parse(s) for c, s in expected.items()
    }
    mine = independent_frames(tmp_path / "run")
    episodes = list(forge_gpu.reading.read_episodes(tmp_path / "run"))
    assert episodes
    lines = [json.loads(line) for line in (tmp_path / "run" / "commits.jsonl").read_text().splitlines()]
    first = np.concatenate([np.asarray(c["episodes"]["first_row"], np.int64) for c in lines])
    stride = np.concatenate([np.asarray(c["episodes"]["stride"], np.int64) for c in lines])
    for episode, row, step in zip(episodes, first, stride, strict=True):
        rows = row + np.arange(episode.steps + 1) * step
        for f in ("rgb", "depth"):
            theirs = np.concatenate([episode.obs[f], episode.next[f][-1:]])
            assert theirs.dtype == mine[f"obs/{f}"].dtype and np.array_equal(theirs, mine[f"obs/{f}"][rows]), f


def test_a_damaged_payload_is_refused_by_its_blocks_checksum_before_any_decode(tmp_path, monkeypatch):
    """A byte flipped inside an encoded depth payload: reading and Windows raise the block's checksum error, and no
    frame of that block was handed to a decoder; verify lists the block and exits 1."""
    import pyarrow as pa

    from forge_gpu._src.formats.packed import layout as schema

    env = synthetic_description(num_envs=3, max_steps=5, images=True)
    record(tmp_path / "run", env, make_batches(SyntheticSim(env, seed=1), 12), recorder=PackedRecorder, codecs={})
    run = tmp_path / "run"
    segment = run / "segment-000000.arrows"
    whole = pa.memory_map(str(segment)).read_buffer()
    batch = pa.ipc.open_stream(pa.BufferReader(whole)).read_next_batch()
    at = batch.column("obs/depth").buffers()[2].address - whole.address + 7
    data = bytearray(segment.read_bytes())
    data[at] ^= 0x40
    segment.write_bytes(bytes(data))
    decoded = []
    monkeypatch.setattr(schema, "decode_frames", lambda *a, **k: decoded.append(a) or pytest.fail("decoded"))
    for attempt in (lambda: list(forge_gpu.reading.read_episodes(run)), lambda: Windows(run, 1, 1)):
        with pytest.raises(ValueError, match="fails its checksum"):
            attempt()
    assert not decoded
    assert not forge_gpu.reading.verify_run(run)["ok"]


def test_the_recorder_takes_frames_the_producer_encoded(tmp_path):
    """Batches whose rgb and depth come as EncodedFrames (as the GPU path hands them), mixed with raw ones, make
    the same run as raw batches: equal episodes, equal statistics; frames of another codec are refused."""
    env = synthetic_description(num_envs=3, max_steps=5, images=True)
    batches = make_batches(SyntheticSim(env, seed=2), 14, resets_at=(6,))
    codecs = {"rgb": CodecSpec("png"), "depth": CodecSpec("zstd")}
    record(tmp_path / "raw", env, batches, recorder=PackedRecorder, codecs=codecs)
    recorder = PackedRecorder(tmp_path / "handed", env, codecs=codecs)
    for k, (observation, result) in enumerate(batches):
        if k % 3:  # every third batch raw
            observation = {**observation, **{f: encode_frames(s, observation[f]) for f, s in codecs.items()}}
        recorder.append(observation, result)
    wrong = {**batches[0][0], "rgb": encode_frames(CodecSpec("jpeg"), batches[0][0]["rgb"])}
    with pytest.raises(ValueError, match=r"observation\['rgb'\]: encoded frames must be 3 frames of codec png"):
        recorder.append(wrong, batches[0][1])
    recorder.close()
    a, b = (list(forge_gpu.reading.read_episodes(tmp_path / name)) for name in ("raw", "handed"))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        for f in x.obs:
            assert np.array_equal(x.obs[f], y.obs[f]) and np.array_equal(x.next[f], y.next[f]), f
    raw, handed = (json.loads((tmp_path / name / "stats.json").read_text())["fields"] for name in ("raw", "handed"))
    assert raw.keys() == handed.keys() and {"obs/rgb", "obs/depth"} <= raw.keys()
    for key, entry in raw.items():  # the same frames, summed in another order (the writer's share merged at close)
        assert entry["count"] == handed[key]["count"] > 0, key
        for stat in ("mean", "std", "min", "max"):
            assert np.allclose(entry[stat], handed[key][stat], rtol=1e-9), (key, stat)


def test_encoded_frames_take_and_concatenate_keep_each_payload():
    """EncodedFrames.take gathers payloads in any order with repeats, concatenate joins them; bad offsets refused."""
    frames = np.arange(4 * 6 * 5 * 3, dtype=np.uint8).reshape(4, 6, 5, 3)
    spec = CodecSpec("png")
    encoded = encode_frames(spec, frames)
    picked = encoded.take(np.array([3, 0, 3]))
    assert np.array_equal(decode_frames(spec, picked, (6, 5, 3), np.uint8), frames[[3, 0, 3]])
    joined = EncodedFrames.concatenate([encoded, picked])
    assert np.array_equal(decode_frames(spec, joined, (6, 5, 3), np.uint8), frames[[0, 1, 2, 3, 3, 0, 3]])
    with pytest.raises(ValueError, match="must rise from 0"):
        EncodedFrames(spec, encoded.payload, encoded.offsets[::-1].copy())


def test_convert_re_encodes_both_ways_and_mapped_windows_decode_on_access(tmp_path):
    """encoded -> raw -> encoded again with other codecs: lossless codecs keep every bit, run.json says what each
    run holds; a mapped Windows of an encoded run gives the loaded one's batches."""
    env = synthetic_description(num_envs=3, max_steps=5, images=True)
    record(tmp_path / "a", env, make_batches(SyntheticSim(env, seed=3), 16), recorder=PackedRecorder)
    convert_run(tmp_path / "a", tmp_path / "raw", to="packed", codecs={"*": "none"})
    convert_run(tmp_path / "raw", tmp_path / "b", to="packed", codecs={"rgb": "webp", "depth": "lz4"})
    convert_run(tmp_path / "b", tmp_path / "c", to="packed")  # kept: the source's codecs
    codecs = {name: forge_gpu.formats.read_manifest(tmp_path / name)["codecs"] for name in ("a", "raw", "b", "c")}
    assert codecs["raw"] == {} and codecs["b"] == codecs["c"]
    assert codecs["b"] == {"obs/rgb": {"codec": "webp", "quality": 90}, "obs/depth": {"codec": "lz4"}}
    runs = {name: list(forge_gpu.reading.read_episodes(tmp_path / name)) for name in ("a", "raw", "b")}
    for x, y, z in zip(runs["a"], runs["raw"], runs["b"], strict=True):
        assert np.array_equal(x.obs["depth"], y.obs["depth"]) and np.array_equal(y.obs["depth"], z.obs["depth"])
        assert np.array_equal(x.obs["rgb"], y.obs["rgb"])
    loaded, mapped = Windows(tmp_path / "b", 2, 2), Windows(tmp_path / "b", 2, 2, mmap=True)
    order = np.random.default_rng(0).permutation(len(loaded))[:7]
    mine, theirs = mapped.batch(order), loaded.batch(order)
    assert all(np.array_equal(mine[k], theirs[k]) for k in ("obs/rgb", "obs/depth", "action"))


def test_bad_codec_options_are_refused_naming_them_and_create_nothing(tmp_path, capsys):
    """A codec on a field the run lacks, on a field that is not an image, or one that does not take the field's
    frames: ValueError naming it, no directory; the command line says so in one line."""
    from forge_gpu.cli import main

    env = synthetic_description(num_envs=2, max_steps=4, images=True)
    for codecs, words in (
        ({"left": "png"}, "the run has no such field"),
        ({"proprio": "zstd"}, "'proprio': it is float32\\[3\\], not an image"),
        ({"depth": "jpeg"}, "codec 'jpeg' for field 'depth': takes uint8"),
        ({"rgb": "jpeg:quality=101"}, "quality=101 must be an integer in \\[1, 100\\]"),
    ):
        with pytest.raises(ValueError, match=words):
            PackedRecorder(tmp_path / "run", env, codecs=codecs)
        assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="codecs apply to the packed format"):
        forge_gpu.recording.RecordingOptions(format="npz", codecs={"rgb": "png"})
    assert main(["collect", "reach", "--codec", "rgb=gif", "--out", str(tmp_path / "cli")]) == 2
    assert "--codec rgb=gif: codec 'gif': expected one of" in capsys.readouterr().err
    assert not (tmp_path / "cli").exists()


def test_a_window_dataset_over_an_encoded_run_decodes_in_its_workers(tmp_path):
    """DataLoader workers (forked) decode an encoded run's frames in their own pools: every window once, equal to
    the ones read in this process."""
    torch = pytest.importorskip("torch")
    from forge_gpu.reading import WindowDataset

    env = synthetic_description(num_envs=3, max_steps=5, images=True)
    record(tmp_path / "run", env, make_batches(SyntheticSim(env, seed=6), 14), recorder=PackedRecorder)
    Windows(tmp_path / "run", 1, 1, mmap=True).batch(np.arange(2))  # this process's pool exists before the fork
    dataset = WindowDataset(tmp_path / "run", history=1, horizon=1, observation_keys=["rgb", "depth"])
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    seen = {(int(w["env_id"]), int(w["episode_id"]), int(w["t"])): w for w in loader}
    options = EpisodeReadOptions(observation_keys=["rgb", "depth"])
    expected = list(forge_gpu.reading.action_windows(tmp_path / "run", options=options))
    assert len(seen) == len(expected) > 0
    for w in expected:
        got = seen[(w["env_id"], w["episode_id"], w["t"])]
        assert np.array_equal(got["obs/rgb"].numpy(), w["obs/rgb"]) and np.array_equal(
            got["obs/depth"].numpy(), w["obs/depth"]
        )


def payloads(*parts: bytes) -> EncodedFrames:
    """One frame whose payload is ``parts`` joined."""
    data = b"".join(parts)
    return EncodedFrames(CodecSpec("zstd"), np.frombuffer(data, np.uint8), np.array([0, len(data)], np.int64))


@pytest.mark.parametrize("name", ["zstd", "lz4", "quantized"])
def test_a_payload_must_be_one_frame_of_exactly_the_frames_bytes(name):
    """A compressed payload decodes only as one frame of exactly the frame's bytes (docs/FORMAT.md "Encoded
    fields"): a frame of fewer bytes, the frame's bytes in two frames, and a whole frame followed by another are
    each refused, naming the codec."""
    import pyarrow as pa

    from forge_gpu._src.core.codecs import transform

    spec = CodecSpec(name)
    frame = np.random.default_rng(1).random((8, 6), dtype=np.float32)
    data = transform(spec, frame).tobytes()
    compressor = pa.Codec("lz4" if name == "lz4" else "zstd")
    whole = compressor.compress(data, asbytes=True)
    half = len(data) // 2
    cases = {
        "short": compressor.compress(data[:half], asbytes=True),
        "two frames": compressor.compress(data[:half], asbytes=True) + compressor.compress(data[half:], asbytes=True),
        "a frame more": whole + compressor.compress(data, asbytes=True),
    }
    back = decode_frames(spec, dataclasses.replace(payloads(whole), spec=spec), frame.shape, np.float32)
    assert np.array_equal(back[0], decode_frames(spec, encode_frames(spec, frame[None]), frame.shape, np.float32)[0])
    page = format_page_decode()  # the format page's decoder agrees
    assert np.array_equal(page(whole, spec.to_json(), frame.shape, np.dtype(np.float32)), back[0])
    for case, payload in cases.items():
        with pytest.raises(ValueError, match=f"a {name} frame does not decode"):
            decode_frames(spec, dataclasses.replace(payloads(payload), spec=spec), frame.shape, np.float32)
            pytest.fail(f"{case} decoded")
        with pytest.raises(AssertionError):
            page(payload, spec.to_json(), frame.shape, np.dtype(np.float32))


def test_webp_keeps_an_opaque_alpha_and_image_payloads_of_another_mode_are_refused():
    """A 4-channel webp frame whose alpha is all 255 (stored as an RGB image: libwebp drops an opaque alpha) decodes
    to 4 channels, alpha 255; a png payload of another mode (palette, grey with alpha, 16-bit) or size, or of
    another format, is refused naming what it is."""
    from PIL import Image

    rng = np.random.default_rng(2)
    frames = rng.integers(0, 256, (2, 8, 6, 4), dtype=np.uint8)
    frames[..., 3] = 255
    spec = CodecSpec("webp")
    back = decode_frames(spec, encode_frames(spec, frames), (8, 6, 4), np.uint8)
    assert back.shape == (2, 8, 6, 4) and (back[..., 3] == 255).all()
    payload = encode_frames(spec, frames[:1]).frame(0).tobytes()
    assert np.array_equal(format_page_decode()(payload, spec.to_json(), (8, 6, 4), np.dtype(np.uint8)), back[0])

    def image(mode: str, size=(6, 8), fmt="PNG") -> EncodedFrames:
        out = io.BytesIO()
        Image.new(mode, size).save(out, format=fmt)
        data = out.getvalue()
        return EncodedFrames(CodecSpec("png"), np.frombuffer(data, np.uint8), np.array([0, len(data)], np.int64))

    png = CodecSpec("png")
    assert decode_frames(png, image("L"), (8, 6), np.uint8).shape == (1, 8, 6)
    for mode, size, fmt, shape in [
        ("P", (6, 8), "PNG", (8, 6)),
        ("LA", (6, 8), "PNG", (8, 6)),
        ("I;16", (6, 8), "PNG", (8, 6)),
        ("L", (8, 6), "PNG", (8, 6)),
        ("RGB", (6, 8), "PNG", (8, 6, 4)),
        ("RGB", (6, 8), "JPEG", (8, 6, 3)),
    ]:
        with pytest.raises(ValueError, match=f"is a {fmt} image of mode {mode} and {size[0]}x{size[1]} pixels"):
            decode_frames(png, image(mode, size, fmt), shape, np.uint8)


def test_inspect_names_each_fields_codec_in_its_lines_and_its_json(tmp_path, capsys):
    """forge-gpu inspect lists each observation field with its codec, every parameter written out (``none`` for a
    field stored raw), in its text and in --json, as run.json records them."""
    from forge_gpu.cli import main

    env = synthetic_description(num_envs=2, max_steps=4, images=True)
    batches = make_batches(SyntheticSim(env, seed=2), 10)
    record(tmp_path / "run", env, batches, recorder=PackedRecorder, codecs={"rgb": "png:level=4", "depth": "lz4"})
    assert main(["inspect", str(tmp_path / "run")]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert lines["rgb"].endswith("codec png:level=4") and lines["depth"].endswith("codec lz4")
    assert lines["proprio"].endswith("codec none")
    assert main(["inspect", str(tmp_path / "run"), "--json"]) == 0
    fields = json.loads(capsys.readouterr().out)["fields"]
    stored = json.loads((tmp_path / "run" / "run.json").read_text())["codecs"]
    assert {f"obs/{name}": d["codec"] for name, d in fields.items() if d["codec"]["codec"] != "none"} == stored
    assert fields["proprio"]["codec"] == {"codec": "none"} and stored["obs/rgb"] == {"codec": "png", "level": 4}


def episode_payloads(run: Path, column: str) -> list[list[bytes]]:
    """Each published episode's payloads of ``column`` (its T + 1 frames, in the commit log's order), read with
    pyarrow from the segments."""
    import pyarrow as pa

    lines = [json.loads(line) for line in (run / "commits.jsonl").read_text().splitlines()]
    payloads: list[bytes] = []
    for segment in sorted({c["segment"] for c in lines}):
        reader = pa.ipc.open_stream(pa.memory_map(str(run / f"segment-{segment:06d}.arrows")))
        for _ in (c for c in lines if c["segment"] == segment):
            payloads += reader.read_next_batch().column(column).to_pylist()
    out = []
    for line in lines:
        e = line["episodes"]
        for first, steps, stride in zip(e["first_row"], e["steps"], e["stride"], strict=True):
            out.append([payloads[first + k * stride] for k in range(steps + 1)])
    return out


def test_convert_copies_the_payloads_of_a_field_whose_codec_does_not_change(tmp_path, monkeypatch):
    """convert keeping a field's codec copies its payloads byte for byte without decoding or encoding one; a field
    whose codec changes is decoded and encoded; every episode reads back equal."""
    from forge_gpu._src.core import codecs as codec_module

    env = synthetic_description(num_envs=3, max_steps=5, images=True)
    record(tmp_path / "a", env, make_batches(SyntheticSim(env, seed=7), 16), recorder=PackedRecorder,
           codecs={"rgb": "png", "depth": "zstd"})
    calls = {"decode": [], "encode": []}
    decoder, encoder = codec_module._decoder, codec_module._encoder

    def counted(make, kind):
        return lambda spec, *args: calls[kind].append(spec.name) or make(spec, *args)

    monkeypatch.setattr(codec_module, "_decoder", counted(decoder, "decode"))
    monkeypatch.setattr(codec_module, "_encoder", counted(encoder, "encode"))
    convert_run(tmp_path / "a", tmp_path / "b", to="packed", codecs={"depth": "lz4"})
    assert "png" not in calls["decode"] + calls["encode"] and calls["encode"] and set(calls["encode"]) == {"lz4"}
    assert episode_payloads(tmp_path / "b", "obs/rgb") == episode_payloads(tmp_path / "a", "obs/rgb")
    assert json.loads((tmp_path / "b" / "run.json").read_text())["codecs"] == {
        "obs/rgb": {"codec": "png", "level": 1},
        "obs/depth": {"codec": "lz4"},
    }
    monkeypatch.undo()
    options = EpisodeReadOptions(state=True)
    before, after = (list(forge_gpu.reading.read_episodes(tmp_path / n, options=options)) for n in "ab")
    assert len(before) == len(after) > 0
    for x, y in zip(before, after, strict=True):
        assert all(np.array_equal(x.obs[f], y.obs[f]) and np.array_equal(x.next[f], y.next[f]) for f in x.obs)
