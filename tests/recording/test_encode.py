"""The host snapshot's encode stage: encoded fields travel as variable-length payloads in bounded slot areas
(overflow through a spill buffer), decode to the frames the env observed, and the other fields arrive exact."""

import threading

import numpy as np
import pytest
from helpers.envtools import DEVICES

import forge_gpu
from forge_gpu._src.collect.encode import HostEncoder, make_encoder, split_layout
from forge_gpu._src.core.codecs import CodecSpec, EncodedFrames, decode_frames
from forge_gpu.recording import HostSnapshotTransport

CODECS = {"rgb": CodecSpec("png"), "depth": CodecSpec("zstd")}


@pytest.fixture(scope="module")
def env():
    return forge_gpu.sim.make("reach", num_envs=3, device="cpu", seed=5, max_steps=6, **{"params.image_size": 32})


def _run(env, transport, steps: int):
    """Publish ``steps`` steps of a random policy; return what the env observed and the batches received (copied)."""
    policy = forge_gpu.sim.make_policy("random", env)
    expected, received = [], []

    def consume():
        while (batch := transport.get(timeout=60)) is not None:
            copied = {
                name: (
                    EncodedFrames(v.spec, v.payload.copy(), v.offsets.copy())
                    if isinstance(v, EncodedFrames)
                    else v.copy()
                )
                for name, v in batch.observation.items()
            }
            received.append((copied, batch.result.reward.copy()))
            transport.release(batch)

    thread = threading.Thread(target=consume)
    thread.start()
    env.reset()
    for _ in range(steps):
        result = env.step(policy(env.observation))
        expected.append((result.numpy().observation, result.reward.numpy().copy()))
        transport.publish(timeout=60)
    transport.close()
    thread.join(timeout=60)
    return expected, received


def _decoded(frames: EncodedFrames, like: np.ndarray) -> np.ndarray:
    return decode_frames(frames.spec, frames, like.shape[1:], like.dtype)


@pytest.mark.parametrize("capacity", [None, 64])
def test_encoded_fields_arrive_as_payloads_that_decode_to_the_observed_frames(env, capacity):
    """rgb as PNG and depth as zstd, encoded on the producer's side: bit-exact after decoding, the other fields
    exact; the raw copy per step leaves the images out; a capacity too small for a step spills, loses nothing."""
    transport = HostSnapshotTransport(env, slots=2, encoder=HostEncoder(CODECS), capacity=capacity)
    raw = HostSnapshotTransport(env, slots=2)
    image_bytes = sum(env.observation[name].capacity for name in CODECS)
    assert transport.bytes_per_step < raw.bytes_per_step - image_bytes + 64 * 4
    expected, received = _run(env, transport, steps=5)
    assert len(received) == 5
    for (observed, reward), (got, got_reward) in zip(expected, received, strict=True):
        assert np.array_equal(reward, got_reward)
        for name, value in observed.items():
            if name in CODECS:
                assert isinstance(got[name], EncodedFrames) and len(got[name]) == env.num_envs
                assert got[name].spec == CODECS[name]
                assert np.array_equal(_decoded(got[name], value), value), name
            else:
                assert np.array_equal(got[name], value), name
    payloads = transport.payloads
    assert payloads.payload_bytes == sum(got[name].nbytes for got, _ in received for name in CODECS)
    assert payloads.payload_bytes < 5 * image_bytes
    assert payloads.overflows == (0 if capacity is None else 5 * len(CODECS))
    assert payloads.raw_bytes == {name: env.observation[name].capacity for name in CODECS}


def test_jpeg_on_the_producer_side_is_jpeg_within_its_bound(env):
    from PIL import Image

    transport = HostSnapshotTransport(env, slots=2, encoder=HostEncoder({"rgb": CodecSpec("jpeg")}))
    expected, received = _run(env, transport, steps=3)
    for (observed, _), (got, _) in zip(expected, received, strict=True):
        frames = got["rgb"]
        assert bytes(frames.frame(0)[:2]) == b"\xff\xd8"  # a JPEG stream, read by any JPEG decoder
        import io

        independent = np.asarray(Image.open(io.BytesIO(bytes(frames.frame(1)))))
        assert np.array_equal(independent, _decoded(frames, observed["rgb"])[1])
        error = _decoded(frames, observed["rgb"]).astype(np.float64) - observed["rgb"]
        psnr = 10 * np.log10(255.0**2 / max(np.mean(error**2), 1e-12))
        assert psnr >= CodecSpec("jpeg").codec.min_psnr
        assert np.array_equal(got["depth"], observed["depth"])  # not encoded: raw, exact


