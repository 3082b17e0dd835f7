"""Run formats: each way of laying a run out on disk, registered once.

A format has a name (``RecordingOptions.format``, ``--format``), the compressions it takes, the keys that
mark its run.json (``schema_version``, and ``layout`` where the version alone does not say), and four
operations: a recorder for a new run, a reader of a run (:class:`RunReader`: its episodes one by one, or as a
frame table for random access, and the check of all its data, ``verify``), the repair of a run a killed process
left (a report of fixed keys), and the writing of checked episodes as a new run (``convert``).
``make_recorder``, ``open_run``, ``repair_run``, ``inspect_run``, ``verify_run``, ``convert_run``, run.json's
checks and the command line's choices all look formats up here, so a new format is one class that satisfies
:class:`RunFormat` and one :func:`register_format` call
(tests/formats/test_registry.py registers one from outside the package).

Two are built in: ``packed`` (schema 2, many episodes per file, docs/FORMAT.md) and ``npz`` (schema 1, one
file per episode, docs/FORMAT-v1.md).

How a run is written in a registered format is :class:`RecordingOptions` (format, compression, writers, memory
budget, statistics, codecs, durability): one frozen value checked once against the formats' capabilities and
passed from the command line through ``collect``, ``collect_distributed`` and ``make_recorder`` to the format's
recorder. The standard library only at import: an implementation imports numpy and pyarrow when it is used, so
the command line checks names and options without them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from forge_gpu._src.core.checks import is_int
from forge_gpu._src.core.codec_specs import CodecSpec
from forge_gpu._src.core.files import load_json
from forge_gpu._src.core.manifest import RUN_MANIFEST, validate_manifest
from forge_gpu._src.formats.npz import identity as npz
from forge_gpu._src.formats.packed import identity as packed

if TYPE_CHECKING:  # types only: the registry loads with the standard library alone
    from forge_gpu._src.core.episode import Episode, EpisodeReadOptions
    from forge_gpu._src.core.manifest import RunDescription
    from forge_gpu._src.recording.base import Recorder


@runtime_checkable
class RunReader(Protocol):
    """The published episodes of one run, in the format's reading order."""

    directory: str
    manifest: dict

    def __len__(self) -> int: ...

    def ids(self, k: int) -> tuple[int, int, int]:
        """``(env_id, episode_id, steps)`` of the ``k``-th episode, from the index alone."""
        ...

    def instructions(self) -> list[str]:
        """Every episode's instruction (``Episode.instruction``), in reading order, from the index alone: its own
        where the run records one per episode, else the run's ``env_spec.instruction``."""
        ...

    def read(self, ks: list[int], options: EpisodeReadOptions) -> Iterator[Episode]:
        """The checked :class:`Episode` objects ``ks`` (ascending), under ``EpisodeReadOptions``: their params
        always, their state where ``options.state`` asks for it."""
        ...

    def frame_table(
        self, ks: list[int], options: EpisodeReadOptions, *, mmap: bool = False
    ) -> tuple[list[str], list[tuple[int, dict]], dict]:
        """The episodes ``ks`` (ascending, at least one), checked, as a frame table for random access
        (:mod:`core.frames`; ``Windows`` reads it): the observation fields; the table's blocks, each ``(first row,
        {"obs/<F>" for every field, "state/<S>" for the state ``options.state`` asks for, "action", ...: [rows,
        ...] array})``, ascending and contiguous; and the episodes' entries (``env_id``, ``episode_id``, ``steps``,
        ``first_row``, ``stride``: int64 arrays; ``instruction``: an object array of strings; ``params/<P>``: one row
        each). In memory by default
        (``core.frames.stack_episodes`` lays read episodes out so); with ``mmap`` the blocks are read-only views
        of the run's files, so the table may be larger than memory, and a run that cannot be mapped so raises
        ValueError naming the command that converts it to one that can."""
        ...

    def check_read(self, options: EpisodeReadOptions, *, mmap: bool = False) -> None:
        """ValueError (one line) for what :meth:`frame_table` refuses of ``options`` before it reads a frame: fields
        or state entries the run lacks and, with ``mmap``, a run that cannot be mapped. Reads no episode data."""
        ...

    def verify(self) -> dict:
        """Check every episode (and, where the format stores blocks, every block) without building episodes for a
        caller, and list what is damaged: the report :data:`VERIFY_KEYS` name (``forge-gpu verify``)."""
        ...


