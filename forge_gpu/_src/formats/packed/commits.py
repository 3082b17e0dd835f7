"""The packed layout's commit log (schema 2, docs/FORMAT.md "The commit log and the commit rule"): one JSON
line per block publishes it, its checksum (layout 3) and the episodes that ended in it, with their instructions
(layout 4) and params. The one encoder of a commit line, used by the writer and by repair; the reader of the log,
which trusts nothing past the last whole line and checks every line before it; and the check of a line's episodes
against the copy its block holds (layout 3).

numpy and the standard library.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from forge_gpu._src.core.instructions import INSTRUCTION, factorize
from forge_gpu._src.formats.packed.identity import COMMIT_LOG

#: Keys of an episode entry in a commit line, each a list with one integer per episode.
EPISODE_KEYS = ("env_id", "episode_id", "steps", "first_row", "stride")
#: The key of an episode entry that holds the episodes' params (a run whose env_spec describes params), and the
#: prefix of their columns in memory: ``params/<name>``, one row per episode.
PARAMS = "params"
PARAMS_PREFIX = "params/"
_COMMIT_KEYS = {"segment", "offset", "length", "first_row", "rows", "episodes"}
#: The commit key of layout 3 that holds the CRC32C of the block's bytes, and the key of a layout-3 block's record
#: batch custom metadata that holds the JSON of its line's ``episodes`` (docs/FORMAT.md "Checksums").
CHECKSUM = "crc32c"
EPISODES = "episodes"
#: The commit key of layout 3 that ``repair --salvage`` adds to a line whose block's copy lists episodes it dropped
#: (their rows were in a damaged block): ``{"env_id": [...], "episode_id": [...]}``.
DROPPED = "dropped"


def encode_params(episodes: Mapping[str, Any]) -> dict[str, list] | None:
    """The ``params`` object of an episode entry: name -> one value per episode (a number, or nested lists of the
    per-episode shape), from the ``params/<name>`` columns of ``episodes``; None where it has none. A float32 value
    becomes the shortest decimal of its float64 equal, which reads back to the same float32 bits."""
    params = {
        k[len(PARAMS_PREFIX) :]: np.asarray(v).tolist() for k, v in episodes.items() if k.startswith(PARAMS_PREFIX)
    }
    return params or None


class FactorizedInstructions(NamedTuple):
    """Episodes' instructions given as the ``instruction`` object holds them: ``texts``, the distinct ones in order of
    first appearance, and ``index``, each episode's position in ``texts`` (a writer that knows them so, e.g. every
    episode of a run without a template having the run's, skips :func:`factorize`'s pass over the episodes)."""

    texts: list[str]
    index: np.ndarray


def encode_instructions(instructions) -> dict[str, list]:
    """The ``instruction`` object of an episode entry: ``texts``, the distinct instructions of the line's episodes
    (in order of first appearance), and ``index``, each episode's position in ``texts`` (a line of many episodes
    holds each text once). ``instructions``: one text per episode, or :class:`FactorizedInstructions`."""
    if isinstance(instructions, FactorizedInstructions):
        return {"texts": list(instructions.texts), "index": np.asarray(instructions.index, np.int64).tolist()}
    texts, index = factorize(instructions)
    return {"texts": texts, "index": index.tolist()}


def decode_instructions(entry: Any, count: int, *, where: str) -> np.ndarray:
    """Each of ``count`` episodes' instruction (an object array of strings) from an ``instruction`` object
    (:func:`encode_instructions`); ValueError naming ``where`` for other keys, a text that is not a string, or an
    index that is not one of ``count`` integers naming a text."""
    if not isinstance(entry, dict) or entry.keys() != {"texts", "index"}:
        raise ValueError(f"{where}: must be an object with keys ['index', 'texts']")
    texts, index = entry["texts"], entry["index"]
    if not isinstance(texts, list) or not all(type(t) is str for t in texts):
        raise ValueError(f"{where}.texts must be a list of strings")
    if (
        not isinstance(index, list)
        or len(index) != count
        or not all(type(i) is int and 0 <= i < len(texts) for i in index)
    ):
        raise ValueError(f"{where}.index must be a list of {count} integers in [0, {len(texts)})")
    return np.array(texts, dtype=object)[np.array(index, dtype=np.int64)]  # one object per distinct text


def open_commit_log(directory: str, *, create: bool = False, name: str = COMMIT_LOG) -> int:
    """The commit log of run ``directory`` (or the file ``name`` beside it), opened for appending (created when
    ``create``): a descriptor."""
    flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0)
    return os.open(os.path.join(directory, name), flags, 0o666)  # the umask decides, as for every file


def encode_episodes(episodes: Mapping[str, Any]) -> str:
    """The JSON text of a commit line's ``episodes`` object: each of :data:`EPISODE_KEYS` (one integer per episode),
    ``instruction`` (layout 4: :func:`encode_instructions`) where ``episodes`` holds each one's, and, where it holds
    ``params/<name>`` columns, ``params`` (:func:`encode_params`)."""
    entry: dict[str, Any] = {key: np.asarray(episodes[key]).tolist() for key in EPISODE_KEYS}
    if INSTRUCTION in episodes:
        entry[INSTRUCTION] = encode_instructions(episodes[INSTRUCTION])
    params = encode_params(episodes)
    if params is not None:
        entry[PARAMS] = params
    return json.dumps(entry, separators=(",", ":"))


def append_commit(
    log: int,
    *,
    segment: int,
    offset: int,
    length: int,
    first_row: int,
    rows: int,
    episodes: Mapping[str, Any] | str,
    crc32c: int | None = None,
    dropped: Mapping[str, Any] | None = None,
) -> None:
    """Publish one block: append its commit line to the open commit log ``log`` (:func:`open_commit_log`).

    The block is ``length`` bytes at ``offset`` of segment ``segment`` and holds run rows ``first_row`` to
    ``first_row + rows - 1``; ``episodes`` maps each of :data:`EPISODE_KEYS` to one integer per episode that
    ended in it, and ``params/<name>`` to each one's params where the run has some (or is that entry's JSON text
    already, :func:`encode_episodes`); ``crc32c`` is the block's checksum (layout 3; None in a repair of an older
    run, whose lines have none); ``dropped`` the ``env_id`` and ``episode_id`` lists of the episodes of the block's
    copy that salvage dropped (None: none). The line is written whole, a short write continued: the bytes before
    its newline are never a whole line, so a torn write stays unpublished.
    """
    text = episodes if isinstance(episodes, str) else encode_episodes(episodes)
    checksum = "" if crc32c is None else f'"{CHECKSUM}":{int(crc32c)},'
    gone = (
        ""
        if dropped is None
        else f',"{DROPPED}":'
        + json.dumps({key: np.asarray(dropped[key]).tolist() for key in _DROPPED_KEYS}, separators=(",", ":"))
    )
    line = (
        f'{{"segment":{int(segment)},"offset":{int(offset)},"length":{int(length)},{checksum}'
        f'"first_row":{int(first_row)},"rows":{int(rows)},"episodes":{text}{gone}}}\n'
    )
    view = memoryview(line.encode())
    while view:
        view = view[os.write(log, view) :]


def read_commits(
    run_dir: str, params: Mapping, *, checksums: bool, instructions: bool = False
) -> tuple[list[dict], bool]:
    """The whole lines of the commit log, parsed and checked, their episodes' params against ``params`` (name ->
    per-episode shape, dtype: ``layout.run_groups``'s); and whether a torn last line was ignored. Each line's
    ``episodes`` holds int64 arrays, ``params/<name>`` arrays of the described dtype, one row per episode, and (with
    ``instructions``: layout 4) ``instruction``, each episode's, an object array of strings; ``line`` is its line
    number.
    ``checksums``: the lines hold ``crc32c`` (layout 3), which older ones must not."""
    path = os.path.join(run_dir, COMMIT_LOG)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the commit log: {exc}") from exc
    lines = data.split(b"\n")
    torn = lines.pop() != b""  # a last line without its newline was being written: not published
    commits, next_row = [], 0
    keys = _COMMIT_KEYS | {CHECKSUM} if checksums else _COMMIT_KEYS
    previous = (-1, 0)  # (segment, end offset) of the previous commit
    for number, line in enumerate(lines, 1):
        where = f"{path}:{number}"
        try:
            commit = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{where}: not a JSON commit line: {exc}") from exc
        if not isinstance(commit, dict) or commit.keys() - {DROPPED} != keys or (DROPPED in commit and not checksums):
            raise ValueError(f"{where}: a commit must be an object with keys {sorted(keys)}")
        for key in ("segment", "offset", "length", "first_row", "rows", *([CHECKSUM] if checksums else [])):
            value, least, limit = commit[key], int(key in ("length", "rows")), _BLOCK_LIMITS.get(key, 1 << 62)
            if type(value) is not int or not least <= value < limit:
                raise ValueError(f"{where}: {key} must be an integer in [{least}, {limit}), got {value!r}")
        segment, offset = commit["segment"], commit["offset"]
        if (segment, offset) != previous and (segment, offset) != (previous[0] + 1, 0):
            raise ValueError(
                f"{where}: the block at segment {segment} offset {offset} does not follow the previous one "
                f"(segment {previous[0]} ending at {previous[1]})"
            )
        if commit["first_row"] != next_row:
            raise ValueError(f"{where}: first_row is {commit['first_row']}, expected {next_row}")
        commit["episodes"] = decode_episodes(commit["episodes"], where, params, instructions=instructions)
        if DROPPED in commit:
            commit[DROPPED] = _dropped(commit[DROPPED], where)
        last = commit["episodes"]["first_row"] + commit["episodes"]["steps"] * commit["episodes"]["stride"]
        if ((last < next_row) | (last >= next_row + commit["rows"])).any():
            raise ValueError(f"{where}: an episode's last row is outside the block's rows")
        previous = (segment, offset + commit["length"])
        next_row += commit["rows"]
        commit["line"] = number
        commits.append(commit)
    return commits, torn


# first_row + steps * stride stays below 2**63: int64 arithmetic on the commit log never overflows.
_EPISODE_LIMITS = {"first_row": 1 << 62}  # the other keys: below 2**31 (ids, lengths and strides are int32)
# A block's fields: offset + length, and first_row + rows, stay below 2**63 (a file offset, a C long, an int64 row);
# the others below 2**62; a segment's number has six digits or more in its name, an int32.
_BLOCK_LIMITS = {"segment": 1 << 31, CHECKSUM: 1 << 32}


_DROPPED_KEYS = ("env_id", "episode_id")


def _dropped(entry: Any, where: str) -> dict[str, np.ndarray]:
    """A line's ``dropped`` object: its two lists as int64 arrays (ValueError naming ``where``)."""
    if not isinstance(entry, dict) or entry.keys() != set(_DROPPED_KEYS):
        raise ValueError(f"{where}: {DROPPED} must be an object with keys {list(_DROPPED_KEYS)}")
    out = {}
    for key in _DROPPED_KEYS:
        values = entry[key]
        if not isinstance(values, list) or not all(type(v) is int and 0 <= v < 1 << 31 for v in values):
            raise ValueError(f"{where}: {DROPPED}.{key} must be a list of integers in [0, {1 << 31})")
        out[key] = np.array(values, np.int64).reshape(-1)
    if len(out["env_id"]) != len(out["episode_id"]):
        raise ValueError(f"{where}: the lists under {DROPPED} differ in length")
    return out