def test_make_encoder_chooses_and_refuses(env):
    assert make_encoder(env, CODECS) is None  # the CPU: the writer pool encodes
    assert make_encoder(env, {"rgb": CodecSpec("none")}, where="host") is None
    assert isinstance(make_encoder(env, CODECS, where="host"), HostEncoder)
    with pytest.raises(ValueError, match=r"encode on the device needs CUDA; Warp's device is cpu"):
        make_encoder(env, {"rgb": CodecSpec("jpeg")}, where="device")
    with pytest.raises(ValueError, match=r"where='gpu': expected one of auto, device, host, none"):
        make_encoder(env, CODECS, where="gpu")
    with pytest.raises(ValueError, match=r"codecs for \['cam'\]: the env observes no such field"):
        make_encoder(env, {"cam": CodecSpec("png")}, where="host")
    with pytest.raises(ValueError, match="capacity must be"):
        HostSnapshotTransport(env, encoder=HostEncoder(CODECS), capacity=0)


def test_split_layout_copies_exactly_the_kept_fields():
    u8, f4 = np.dtype(np.uint8), np.dtype(np.float32)
    layout = [("a", 0, (3,), f4), ("img", 64, (100,), u8), ("b", 192, (5,), f4), ("c", 256, (2,), u8)]
    runs, kept, size = split_layout(layout, {"img"})
    assert runs == [(0, 0, 12), (192, 64, 66)]
    assert kept == [("a", 0, (3,), f4), ("b", 64, (5,), f4), ("c", 128, (2,), u8)]
    assert size == 130
    source = np.arange(300, dtype=np.uint8)
    slot = np.zeros(size, np.uint8)
    for at_source, at, n in runs:
        slot[at : at + n] = source[at_source : at_source + n]
    for (name, offset, shape, dtype), (_, source_offset, _, _) in zip(kept, [layout[0], *layout[2:]], strict=True):
        n = int(np.prod(shape)) * dtype.itemsize
        assert np.array_equal(slot[offset : offset + n], source[source_offset : source_offset + n]), name


def test_decode_on_device_refuses_clearly_without_cuda():
    """Batched decode into a CUDA tensor: a one-line refusal on a machine without CUDA, or for a device that is not
    CUDA (the nvJPEG path itself has not yet run on a GPU)."""
    torch = pytest.importorskip("torch")
    from forge_gpu._src.core.codecs import encode_frames
    from forge_gpu._src.reading.torch_data import decode_on_device

    gradient = (np.arange(2 * 8 * 8 * 3).reshape(2, 8, 8, 3) % 256).astype(np.uint8)
    frames = encode_frames(CodecSpec("jpeg"), gradient)
    with pytest.raises(ValueError, match=r"decode_device='cpu': expected a CUDA device"):
        decode_on_device(frames, (8, 8, 3), np.uint8, device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"decode_device='cuda': torch sees no CUDA device on this machine"):
            decode_on_device(frames, (8, 8, 3), np.uint8)
    else:
        decoded = decode_on_device(frames, (8, 8, 3), np.uint8)
        assert decoded.device.type == "cuda" and tuple(decoded.shape) == (2, 8, 8, 3)
        # JPEG decoders may round their inverse DCTs differently: nvJPEG's frames within 3 levels of Pillow's
        pillow = decode_frames(frames.spec, frames, (8, 8, 3), np.uint8).astype(int)
        assert np.abs(decoded.cpu().numpy().astype(int) - pillow).max() <= 3


def test_frames_encoded_by_the_producer_record_as_the_writers_would(env, tmp_path):
    """collect with the producer-side encoder (the plumbing the GPU path uses) writes the run the recorder's own
    writers write: the same episodes, the same frames (lossless codecs), the same codecs in run.json. On the CPU
    collect gives its transport no encoder."""
    import functools

    from forge_gpu._src.collect.encode import run_encoder

    # statistics off until the recorder takes two producer-encoded fields with them (notes/frames-to-codec.md)
    options = forge_gpu.recording.RecordingOptions(codecs={"rgb": "png", "depth": "zstd"}, statistics=False)
    assert run_encoder(env, options, recording=True) is None
    producer = functools.partial(HostSnapshotTransport, encoder=HostEncoder(CODECS))
    for name, transport in (("producer", producer), ("writers", None)):
        fresh = forge_gpu.sim.make("reach", num_envs=3, device="cpu", seed=5, max_steps=6, **{"params.image_size": 32})
        policy = forge_gpu.sim.make_policy("random", fresh)
        forge_gpu.recording.collect(fresh, policy, str(tmp_path / name), steps=14, options=options, transport=transport)
    manifests = [forge_gpu.formats.read_manifest(tmp_path / name) for name in ("producer", "writers")]
    assert manifests[0]["codecs"] == manifests[1]["codecs"] and manifests[0]["codecs"]
    runs = [list(forge_gpu.reading.read_episodes(tmp_path / name)) for name in ("producer", "writers")]
    assert len(runs[0]) == len(runs[1]) > 0
    for a, b in zip(*runs, strict=True):
        assert (a.env_id, a.episode_id, a.steps) == (b.env_id, b.episode_id, b.steps)
        for name in ("rgb", "depth"):
            assert a.obs[name].any() and np.array_equal(a.obs[name], b.obs[name]), name