#: The keys of the report :meth:`RunReader.verify` returns, format-neutral: ``checksums`` (whether the run's data
#: carries checksums that were checked), ``blocks`` (the blocks read; 0 for a format without blocks), ``episodes``,
#: ``bytes`` (read), ``dropped`` (episodes a salvage dropped earlier), ``bad_blocks`` (each ``segment``, ``offset``,
#: ``line``, ``error``), ``bad_episodes`` (each ``episode`` as ``"env_id:episode_id"``, ``error``) and ``error``
#: (what kept the run from being checked at all, else None).
VERIFY_KEYS = ("checksums", "blocks", "episodes", "bytes", "dropped", "bad_blocks", "bad_episodes", "error")


DURABILITIES = ("process", "machine")
"""The durability levels, weakest first (``RecordingOptions.durability``; docs/FORMAT.md "Durability")."""


@dataclass(frozen=True, kw_only=True)
class FormatCapabilities:
    """What a run format can do, declared on the format (:attr:`RunFormat.capabilities`) and read by every caller
    that must know: ``RecordingOptions``' checks, the command line's choices, ``repair_run``, ``convert_run``,
    ``verify_run``. No
    caller tests a format's attributes or signatures (tests/formats/test_registry.py fails one that does)."""

    compressions: tuple[str, ...]
    """The compressions it takes, the first one the default."""
    durabilities: tuple[str, ...] = ("process",)
    """The durability levels it records at (:data:`DURABILITIES`; ``process`` always)."""
    spec_groups: tuple[str, ...] = ()
    """Which of an episode's ``state`` and ``params`` (``core.fields.SPEC_GROUPS``) its runs store; ``convert`` keeps
    only those in the env_spec it writes."""
    codecs: bool = False
    """Whether it stores image fields encoded (``RecordingOptions.codecs``, ``convert --codec``; its ``write``
    then takes a ``codecs`` keyword, its reader's ``read`` an ``encoded`` keyword, the fields to give as their
    stored payloads, and its ``write`` episodes holding such payloads, copied where their codec is kept)."""
    salvage: bool = False
    """Whether its ``repair`` takes ``salvage=True`` (``repair --salvage``: keep every episode whose data checks)."""
    blocks: bool = False
    """Whether its runs are stored in blocks that ``verify`` reads and counts (:meth:`RunReader.verify`'s
    ``blocks`` and ``bad_blocks``); without, its report lists episodes alone."""
    restores: str | None = None
    """What restores the published episodes a closed run's index lost (``{run}`` the run directory), where anything
    can; ``None``: they cannot be rebuilt (:func:`check_published`)."""

    def __post_init__(self) -> None:
        names = {"compressions": self.compressions, "durabilities": self.durabilities, "spec_groups": self.spec_groups}
        for name, value in names.items():
            if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"FormatCapabilities.{name}={value!r}: must be a tuple of names")
        if not self.compressions:
            raise ValueError("FormatCapabilities.compressions=(): a format takes at least one compression")
        if "process" not in self.durabilities or not set(self.durabilities) <= set(DURABILITIES):
            raise ValueError(
                f"FormatCapabilities.durabilities={self.durabilities!r}: 'process' and any of {DURABILITIES}"
            )
        for name, value in {"codecs": self.codecs, "salvage": self.salvage, "blocks": self.blocks}.items():
            if not isinstance(value, bool):
                raise ValueError(f"FormatCapabilities.{name}={value!r}: must be True or False")
        if self.restores is not None and not isinstance(self.restores, str):
            raise ValueError(f"FormatCapabilities.restores={self.restores!r}: must be a string or None")


