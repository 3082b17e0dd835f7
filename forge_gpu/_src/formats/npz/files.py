"""A schema-1 run's files (docs/FORMAT-v1.md): the episode file and its completion marker, and the instruction
file.

A schema-1 episode file and its completion marker (docs/FORMAT-v1.md): their names, the marker, and the rules
the file's members must pass (their names, shapes and dtypes; their values: the content rules every episode
keeps, :mod:`core.rules`, and schema 1's continuity).

The episode's file stem is :func:`core.episode.episode_stem`; run.json, which both formats share, is
:mod:`core.manifest`'s; the writer of episode files is :mod:`formats.npz.zipwriter`, of markers
:mod:`formats.npz.write`, the reader (with the checks of untrusted member sizes) :mod:`formats.npz.read`. numpy and
the standard library; shared by the recorder (which writes) and the reader (which checks).

forge_gpu's per-episode instructions beside a schema-1 run (docs/FORMAT.md "Instructions"): ``instructions.jsonl``,
one JSON line ``{"env_id": E, "episode_id": K, "instruction": "..."}`` per published episode, appended before the
episode's marker, and named by run.json's ``episode_instructions``. The schema-1 contract (docs/FORMAT-v1.md) lets
run.json hold keys it does not list, and the file's name is not an episode's, so a reader of the contract passes
over both. The standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from forge_gpu._src.core.fields import (
    BOOKKEEPING_FIELDS,
    NUMERIC,
    REQUIRED_FIELDS,
    REQUIRED_LAYOUT,
    TRANSITION_LAYOUT,
    TRANSITIONS,
    check_layout,
    describe,
    leading,
)
from forge_gpu._src.core.rules import check_finite, check_transitions
from forge_gpu._src.formats.npz.identity import INSTRUCTIONS_FILE, INSTRUCTIONS_KEY, SCHEMA_VERSION

EPISODE_SUFFIX = ".npz"
MARKER_SUFFIX = ".json"

#: Per-transition members of an episode file.
TRANSITION_MEMBERS = TRANSITIONS


# The indented JSON of a marker, as json.dumps(marker, indent=2) lays it out; a format string is 5x faster.
_MARKER_JSON = (
    '{{\n  "schema_version": {schema_version},\n  "complete": true,\n  "steps": {steps},\n'
    '  "env_id": {env_id},\n  "episode_id": {episode_id}\n}}\n'
)


def encode_marker(marker: Mapping[str, Any]) -> bytes:
    """The UTF-8 JSON of a marker made by :func:`make_marker`."""
    if marker.keys() != _MARKER_KEYS or marker["complete"] is not True:
        return (json.dumps(marker, indent=2) + "\n").encode()
    return _MARKER_JSON.format_map(marker).encode()


_MARKER_KEYS = {"schema_version": 0, "complete": 0, "steps": 0, "env_id": 0, "episode_id": 0}.keys()


def make_marker(env_id: int, episode_id: int, steps: int) -> dict:
    """The completion marker of an episode."""
    return {
        "schema_version": SCHEMA_VERSION,
        "complete": True,
        "steps": int(steps),
        "env_id": int(env_id),
        "episode_id": int(episode_id),
    }


def validate_marker(marker: Any, *, name: str, env_id: int | None = None, episode_id: int | None = None) -> int:
    """Check a completion marker (and, if given, the ids its file name implies); return its ``steps``."""
    if not isinstance(marker, dict):
        raise ValueError(f"{name}: marker must be a JSON object, got {type(marker).__name__}")
    expected = {"schema_version", "complete", "steps", "env_id", "episode_id"}
    missing = expected - marker.keys()
    if missing:
        raise ValueError(f"{name}: marker lacks key(s) {sorted(missing)}")
    if marker["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"{name}: marker schema_version is {marker['schema_version']!r}, expected 1")
    if marker["complete"] is not True:
        raise ValueError(f"{name}: marker 'complete' is {marker['complete']!r}, expected true")
    for key in ("steps", "env_id", "episode_id"):
        value = marker[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name}: marker {key!r} must be a non-negative integer, got {value!r}")
    if marker["steps"] < 1:
        raise ValueError(f"{name}: marker steps must be >= 1, got {marker['steps']}")
    for key, value in (("env_id", env_id), ("episode_id", episode_id)):
        if value is not None and marker[key] != value:
            raise ValueError(f"{name}: marker {key} is {marker[key]}, but the file name says {value}")
    return marker["steps"]


def validate_episode(arrays: Mapping[str, np.ndarray], marker: Mapping[str, Any], *, name: str) -> None:
    """Check one whole episode (member name -> array) against docs/FORMAT-v1.md; raise ValueError naming ``name``.

    Every member must be present; use `validate_episode_schema` plus `validate_episode_values` to check
    a projection (the schema of all members, the values of some).
    """
    validate_episode_schema({key: (a.shape, a.dtype) for key, a in arrays.items()}, marker, name=name)
    validate_episode_values(arrays, marker, name=name)


def observation_fields(members: Iterable[str]) -> list[str]:
    """The observation field names among member names (those of ``obs/``), sorted."""
    return sorted(m[4:] for m in members if m.startswith("obs/"))


def validate_episode_schema(
    headers: Mapping[str, tuple[tuple[int, ...], np.dtype]], marker: Mapping[str, Any], *, name: str
) -> None:
    """Check member names, shapes and dtypes (member -> (shape, dtype)), without looking at values."""
    steps = validate_marker(marker, name=name)
    for member, (shape, _) in headers.items():
        if len(shape) == 0 or shape[0] != steps:
            raise ValueError(f"{name}: member {member} has shape {tuple(shape)}; its first dim must be T={steps}")
    fields = {m.split("/", 1)[1] for m in headers if m.startswith(("obs/", "next/"))} | set(REQUIRED_FIELDS)
    expected = {f"{prefix}{f}": (None, NUMERIC) for prefix in ("obs/", "next/") for f in sorted(fields)}
    expected |= {f"{prefix}{f}": e for prefix in ("obs/", "next/") for f, e in REQUIRED_LAYOUT.items()}
    check_layout(headers, leading(expected | TRANSITION_LAYOUT, "T"), name=name, what="member", source="schema 1")
    for field in sorted(fields):
        if headers[f"obs/{field}"] != headers[f"next/{field}"]:
            raise ValueError(
                f"{name}: obs/{field} is {describe(*headers[f'obs/{field}'])} but "
                f"next/{field} is {describe(*headers[f'next/{field}'])}; they must match"
            )


def validate_episode_values(arrays: Mapping[str, np.ndarray], marker: Mapping[str, Any], *, name: str) -> None:
    """Check the values of the members present in ``arrays`` (whose schema is already checked): the content rules
    every episode keeps (:mod:`core.rules`), with ``obs/`` the frames before the transitions and ``next/`` those
    after, then schema 1's own, continuity: ``next/F[t] == obs/F[t+1]`` for every field present.

    The transition members and the ``env_id``, ``episode_id``, ``step_id`` and ``time`` fields must be
    present; other observation fields are checked where present.
    """
    episode = {key: np.array([marker[key]], np.int64) for key in ("env_id", "episode_id", "steps")}
    check_finite(arrays, episode["steps"], episode, name=name)
    obs, nxt = ({f: arrays[prefix + f] for f in BOOKKEEPING_FIELDS} for prefix in ("obs/", "next/"))
    check_transitions(episode, obs, nxt, arrays["terminated"], arrays["truncated"], name=name)
    for member in arrays:
        if member.startswith("obs/"):
            field = member[4:]
            later, earlier = arrays[f"next/{field}"][:-1], arrays[member][1:]
            if not np.array_equal(later, earlier):
                t = int(np.argmax((later != earlier).reshape(len(later), -1).any(axis=1)))
                raise ValueError(f"{name}: continuity broken: next/{field}[t] != obs/{field}[t+1] at t={t}")


_LINE_KEYS = ("env_id", "episode_id", "instruction")


class InstructionLog:
    """``instructions.jsonl`` of a run directory, opened for appending (created where missing); ``append`` is safe
    from several writer threads: each line is one write of the whole line."""

    def __init__(self, directory: str):
        self._fd = os.open(os.path.join(directory, INSTRUCTIONS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._lock = threading.Lock()

    def append(self, env_id: int, episode_id: int, instruction: str) -> None:
        """Record one episode's instruction (before its marker publishes it)."""
        line = json.dumps({"env_id": int(env_id), "episode_id": int(episode_id), "instruction": instruction})
        view = memoryview((line + "\n").encode())
        with self._lock:
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_instructions(run_dir: str, manifest: Mapping, episodes: Iterable[tuple[int, int]]) -> list[str]:
    """The instruction of each of ``episodes`` (``(env_id, episode_id)`` of the marked ones, in reading order): the
    run's ``env_spec.instruction`` for every one where run.json names no instructions file, else each one's line.
    ValueError naming the file for a line that is not a whole JSON object of the three keys (a torn last line, an
    unmarked episode's, is ignored), an episode listed twice, or a marked episode without a line."""
    episodes = list(episodes)
    if INSTRUCTIONS_KEY not in manifest:
        return [manifest["env_spec"].get("instruction", "")] * len(episodes)
    path = os.path.join(run_dir, INSTRUCTIONS_FILE)
    if manifest[INSTRUCTIONS_KEY] != INSTRUCTIONS_FILE:
        raise ValueError(
            f"{os.path.join(run_dir, 'run.json')}: key {INSTRUCTIONS_KEY!r} is {manifest[INSTRUCTIONS_KEY]!r}; "
            f"allowed: {INSTRUCTIONS_FILE!r}"
        )
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        data = b""
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the instructions: {exc}") from exc
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a torn line (an episode its marker never published)
    found: dict[tuple[int, int], str] = {}
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}:{number}: not a JSON line: {exc}") from exc
        if not isinstance(entry, dict) or set(entry) != set(_LINE_KEYS):
            raise ValueError(f"{path}:{number}: a line must be an object with keys {list(_LINE_KEYS)}")
        env_id, episode_id, text = (entry[k] for k in _LINE_KEYS)
        if not all(type(v) is int and v >= 0 for v in (env_id, episode_id)) or type(text) is not str:
            raise ValueError(f"{path}:{number}: env_id and episode_id must be integers >= 0, instruction a string")
        if (env_id, episode_id) in found:
            raise ValueError(f"{path}:{number}: episode {env_id}:{episode_id} is listed twice")
        found[env_id, episode_id] = sys.intern(text)  # one copy of each text
    missing = [pair for pair in episodes if pair not in found]
    if missing:
        raise ValueError(f"{path}: no instruction for the published episode {missing[0][0]}:{missing[0][1]}")
    return [found[pair] for pair in episodes]


def cut_torn_line(run_dir: str) -> list[str]:
    """Cut a torn last line (a killed writer's, whose episode was never published) off the run's instructions file;
    return what was done (a sentence, or nothing)."""
    path = os.path.join(run_dir, INSTRUCTIONS_FILE)
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    whole = data.rfind(b"\n") + 1
    if whole == len(data):
        return []
    os.truncate(path, whole)
    return [f"cut a torn line of {len(data) - whole} bytes off {INSTRUCTIONS_FILE}"]
