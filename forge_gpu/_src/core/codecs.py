"""Image codecs: how a packed run stores one image field's frames (docs/FORMAT.md "Encoded fields"), in one place.
Every other module asks a codec what it can do, never its name: ``spec.codec.lossless``/``lossy``, ``nvjpeg`` (a
CUDA device encodes and decodes its payloads), ``min_psnr``; :func:`stored_values` (the values a reader decodes from
given frames: what a run's statistics count) and the ``values`` :func:`encode_frames` gives with the payloads.

A codec turns each frame of a field (an ``[H, W]`` or ``[H, W, C]`` array) into one self-contained payload, so a
frame is one row of its column and any frame decodes without its neighbours. :data:`CODECS` registers them by name; a
:class:`CodecSpec` is a name and its parameters, as run.json records it per field; :class:`EncodedFrames` holds
the payloads of ``n`` frames in one contiguous uint8 buffer with ``n + 1`` offsets; :func:`encode_frames` and
:func:`decode_frames` go between the two, optionally over a thread pool (the libraries used here let go of the GIL
while they work; bench/codecs.py's ``encode_x2`` and ``decode_x2`` measure it); :func:`decode_into` decodes any
payloads (views of a mapped segment) straight into given rows of an array.

:func:`transform` and :func:`untransform` state the byte formats frame by frame, as docs/FORMAT.md does; the decoder
undoes ``untransform``'s steps on several frames at once in the words' own unsigned width (the same values, bit for
bit: the differences' sums wrap as the format's do), which is what makes a batch of windows quick to decode. Where
numba imports (the ``torch`` extra installs it), each transform's undoing is one compiled pass per frame instead
(:func:`_kernels`: byte planes to words, zigzag, row sums and, for ``quantized``, the float conversion, written
straight into the output row); numpy's steps, the reference, decode every frame otherwise.

The standard library and numpy at import; Pillow and pyarrow are loaded by the codecs that use them, numba at the
first decode of a ``zstd``, ``lz4`` or ``quantized`` frame of wider words than bytes.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forge_gpu._src.core.codec_specs import (  # noqa: F401 - the registry half, re-exported
    CODECS,
    RAW,
    Codec,
    CodecSpec,
    channels,
    default_codec,
    dtype_name,
    is_image,
)


@dataclass(frozen=True)
class EncodedFrames:
    """The payloads of ``n`` frames, encoded with ``spec``: frame ``i`` is ``payload[offsets[i]:offsets[i+1]]``.

    ``payload`` is a 1-d uint8 array, ``offsets`` an int64 array of ``n + 1`` non-decreasing entries from 0 to
    ``payload.size``. A producer that encodes its own frames (the GPU path) hands the recorder one of these per
    batch for an encoded field, ``n`` = the batch's envs, in place of the raw ``[n, H, W, C]`` frames; ``spec``
    must be the run's codec for the field."""

    spec: CodecSpec
    payload: np.ndarray
    offsets: np.ndarray
    values: np.ndarray | None = field(default=None, compare=False, repr=False)
    """The frames' values as a reader decodes them (``[n, *shape]``), where the encoder that made the payloads gave
    them (:func:`encode_frames` with ``values``): what a run's statistics count, so nothing decodes the payloads
    again to count them. None where the encoder kept none (the payloads alone travelled)."""
    counts: np.ndarray | None = field(default=None, compare=False, repr=False)
    """Where the frames' values did not travel (a device encoder's): each frame's per-channel histogram of its byte
    values, ``[n, channels, 256]``, counted where the frames were rendered, before the encode
    (``sim/camera.count_frames``): what a run's statistics count for a one-byte field instead of its values."""

    def __post_init__(self) -> None:
        payload, offsets = np.asarray(self.payload), np.asarray(self.offsets)
        if payload.dtype != np.uint8 or payload.ndim != 1:
            raise ValueError(
                f"EncodedFrames.payload must be a 1-d uint8 array, got {payload.dtype}{list(payload.shape)}"
            )
        if offsets.dtype != np.int64 or offsets.ndim != 1 or offsets.size < 1:
            raise ValueError(f"EncodedFrames.offsets must be a 1-d int64 array of n + 1 entries, got {offsets.dtype}")
        if offsets[0] != 0 or offsets[-1] != payload.size or (np.diff(offsets) < 0).any():
            raise ValueError(
                f"EncodedFrames.offsets must rise from 0 to the payload's {payload.size} bytes, "
                f"got {offsets[0]}..{offsets[-1]}"
            )
        object.__setattr__(self, "payload", payload)
        object.__setattr__(self, "offsets", offsets)

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1])

    def frame(self, i: int) -> memoryview:
        """Frame ``i``'s payload (a view)."""
        return memoryview(self.payload[self.offsets[i] : self.offsets[i + 1]])

    def take(self, rows: np.ndarray) -> EncodedFrames:
        """The frames ``rows`` (any order, repeats allowed), their payloads copied into a new buffer."""
        rows = np.asarray(rows, np.int64).reshape(-1)
        sizes = self.offsets[rows + 1] - self.offsets[rows]
        offsets = np.zeros(rows.size + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        # each byte's source: its frame's start plus its position within the frame (whole-array, no per-frame loop)
        within = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1], sizes)
        payload = self.payload[np.repeat(self.offsets[rows], sizes) + within]
        values, counts = (None if a is None else a[rows] for a in (self.values, self.counts))
        return EncodedFrames(self.spec, payload, offsets, values, counts)

    @staticmethod
    def concatenate(parts: Sequence[EncodedFrames]) -> EncodedFrames:
        """The frames of ``parts`` (all of one spec) end to end, with their values (and counts) where every part has
        them."""
        if not parts:
            raise ValueError("EncodedFrames.concatenate needs at least one part")
        spec = parts[0].spec
        if any(p.spec != spec for p in parts):
            raise ValueError("EncodedFrames.concatenate: parts of different codecs")
        if len(parts) == 1:
            return parts[0]
        starts = np.cumsum([0] + [p.nbytes for p in parts[:-1]])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + s for p, s in zip(parts, starts, strict=True)])
        values = None if any(p.values is None for p in parts) else np.concatenate([p.values for p in parts])
        counts = None if any(p.counts is None for p in parts) else np.concatenate([p.counts for p in parts])
        payload = np.concatenate([p.payload for p in parts])
        return EncodedFrames(spec, payload, offsets.astype(np.int64), values, counts)