def decode_episodes(entry: Any, where: str, params: Mapping, *, instructions: bool = False) -> dict[str, np.ndarray]:
    """A line's ``episodes`` object (parsed JSON) as arrays: each of :data:`EPISODE_KEYS` int64, ``params/<name>``
    of the described dtype (``params``, name -> (shape, dtype)), and with ``instructions`` (layout 4)
    ``instruction``, an object array of strings; ValueError naming ``where`` for any other keys, types, ranges or
    lengths."""
    keys = [*EPISODE_KEYS, *([INSTRUCTION] if instructions else []), *([PARAMS] if params else [])]
    if not isinstance(entry, dict) or entry.keys() != set(keys):
        raise ValueError(f"{where}: episodes must be an object with keys {keys}")
    out = {}
    for key in EPISODE_KEYS:
        values, least, limit = entry[key], int(key in ("steps", "stride")), _EPISODE_LIMITS.get(key, 1 << 31)
        if not isinstance(values, list) or not all(type(v) is int and least <= v < limit for v in values):
            raise ValueError(f"{where}: episodes.{key} must be a list of integers in [{least}, {limit})")
        out[key] = np.array(values, dtype=np.int64) if values else np.zeros(0, np.int64)
    if len({len(v) for v in out.values()}) > 1:
        raise ValueError(f"{where}: the lists under episodes differ in length")
    if instructions:
        out[INSTRUCTION] = decode_instructions(
            entry[INSTRUCTION], len(out["steps"]), where=f"{where}: episodes.{INSTRUCTION}"
        )
    if params:
        out.update(decode_params(entry[PARAMS], params, len(out["steps"]), where=f"{where}: episodes.{PARAMS}"))
    return out


