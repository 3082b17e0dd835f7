"""The host snapshot's encode stage: image fields encoded where the step ran, before the host copy.

A :class:`FrameEncoder` takes the env's observation right after the step (device arrays) and returns, per field
it encodes, an :class:`Encoded`: each frame's payload size (host int64 [n]) and the bytes, still where the encoder
made them, with a way to copy them into a host buffer. ``HostSnapshotTransport(encoder=...)`` then copies those
bytes into its slot (docs/ARCHITECTURE.md "The data path") instead of the raw frames, and hands the consumer an
:class:`~forge_gpu._src.core.codecs.EncodedFrames` for the field.

Two encoders, one interface:

- :class:`NvjpegEncoder` (CUDA): JPEG through ``torchvision.io.encode_jpeg`` on CUDA tensors (nvJPEG), batched
  over the envs, on the env's stream. torchvision returns one tensor per frame whose length it learnt by waiting
  for its encode to finish, so an encoded step costs one wait of the stepping thread for the step and the encode
  (the next step is not queued ahead of it), and O(envs) Python over that list (the sizes and one ``torch.cat``).
  The bytes are JPEG: the CPU codec decodes them (min PSNR 39.8 dB at quality 90). On an H200 (``bench/gpu.py``,
  reach 128 px x512): 5,261 frames/s, 97 ms a step against the step's own 5 ms, so an encoded step runs at 0.05 of
  a raw one: torchvision's batched call is not the rate nvJPEG is known for.
- :class:`HostEncoder`: the CPU codec (``core/codecs.encode_frames``) on the producer's side, for any codec, with
  the frames' values as a reader decodes them (what the run's statistics count, taken before or, for a lossy image
  codec, by the encode: the recorder then decodes nothing to count them). The CPU path does not use it by default
  (there the recorder's writer pool encodes); tests and ``bench/gpu.py --smoke`` run the transport's
  variable-length plumbing through it.

The device encoder's frames never leave the device: before it encodes them it counts each frame's per-channel
histogram of its byte values there (``sim/camera.count_frames``: one launch, atomic adds into
``[n, channels, 256]``) and hands those with the payloads (``EncodedFrames.counts``), so the recorder decodes nothing
to count its statistics. Those statistics are of the frames as rendered, before JPEG's loss (``forge-gpu stats RUN``,
which recounts the decoded frames, differs by it); the CPU path counts the decoded values.

:func:`make_encoder` chooses: on CUDA the fields whose codec nvJPEG makes (``Codec.nvjpeg``: JPEG) get it (the
others, depth included, stay raw through the copy and are compressed by the writer pool: no lossless GPU codec is
used, nvCOMP is not a dependency); on the CPU none.

The simulation half of ``forge_gpu.recording`` (``_src/collect``: it drives the env, with Warp); the data half,
``_src/recording``, never imports Warp.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import warp as wp

from forge_gpu._src.core.codecs import CodecSpec, EncodedFrames, encode_frames, field_codecs
from forge_gpu._src.sim.camera import count_frames
from forge_gpu._src.sim.env import PACK_ALIGNMENT

WHERE = ("auto", "device", "host", "none")
"""Where :func:`make_encoder` encodes: ``auto`` (nvJPEG for JPEG fields on CUDA, nothing on the CPU), ``device``
(nvJPEG; CUDA only), ``host`` (the CPU codec on the producer's side), ``none``."""


@dataclass
class Encoded:
    """One field's frames of one step, encoded: frame ``i`` is ``sizes[i]`` bytes, all ``nbytes`` of them end to end
    where the encoder left them; ``copy_to(area)`` copies them to the start of a host buffer (a numpy uint8 array,
    or a page-locked Warp array, into which the copy is issued on the env's stream without waiting). ``values``: the
    frames as a reader decodes them, on the host, where the encoder has them (``EncodedFrames.values``); else
    ``counts``: each frame's byte histogram, counted before the encode (``EncodedFrames.counts``)."""

    sizes: np.ndarray
    nbytes: int
    copy_to: Callable[[object], None]
    values: np.ndarray | None = None
    counts: np.ndarray | None = None


class FrameEncoder(Protocol):
    """What the transport calls after each step: ``encode`` of the env's observation, for the ``fields`` it
    encodes (field -> the run's codec for it). ``name`` goes to the transport's report."""

    name: str
    fields: Mapping[str, CodecSpec]

    def encode(self, observation: Mapping[str, wp.array]) -> dict[str, Encoded]: ...


def _host_view(area) -> np.ndarray:
    return area.numpy() if isinstance(area, wp.array) else area


class HostEncoder:
    """The CPU codec on the producer's side (over ``pool`` where given): the same payloads the writer pool makes, and
    the frames' values as a reader decodes them (a copy: the env's frames change with the next step)."""

    name = "host"

    def __init__(self, fields: Mapping[str, CodecSpec], *, pool=None):
        self.fields = dict(fields)
        self.pool = pool

    def encode(self, observation: Mapping[str, wp.array]) -> dict[str, Encoded]:
        out = {}
        for name, spec in self.fields.items():
            frames = observation[name]
            frames = frames.numpy() if isinstance(frames, wp.array) else np.asarray(frames)
            encoded = encode_frames(spec, frames, pool=self.pool, values=True)
            values = encoded.values.copy() if np.may_share_memory(encoded.values, frames) else encoded.values

            def copy_to(area, payload=encoded.payload) -> None:
                np.copyto(_host_view(area)[: payload.size], payload)

            out[name] = Encoded(np.diff(encoded.offsets), encoded.nbytes, copy_to, values)
        return out


class NvjpegEncoder:
    """JPEG on the GPU (nvJPEG through ``torchvision.io.encode_jpeg`` of CUDA tensors), for uint8 [n, H, W, 3]
    fields whose codec nvJPEG makes (``Codec.nvjpeg``: ``jpeg``, its ``quality``); its measured rate is in the
    module's docstring."""

    name = "nvjpeg"

    def __init__(self, fields: Mapping[str, CodecSpec], device):
        device = wp.get_device(device)
        if not device.is_cuda:
            raise ValueError(f"encode on the device needs CUDA; Warp's device is {device} (use the CPU writer pool)")
        for name, spec in fields.items():
            if not spec.codec.nvjpeg:
                raise ValueError(f"field {name!r}: the GPU encoder makes jpeg, not {spec.name!r}")
        try:
            import torch
            import torchvision.io  # noqa: F401
        except ImportError as exc:
            raise ValueError(f"encode on the device needs torch and torchvision with CUDA: {exc}") from exc
        self.fields, self.device, self._torch = dict(fields), device, torch
        self._counts: dict[str, wp.array] = {}  # field -> its frames' histograms, on the device

    def encode(self, observation: Mapping[str, wp.array]) -> dict[str, Encoded]:
        import torchvision.io

        from forge_gpu._src.sim.streams import torch_stream_of

        torch = self._torch
        out = {}
        with torch.cuda.stream(torch_stream_of(wp.get_stream(self.device))):  # ordered after the step
            for name, spec in self.fields.items():
                # What the statistics count, before the encode: each frame's histogram (read once it has waited).
                counts = self._counts[name] = count_frames(observation[name], self._counts.get(name))
                frames = wp.to_torch(observation[name])  # [n, H, W, 3] uint8, zero-copy
                chw = frames.permute(0, 3, 1, 2).contiguous()
                # One batched nvJPEG call; torchvision waits for it to learn each payload's length.
                payloads = torchvision.io.encode_jpeg(list(chw.unbind(0)), quality=spec.param("quality"))
                sizes = np.fromiter((p.numel() for p in payloads), np.int64, count=len(payloads))
                joined = torch.cat(payloads)

                def copy_to(area, joined=joined) -> None:
                    if isinstance(area, wp.array):  # page-locked: issued on the stream, not waited for
                        wp.to_torch(area)[: joined.numel()].copy_(joined, non_blocking=True)
                    else:  # a spill buffer (pageable): a copy the thread waits for
                        torch.from_numpy(area[: joined.numel()]).copy_(joined)

                out[name] = Encoded(sizes, int(sizes.sum()), copy_to, counts=counts.numpy())  # after the wait
        return out


def make_encoder(env, codecs: Mapping[str, CodecSpec], *, where: str = "auto", pool=None) -> FrameEncoder | None:
    """The encode stage for ``env`` and the run's image ``codecs`` (field -> spec; raw fields are left out), or
    None when nothing is encoded before the copy. ``where``: one of :data:`WHERE`. ValueError (one line) for another
    ``where``, a field the env does not observe, or ``device`` without CUDA."""
    if where not in WHERE:
        raise ValueError(f"where={where!r}: expected one of {', '.join(WHERE)}")
    codecs = {name: spec for name, spec in codecs.items() if not spec.raw}
    missing = sorted(set(codecs) - set(env.observation))
    if missing:
        raise ValueError(f"codecs for {missing}: the env observes no such field ({', '.join(env.observation)})")
    if where == "none" or not codecs:
        return None
    if where == "host":
        return HostEncoder(codecs, pool=pool)
    jpeg = {name: spec for name, spec in codecs.items() if spec.codec.nvjpeg}
    if where == "device":
        return NvjpegEncoder(jpeg or codecs, env.device)
    if env.device.is_cuda and jpeg:
        return NvjpegEncoder(jpeg, env.device)
    return None


def run_encoder(env, options, *, recording: bool) -> FrameEncoder | None:
    """The encode stage ``collect`` gives its transport: on CUDA, for a packed run being recorded, nvJPEG for the
    fields whose codec (``options.codecs``, as the recorder resolves them) is JPEG; otherwise none (the recorder's
    writer pool encodes, and the CPU path is unchanged)."""
    if not recording or options.format != "packed" or not env.device.is_cuda:
        return None
    fields = {name: (tuple(e["shape"]), e["dtype"]) for name, e in env.spec["observation"].items()}
    return make_encoder(env, field_codecs(fields, options.codecs), where="auto")


def split_layout(layout: list[tuple], encoded: set[str]) -> tuple[list[tuple[int, int, int]], list[tuple], int]:
    """The packed result's ``layout`` without the ``encoded`` fields: the byte runs to copy (``(source offset, slot
    offset, bytes)``; fields next to each other in the packed buffer are one run, padding included, so a step is a
    few copies whatever the number of envs), the kept fields' layout in the slot, and the slot's bytes."""
    runs: list[list[int]] = []
    kept: list[tuple] = []
    previous_kept = False
    for name, offset, shape, dtype in layout:
        if name in encoded:
            previous_kept = False
            continue
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not previous_kept:
            at = -(-(runs[-1][1] + runs[-1][2]) // PACK_ALIGNMENT) * PACK_ALIGNMENT if runs else 0
            runs.append([offset, at, 0])
        source, at, _ = runs[-1]
        kept.append((name, at + offset - source, shape, dtype))
        runs[-1][2] = offset - source + size
        previous_kept = True
    end = runs[-1][1] + runs[-1][2] if runs else 0
    return [(a, b, c) for a, b, c in runs], kept, max(end, 1)


class PayloadAreas:
    """The encoded fields' part of the transport's slots: per slot and field a host buffer of ``capacity`` bytes
    (page-locked on CUDA) that a step's encoded frames are copied into, and their offsets.

    ``capacity`` defaults to the field's raw bytes per step, so a codec that does not expand the frames never
    overflows and the slots take no more page-locked memory than raw ones. A step whose frames of a field exceed it
    (a smaller ``capacity``, or frames a codec makes larger than raw) is not dropped and does not wait: its bytes go
    to a spill buffer allocated for that step (pageable host memory, a copy the stepping thread waits for), freed when
    the slot is released; ``overflows`` counts them."""

    def __init__(self, encoder: FrameEncoder, layout: list[tuple], slots: int, *, pinned: bool, capacity=None):
        self.encoder = encoder
        shapes = {name[len("obs/") :]: (shape, dtype) for name, _, shape, dtype in layout if name.startswith("obs/")}
        self.raw_bytes = {
            name: int(np.prod(shapes[name][0], dtype=np.int64)) * shapes[name][1].itemsize for name in encoder.fields
        }
        """Each encoded field's raw bytes per step (all envs)."""
        self.capacity = {name: int(capacity or raw) for name, raw in self.raw_bytes.items()}

        def area(size: int):
            return wp.empty(size, dtype=wp.uint8, device="cpu", pinned=True) if pinned else np.empty(size, np.uint8)

        self._areas = [{name: area(size) for name, size in self.capacity.items()} for _ in range(slots)]
        self._held: list[dict] = [{} for _ in range(slots)]
        self.encode_seconds = 0.0
        """Time the encoder took, as the stepping thread saw it [s]."""
        self.payload_bytes = 0
        """Encoded bytes copied to the host."""
        self.overflows = 0
        """Fields of steps whose encoded frames did not fit their slot's area (sent through a spill buffer)."""

    def fill(self, slot: int, observation: Mapping[str, wp.array]) -> None:
        """Encode the step's fields and issue their copies into ``slot``'s areas."""
        import time

        began = time.perf_counter()
        encoded = self.encoder.encode(observation)
        self.encode_seconds += time.perf_counter() - began
        for name, frames in encoded.items():
            area = self._areas[slot][name]
            if frames.nbytes > self.capacity[name]:
                area = np.empty(frames.nbytes, np.uint8)
                self.overflows += 1
            frames.copy_to(area)
            offsets = np.zeros(frames.sizes.size + 1, np.int64)
            np.cumsum(frames.sizes, out=offsets[1:])
            self._held[slot][name] = (area, offsets, frames.values, frames.counts)
            self.payload_bytes += frames.nbytes

    def frames(self, slot: int) -> dict[str, EncodedFrames]:
        """``slot``'s encoded fields, once its copies are complete. Each owns its bytes (one host copy of the
        compressed payloads, a fraction of the raw frames' bytes): a recorder may keep them past the slot's
        release, until its writer has written them. With their values, or counts, where the encoder gave them."""
        fields = self.encoder.fields
        return {
            name: EncodedFrames(fields[name], _host_view(area)[: offsets[-1]].copy(), offsets, values, counts)
            for name, (area, offsets, values, counts) in self._held[slot].items()
        }

    def release(self, slot: int) -> None:
        self._held[slot] = {}
