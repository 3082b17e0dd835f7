"""Image codecs: how a packed run stores one image field's frames (docs/FORMAT.md "Encoded fields").

A codec turns each frame of a field (an ``[H, W, C]`` array) into one self-contained payload, so a frame is one row
of its column and any frame decodes without its neighbours. :data:`CODECS` registers them by name; a
:class:`CodecSpec` is a name and its parameters, as run.json records it per field; :class:`EncodedFrames` holds
the payloads of ``n`` frames in one contiguous uint8 buffer with ``n + 1`` offsets; :func:`encode_frames` and
:func:`decode_frames` go between the two, optionally over a thread pool (the libraries used here let go of the GIL
while they work; bench/codecs.py measures it).

The standard library and numpy at import; Pillow and pyarrow are loaded by the codecs that use them.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The name of the codec that stores frames raw (a fixed-size list column, as before layout 5).
RAW = "none"


@dataclass(frozen=True)
class Codec:
    """One registered codec: what it takes and what it promises."""

    name: str
    lossless: bool
    """Whether every frame decodes bit-exact."""
    dtypes: tuple[str, ...]
    """The numpy dtypes of the frames it takes."""
    channels: tuple[int, ...] | None
    """The channel counts C of ``[H, W, C]`` frames it takes (None: any per-frame shape)."""
    params: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    """parameter -> (default, minimum, maximum), all integers."""
    bound: str = "bit-exact"
    """The stated error bound, in words (docs/FORMAT.md)."""
    min_psnr: float | None = None
    """A lossy codec's promise at its default parameters: every frame's PSNR [dB] at least this (peak 255)."""


def _zstd_level(default: int) -> dict:
    return {"level": (default, 1, 19)}


#: The codecs, by name.
CODECS: dict[str, Codec] = {
    c.name: c
    for c in (
        Codec(RAW, True, ("uint8", "uint16", "float32"), None, bound="bit-exact (stored raw)"),
        Codec("png", True, ("uint8",), (1, 3, 4), {"level": (1, 0, 9)}),
        Codec("zstd", True, ("uint8", "uint16", "float32"), None, _zstd_level(1)),
        Codec("lz4", True, ("uint8", "uint16", "float32"), None),
        Codec(
            "jpeg",
            False,
            ("uint8",),
            (1, 3),
            {"quality": (90, 1, 100)},
            bound="lossy: every frame's PSNR >= 30 dB at quality >= 75 on rendered frames",
            min_psnr=30.0,
        ),
        Codec(
            "webp",
            False,
            ("uint8",),
            (3, 4),
            {"quality": (90, 1, 100)},
            bound="lossy: every frame's PSNR >= 30 dB at quality >= 75 on rendered frames",
            min_psnr=30.0,
        ),
    )
}


@dataclass(frozen=True)
class CodecSpec:
    """A codec and its parameters (every one the codec has, defaults filled in), as run.json records it per field:
    ``{"codec": name, **params}`` (:meth:`to_json`)."""

    name: str
    params: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.name not in CODECS:
            raise ValueError(f"codec {self.name!r}: expected one of {', '.join(CODECS)}")
        codec = CODECS[self.name]
        given = dict(self.params)
        unknown = sorted(set(given) - set(codec.params))
        if unknown:
            takes = ", ".join(codec.params) or "no parameters"
            raise ValueError(f"codec {self.name!r}: unknown parameter(s) {unknown}; it takes {takes}")
        filled = []
        for key, (default, low, high) in codec.params.items():
            value = given.get(key, default)
            if type(value) is not int or not low <= value <= high:
                raise ValueError(f"codec {self.name!r}: {key}={value!r} must be an integer in [{low}, {high}]")
            filled.append((key, value))
        object.__setattr__(self, "params", tuple(filled))

    @property
    def codec(self) -> Codec:
        return CODECS[self.name]

    @property
    def raw(self) -> bool:
        """Whether the field is stored raw (no codec)."""
        return self.name == RAW

    def param(self, key: str) -> int:
        return dict(self.params)[key]

    def to_json(self) -> dict:
        return {"codec": self.name, **dict(self.params)}

    @classmethod
    def from_json(cls, entry: Any, *, name: str) -> CodecSpec:
        """From run.json's ``{"codec": name, **params}``; ValueError naming ``name``."""
        if not isinstance(entry, Mapping) or not isinstance(entry.get("codec"), str):
            raise ValueError(f"{name}: expected {{'codec': NAME, ...params}}, got {entry!r}")
        try:
            return cls(entry["codec"], tuple((k, v) for k, v in entry.items() if k != "codec"))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from exc

    @classmethod
    def parse(cls, text: str) -> CodecSpec:
        """From the command line's ``NAME[:VALUE]`` (the value is the codec's one parameter, e.g. ``jpeg:90``) or
        ``NAME:KEY=VALUE[,KEY=VALUE]``."""
        name, _, rest = str(text).partition(":")
        if name not in CODECS:
            raise ValueError(f"codec {text!r}: expected one of {', '.join(CODECS)}")
        params: list[tuple[str, Any]] = []
        for part in filter(None, rest.split(",")):
            key, eq, value = part.rpartition("=")
            if not eq:
                keys = list(CODECS[name].params)
                if len(keys) != 1:
                    raise ValueError(
                        f"codec {text!r}: {name} takes {', '.join(keys) or 'no parameters'}; use KEY=VALUE"
                    )
                key = keys[0]
            params.append((key, int(value) if value.lstrip("-").isdigit() else value))
        return cls(name, tuple(params))

    def __str__(self) -> str:
        return ":".join([self.name, ",".join(f"{k}={v}" for k, v in self.params)]) if self.params else self.name

    def check(self, shape: Sequence[int], dtype: Any, *, field: str) -> None:
        """The codec must take frames of per-frame ``shape`` and ``dtype``: ValueError naming ``field`` otherwise."""
        codec, dtype = self.codec, np.dtype(dtype)
        if dtype.name not in codec.dtypes:
            raise ValueError(f"codec {self.name!r} for field {field!r}: takes {', '.join(codec.dtypes)}, not {dtype}")
        if codec.channels is not None and (len(shape) != 3 or shape[2] not in codec.channels):
            raise ValueError(
                f"codec {self.name!r} for field {field!r}: takes [H, W, C] frames with C in {list(codec.channels)}, "
                f"not {list(shape)}"
            )