# -- the codecs' byte formats (docs/FORMAT.md "Encoded fields") -----------------------------------------------


def _planes(words: np.ndarray) -> np.ndarray:
    """Unsigned little-endian words (a frame's, C order) as byte planes: plane ``k`` (byte ``k`` of every word)
    after plane ``k - 1``."""
    words = words.astype(words.dtype.newbyteorder("<"), copy=False)
    return np.ascontiguousarray(words.view(np.uint8).reshape(-1, words.dtype.itemsize).T).reshape(-1)


def _words(planes: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The inverse of :func:`_planes`: the words, of the unsigned ``dtype``."""
    return np.ascontiguousarray(planes.reshape(dtype.itemsize, -1).T).view(dtype.newbyteorder("<")).reshape(-1)


def _zigzag_delta(values: np.ndarray, rows: int, bits: int) -> np.ndarray:
    """Signed integers (int64, C order, ``rows`` rows of a frame) as each one's difference from its left neighbour
    in its row (the first of a row: from 0), wrapped to ``bits`` bits and zigzagged (``(r << 1) ^ (r >> bits-1)``:
    small differences of either sign become small unsigned words)."""
    grid = values.reshape(rows, -1)
    r = np.diff(grid, axis=1, prepend=0)
    r = (r + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))  # wrapped to a signed word
    return ((r << 1) ^ (r >> (bits - 1))) & ((1 << bits) - 1)


def _undo_zigzag_delta(words: np.ndarray, rows: int, bits: int) -> np.ndarray:
    """The inverse of :func:`_zigzag_delta`: the signed values (int64), wrapped to ``bits`` bits."""
    z = words.astype(np.int64).reshape(rows, -1)
    r = (z >> 1) ^ -(z & 1)
    values = np.cumsum(r, axis=1) % (1 << bits)
    return np.where(values >= 1 << (bits - 1), values - (1 << bits), values).reshape(-1)


_UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32)}


def transform(spec: CodecSpec, frame: np.ndarray) -> np.ndarray:
    """The bytes the ``zstd``, ``lz4`` and ``quantized`` codecs compress, from one frame (docs/FORMAT.md "Encoded
    fields"). uint8: the frame's bytes (C order). uint16 and float32: each value's bits as an unsigned word, its
    difference from the word to its left in its row (``_zigzag_delta``), split into byte planes. ``quantized``:
    ``q = rint(value / (step_um * 1e-6))`` as a signed 32-bit integer, then the same differences and planes."""
    frame = np.ascontiguousarray(frame)
    if spec.name == "quantized":
        q = _steps(spec, frame)
        if np.abs(q).max(initial=0) >= 1 << 31:
            raise ValueError(f"codec {spec}: a value of {np.abs(frame).max()} is out of its range (2**31 steps)")
        return _planes(_zigzag_delta(q.astype(np.int64), frame.shape[0], 32).astype(np.uint32))
    if frame.dtype.itemsize == 1:
        return frame.reshape(-1).view(np.uint8)
    bits = 8 * frame.dtype.itemsize
    words = frame.reshape(-1).view(_UNSIGNED[frame.dtype.itemsize]).astype(np.int64)
    return _planes(_zigzag_delta(words, frame.shape[0], bits).astype(_UNSIGNED[frame.dtype.itemsize]))


def _steps(spec: CodecSpec, values: np.ndarray) -> np.ndarray:
    """``quantized``: each value as its count of ``step_um`` steps, ``rint(value / (step_um * 1e-6))`` (float64)."""
    return np.rint(values.astype(np.float64) / (spec.param("step_um") * 1e-6))


def untransform(spec: CodecSpec, data: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The inverse of :func:`transform`: the frame of ``shape`` and ``dtype`` (``quantized``: ``float32(q *
    step_um * 1e-6)``, the product taken in float64)."""
    if spec.name == "quantized":
        q = _undo_zigzag_delta(_words(data, _UNSIGNED[4]), shape[0], 32)
        return (q * (spec.param("step_um") * 1e-6)).astype(np.float32).reshape(shape)
    if dtype.itemsize == 1:
        return data.view(dtype).reshape(shape)
    bits = 8 * dtype.itemsize
    words = _undo_zigzag_delta(_words(data, _UNSIGNED[dtype.itemsize]), shape[0], bits) % (1 << bits)
    return words.astype(_UNSIGNED[dtype.itemsize]).view(dtype).reshape(shape)


def _pillow():
    from PIL import Image

    return Image


def _arrow_codec(name: str, level: int | None):
    import pyarrow as pa

    return pa.Codec(name, compression_level=level) if level is not None else pa.Codec(name)


#: The codecs that compress :func:`transform`'s bytes, and the compression (pyarrow's codec name) they use.
_COMPRESSED = {"zstd": "zstd", "lz4": "lz4", "quantized": "zstd"}


def _encoder(spec: CodecSpec):
    """A function from one frame ([H, W, C], C-contiguous) to its payload (bytes)."""
    name = spec.name
    if name in _COMPRESSED:
        codec = _arrow_codec(_COMPRESSED[name], spec.param("level") if "level" in dict(spec.params) else None)
        return lambda frame: codec.compress(transform(spec, frame), asbytes=True)
    Image = _pillow()
    if name == "png":
        options = {"compress_level": spec.param("level")}
    else:
        options = {"quality": spec.param("quality"), **({"method": 0} if name == "webp" else {})}
    fmt = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}[name]

    def encode(frame: np.ndarray) -> bytes:
        out = io.BytesIO()
        Image.fromarray(
            frame.reshape(frame.shape[0], frame.shape[1], -1).squeeze(2) if channels(frame.shape) == 1 else frame
        ).save(out, format=fmt, **options)
        return out.getvalue()

    return encode


def _decoder(spec: CodecSpec, shape: tuple[int, ...], dtype: np.dtype):
    """A function from one payload (a buffer) to its frame, checked to be of ``shape`` and ``dtype``."""
    name = spec.name
    if name in _COMPRESSED:
        unpack = _decompressor(spec, int(np.prod(shape)) * (4 if name == "quantized" else dtype.itemsize))
        return lambda data: untransform(spec, np.frombuffer(unpack(data), np.uint8), shape, dtype)
    Image = _pillow()
    fmt, modes = _IMAGE_FORMATS[name], _IMAGE_MODES[name][channels(shape)]

    def decode_image(data) -> np.ndarray:
        with Image.open(io.BytesIO(data)) as image:
            if image.format != fmt or image.mode not in modes or image.size != (shape[1], shape[0]):
                raise ValueError(
                    f"a {name} payload is a {image.format} image of mode {image.mode} and {image.size[0]}x"
                    f"{image.size[1]} pixels; a {dtype}{list(shape)} frame is a {fmt} image of mode "
                    f"{' or '.join(modes)} and {shape[1]}x{shape[0]} pixels"
                )
            frame = np.asarray(image)
        if frame.ndim == 3 and frame.shape[2] == 3 and channels(shape) == 4:  # webp: the writer's opaque alpha
            frame = np.concatenate([frame, np.full((*frame.shape[:2], 1), 255, np.uint8)], axis=2)
        frame = frame.reshape(shape) if frame.size == int(np.prod(shape)) else frame
        if frame.shape != shape or frame.dtype != dtype:
            raise ValueError(
                f"a {name} payload decodes to {frame.dtype}{list(frame.shape)}, expected {dtype}{list(shape)}"
            )
        return frame

    return decode_image


#: The file format of each image codec's payload (Pillow's name), and the image modes a payload of a field of C
#: channels may decode to: a webp payload of a 4-channel field whose alpha was all 255 is an RGB image (libwebp
#: drops an opaque alpha), its alpha 255 again when decoded.
_IMAGE_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}
_IMAGE_MODES = {
    "png": {1: ("L",), 3: ("RGB",), 4: ("RGBA",)},
    "jpeg": {1: ("L",), 3: ("RGB",)},
    "webp": {3: ("RGB",), 4: ("RGBA", "RGB")},
}


