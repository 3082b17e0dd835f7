"""``collect``'s recording flags, derived from :class:`RecordingOptions`: one flag per field, named after it
(``max_buffer_bytes`` is ``--max-buffer-bytes``; ``codecs`` is the repeatable ``--codec``, ``statistics`` the switch
``--no-statistics``), its default the field's. :func:`recording_options_of` builds the options from the parsed flags
by the same table, so a field added to RecordingOptions without a flag here fails at import
(tests/cli/test_cli.py also checks both directions)."""

from __future__ import annotations

import argparse
import dataclasses

from forge_gpu._src.core.codec_specs import CODECS
from forge_gpu._src.formats.registry import DURABILITIES, FORMATS, OptionError, RecordingOptions, parse_codec_option

from ._common import UsageError

DEFAULTS = RecordingOptions()
FIELDS = tuple(f.name for f in dataclasses.fields(RecordingOptions))


def flag(name: str) -> str:
    """The command line's spelling of a RecordingOptions field."""
    return {"codecs": "--codec", "statistics": "--no-statistics"}.get(name, "--" + name.replace("_", "-"))


def add_codec_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--codec FIELD=CODEC`` (repeatable; ``--codec CODEC``: every image field not named)."""
    parser.add_argument(
        "--codec",
        action="append",
        default=[],
        dest="codecs",
        metavar="FIELD=CODEC",
        help=f"{what}: e.g. --codec rgb=jpeg:90 --codec depth=zstd; CODEC alone for every image field; codecs: "
        f"{', '.join(CODECS)} (default: rgb zstd, depth quantized to 10 um; docs/FORMAT.md 'Encoded fields')",
    )


def codec_options(args: argparse.Namespace) -> dict[str, str]:
    """``--codec`` flags as ``RecordingOptions.codecs`` (field -> codec text)."""
    return dict(parse_codec_option(text) for text in args.codecs)


def compression_choices() -> tuple[tuple[str, ...], str]:
    """Every registered format's compressions (the choices) and a help naming each format's."""
    compressions = tuple(sorted({c for f in FORMATS.values() for c in f.capabilities.compressions}))
    return compressions, "; ".join(f"{f.name}: {', '.join(f.capabilities.compressions)}" for f in FORMATS.values())


def _arguments() -> dict[str, dict]:
    """Each field's ``add_argument`` keywords (its default added by :func:`add_recording_options`)."""
    formats = tuple(FORMATS)  # the registered formats, read when the parser is built
    compressions, compression_help = compression_choices()
    return {
        "format": dict(
            choices=formats,
            help=f"run format, one of {', '.join(formats)}; packed: many episodes per file (schema 2, the default); "
            "npz: one file per episode (schema 1)",
        ),
        "compression": dict(choices=compressions, help=compression_help),
        "compression_level": dict(type=int, help="npz deflate level 0-9"),
        "writers": dict(type=int, help="npz writer threads; packed: threads that encode frames"),
        "max_buffer_bytes": dict(
            type=int,
            help="recorder memory budget (default: packed 256 MiB of buffered batches, npz 1 GiB of episode buffers)",
        ),
        "statistics": dict(
            action="store_false", help="do not compute normalization statistics (stats.json) while recording"
        ),
        "codecs": {},  # add_codec_option
        "durability": dict(
            choices=DURABILITIES,
            help="process (default): published episodes survive a killed process; machine (packed): each block is "
            "synced before its commit line and the log after it, so they survive a machine crash",
        ),
    }


def add_recording_options(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`RecordingOptions` field, its default the field's."""
    arguments = _arguments()
    if set(arguments) != set(FIELDS):  # a field without a flag, or a flag without a field
        raise RuntimeError(f"recording flags {sorted(arguments)} do not match RecordingOptions {sorted(FIELDS)}")
    for name in FIELDS:
        if name == "codecs":
            add_codec_option(parser, "image codecs of the packed run, per field")
        elif name == "statistics":
            parser.add_argument(flag(name), dest=name, **arguments[name])
        else:
            parser.add_argument(flag(name), dest=name, default=getattr(DEFAULTS, name), **arguments[name])


def recording_options_of(args: argparse.Namespace) -> RecordingOptions:
    """The checked :class:`RecordingOptions` of ``collect``'s flags; a bad one is a UsageError naming its flag as
    spelled on the command line."""
    values = {name: vars(args)[name] for name in FIELDS}
    values["codecs"] = codec_options(args)
    try:
        return RecordingOptions(**values)
    except OptionError as e:
        raise UsageError(f"{flag(e.name)} {e.value}: {e.allowed}") from e