def is_image(shape: Sequence[int], dtype: Any) -> bool:
    """Whether a field of per-frame ``shape`` and ``dtype`` is an image, which takes a codec: ``[H, W, C]`` with
    C in 1..4, of uint8, uint16 or float32."""
    return len(shape) == 3 and 1 <= shape[2] <= 4 and np.dtype(dtype).name in ("uint8", "uint16", "float32")


def default_codec(shape: Sequence[int], dtype: Any) -> CodecSpec:
    """The codec a new run gives an image field when none is asked for (README "Image codecs" measures them):
    PNG for uint8 frames of 1, 3 or 4 channels, zstd over the byte planes otherwise (depth: float32, bit-exact)."""
    dtype = np.dtype(dtype)
    if dtype == np.uint8 and shape[2] in (1, 3, 4):
        return CodecSpec("png")
    return CodecSpec("zstd")


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
        return EncodedFrames(self.spec, payload, offsets)

    @staticmethod
    def concatenate(parts: Sequence[EncodedFrames]) -> EncodedFrames:
        """The frames of ``parts`` (all of one spec) end to end."""
        if not parts:
            raise ValueError("EncodedFrames.concatenate needs at least one part")
        spec = parts[0].spec
        if any(p.spec != spec for p in parts):
            raise ValueError("EncodedFrames.concatenate: parts of different codecs")
        if len(parts) == 1:
            return parts[0]
        starts = np.cumsum([0] + [p.nbytes for p in parts[:-1]])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + s for p, s in zip(parts, starts, strict=True)])
        return EncodedFrames(spec, np.concatenate([p.payload for p in parts]), offsets.astype(np.int64))


# -- the codecs' byte formats (docs/FORMAT.md "Encoded fields") -----------------------------------------------


def shuffle_planes(frame: np.ndarray) -> np.ndarray:
    """A frame's values (C order) as little-endian words split into byte planes, plane ``k`` (byte ``k`` of every
    word) after plane ``k - 1``: the transform the ``zstd`` and ``lz4`` codecs compress (it groups the slowly
    varying high bytes of float32 depth together). uint8 frames are unchanged."""
    words = np.ascontiguousarray(frame).reshape(-1)
    words = words.astype(words.dtype.newbyteorder("<"), copy=False)
    return np.ascontiguousarray(words.view(np.uint8).reshape(-1, words.dtype.itemsize).T).reshape(-1)


