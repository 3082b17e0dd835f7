"""Reading a schema-1 run (docs/FORMAT-v1.md): its marked episodes, each archive checked before it is trusted.

An episode file is untrusted input: its members' headers are read and their claimed sizes checked against
the archive and a per-member limit before any array is allocated; every way a damaged archive fails to read
becomes a ValueError naming the file. numpy and the standard library.
"""

from __future__ import annotations

import contextlib
import lzma
import math
import os
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Iterator, Mapping

import numpy as np

from forge_gpu._src.core.episode import MAX_MEMBER_BYTES, Episode, EpisodeReadOptions, chosen, parse_episode_stem
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS, check_spec_layout
from forge_gpu._src.core.files import load_json
from forge_gpu._src.core.frames import stack_episodes
from forge_gpu._src.formats.npz.files import (
    EPISODE_SUFFIX,
    MARKER_SUFFIX,
    TRANSITION_MEMBERS,
    observation_fields,
    read_instructions,
    validate_episode_schema,
    validate_episode_values,
    validate_marker,
)

# Fields the value checks need even when a projection leaves them out.
_CHECK_FIELDS = BOOKKEEPING_FIELDS


class NpzRunReader:
    """A schema-1 run: its marked episodes in file-name order (a ``RunReader``, as ``PackedRunReader`` is)."""

    def __init__(self, run_dir: str, manifest: dict):
        self.directory, self.manifest = run_dir, manifest
        self.marked = marked_episodes(run_dir)
        pairs = [(marker["env_id"], marker["episode_id"]) for _, marker in self.marked]
        self._instructions = read_instructions(run_dir, manifest, pairs)

    def __len__(self) -> int:
        return len(self.marked)

    def ids(self, k: int) -> tuple[int, int, int]:
        """``(env_id, episode_id, steps)`` of the ``k``-th episode."""
        marker = self.marked[k][1]
        return marker["env_id"], marker["episode_id"], marker["steps"]

    def instructions(self) -> list[str]:
        """Every episode's instruction, in reading order (``instructions.jsonl``, or the run's)."""
        return list(self._instructions)

    def read(self, ks: list[int], options: EpisodeReadOptions) -> Iterator[Episode]:
        for k in ks:
            path, marker = self.marked[k]
            yield load_episode(path, marker, self.manifest["env_spec"], options, instruction=self._instructions[k])

    def verify(self) -> dict:
        """Every episode read one by one, each member's zip CRC-32 and the episode rules checked
        (``RunReader.verify``)."""
        return verify_episodes(self)

    def check_read(self, options: EpisodeReadOptions, *, mmap: bool = False) -> None:
        """What :meth:`frame_table` refuses of ``options`` before it reads a frame (``RunReader.check_read``): the
        fields against run.json's observation (each episode's archive is checked against them as it is read)."""
        if mmap:
            raise ValueError(
                f"{self.directory}: a schema-1 (npz) run cannot be memory-mapped (mmap=True reads packed runs); "
                f"write a packed copy: forge-gpu convert {self.directory} OUT --to packed"
            )
        observation = self.manifest.get("env_spec", {}).get("observation")
        if isinstance(observation, dict):
            chosen(options.observation_keys, sorted(observation), what="field", name=self.directory)
        chosen(options.state, [], what="state entry", name=self.directory)  # schema 1 holds no state

    def frame_table(
        self, ks: list[int], options: EpisodeReadOptions, *, mmap: bool = False
    ) -> tuple[list[str], list[tuple[int, dict]], dict]:
        """The episodes ``ks`` (ascending), read and checked, laid end to end in memory as one block of a frame
        table (``RunReader.frame_table``). An episode archive cannot be memory-mapped as one: ``mmap`` is a
        ValueError naming the convert command that writes a packed copy, which can."""
        if mmap:
            self.check_read(options, mmap=True)
        fields, columns, episodes = stack_episodes(list(self.read(ks, options)))
        return fields, [(0, columns)], episodes


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


def load_episode(
    path: str, marker: dict, env_spec: dict, options: EpisodeReadOptions, *, instruction: str = ""
) -> Episode:
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
        check_spec_layout(headers, env_spec, name=path, what="member", lead=("T",))
        wanted = chosen(fields, observation_fields(headers), what="field", name=path)
        chosen(options.state, [], what="state entry", name=path)  # schema 1 holds no state (docs/FORMAT.md)
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
        instruction=instruction,
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


def read_npy_header(archive: zipfile.ZipFile, member: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one ``.npy`` member of a zip, read from its header alone."""
    with archive.open(member + ".npy") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"member {member} uses unsupported .npy format version {version}")
    return tuple(shape), dtype


def check_member_sizes(
    archive: zipfile.ZipFile,
    headers: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    *,
    name: str,
    max_member_bytes: int = MAX_MEMBER_BYTES,
) -> None:
    """Refuse members whose header claims more data than the member holds or than the limit allows.

    Runs on the headers alone, before any array is allocated or decompressed. A deflate member can
    never expand beyond its declared size: zipfile stops at the declared size and checks the CRC.
    """
    for member, (shape, dtype) in headers.items():
        if any(int(s) < 0 for s in shape):
            raise ValueError(f"{name}: member {member} has a negative dimension {tuple(shape)}")
        claimed = math.prod(int(s) for s in shape) * np.dtype(dtype).itemsize
        if claimed > max_member_bytes:
            raise ValueError(
                f"{name}: member {member} claims {claimed} bytes, over the per-member limit of {max_member_bytes}"
            )
        declared = archive.getinfo(member + ".npy").file_size
        if claimed > declared:
            raise ValueError(
                f"{name}: member {member} claims {claimed} bytes but the archive holds only {declared} for it"
            )
        if declared > max_member_bytes + 65536:
            raise ValueError(f"{name}: member {member} declares {declared} bytes, over the per-member limit")


def verify_episodes(reader: NpzRunReader) -> dict:
    """:meth:`NpzRunReader.verify`: every episode read one by one (each member's zip CRC-32 and the episode rules
    checked as it is read), each that fails listed: the report ``formats.registry.VERIFY_KEYS`` name."""
    report = {"checksums": True, "blocks": 0, "episodes": 0, "bytes": 0, "dropped": 0}
    report.update(bad_blocks=[], bad_episodes=[], error=None)
    options = EpisodeReadOptions(state=True)
    for k in range(len(reader)):
        env_id, episode_id, _ = reader.ids(k)
        report["episodes"] += 1
        try:
            for episode in reader.read([k], options):
                report["bytes"] += sum(a.nbytes for a in (*episode.obs.values(), episode.action, episode.reward))
        except ValueError as exc:
            report["bad_episodes"].append({"episode": f"{env_id}:{episode_id}", "error": str(exc)})
    return report