def decode_params(entry: Any, layout: Mapping, count: int, *, where: str) -> dict[str, np.ndarray]:
    """``params/<name>`` -> [count, ...] array of the ``layout`` (name -> per-episode shape, dtype: env_spec's) from
    a ``params`` object (:func:`encode_params`); ValueError naming ``where`` for another name, count, shape or
    kind of value, or a float that is not finite."""
    if not isinstance(entry, dict) or entry.keys() != layout.keys():
        raise ValueError(f"{where}: must be an object with keys {sorted(layout)} (run.json's env_spec.params)")
    out = {}
    for name, (shape, dtype) in layout.items():
        values, due = entry[name], (count, *shape)
        try:
            found = np.array(values) if values else np.zeros((0, *shape), dtype)
        except (ValueError, TypeError, RecursionError) as exc:  # ragged lists; nesting deeper than numpy goes
            raise ValueError(f"{where}.{name}: not a list of {list(shape)} values: {exc}") from exc
        kinds = {"b": "b", "f": "iuf"}.get(dtype.kind, "iu")  # the JSON values a dtype takes: no bool as a number
        if not isinstance(values, list) or found.shape != due or found.dtype.kind not in kinds:
            raise ValueError(f"{where}.{name}: must be a list of {count} {dtype} values of shape {list(shape)}")
        with np.errstate(over="ignore", invalid="ignore"):  # a float past the dtype's range: inf, refused below
            array = found.astype(dtype)
        if (dtype.kind == "f" and not np.isfinite(array).all()) or (dtype.kind in "iu" and (array != found).any()):
            raise ValueError(f"{where}.{name}: holds a value that is not a finite {dtype}")
        out[PARAMS_PREFIX + name] = array
    return out