def unshuffle_planes(planes: np.ndarray, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """The inverse of :func:`shuffle_planes`: the frame of ``shape`` and ``dtype``."""
    dtype = np.dtype(dtype)
    words = np.ascontiguousarray(planes.reshape(dtype.itemsize, -1).T).view(dtype.newbyteorder("<"))
    return words.reshape(shape).astype(dtype, copy=False)


def _pillow():
    from PIL import Image  # noqa: PLC0415 - loaded by the codecs that use it

    return Image


def _arrow_codec(name: str, level: int | None):
    import pyarrow as pa  # noqa: PLC0415 - loaded by the codecs that use it

    return pa.Codec(name, compression_level=level) if level is not None else pa.Codec(name)


def _encoder(spec: CodecSpec):
    """A function from one frame ([H, W, C], C-contiguous) to its payload (bytes)."""
    name = spec.name
    if name in ("zstd", "lz4"):
        codec = _arrow_codec("zstd" if name == "zstd" else "lz4", spec.param("level") if name == "zstd" else None)
        return lambda frame: codec.compress(shuffle_planes(frame), asbytes=True)
    Image = _pillow()
    options = {"png": {"compress_level": 0}, "jpeg": {}, "webp": {"method": 0}}[name]
    if name == "png":
        options = {"compress_level": spec.param("level")}
    else:
        options = {**options, "quality": spec.param("quality")}
    fmt = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}[name]

    def encode(frame: np.ndarray) -> bytes:
        out = io.BytesIO()
        Image.fromarray(frame[..., 0] if frame.shape[2] == 1 else frame).save(out, format=fmt, **options)
        return out.getvalue()

    return encode


def _decoder(spec: CodecSpec, shape: tuple[int, ...], dtype: np.dtype):
    """A function from one payload (a buffer) to its frame, checked to be of ``shape`` and ``dtype``."""
    name = spec.name
    if name in ("zstd", "lz4"):
        codec = _arrow_codec("zstd" if name == "zstd" else "lz4", None)
        size = int(np.prod(shape)) * dtype.itemsize

        def decode(data) -> np.ndarray:
            planes = np.frombuffer(codec.decompress(data, decompressed_size=size, asbytes=True), np.uint8)
            return unshuffle_planes(planes, shape, dtype)

        return decode
    Image = _pillow()

    def decode_image(data) -> np.ndarray:
        with Image.open(io.BytesIO(data)) as image:
            frame = np.asarray(image)
        frame = frame.reshape(*frame.shape[:2], -1)
        if frame.shape != shape or frame.dtype != dtype:
            raise ValueError(
                f"a {name} payload decodes to {frame.dtype}{list(frame.shape)}, expected {dtype}{list(shape)}"
            )
        return frame

    return decode_image


def _chunks(n: int, parts: int) -> list[tuple[int, int]]:
    bounds = np.linspace(0, n, max(1, min(parts, n)) + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def encode_frames(spec: CodecSpec, frames: np.ndarray, *, pool=None) -> EncodedFrames:
    """Encode ``frames`` ([n, H, W, C]) with ``spec``, one payload per frame; over ``pool`` (a
    ``concurrent.futures.Executor``; its workers each take a run of frames) where given. The frames must be of a
    dtype and shape the codec takes (:meth:`CodecSpec.check`)."""
    frames = np.asarray(frames)
    if spec.raw:
        raise ValueError("encode_frames: codec 'none' stores frames raw; there is nothing to encode")
    spec.check(frames.shape[1:], frames.dtype, field="frames")
    encode = _encoder(spec)

    def run(bounds: tuple[int, int]) -> list[bytes]:
        return [encode(np.ascontiguousarray(frames[i])) for i in range(*bounds)]

    chunks = _chunks(len(frames), getattr(pool, "_max_workers", 1) if pool is not None else 1)
    parts = list(pool.map(run, chunks)) if pool is not None and len(chunks) > 1 else [run(c) for c in chunks]
    payloads = [p for part in parts for p in part]
    offsets = np.zeros(len(payloads) + 1, np.int64)
    np.cumsum([len(p) for p in payloads], out=offsets[1:])
    payload = np.frombuffer(b"".join(payloads), np.uint8) if payloads else np.zeros(0, np.uint8)
    return EncodedFrames(spec, payload, offsets)


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
    decode = _decoder(spec, shape, dtype)
    payload, offsets = encoded.payload, encoded.offsets

    def run(bounds: tuple[int, int]) -> None:
        for i in range(*bounds):
            result[i] = decode(payload[offsets[i] : offsets[i + 1]])

    chunks = _chunks(n, getattr(pool, "_max_workers", 1) if pool is not None else 1)
    try:
        if pool is not None and len(chunks) > 1:
            list(pool.map(run, chunks))
        else:
            for bounds in chunks:
                run(bounds)
    except (OSError, ValueError, SyntaxError) as exc:  # Pillow raises OSError / SyntaxError on bad data
        raise ValueError(f"a {spec.name} frame does not decode: {exc}") from exc
    return result
