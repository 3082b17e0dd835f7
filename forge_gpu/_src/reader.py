"""Read a run directory or a dataset of runs: the manifest, checked episodes, training windows.

A run is schema 1 (FORMAT.md: one ``.npz`` per episode) or packed (schema 2, docs/FORMAT.md); both
read back as the same :class:`Episode` objects. A dataset root is a directory holding ``dataset.json``
(written by the distributed collector) and its run directories. Over a dataset, episodes are counted in
the order of the runs in ``dataset.json``, then in each run's order (schema 1: file names; packed: the
commit log); sharding applies to that whole sequence.

numpy and the standard library (pyarrow for packed runs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import lzma
import os
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from forge_gpu._src.episode_format import (
    EPISODE_SUFFIX,
    MARKER_SUFFIX,
    MAX_MEMBER_BYTES,
    REQUIRED_FIELDS,
    TRANSITION_MEMBERS,
    check_member_sizes,
    episode_stem,
    observation_fields,
    parse_episode_stem,
    read_npy_header,
    validate_episode_schema,
    validate_episode_values,
    validate_marker,
)
from forge_gpu._src.formats import RunReader, format_of
from forge_gpu._src.manifest import RUN_MANIFEST, load_json, read_manifest
from forge_gpu._src.options import check_int

# Fields the value checks need even when a projection leaves them out.
_CHECK_FIELDS = ("env_id", "episode_id", "step_id", "time")

DATASET_MANIFEST = "dataset.json"
DATASET_KIND = "forge_gpu.dataset"
#: The version of dataset.json's own schema (not a run's).
DATASET_SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Episode:
    """One checked episode of ``steps`` (T) transitions.

    ``obs[F]`` and ``next[F]`` are ``[T, ...]`` arrays of observation field ``F`` before and after each
    transition; ``action`` is ``[T, A]``, ``reward``, ``terminated`` and ``truncated`` are ``[T]``.
    """

    env_id: int
    episode_id: int
    steps: int
    obs: dict[str, np.ndarray]
    next: dict[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    path: str


def is_dataset(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a dataset root (holds ``dataset.json``) rather than a run directory."""
    return os.path.isfile(os.path.join(os.fspath(path), DATASET_MANIFEST))


def read_dataset_manifest(root: str | os.PathLike) -> dict:
    """Load and check ``dataset.json`` of a dataset root."""
    root = os.fspath(root)
    path = os.path.join(root, DATASET_MANIFEST)
    manifest = load_json(path)
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: must hold a JSON object")
    if manifest.get("schema_version") != DATASET_SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema_version is {manifest.get('schema_version')!r}; this reader reads {DATASET_SCHEMA_VERSION}"
        )
    if manifest.get("kind") != DATASET_KIND:
        raise ValueError(f"{path}: kind is {manifest.get('kind')!r}, expected {DATASET_KIND!r}")
    runs = manifest.get("runs")
    if not isinstance(runs, list):
        raise ValueError(f"{path}: runs must be a list")
    for entry in runs:
        name = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name in ("", ".", "..") or os.path.basename(name) != name:
            raise ValueError(f"{path}: each run needs a path naming a directory beside dataset.json, got {entry!r}")
    if os.path.isfile(os.path.join(root, RUN_MANIFEST)):
        raise ValueError(f"{root}: holds both {RUN_MANIFEST} and {DATASET_MANIFEST}; it must be one or the other")
    return manifest


