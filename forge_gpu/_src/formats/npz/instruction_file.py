"""forge_gpu's per-episode instructions beside a schema-1 run (docs/FORMAT.md "Instructions"): ``instructions.jsonl``,
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

from forge_gpu._src.formats.npz.identity import INSTRUCTIONS_FILE, INSTRUCTIONS_KEY

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