def _zstd_frame(data: memoryview, size: int) -> None:
    """A ``zstd`` payload must be one Zstandard frame, its header giving its content size, ``size`` bytes, and ending
    where the payload ends (docs/FORMAT.md "Encoded fields"): ValueError otherwise. Read from the frame's header and
    its blocks' headers; the decompressor checks the content against the size."""
    if len(data) < 6 or bytes(data[:4]) != b"\x28\xb5\x2f\xfd":
        raise ValueError("a zstd payload does not begin with a Zstandard frame")
    descriptor = data[4]
    single, checksum, dictionary = (descriptor >> 5) & 1, (descriptor >> 2) & 1, descriptor & 3
    content_bytes = (single, 2, 4, 8)[descriptor >> 6]
    at = 5 + (1 - single) + (0, 1, 2, 4)[dictionary]
    content = int.from_bytes(data[at : at + content_bytes], "little") + (256 if content_bytes == 2 else 0)
    if not content_bytes or content != size:
        given = f"gives {content} bytes" if content_bytes else "gives no content size"
        raise ValueError(f"a zstd payload's frame header {given}, expected {size}")
    at += content_bytes
    last = 0
    while not last:
        if at + 3 > len(data):
            raise ValueError(f"a zstd payload of {len(data)} bytes ends inside its frame")
        header = int.from_bytes(data[at : at + 3], "little")
        last, kind = header & 1, (header >> 1) & 3
        if kind == 3:
            raise ValueError("a zstd payload holds a block of the reserved type")
        at += 3 + (1 if kind == 1 else header >> 3)  # an RLE block holds one byte
    at += 4 * checksum
    if at != len(data):
        raise ValueError(f"a zstd payload of {len(data)} bytes holds its frame in {at}: it must be one frame")