def check_block_episodes(commit: Mapping, metadata: Mapping, params: Mapping, *, where: str) -> None:
    """A layout-3 block's copy of its line's ``episodes`` (its record batch's custom metadata :data:`EPISODES`,
    covered by the block's checksum) must equal the line's (``commit``, parsed and checked by :func:`read_commits`;
    ``params``: name -> (shape, dtype), the run's): ValueError naming ``where`` otherwise, so a changed, dropped or
    added episode, instruction or param in the log is refused. The episodes a salvage dropped (the line's
    ``dropped``) are left out of the copy first. The copy is compared, not checked again: equal to a checked line,
    it is one."""
    mine = commit["episodes"]
    texts = [INSTRUCTION] if INSTRUCTION in mine else []  # layout 4
    try:
        entry = json.loads(metadata[EPISODES.encode()])
        if not isinstance(entry, dict) or entry.keys() != {*EPISODE_KEYS, *texts, *([PARAMS] if params else [])}:
            raise ValueError(f"keys {sorted(entry) if isinstance(entry, dict) else type(entry).__name__}")
        copy = {key: np.asarray(entry[key], np.int64) for key in EPISODE_KEYS}
        for key in texts:  # each episode's text, as the line's are compared
            copy[key] = np.array(entry[key]["texts"], dtype=object)[np.asarray(entry[key]["index"], np.int64)]
        for name, (shape, dtype) in params.items():  # reshaped: an empty list is (0, *shape) in the line
            copy[PARAMS_PREFIX + name] = np.asarray(entry[PARAMS][name], dtype).reshape(-1, *shape)
    except (KeyError, TypeError, ValueError, OverflowError, UnicodeDecodeError, IndexError) as exc:
        raise ValueError(f"{where}: the block holds no readable copy of its episodes: {exc}") from exc
    if DROPPED in commit and copy["env_id"].ndim == 1 == copy["episode_id"].ndim:  # not the line's any more
        pairs = copy["env_id"] * (1 << 32) + copy["episode_id"]
        gone = commit[DROPPED]["env_id"] * (1 << 32) + commit[DROPPED]["episode_id"]
        kept = ~np.isin(pairs, gone)
        copy = {key: values[kept] if values.shape[:1] == kept.shape else values for key, values in copy.items()}
    if not all(copy[k].shape == mine[k].shape and (copy[k] == mine[k]).all() for k in mine):
        raise ValueError(f"{where}: the line's episodes differ from the copy its block holds")
