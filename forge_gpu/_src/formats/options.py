"""RecordingOptions: how a run is written (format, compression, writers, memory budget, statistics), one frozen
value checked once and passed from the command line through ``collect``, ``collect_distributed`` and
``make_recorder`` to the recorder. The formats and their compressions are :mod:`formats.registry`'s. The standard
library only: the command line checks it without numpy's recorders or Warp."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from forge_gpu._src.core.checks import is_int
from forge_gpu._src.core.codec_specs import CodecSpec
from forge_gpu._src.formats.registry import FORMATS


class OptionError(ValueError):
    """A recording option out of range: ``name`` (the field), ``value`` and what is ``allowed``."""

    def __init__(self, name: str, value: Any, allowed: str):
        super().__init__(f"{name}={value!r}: {allowed}")
        self.name, self.value, self.allowed = name, value, allowed


@dataclass(frozen=True, kw_only=True)
class RecordingOptions:
    """How a run is recorded; every field is checked when the value is made (:class:`OptionError`)."""

    format: str = "packed"
    """A registered format (:data:`formats.FORMATS`): ``packed`` (schema 2, many episodes per file,
    :class:`PackedRecorder`), ``npz`` (schema 1, one file per episode, :class:`NpzRecorder`), or one added by
    ``register_format``."""
    compression: str = "none"
    """One of the format's compressions: packed ``none``, ``lz4`` or ``zstd``; npz ``none`` or ``deflate``."""
    compression_level: int = 1
    """npz deflate level, 0-9 (packed ignores it)."""
    writers: int = 2
    """npz writer threads; packed: the threads of its one writer's pool that encode image frames."""
    max_buffer_bytes: int | None = None
    """The recorder's memory budget [bytes]; ``None``: the format's default (packed 256 MiB of buffered batches,
    npz 1 GiB of episode buffers)."""
    statistics: bool = True
    """Compute normalization statistics while recording and write them as ``stats.json`` at close."""
    codecs: Mapping[str, Any] = field(default_factory=dict)
    """Image codecs, field -> codec (a :class:`CodecSpec` or its text, ``jpeg:90``, ``quantized:step_um=100``,
    ``none`` for raw), the key ``*`` for every image field not named (packed only; docs/FORMAT.md "Encoded
    fields"). An image field named nowhere gets the default codec (:func:`core.codec_specs.default_codec`); the
    recorder checks each against its field. Kept as field -> :class:`CodecSpec`."""
    durability: str = "process"
    """What a published episode survives (docs/FORMAT.md "Durability"): ``process`` (the default: its data is in
    the page cache when its commit returns, so it survives the recording process being killed) or ``machine``
    (packed only: each block's data is synced before its commit line and the log after it, one sync pair per
    block, so it survives a machine crash or power cut once its commit returned)."""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise OptionError("format", self.format, f"expected one of {', '.join(FORMATS)}")
        capabilities = FORMATS[self.format].capabilities
        allowed = capabilities.compressions
        if self.compression not in allowed:
            raise OptionError("compression", self.compression, f"the {self.format} format takes {', '.join(allowed)}")
        if not is_int(self.compression_level) or not 0 <= self.compression_level <= 9:
            raise OptionError("compression_level", self.compression_level, "must be an integer in [0, 9] (npz deflate)")
        if not is_int(self.writers) or self.writers < 1:
            raise OptionError("writers", self.writers, "must be an integer >= 1")
        if self.max_buffer_bytes is not None and (not is_int(self.max_buffer_bytes) or self.max_buffer_bytes < 1):
            raise OptionError("max_buffer_bytes", self.max_buffer_bytes, "must be an integer >= 1 (or None)")
        if not isinstance(self.statistics, bool):
            raise OptionError("statistics", self.statistics, "must be True or False")
        object.__setattr__(self, "codecs", check_codecs(self.codecs, self.format))
        takes = capabilities.durabilities
        if self.durability not in takes:
            raise OptionError("durability", self.durability, f"the {self.format} format takes {', '.join(takes)}")

    def replace(self, **changes: Any) -> RecordingOptions:
        """A copy with ``changes`` (RecordingOptions' fields), checked."""
        return dataclasses.replace(self, **changes)


def check_codecs(codecs: Any, format: str) -> dict[str, CodecSpec]:
    """``RecordingOptions.codecs`` checked: field -> :class:`CodecSpec` (OptionError naming the bad entry)."""
    if not isinstance(codecs, Mapping):
        raise OptionError("codecs", codecs, "must be a dict of field -> codec, e.g. {'rgb': 'jpeg:90'}")
    if codecs and not FORMATS[format].capabilities.codecs:
        takes = ", ".join(f.name for f in FORMATS.values() if f.capabilities.codecs)
        raise OptionError("codecs", dict(codecs), f"codecs apply to the {takes} format, not {format}")
    out = {}
    for name, spec in codecs.items():
        if not isinstance(name, str) or not name:
            raise OptionError("codecs", name, "a field name (or '*' for every image field)")
        try:
            out[name] = spec if isinstance(spec, CodecSpec) else CodecSpec.parse(spec)
        except ValueError as exc:
            raise OptionError("codec", f"{name}={spec}", str(exc)) from exc
    return out


def parse_codec_option(text: str) -> tuple[str, str]:
    """The command line's ``--codec FIELD=CODEC`` (``--codec CODEC``: every image field, ``*``) as (field, codec)."""
    name, eq, spec = text.partition("=")
    return (name, spec) if eq else ("*", name)


def recording_options(options: RecordingOptions | None = None) -> RecordingOptions:
    """``options``, or ``RecordingOptions()`` for ``None``: the one way ``collect``, ``collect_distributed`` and
    ``make_recorder`` take how a run is recorded (TypeError for anything else)."""
    if options is not None and not isinstance(options, RecordingOptions):
        raise TypeError(f"options must be a RecordingOptions, got {type(options).__name__}")
    return options or RecordingOptions()