def _lz4_frame(data: memoryview, size: int) -> None:
    """An ``lz4`` payload must be one LZ4 frame ending where the payload ends (docs/FORMAT.md "Encoded fields"):
    ValueError otherwise. Read from the frame's header and its blocks' sizes."""
    if len(data) < 7 or bytes(data[:4]) != b"\x04\x22\x4d\x18":
        raise ValueError("an lz4 payload does not begin with an LZ4 frame")
    flags = data[4]
    block_checksum, content_checksum = (flags >> 4) & 1, (flags >> 2) & 1
    at = 7 + 8 * ((flags >> 3) & 1) + 4 * (flags & 1)  # magic, flags, block size, [content size], [dictionary], HC
    while True:
        if at + 4 > len(data):
            raise ValueError(f"an lz4 payload of {len(data)} bytes ends inside its frame")
        block = int.from_bytes(data[at : at + 4], "little") & 0x7FFFFFFF  # the high bit: stored uncompressed
        at += 4
        if not block:
            break
        at += block + 4 * block_checksum
    at += 4 * content_checksum
    if at != len(data):
        raise ValueError(f"an lz4 payload of {len(data)} bytes holds its frame in {at}: it must be one frame")


def _chunks(n: int, parts: int) -> list[tuple[int, int]]:
    bounds = np.linspace(0, n, max(1, min(parts, n)) + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def encode_frames(spec: CodecSpec, frames: np.ndarray, *, pool=None, values: bool = False) -> EncodedFrames:
    """Encode ``frames`` ([n, H, W, C]) with ``spec``, one payload per frame; over ``pool`` (a
    ``concurrent.futures.Executor``; its workers each take a run of frames) where given. The frames must be of a
    dtype and shape the codec takes (:meth:`CodecSpec.check`). With ``values``, the result's ``values`` are what a
    reader decodes (:func:`stored_values`): a lossy image codec's each frame decoded by the worker that encoded it,
    right after its encode; the others' from the frames, whole-array, without their payloads."""
    frames = np.asarray(frames)
    if spec.raw:
        raise ValueError("encode_frames: codec 'none' stores frames raw; there is nothing to encode")
    spec.check(frames.shape[1:], frames.dtype, field="frames")
    encode = _encoder(spec)
    round_trip = values and _WHOLE_ARRAY.get(spec.name) is None and spec.codec.lossy
    decode = _decoder(spec, frames.shape[1:], frames.dtype) if round_trip else None
    decoded = np.empty_like(frames) if round_trip else None

    def run(bounds: tuple[int, int]) -> list[bytes]:
        payloads = [encode(np.ascontiguousarray(frames[i])) for i in range(*bounds)]
        if decode is not None:
            for i, data in zip(range(*bounds), payloads, strict=True):
                decoded[i] = decode(data)
        return payloads

    chunks = _chunks(len(frames), getattr(pool, "_max_workers", 1) if pool is not None else 1)
    parts = list(pool.map(run, chunks)) if pool is not None and len(chunks) > 1 else [run(c) for c in chunks]
    payloads = [p for part in parts for p in part]
    offsets = np.zeros(len(payloads) + 1, np.int64)
    np.cumsum([len(p) for p in payloads], out=offsets[1:])
    payload = np.frombuffer(b"".join(payloads), np.uint8) if payloads else np.zeros(0, np.uint8)
    if values and decoded is None:
        decoded = stored_values(spec, frames)
    return EncodedFrames(spec, payload, offsets, decoded)


def _quantized_values(spec: CodecSpec, frames: np.ndarray) -> np.ndarray:
    """``quantized``'s decoded values, whole-array: ``float32(rint(value / step) * step)`` (:func:`untransform`)."""
    return (_steps(spec, frames) * (spec.param("step_um") * 1e-6)).astype(np.float32)


#: The lossy codecs whose decoded values follow from the frames whole-array, without their payloads.
_WHOLE_ARRAY = {"quantized": _quantized_values}


def stored_values(spec: CodecSpec, frames: np.ndarray, *, pool=None) -> np.ndarray:
    """The values a reader decodes from ``frames`` ([n, ...]) once encoded with ``spec``: the frames themselves for a
    lossless codec (no copy), ``quantized``'s rounding whole-array (``float32(rint(value / step) * step)``, the
    decoder's arithmetic, bit for bit), and a lossy image codec's frames encoded and decoded (over ``pool``)."""
    if spec.raw or spec.codec.lossless:
        return frames
    whole_array = _WHOLE_ARRAY.get(spec.name)
    if whole_array is not None:
        return whole_array(spec, np.asarray(frames))
    return encode_frames(spec, frames, pool=pool, values=True).values


def frame_values(encoded: EncodedFrames, shape: Sequence[int], dtype: Any, *, pool=None) -> np.ndarray:
    """What a reader decodes from ``encoded``: the ``values`` its encoder gave, else its payloads decoded (frames a
    producer encoded where their values did not travel with them: nvJPEG's, on the device)."""
    if encoded.values is not None:
        return encoded.values
    return decode_frames(encoded.spec, encoded, shape, dtype, pool=pool)


def decode_frames(
    spec: CodecSpec, encoded: EncodedFrames, shape: Sequence[int], dtype: Any, *, pool=None, out=None
) -> np.ndarray:
    """The frames of ``encoded`` as one ``[n, *shape]`` array of ``dtype`` (written into ``out`` where given);
    over ``pool`` where given. ValueError when ``encoded`` was made with another codec or a payload does not decode
    to a frame of ``shape`` and ``dtype``."""
    if encoded.spec.name != spec.name:
        raise ValueError(f"decode_frames: frames encoded with {encoded.spec.name!r}, asked to decode as {spec.name!r}")
    shape, dtype = tuple(int(s) for s in shape), np.dtype(dtype)
    n = len(encoded)
    result = np.empty((n, *shape), dtype) if out is None else out
    if result.shape != (n, *shape) or result.dtype != dtype:
        raise ValueError(f"decode_frames: out is {result.dtype}{list(result.shape)}, expected {dtype}{[n, *shape]}")
    view, bounds = memoryview(encoded.payload), encoded.offsets.tolist()
    decode_into(spec, [view[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)], result, pool=pool)
    return result


def decode_into(spec: CodecSpec, payloads: Sequence, out: np.ndarray, *, places=None, pool=None) -> None:
    """Decode ``payloads`` (buffers, one frame's payload each, encoded with ``spec``) into ``out`` (``[m, *shape]``
    of the frames' dtype): payload ``i`` into ``out[places[i]]`` (``out[i]`` without ``places``); over ``pool`` (a
    ``concurrent.futures.Executor``; its workers take runs of payloads) where given. ValueError when a payload
    does not decode to a frame of ``out``'s shape and dtype (other rows may be written)."""
    decode_all([(spec, payloads, out, places)], pool=pool)


def decode_all(jobs: Sequence[tuple], *, pool=None) -> None:
    """Several :func:`decode_into` at once, each job ``(spec, payloads, out, places)``: every job cut into runs of
    payloads (two per worker) that ``pool``'s workers take in turn, so that the frames of a field quick to decode and
    of a slow one share the workers to the end."""
    workers = getattr(pool, "_max_workers", 1) if pool is not None else 1
    tasks = []
    for spec, payloads, out, places in jobs:
        places = np.arange(len(payloads)) if places is None else np.asarray(places, np.int64).reshape(-1)
        if places.size != len(payloads):
            raise ValueError(f"decode_into: {len(payloads)} payloads for {places.size} places")
        run = _frames_decoder(spec, tuple(out.shape[1:]), out.dtype)
        parts = _chunks(len(payloads), 2 * workers if workers > 1 else 1)
        tasks += [(spec, run, payloads[a:b], places[a:b], out) for a, b in parts]

    def task(spec: CodecSpec, run, payloads: Sequence, places: np.ndarray, out: np.ndarray) -> None:
        try:
            run(payloads, places, out)
        except (OSError, ValueError, SyntaxError) as exc:  # Pillow raises OSError / SyntaxError on bad data
            raise ValueError(f"a {spec.name} frame does not decode: {exc}") from exc

    if pool is not None and len(tasks) > 1:
        list(pool.map(lambda args: task(*args), tasks))
    else:
        for args in tasks:
            task(*args)


#: The frames whose words :func:`_frames_decoder` undoes together: about this many bytes of words at a time (a few
#: frames, kept in the core's cache between the steps).
_GROUP_BYTES = 1 << 18


def _frames_decoder(spec: CodecSpec, shape: tuple[int, ...], dtype: np.dtype, *, compiled: bool = True):
    """A function ``(payloads, places, out)`` that decodes each payload into ``out[place]``. The ``zstd``, ``lz4`` and
    ``quantized`` codecs' words are undone by their compiled transform (:func:`_kernels`) unless ``compiled`` is off
    or numba is missing, else a group of frames at a time (:func:`_undo_words`): the same steps as
    :func:`untransform`, whole-array over the group, in the words' unsigned width."""
    if spec.name not in _COMPRESSED:
        decode = _decoder(spec, shape, dtype)

        def each(payloads: Sequence, places: np.ndarray, out: np.ndarray) -> None:
            for data, at in zip(payloads, places.tolist(), strict=True):
                out[at] = decode(data)

        return each
    size = int(np.prod(shape)) * (4 if spec.name == "quantized" else dtype.itemsize)
    unpack = _decompressor(spec, size)
    if spec.name != "quantized" and dtype.itemsize == 1:  # the transformed bytes are the frame's

        def raw(payloads: Sequence, places: np.ndarray, out: np.ndarray) -> None:
            for data, at in zip(payloads, places.tolist(), strict=True):
                out[at] = np.frombuffer(unpack(data), dtype).reshape(shape)

        return raw
    width = 4 if spec.name == "quantized" else dtype.itemsize
    words = _UNSIGNED[width].newbyteorder("<")
    count, rows = size // width, shape[0]
    kernels = _kernels() if compiled else None
    if kernels is not None:
        return _compiled_decoder(kernels, spec, unpack, size, rows, dtype)
    group = max(1, _GROUP_BYTES // max(size, 1))
    scale = spec.param("step_um") * 1e-6 if spec.name == "quantized" else None

    def grouped(payloads: Sequence, places: np.ndarray, out: np.ndarray) -> None:
        k = min(group, len(payloads))
        if not k:
            return
        gathered = np.empty((k, count, width), np.uint8)  # each frame's words, from its byte planes
        signs = np.empty((k, count), words)
        values = np.empty((k, count), np.float64) if scale is not None else None
        for first in range(0, len(payloads), k):
            part = payloads[first : first + k]
            n = len(part)
            for j, data in enumerate(part):
                planes = np.frombuffer(unpack(data), np.uint8).reshape(width, count)
                for b in range(width):
                    gathered[j, :, b] = planes[b]
            w = gathered[:n].reshape(n, count * width).view(words).reshape(n, rows, -1)
            _undo_words(w, signs[:n].reshape(n, rows, -1))
            at = places[first : first + n]
            if scale is None:
                out[at] = w.view(dtype.newbyteorder("<")).reshape(n, *shape)
            else:  # q * step in float64, rounded once to float32, as untransform
                np.multiply(w.view(np.dtype("<i4")), scale, out=values[:n].reshape(n, rows, -1))
                out[at] = values[:n].reshape(n, *shape)

    return grouped


def _undo_words(words: np.ndarray, scratch: np.ndarray) -> None:
    """:func:`_undo_zigzag_delta` in place on unsigned words ``[frames, rows, row]`` (``scratch``: an array of their
    shape and dtype): each zigzagged difference back to its wrapped signed value (``(z >> 1) ^ -(z & 1)``), then
    summed along its row, every step wrapping at the words' width as the format's arithmetic does. The words come
    out as the values' bits (``quantized``: view them as int32)."""
    np.bitwise_and(words, 1, out=scratch)
    np.negative(scratch, out=scratch)
    np.right_shift(words, 1, out=words)
    np.bitwise_xor(words, scratch, out=words)
    np.cumsum(words, axis=2, dtype=words.dtype, out=words)


#: Whether :func:`_kernels` may give the compiled decode (False: numpy's steps decode every frame, as where numba
#: is not installed).
_COMPILED = True
_KERNELS: dict | None = None


def _kernels() -> dict | None:
    """The compiled transforms, by the words' width (2, 4 and ``"quantized"``), or None where numba does not import
    (or :data:`_COMPILED` is off). numba is imported at the first call; each function compiles at its first use and
    is cached on disk (next to this module, else in numba's user-wide cache or ``NUMBA_CACHE_DIR``); where no cache
    directory is writable it compiles once per process instead."""
    global _KERNELS
    if not _COMPILED or sys.byteorder != "little":
        return None
    if _KERNELS is None:
        try:
            import numba
        except ImportError:
            _KERNELS = {}
        else:

            def jit(function):
                try:
                    return numba.njit(cache=True, nogil=True)(function)
                except RuntimeError:  # no writable cache directory: compiled per process
                    return numba.njit(nogil=True)(function)

            _KERNELS = {2: jit(_undo_planes_16), 4: jit(_undo_planes_32), "quantized": jit(_undo_planes_quantized)}
    return _KERNELS or None


def _undo_planes_16(planes: np.ndarray, out: np.ndarray, at: int, rows: int) -> None:
    """One uint16 frame's byte planes (``planes``: uint8, ``2 * count`` bytes) decoded into ``out[at]`` (``[m,
    count]`` uint16 words) in one pass: each word's bytes gathered, its zigzag undone (``(z >> 1) ^ -(z & 1)``) and
    summed along its row in int32, whose low 16 bits wrap as the format's sums do. Compiled by numba (its int32
    arithmetic wraps at 32 bits)."""
    count = out.shape[1]
    cols = count // rows
    row, p0, p1 = out[at], planes[:count], planes[count:]
    for r in range(rows):
        acc = np.int32(0)
        for c in range(r * cols, (r + 1) * cols):
            z = np.int32(p0[c]) | (np.int32(p1[c]) << np.int32(8))
            acc = np.int32(acc + ((z >> np.int32(1)) ^ -(z & np.int32(1))))
            row[c] = acc & np.int32(0xFFFF)


def _undo_planes_32(planes: np.ndarray, out: np.ndarray, at: int, rows: int) -> None:
    """As :func:`_undo_planes_16` for 32-bit words (float32 frames: ``out`` holds their bits as uint32), summed in
    int32."""
    count = out.shape[1]
    cols = count // rows
    row, p0, p1, p2, p3 = (
        out[at],
        planes[:count],
        planes[count : 2 * count],
        planes[2 * count : 3 * count],
        planes[3 * count :],
    )
    for r in range(rows):
        acc = np.int32(0)
        for c in range(r * cols, (r + 1) * cols):
            z = (
                np.uint32(p0[c])
                | (np.uint32(p1[c]) << np.uint32(8))
                | (np.uint32(p2[c]) << np.uint32(16))
                | (np.uint32(p3[c]) << np.uint32(24))
            )
            acc = np.int32(acc + np.int32((z >> np.uint32(1)) ^ (np.uint32(0) - (z & np.uint32(1)))))
            row[c] = np.uint32(acc)


def _undo_planes_quantized(planes: np.ndarray, out: np.ndarray, at: int, rows: int, scale: float) -> None:
    """As :func:`_undo_planes_32`, each row sum then the signed 32-bit step count ``q``, written to ``out[at]``
    (float32) as ``q * scale`` taken in float64 and rounded once to float32."""
    count = out.shape[1]
    cols = count // rows
    row, p0, p1, p2, p3 = (
        out[at],
        planes[:count],
        planes[count : 2 * count],
        planes[2 * count : 3 * count],
        planes[3 * count :],
    )
    for r in range(rows):
        acc = np.int32(0)
        for c in range(r * cols, (r + 1) * cols):
            z = (
                np.uint32(p0[c])
                | (np.uint32(p1[c]) << np.uint32(8))
                | (np.uint32(p2[c]) << np.uint32(16))
                | (np.uint32(p3[c]) << np.uint32(24))
            )
            acc = np.int32(acc + np.int32((z >> np.uint32(1)) ^ (np.uint32(0) - (z & np.uint32(1)))))
            row[c] = np.float32(np.float64(acc) * scale)


def _compiled_decoder(kernels: dict, spec: CodecSpec, unpack, size: int, rows: int, dtype: np.dtype):
    """:func:`_frames_decoder`'s function for words of 2 or 4 bytes, each frame decompressed and then undone by its
    compiled transform straight into its row of ``out`` (numpy's steps where ``out`` is not one C-ordered block of
    native words)."""
    quantized = spec.name == "quantized"
    kernel = kernels["quantized" if quantized else dtype.itemsize]
    scale = spec.param("step_um") * 1e-6 if quantized else 0.0
    fallback = None

    def compiled(payloads: Sequence, places: np.ndarray, out: np.ndarray) -> None:
        nonlocal fallback
        if not out.flags.c_contiguous or not out.dtype.isnative:
            fallback = fallback or _frames_decoder(spec, tuple(out.shape[1:]), out.dtype, compiled=False)
            return fallback(payloads, places, out)
        m = len(out)
        places = np.asarray(places, np.int64)
        if places.size and (places.min() < -m or places.max() >= m):
            raise IndexError(f"decode_into: a place of {places.min()}..{places.max()} is outside out's {m} rows")
        places = np.where(places < 0, places + m, places)
        rows_of = out.reshape(m, -1)
        if not quantized:
            rows_of = rows_of.view(_UNSIGNED[dtype.itemsize])
        for data, at in zip(payloads, places.tolist(), strict=True):
            planes = np.frombuffer(unpack(data), np.uint8)
            if planes.size != size:
                raise ValueError(f"a payload decompresses to {planes.size} bytes, expected {size}")
            if quantized:
                kernel(planes, rows_of, at, rows, scale)
            else:
                kernel(planes, rows_of, at, rows)

    return compiled


def _decompressor(spec: CodecSpec, size: int):
    """A function from one ``zstd``, ``lz4`` or ``quantized`` payload to its transformed bytes (a buffer of exactly
    ``size`` bytes), the payload checked to be one frame of that content (docs/FORMAT.md "Encoded fields")."""
    if _COMPRESSED[spec.name] == "zstd":
        codec = _arrow_codec("zstd", None)

        def zstd(data):
            _zstd_frame(memoryview(data).cast("B"), size)  # its content size, checked, is the size Arrow returns
            return codec.decompress(data, decompressed_size=size)  # an Arrow buffer: no copy into bytes

        return zstd
    import pyarrow as pa

    def lz4(data):
        _lz4_frame(memoryview(data).cast("B"), size)
        # Arrow's lz4 decompress returns `size` bytes whatever the frame holds: read one more, as a stream
        found = pa.CompressedInputStream(pa.BufferReader(data), "lz4").read(size + 1)
        if len(found) != size:
            raise ValueError(f"an lz4 payload decompresses to {len(found)} bytes, expected {size}")
        return found

    return lz4


def field_codecs(fields: Mapping[str, tuple[Sequence[int], Any]], requested: Mapping[str, CodecSpec]) -> dict:
    """field -> :class:`CodecSpec` of the fields a run encodes: each image field (:func:`is_image`) gets the codec
    ``requested`` names for it, else ``requested["*"]``, else :func:`default_codec`; those that come out ``none``
    are left out (stored raw). ValueError naming a requested field the run lacks, one that is not an image, or a
    codec that does not take the field's frames."""
    for name, spec in requested.items():
        if name == "*":
            continue
        if name not in fields:
            raise ValueError(f"codec for field {name!r}: the run has no such field (it has {', '.join(fields)})")
        if not spec.raw and not is_image(*fields[name]):
            shape, dtype = fields[name]
            raise ValueError(f"codec for field {name!r}: it is {np.dtype(dtype)}{list(shape)}, not an image")
    out = {}
    for name, (shape, dtype) in fields.items():
        if not is_image(shape, dtype):
            continue
        spec = requested.get(name, requested.get("*"))
        spec = spec if spec is not None else default_codec(shape, dtype)
        if spec.raw:
            continue
        spec.check(shape, dtype, field=name)
        out[name] = spec
    return out