#: The keys of the report every :meth:`RunFormat.repair` returns.
REPAIR_KEYS = ("removed", "actions", "recovered_episodes")
#: The keys a repair report may add, and their values where it does not: what was cut off or emptied (damaged
#: blocks: their count, rows and episodes) and the episodes lost so, as ``"env_id:episode_id"``.
REPAIR_EXTRA_KEYS = {"cut": {"blocks": 0, "rows": 0, "episodes": 0}, "lost_episodes": []}


@runtime_checkable
class RunFormat(Protocol):
    """What a run format provides; see the module docstring. What it can do beyond the four operations (its
    compressions, durabilities, stored spec groups, codecs, salvage) it declares in ``capabilities``."""

    name: str
    """The format's name: ``RecordingOptions.format`` and what ``inspect`` reports."""
    capabilities: FormatCapabilities
    """What it can do (:class:`FormatCapabilities`)."""
    identity: Mapping[str, Any]
    """The run.json keys that mark a run of this format (``schema_version``, ``layout``)."""
    published_by: str
    """What publishes an episode (``inspect --quick`` checks it alone), e.g. ``markers``."""

    def owns(self, manifest: Mapping[str, Any]) -> bool:
        """Whether ``manifest`` (run.json, keys already type-checked) is a run of this format."""
        ...

    def recorder(self, directory: str, run: RunDescription, options: RecordingOptions) -> Recorder:
        """A new :class:`Recorder` writing run ``directory`` (it must not exist), for the :class:`RunDescription`
        ``run`` and the :class:`RecordingOptions` ``options``."""
        ...

    def open(self, run_dir: str, manifest: dict) -> RunReader:
        """The published episodes of the run (its index read and checked, no episode data)."""
        ...

    def repair(self, run_dir: str, manifest: dict) -> dict:
        """Publish what a killed recorder wrote whole and remove its unpublished leftovers; never touch a
        published episode whose data checks; idempotent. Returns the report :data:`REPAIR_KEYS` name, every key
        filled: ``removed`` (the names of the files it removed), ``actions`` (what else it did, a sentence each) and
        ``recovered_episodes`` (how many episodes it published); and, where it cut or dropped damaged data, those of
        :data:`REPAIR_EXTRA_KEYS`. run.json and ``*.tmp`` files are the caller's (``repair_run``). A format whose
        ``capabilities.salvage`` is set takes the keyword ``salvage`` (``repair --salvage``): keep every episode
        whose data checks, drop the others, whatever the run's status."""
        ...

    def write(self, directory: str, episodes: Iterable[Episode], compression: str) -> tuple[int, dict]:
        """Write checked episodes into the empty ``directory`` as this format's episode files; return the
        count and the run.json keys to set (the identity and any of the format's own). run.json is the
        caller's (``convert_run``)."""
        ...


def _budget(options: RecordingOptions) -> dict:
    """The recorder's ``max_buffer_bytes`` keyword where the options set one; none keeps the format's default."""
    return {} if options.max_buffer_bytes is None else {"max_buffer_bytes": options.max_buffer_bytes}