def test_a_device_batch_decodes_the_payloads_of_the_right_frames(env, tmp_path, monkeypatch):
    """device_batch gathers each batch's encoded frames block by block (Windows.batch(encoded=True)) and hands
    them to the device decoder in the batch's order: with the decoder replaced by a CPU one (no GPU here), the batch
    equals the CPU path's, over a mapped run of several blocks. Without CUDA it is a one-line refusal."""
    torch = pytest.importorskip("torch")
    from forge_gpu._src.reading import torch_data

    options = forge_gpu.recording.RecordingOptions(codecs={"rgb": "png", "depth": "zstd"}, max_buffer_bytes=1 << 16)
    forge_gpu.recording.collect(
        env, forge_gpu.sim.make_policy("random", env), str(tmp_path / "run"), steps=20, options=options
    )
    windows = forge_gpu.reading.Windows(tmp_path / "run", history=3, horizon=2, mmap=True)
    assert len(windows._obs) > 1  # several blocks: the gather crosses them
    assert set(windows.encoded_fields) == {"obs/rgb", "obs/depth"}
    indices = np.random.default_rng(1).integers(0, len(windows), 40)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"decode_device='cuda': torch sees no CUDA device"):
            forge_gpu.reading.device_batch(windows, indices)
    asked = []

    def on_cpu(frames, shape, dtype, device):
        asked.append((frames.spec.name, device))
        return torch.from_numpy(decode_frames(frames.spec, frames, shape, dtype))

    monkeypatch.setattr(torch_data, "check_decode_device", lambda device: device)
    monkeypatch.setattr(torch_data, "decode_on_device", on_cpu)
    a, b = windows.batch(indices), forge_gpu.reading.device_batch(windows, indices, "cuda:7")
    assert sorted(asked) == [("png", "cuda:7"), ("zstd", "cuda:7")]
    assert set(a) == set(b)
    for key in a:
        got = b[key].numpy() if isinstance(b[key], torch.Tensor) else b[key]
        assert np.array_equal(np.asarray(a[key]), np.asarray(got)), key
    assert isinstance(b["obs/rgb"], torch.Tensor) and not isinstance(b["obs/proprio"], torch.Tensor)


class CountingHostEncoder(HostEncoder):
    """The device encoder's contract on the CPU: payloads and each frame's histogram counted before the encode
    (``count_frames``), no values."""

    name = "counting"

    def encode(self, observation):
        from forge_gpu._src.sim.camera import count_frames

        out = super().encode(observation)
        for name, encoded in out.items():
            encoded.values, encoded.counts = None, count_frames(observation[name]).numpy().copy()
        return out


@pytest.mark.parametrize("device", DEVICES)
def test_frames_counted_where_rendered_are_counted_as_rendered_without_a_decode(tmp_path, monkeypatch, device):
    """On CUDA, collect encodes JPEG fields with nvJPEG and counts each frame's histogram on the device before the
    encode (on the CPU an encoder that hands counts the same way stands in for it): the run's rgb statistics equal
    those of the same frames recorded losslessly, and nothing decodes a payload to count them."""
    import forge_gpu._src.collect.collector as collector_module
    import forge_gpu._src.core.codecs as codecs_module
    import forge_gpu._src.formats.packed.read as readers  # they bind decode_frames when imported: before the patch
    from forge_gpu._src.collect.encode import NvjpegEncoder, run_encoder

    assert readers.PackedRun

    stats = {}
    for name, rgb in (("jpeg", "jpeg:90"), ("lossless", "zstd")):
        env = forge_gpu.sim.make("reach", num_envs=4, device=device, seed=5, max_steps=6, **{"params.image_size": 32})
        options = forge_gpu.recording.RecordingOptions(codecs={"rgb": rgb, "depth": "zstd"})
        encoder = run_encoder(env, options, recording=True)
        assert isinstance(encoder, NvjpegEncoder) == (name == "jpeg" and device != "cpu")
        with monkeypatch.context() as patch:
            if name == "jpeg":
                real = codecs_module.decode_frames

                def decode(spec, *args, real=real, **kwargs):  # depth (zstd) is read back at close, rgb never
                    assert not spec.codec.nvjpeg, "JPEG frames decoded to count them"
                    return real(spec, *args, **kwargs)

                patch.setattr(codecs_module, "decode_frames", decode)
                if device == "cpu":
                    stand_in = CountingHostEncoder({"rgb": CodecSpec.parse(rgb)})
                    patch.setattr(collector_module, "run_encoder", lambda *a, stand_in=stand_in, **k: stand_in)
            policy = forge_gpu.sim.make_policy("random", env)
            forge_gpu.recording.collect(env, policy, str(tmp_path / name), steps=20, options=options)
        stats[name] = forge_gpu.curation.run_statistics(tmp_path / name)
        assert len(list(forge_gpu.reading.read_episodes(tmp_path / name))) > 0
    for key in ("obs/rgb", "obs/proprio", "action"):
        for figure, value in stats["lossless"][key].items():
            np.testing.assert_allclose(stats["jpeg"][key][figure], value, rtol=1e-12, err_msg=f"{key} {figure}")
