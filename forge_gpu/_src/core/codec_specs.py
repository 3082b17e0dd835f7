"""The image codecs' names, what each takes and promises, and :class:`CodecSpec` (a codec and its parameters, as
run.json records it per field): the registry half of :mod:`core.codecs`, with the standard library alone, so the
command line and :class:`RecordingOptions` check a codec option without numpy. docs/FORMAT.md "Encoded fields"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def dtype_name(dtype: Any) -> str:
    """The name of a numpy dtype (or dtype-like: ``np.float32``, ``"float32"``) without importing numpy."""
    name = getattr(dtype, "name", None)
    return name if isinstance(name, str) else getattr(dtype, "__name__", str(dtype))


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
    """A lossy image codec's promise at quality >= 75: every frame's PSNR [dB] at least this (peak 255)."""
    nvjpeg: bool = False
    """Whether nvJPEG encodes and decodes its payloads on a CUDA device (the device encoder and ``device_batch``)."""

    @property
    def lossy(self) -> bool:
        """Whether a frame may decode to other values than were encoded (what a reader gets is what is stored)."""
        return not self.lossless


def _zstd_level(default: int) -> dict:
    return {"level": (default, 1, 19)}


#: The codecs, by name.
CODECS: dict[str, Codec] = {
    c.name: c
    for c in (
        Codec(RAW, True, ("uint8", "uint16", "float32"), None, bound="bit-exact (stored raw)"),
        Codec("png", True, ("uint8",), (1, 3, 4), {"level": (1, 0, 9)}),
        Codec("zstd", True, ("uint8", "uint16", "float32"), None, _zstd_level(3)),
        Codec("lz4", True, ("uint8", "uint16", "float32"), None),
        Codec(
            "quantized",
            False,
            ("float32",),
            (1,),
            {"step_um": (10, 1, 1_000_000), **_zstd_level(3)},
            bound="every value within step_um / 2 micrometres (plus float32 rounding); 0 stays 0",
        ),
        Codec(
            "jpeg",
            False,
            ("uint8",),
            (1, 3),
            {"quality": (90, 1, 100)},
            bound="lossy: every frame's PSNR >= 25 dB at quality >= 75 on the tasks' rendered frames (32 px and up)",
            min_psnr=25.0,
            nvjpeg=True,
        ),
        Codec(
            "webp",
            False,
            ("uint8",),
            (3, 4),
            {"quality": (90, 1, 100)},
            bound="lossy: every frame's PSNR >= 25 dB at quality >= 75 on the tasks' rendered frames (32 px and up)",
            min_psnr=25.0,
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
        codec, dtype = self.codec, dtype_name(dtype)
        if dtype not in codec.dtypes:
            raise ValueError(f"codec {self.name!r} for field {field!r}: takes {', '.join(codec.dtypes)}, not {dtype}")
        if codec.channels is not None and (len(shape) not in (2, 3) or channels(shape) not in codec.channels):
            raise ValueError(
                f"codec {self.name!r} for field {field!r}: takes [H, W] or [H, W, C] frames with C in "
                f"{list(codec.channels)}, "
                f"not {list(shape)}"
            )


def channels(shape: Sequence[int]) -> int:
    """C of an ``[H, W, C]`` frame; 1 for an ``[H, W]`` one."""
    return int(shape[2]) if len(shape) == 3 else 1


def is_image(shape: Sequence[int], dtype: Any) -> bool:
    """Whether a field of per-frame ``shape`` and ``dtype`` is an image, which takes a codec: ``[H, W]`` or
    ``[H, W, C]`` with C in 1..4, of uint8, uint16 or float32."""
    dims = len(shape) in (2, 3) and 1 <= channels(shape) <= 4
    return dims and dtype_name(dtype) in ("uint8", "uint16", "float32")


def default_codec(shape: Sequence[int], dtype: Any) -> CodecSpec:
    """The codec a new run gives an image field when none is asked for (README "Image codecs" measures them):
    ``quantized`` (10 um steps) for one-channel float32 frames (depth: bit-exact float32 depth does not compress
    below about 10 KB a 128 px frame, its low mantissa bits being noise), lossless ``zstd`` for the others (the
    tasks' flat-shaded rgb: smaller than JPEG at quality 90, faster than PNG)."""
    if dtype_name(dtype) == "float32" and channels(shape) == 1:
        return CodecSpec("quantized")
    return CodecSpec("zstd")