class PackedFormat:
    """Schema 2: Arrow IPC segments and a commit log (docs/FORMAT.md)."""

    name = "packed"
    capabilities = FormatCapabilities(
        compressions=packed.COMPRESSIONS,
        durabilities=DURABILITIES,
        spec_groups=("state", "params"),
        codecs=True,
        salvage=True,
        blocks=True,
        restores="forge-gpu repair {run} publishes again the blocks written whole after its last line",
    )
    identity = packed.IDENTITY
    published_by = "commit log"

    def owns(self, manifest: Mapping[str, Any]) -> bool:
        return all(manifest.get(key) == value for key, value in self.identity.items())

    def recorder(self, directory: str, run: RunDescription, options: RecordingOptions) -> Recorder:
        from forge_gpu._src.formats.packed.recorder import PackedRecorder

        budget = _budget(options)
        return PackedRecorder(
            directory,
            run,
            compression=options.compression,
            statistics=options.statistics,
            durability=options.durability,
            codecs=options.codecs,
            encode_threads=options.writers,
            **budget,
        )

    def open(self, run_dir: str, manifest: dict) -> RunReader:
        from forge_gpu._src.formats.packed.read import PackedRunReader

        return PackedRunReader(run_dir, manifest)

    def repair(self, run_dir: str, manifest: dict, *, salvage: bool = False) -> dict:
        from forge_gpu._src.formats.packed.repair import repair_packed

        return repair_packed(run_dir, manifest, salvage=salvage)

    def write(
        self, directory: str, episodes: Iterable[Episode], compression: str, *, codecs: Mapping | None = None
    ) -> tuple[int, dict]:
        """As :meth:`RunFormat.write`; ``codecs``: field -> ``CodecSpec`` (``*`` the rest), as the recorder's."""
        from forge_gpu._src.formats.packed.write import write_episodes

        count, stored = write_episodes(directory, episodes, compression, codecs)
        recorder = {"compression": compression, "converted": True}
        keys = {**self.identity, "layout_version": packed.LAYOUT_VERSION, "recorder": recorder}
        return count, {**keys, "codecs": stored}


class NpzFormat:
    """Schema 1: one ``.npz`` and one completion marker per episode (docs/FORMAT-v1.md)."""

    name = "npz"
    # schema 1 stores neither state nor params (docs/FORMAT.md "State and params")
    capabilities = FormatCapabilities(compressions=npz.COMPRESSIONS, salvage=True)
    identity = npz.IDENTITY
    published_by = "markers"

    def owns(self, manifest: Mapping[str, Any]) -> bool:
        return manifest.get("schema_version") == npz.SCHEMA_VERSION and manifest.get("layout", "npz") == "npz"

    def recorder(self, directory: str, run: RunDescription, options: RecordingOptions) -> Recorder:
        from forge_gpu._src.formats.npz.write import NpzRecorder

        budget = _budget(options)
        return NpzRecorder(
            directory,
            run,
            writers=options.writers,
            compression=options.compression,
            compression_level=options.compression_level,
            statistics=options.statistics,
            **budget,
        )

    def open(self, run_dir: str, manifest: dict) -> RunReader:
        from forge_gpu._src.formats.npz.read import NpzRunReader

        return NpzRunReader(run_dir, manifest)

    def repair(self, run_dir: str, manifest: dict, *, salvage: bool = False) -> dict:
        from forge_gpu._src.formats.npz.files import cut_torn_line
        from forge_gpu._src.formats.npz.write import drop_damaged, remove_unmarked

        dropped = drop_damaged(run_dir, manifest) if salvage else {}  # salvage: unpublish the episodes that fail
        removed = remove_unmarked(run_dir)
        return {"removed": removed, "actions": cut_torn_line(run_dir), "recovered_episodes": 0, **dropped}

    def write(self, directory: str, episodes: Iterable[Episode], compression: str) -> tuple[int, dict]:
        from forge_gpu._src.formats.npz.write import write_episodes

        count = write_episodes(directory, episodes, compression)
        return count, {**self.identity, npz.INSTRUCTIONS_KEY: npz.INSTRUCTIONS_FILE}


#: The registered formats by name; the first is the default of ``RecordingOptions``.
FORMATS: dict[str, RunFormat] = {f.name: f for f in (PackedFormat(), NpzFormat())}