def run_directories(path: str | os.PathLike) -> list[str]:
    """The run directories of a dataset root in ``dataset.json`` order, or ``[path]`` for a run directory."""
    path = os.fspath(path)
    if not is_dataset(path):
        return [path]
    return [os.path.join(path, entry["path"]) for entry in read_dataset_manifest(path)["runs"]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EpisodeReadOptions:
    """What :func:`read_episodes` and :func:`action_windows` read, and which partition."""

    observation_keys: Sequence[str] | None = None
    """Observation fields to load and value-check; ``None`` loads all. The full member schema, the
    required fields and the transition members are checked either way."""
    shard_index: int = 0
    """This reader's partition: the ``k``-th counted episode belongs to shard ``k % num_shards``."""
    num_shards: int = 1
    """Number of partitions."""
    max_member_bytes: int = MAX_MEMBER_BYTES
    """A member whose header claims more bytes is refused before anything is allocated."""

    def __post_init__(self):
        check_int("num_shards", self.num_shards, minimum=1)
        index = self.shard_index
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < self.num_shards:
            raise ValueError(f"shard_index must be an integer in [0, {self.num_shards - 1}], got {index!r}")
        keys = self.observation_keys
        if keys is not None:
            if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
                raise ValueError(f"observation_keys must be a sequence of field names, got {keys!r}")
            object.__setattr__(self, "observation_keys", tuple(keys))
        if not isinstance(self.max_member_bytes, int) or self.max_member_bytes < 1:
            raise ValueError(f"max_member_bytes must be a positive integer, got {self.max_member_bytes!r}")


def read_episodes(directory: str | os.PathLike, *, options: EpisodeReadOptions | None = None) -> Iterator[Episode]:
    """Yield the checked episodes of one shard of a run directory or a dataset root.

    Episodes come in each run's order (schema 1: sorted file names; packed: the commit log), run by run
    over a dataset in ``dataset.json`` order. Only published episodes count (schema 1: those with a
    valid completion marker; packed: those in the commit log); the ``k``-th of them belongs to shard
    ``k % num_shards``, decided before any episode data is opened. A file that breaks the format raises
    ValueError naming it. The manifests, markers and commit logs are checked at the call; episode data
    when it is reached (a packed run's blocks are read once, in order, and its episodes checked in
    groups, whole columns at a time).
    """
    options = options or EpisodeReadOptions()
    return read_index(_shard(directory, options), options)


def read_index(index: list[tuple[Any, int]], options: EpisodeReadOptions) -> Iterator[Episode]:
    """The episodes of an index (``(run, k)`` pairs from :func:`episode_index`), in its order."""
    for run, group in itertools.groupby(index, key=lambda entry: entry[0]):
        yield from run.read([k for _, k in group], options)


def _shard(directory: str | os.PathLike, options: EpisodeReadOptions) -> list[tuple[Any, int]]:
    return episode_index(directory)[options.shard_index :: options.num_shards]


def episode_index(path: str | os.PathLike) -> list[tuple[Any, int]]:
    """``(run, k)`` for every published episode, in reading order: the ``k``-th episode of ``run`` (an
    opened run, :func:`open_run`). Manifests, markers and commit logs are read; no episode data."""
    index = []
    for run_dir in run_directories(path):
        run = open_run(run_dir)
        index += [(run, k) for k in range(len(run))]
    return index


def open_run(run_dir: str | os.PathLike) -> RunReader:
    """The published episodes of one run directory, of any registered format (:mod:`formats`; manifest, and
    markers or commit log, read and checked; no episode data)."""
    run_dir = os.fspath(run_dir)
    manifest = read_manifest(run_dir)
    return format_of(manifest).open(run_dir, manifest)


class NpzRun:
    """A schema-1 run: its marked episodes in file-name order."""

    def __init__(self, run_dir: str, manifest: dict):
        self.directory, self.manifest = run_dir, manifest
        self.marked = marked_episodes(run_dir)

    def __len__(self) -> int:
        return len(self.marked)

    def ids(self, k: int) -> tuple[int, int, int]:
        """``(env_id, episode_id, steps)`` of the ``k``-th episode."""
        marker = self.marked[k][1]
        return marker["env_id"], marker["episode_id"], marker["steps"]

    def read(self, ks: list[int], options: EpisodeReadOptions) -> Iterator[Episode]:
        for k in ks:
            path, marker = self.marked[k]
            yield _load_episode(path, marker, self.manifest["env_spec"], options)


class PackedRunReader:
    """A packed run: its committed episodes in commit-log order."""

    def __init__(self, run_dir: str, manifest: dict):
        from forge_gpu._src.packed import PackedRun  # noqa: PLC0415 - pyarrow only for packed runs

        self.directory, self.manifest = run_dir, manifest
        self.run = PackedRun(run_dir)

    def __len__(self) -> int:
        return len(self.run)

    def ids(self, k: int) -> tuple[int, int, int]:
        """``(env_id, episode_id, steps)`` of the ``k``-th episode."""
        episodes = self.run.episodes
        return int(episodes["env_id"][k]), int(episodes["episode_id"][k]), int(episodes["steps"][k])

    def tables(self, ks: list[int], options: EpisodeReadOptions) -> tuple[list[str], Iterator]:
        """The observation fields to read, and the selected episodes (``ks`` ascending) in checked groups:
        ``(episodes, gathered, starts)`` of ``packed.read_episode_tables``."""
        from forge_gpu._src.packed import CHECK_COLUMNS, read_episode_tables  # noqa: PLC0415

        fields = self._fields(options)
        names = list(dict.fromkeys([f"obs/{f}" for f in fields] + list(CHECK_COLUMNS)))
        return fields, read_episode_tables(self.run, names, np.asarray(ks, dtype=np.int64))

    def mapped(self, ks: list[int], options: EpisodeReadOptions) -> tuple[list[str], list[tuple[int, dict]], dict]:
        """For random access without loading the run: the observation fields, every committed block as
        ``(first row, {"obs/<F>" and "action": [rows, ...] array})`` with the arrays read-only views of the
        memory-mapped segments, and the entries (``env_id``, ``episode_id``, ``steps``, ``first_row``,
        ``stride``) of episodes ``ks`` (ascending). The episodes are checked first, in one streaming pass as
        :meth:`read` does. An uncompressed run only: compressed buffers cannot be mapped."""
        from forge_gpu._src.packed import read_blocks  # noqa: PLC0415

        compression = self.manifest.get("recorder", {}).get("compression", "none")
        if compression != "none":
            raise ValueError(
                f"{self.directory}: its segments are {compression}-compressed and cannot be memory-mapped; "
                f"write an uncompressed copy: forge-gpu convert {self.directory} OUT --to packed"
            )
        fields, groups = self.tables(ks, options)
        for _ in groups:  # each group is checked as it is gathered, then let go
            pass
        names = [f"obs/{f}" for f in fields] + ["action"]
        blocks = [
            (commit["first_row"], columns) for commit, columns in read_blocks(self.directory, self.run.commits, names)
        ]
        episodes = {key: values[np.asarray(ks, dtype=np.int64)] for key, values in self.run.episodes.items()}
        return fields, blocks, episodes

    def read(self, ks: list[int], options: EpisodeReadOptions) -> Iterator[Episode]:
        fields, groups = self.tables(ks, options)
        for episodes, gathered, starts in groups:
            for i in range(len(starts) - 1):
                s, e = int(starts[i]), int(starts[i + 1])
                env_id, episode_id = int(episodes["env_id"][i]), int(episodes["episode_id"][i])
                yield Episode(
                    env_id=env_id,
                    episode_id=episode_id,
                    steps=e - s - 1,
                    obs={f: gathered[f"obs/{f}"][s : e - 1] for f in fields},
                    next={f: gathered[f"obs/{f}"][s + 1 : e] for f in fields},
                    action=gathered["action"][s + 1 : e],
                    reward=gathered["reward"][s + 1 : e],
                    terminated=gathered["terminated"][s + 1 : e],
                    truncated=gathered["truncated"][s + 1 : e],
                    path=os.path.join(self.directory, episode_stem(env_id, episode_id)),
                )

    def _fields(self, options: EpisodeReadOptions) -> list[str]:
        """The observation fields to read, after checking the segments' columns against run.json."""
        columns = self.run.columns()
        spec = self.manifest["env_spec"]
        described = spec.get("observation") if isinstance(spec.get("observation"), dict) else {}
        present = sorted(c[4:] for c in columns if c.startswith("obs/")) if columns else sorted(described)
        if columns:
            _check_packed_columns(columns, spec, described, present, self.directory)
        wanted = present if options.observation_keys is None else list(options.observation_keys)
        unknown = [f for f in wanted if f not in present]
        if unknown:
            raise ValueError(f"{self.directory}: requested field(s) {unknown} are not in the run (it has {present})")
        return wanted


def _check_packed_columns(columns: dict, spec: dict, described: dict, present: list[str], name: str) -> None:
    """Check a packed run's segment columns against the format and run.json's env_spec."""
    from forge_gpu._src.packed import TRANSITION_COLUMNS  # noqa: PLC0415

    unknown = [c for c in columns if not c.startswith("obs/") and c not in TRANSITION_COLUMNS]
    missing = [c for c in (*(f"obs/{f}" for f in REQUIRED_FIELDS), *TRANSITION_COLUMNS) if c not in columns]
    if unknown or missing:
        raise ValueError(f"{name}: segment columns: unknown {unknown}, missing {missing}")
    if described and sorted(described) != present:
        raise ValueError(f"{name}: observation fields {present} differ from run.json's {sorted(described)}")
    expected = {f"obs/{f}": (tuple(e.get("shape", ())), e.get("dtype")) for f, e in described.items()}
    expected["action"] = ((int(spec["action_shape"][0]),), "float32")
    for column, (shape, dtype) in columns.items():
        if column in expected and (shape, str(dtype)) != (expected[column][0], expected[column][1] or str(dtype)):
            raise ValueError(
                f"{name}: column {column} is {dtype}{list(shape)} per row; run.json says "
                f"{expected[column][1]}{list(expected[column][0])}"
            )
    for column, kinds in (("reward", "iuf"), ("terminated", "b"), ("truncated", "b")):
        if columns[column][0] != () or columns[column][1].kind not in kinds:
            raise ValueError(f"{name}: column {column} is {columns[column][1]}{list(columns[column][0])} per row")
    for field in ("env_id", "episode_id", "step_id", "time"):
        shape, dtype = columns[f"obs/{field}"]
        if shape != () or dtype.kind not in ("f" if field == "time" else "iu"):
            raise ValueError(f"{name}: column obs/{field} is {dtype}{list(shape)} per row")
    if len(columns["obs/proprio"][0]) != 1:
        raise ValueError(f"{name}: column obs/proprio must have a per-row shape [P]")


def action_windows(
    directory: str | os.PathLike,
    history: int = 1,
    horizon: int = 1,
    *,
    options: EpisodeReadOptions | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield training windows (FORMAT.md "Training windows") of the episodes of one shard.

    ``directory`` is a run directory or a dataset root; episodes and shards are as in :func:`read_episodes`.
    For an episode of T transitions there is one window per ``t`` in ``[history-1, T-horizon]``, a dict
    with ``obs/<F>`` = ``obs[F][t-history+1 : t+1]`` (``[history, ...]``), ``action`` =
    ``action[t : t+horizon]`` (``[horizon, A]``), the ``instruction`` of the episode's run and the ints
    ``env_id``, ``episode_id`` and ``t``. The arrays are views of the episode's arrays.
    """
    check_window(history, horizon)
    options = options or EpisodeReadOptions()
    return episode_windows(_shard(directory, options), options, history, horizon)


def check_window(history: int, horizon: int) -> None:
    for name, value in (("history", history), ("horizon", horizon)):
        check_int(name, value, minimum=1)


def episode_windows(
    index: list[tuple[Any, int]], options: EpisodeReadOptions, history: int, horizon: int
) -> Iterator[dict]:
    """The windows of the indexed episodes, in index order."""
    for run, group in itertools.groupby(index, key=lambda entry: entry[0]):
        instruction = run.manifest["env_spec"]["instruction"]
        for episode in run.read([k for _, k in group], options):
            for t in range(history - 1, episode.steps - horizon + 1):
                window: dict[str, Any] = {f"obs/{f}": a[t - history + 1 : t + 1] for f, a in episode.obs.items()}
                window["action"] = episode.action[t : t + horizon]
                window["instruction"] = instruction
                window["env_id"] = episode.env_id
                window["episode_id"] = episode.episode_id
                window["t"] = t
                yield window


def marked_episodes(run_dir: str) -> list[tuple[str, dict]]:
    """(episode path, marker) of every marked episode, in sorted file-name order; no archive is opened."""
    npz, markers = set(), set()
    for name in os.listdir(run_dir):
        stem, suffix = os.path.splitext(name)
        if parse_episode_stem(stem) is None:
            continue
        if suffix == EPISODE_SUFFIX:
            npz.add(stem)
        elif suffix == MARKER_SUFFIX:
            markers.add(stem)
    orphans = sorted(markers - npz)
    if orphans:
        path = os.path.join(run_dir, orphans[0] + MARKER_SUFFIX)
        raise ValueError(f"{path}: completion marker without its episode file {orphans[0] + EPISODE_SUFFIX}")
    marked = []
    for stem in sorted(npz & markers):
        env_id, episode_id = parse_episode_stem(stem)
        marker_path = os.path.join(run_dir, stem + MARKER_SUFFIX)
        marker = load_json(marker_path)
        validate_marker(marker, name=marker_path, env_id=env_id, episode_id=episode_id)
        marked.append((os.path.join(run_dir, stem + EPISODE_SUFFIX), marker))
    return marked


def _load_episode(path: str, marker: dict, env_spec: dict, options: EpisodeReadOptions) -> Episode:
    fields = options.observation_keys
    with _archive_errors(path):
        archive = np.load(path, allow_pickle=False)
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: not an .npz archive")
    with archive:
        with _archive_errors(path):
            headers = {member: read_npy_header(archive.zip, member) for member in archive.files}
            check_member_sizes(archive.zip, headers, name=path, max_member_bytes=options.max_member_bytes)
        validate_episode_schema(headers, marker, name=path)
        _check_against_spec(headers, env_spec, path)
        present = observation_fields(headers)
        wanted = present if fields is None else fields
        unknown = [f for f in wanted if f not in present]
        if unknown:
            raise ValueError(f"{path}: requested field(s) {unknown} are not in the episode (it has {present})")
        loaded = sorted(set(wanted) | set(_CHECK_FIELDS))
        members = [f"{prefix}/{f}" for prefix in ("obs", "next") for f in loaded] + list(TRANSITION_MEMBERS)
        with _archive_errors(path):
            arrays = {member: archive[member] for member in members}
    validate_episode_values(arrays, marker, name=path)
    return Episode(
        env_id=marker["env_id"],
        episode_id=marker["episode_id"],
        steps=marker["steps"],
        obs={f: arrays[f"obs/{f}"] for f in wanted},
        next={f: arrays[f"next/{f}"] for f in wanted},
        action=arrays["action"],
        reward=arrays["reward"],
        terminated=arrays["terminated"],
        truncated=arrays["truncated"],
        path=path,
    )


def _check_against_spec(headers: dict, env_spec: dict, path: str) -> None:
    """Check observation fields and action width against run.json's env_spec, where it describes them."""
    action_dim = headers["action"][0][1]
    if [action_dim] != list(env_spec["action_shape"]):
        raise ValueError(f"{path}: action has width {action_dim}; run.json says {env_spec['action_shape']}")
    described = env_spec.get("observation")
    if not isinstance(described, dict):
        return
    present = observation_fields(headers)
    if sorted(described) != present:
        raise ValueError(f"{path}: observation fields {present} differ from run.json's {sorted(described)}")
    for field, entry in described.items():
        shape, dtype = headers[f"obs/{field}"]
        if list(shape[1:]) != list(entry.get("shape", shape[1:])) or str(dtype) != entry.get("dtype", str(dtype)):
            raise ValueError(
                f"{path}: obs/{field} is {dtype}{list(shape[1:])} per transition; run.json says "
                f"{entry.get('dtype')}{entry.get('shape')}"
            )


@contextlib.contextmanager
def _archive_errors(path: str) -> Iterator[None]:
    """Turn the ways a damaged archive fails to read into a ValueError naming it.

    zipfile raises RuntimeError for an encrypted member and its subclass NotImplementedError for an unknown
    compression method or patched data; a bzip2 member fails with OSError, an lzma one with LZMAError or
    struct.error; numpy's header parser with ValueError, or tokenize.TokenError where it retries a header
    as Python 2 wrote them."""
    try:
        yield
    except (
        OSError,
        EOFError,
        KeyError,
        ValueError,
        RuntimeError,
        zipfile.BadZipFile,
        zlib.error,
        lzma.LZMAError,
        struct.error,
        tokenize.TokenError,
    ) as exc:
        raise ValueError(f"{path}: cannot read episode archive: {type(exc).__name__}: {exc}") from exc