def register_format(fmt: RunFormat) -> RunFormat:
    """Add a run format (see :class:`RunFormat`); it must not reuse a registered name or identity."""
    if not isinstance(fmt, RunFormat):
        raise TypeError(f"{fmt!r} does not provide RunFormat's attributes and methods")
    if not isinstance(fmt.name, str) or not fmt.name.isidentifier():
        raise ValueError(f"format name must be an identifier, got {fmt.name!r}")
    if fmt.name in FORMATS:
        raise ValueError(f"a format named {fmt.name!r} is already registered")
    if not isinstance(fmt.capabilities, FormatCapabilities):
        raise ValueError(f"format {fmt.name!r}: capabilities must be a FormatCapabilities, got {fmt.capabilities!r}")
    if not isinstance(fmt.identity, Mapping) or not isinstance(fmt.identity.get("schema_version"), int):
        raise ValueError(f"format {fmt.name!r}: identity must hold an integer schema_version")
    for other in FORMATS.values():
        if other.owns(fmt.identity) or fmt.owns(other.identity):
            raise ValueError(f"format {fmt.name!r}: identity {dict(fmt.identity)} clashes with format {other.name!r}")
    FORMATS[fmt.name] = fmt
    return fmt


def format_of(manifest: Mapping[str, Any], *, name: str = "run.json") -> RunFormat:
    """The registered format of a run.json; ValueError naming the file and the keys when none reads it."""
    for fmt in FORMATS.values():
        if fmt.owns(manifest):
            return fmt
    known = "; ".join(f"{f.name}: " + ", ".join(f"{k} {v!r}" for k, v in f.identity.items()) for f in FORMATS.values())
    version, layout = manifest.get("schema_version"), manifest.get("layout")
    raise ValueError(
        f"{name}: key 'schema_version' is {version!r} and key 'layout' is {layout!r}; this reader reads {known}"
    )


def check_published(run_dir: str, manifest: Mapping[str, Any], episodes: int, fmt: RunFormat) -> None:
    """A closed run must hold every episode its run.json says was published (``completed_episodes``): where its
    commit log or markers hold fewer (``episodes``; e.g. the log's last lines lost to a copy cut short), ValueError
    saying it is damaged, by how much, and what restores them (``capabilities.restores``)."""
    expected = manifest["completed_episodes"]
    if manifest["status"] != "closed" or episodes >= expected:
        return
    restores = fmt.capabilities.restores
    fix = restores.format(run=run_dir) if restores else f"the {fmt.published_by} cannot be rebuilt"
    raise ValueError(
        f"{run_dir}: damaged: run.json says {expected} episodes were published but its {fmt.published_by} holds "
        f"{episodes} ({expected - episodes} lost, e.g. the last lines of a copy cut short); {fix}"
    )


def read_manifest(run_dir: str | os.PathLike) -> dict:
    """Load and check ``run.json`` of a run directory: its keys (:func:`core.manifest.validate_manifest`), that a
    registered format reads it, and the spec's action shape, instruction and instruction template (against the
    params it describes, where it describes any: ``core.instructions.check_template``)."""
    path = os.path.join(os.fspath(run_dir), RUN_MANIFEST)
    manifest = load_json(path)
    validate_manifest(manifest, name=path)
    format_of(manifest, name=path)
    spec = manifest["env_spec"]
    action_shape = spec.get("action_shape")
    if not isinstance(action_shape, list) or len(action_shape) != 1:
        raise ValueError(f"{path}: env_spec.action_shape must be a list [A], got {action_shape!r}")
    if not isinstance(spec.get("instruction"), str):
        raise ValueError(f"{path}: env_spec.instruction must be a string")
    if "instruction_template" in spec:  # numpy is loaded by now: a run is being read
        from forge_gpu._src.core.fields import group_layout
        from forge_gpu._src.core.instructions import TEMPLATE_KEY, check_template

        params = group_layout(spec, "params", name=f"{path}: env_spec") if "params" in spec else None
        check_template(spec[TEMPLATE_KEY], params, name=f"{path}: env_spec.{TEMPLATE_KEY}")
    return manifest


# -- how a run is written: the recording options, checked against the formats ---------------------------------


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
