"""Test helpers: the synthetic batches of ``forge_gpu.testing`` with the episodes they form remembered, and the
run-directory helpers the tests share (record, load, tamper)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np

from forge_gpu._src.formats.npz.files import make_marker
from forge_gpu.testing import (
    CONTROL_DT,
    INSTRUCTION,
    PARAMS,
    STATE,
    SyntheticBatches,
    make_batches,
    synthetic_description,
)

__all__ = ["CONTROL_DT", "INSTRUCTION", "PARAMS", "STATE", "make_batches", "synthetic_description"]

#: The codecs of the packed runs :func:`record` writes where a test names none: lossless for every image field.
LOSSLESS = {"*": "zstd"}


def slot_bytes(env):
    """Bytes of one episode buffer, computed independently of the recorder."""
    frame = 0
    for entry in env.spec["observation"].values():
        frame += int(np.prod(entry["shape"], dtype=np.int64)) * np.dtype(entry["dtype"]).itemsize
    action_dim = env.spec["action_shape"][0]
    steps = env.max_steps
    return (steps + 1) * frame + steps * (4 * action_dim + 4 + 1 + 1)


class SyntheticSim(SyntheticBatches):
    """:class:`forge_gpu.testing.SyntheticBatches` that remembers the episodes its batches form: ``completed`` maps
    (env_id, episode_id) to the expected episode members (with ``state/<S>`` [T+1, ...] and ``params/<P>`` where the
    spec has state and params); ``abandoned`` lists the episodes given up by a `reset` with at least one transition.
    The bookkeeping loops over envs in Python: it is the tests' oracle, not a path that is timed."""

    def __init__(self, env, *, seed=0, end_prob=0.25):
        super().__init__(env, seed=seed, end_prob=end_prob)
        self.frames = [[] for _ in range(self.n)]
        self.transitions = [[] for _ in range(self.n)]
        self.completed = {}
        self.abandoned = []

    def _frame(self, obs, groups, i):
        """Env ``i``'s frame: its observation fields, and ``state/<S>`` and ``params/<P>``."""
        frame = {f: a[i].copy() for f, a in obs.items()}
        frame.update({f"{group}/{k}": v[i].copy() for group, values in groups.items() for k, v in values.items()})
        return frame

    def abandoning(self):
        self.abandoned.extend(self.in_progress())

    def began(self, obs, groups):
        for i in range(self.n):
            self.frames[i] = [self._frame(obs, groups, i)]
            self.transitions[i] = []

    def stepped(self, obs, groups, active, transition):
        action, reward, terminated, truncated = transition
        for i in range(self.n):
            frame = self._frame(obs, groups, i)
            if not active[i]:
                self.frames[i] = [frame]
                self.transitions[i] = []
                continue
            self.frames[i].append(frame)
            self.transitions[i].append((action[i].copy(), reward[i], terminated[i], truncated[i]))
            if terminated[i] or truncated[i]:
                self.completed[(i, int(self.episode_id[i]))] = _episode_members(self.frames[i], self.transitions[i])

    def in_progress(self):
        """Episodes with at least one transition that have not ended."""
        return [
            {"env_id": i, "episode_id": int(self.episode_id[i]), "steps": len(self.transitions[i])}
            for i in range(self.n)
            if self.transitions[i] and not self.ended[i]
        ]


def _episode_members(frames, transitions):
    members = {}
    for field in frames[0]:
        stacked = np.stack([frame[field] for frame in frames])
        if field.startswith("state/"):  # every frame's
            members[field] = stacked
        elif field.startswith("params/"):  # the episode's (its last frame's)
            members[field] = stacked[-1]
        else:
            members[f"obs/{field}"] = stacked[:-1]
            members[f"next/{field}"] = stacked[1:]
    members["action"] = np.stack([t[0] for t in transitions])
    members["reward"] = np.array([t[1] for t in transitions], np.float32)
    members["terminated"] = np.array([t[2] for t in transitions], bool)
    members["truncated"] = np.array([t[3] for t in transitions], bool)
    return members


def record(directory, env, batches, *, recorder=None, **kwargs):
    """Record ``batches`` into a new run directory with ``recorder`` (a class; default the schema-1
    NpzRecorder) and close; return the recorder. A packed run's images are stored losslessly unless ``codecs``
    says otherwise (:data:`LOSSLESS`: the synthetic depth is noise, not a depth map, and the tests compare bit for
    bit; the default quantizes depth)."""
    from forge_gpu.recording import NpzRecorder, PackedRecorder

    if recorder is PackedRecorder:
        kwargs = {"codecs": LOSSLESS, **kwargs}
    recorder = (recorder or NpzRecorder)(directory, env, **kwargs)
    for observation, result in batches:
        recorder.append(observation, result)
    recorder.close()
    return recorder


def load_run(directory):
    """Every episode file (member -> array) and marker of a run directory, by file name."""
    contents = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(".npz"):
            with np.load(path, allow_pickle=False) as archive:
                contents[name] = {key: archive[key] for key in archive.files}
        elif name.endswith(".json") and name not in ("run.json", "stats.json"):
            with open(path) as f:
                contents[name] = json.load(f)
    return contents


def published(directory) -> int:
    """Episodes a reader sees in a run directory of either layout now (0 while it holds no readable run)."""
    from forge_gpu.reading import open_run

    try:
        return len(open_run(directory))
    except (ValueError, OSError):
        return 0


def standard_read(directory):
    """A packed run read with pyarrow and json alone, as docs/FORMAT.md shows: its commit lines and one table of
    every committed row."""
    import pyarrow as pa

    commits = [json.loads(line) for line in (directory / "commits.jsonl").read_bytes().split(b"\n")[:-1]]
    tables = []
    for segment in sorted({c["segment"] for c in commits}):
        reader = pa.ipc.open_stream(pa.memory_map(str(directory / f"segment-{segment:06d}.arrows")))
        tables.append(pa.Table.from_batches([reader.read_next_batch() for c in commits if c["segment"] == segment]))
    return commits, pa.concat_tables(tables)


def downgrade_packed_run(directory, version):
    """Rewrite the packed run ``directory`` (written at layout_version 5, its image fields raw: layout 5 added the
    encoded ones) as a run of an older layout ``version`` (1 or 2) would hold it: its commit lines without
    ``crc32c`` (the key layout 3 added) and without the episodes' ``instruction`` (layout 4's), its run.json's
    layout_version ``version`` (none for 1). Its blocks keep their copies of the episodes, which older readers
    ignore."""
    directory = Path(directory)
    lines = [json.loads(line) for line in (directory / "commits.jsonl").read_text().splitlines()]
    for c in lines:
        c["episodes"].pop("instruction")
    text = "".join(
        json.dumps({k: v for k, v in c.items() if k != "crc32c"}, separators=(",", ":")) + "\n" for c in lines
    )
    (directory / "commits.jsonl").write_text(text)
    manifest = json.loads((directory / "run.json").read_text())
    assert not manifest.pop("codecs", None), "an older layout holds no encoded columns: record it with raw images"
    manifest.pop("layout_version")
    if version > 1:
        manifest["layout_version"] = version
    (directory / "run.json").write_text(json.dumps(manifest))
    return manifest


#: The ways :func:`mutate_packed_run` damages a run: segments (bit flips, truncation, zeroed ranges anywhere and
#: inside a block's payload), commit lines (a changed value; one integer of a line set to 0, -1, 2**40, 2**63 or
#: one off; a line dropped, duplicated or two swapped; a changed byte; the last lines cut off; the log cut at a byte),
#: run.json (a changed byte, truncation, a key changed or dropped), stats.json (a changed byte, truncation, a value
#: changed or dropped) and any file's zeroed range.
FUZZ_KINDS = (
    *("flip", "truncate", "zero", "zero_payload"),
    *("line_value", "line_int", "line_drop", "line_dup", "line_swap", "log_tail", "log_bytes", "log_truncate"),
    *("manifest_bytes", "manifest_truncate", "manifest_key"),
    *("stats_bytes", "stats_truncate", "stats_value", "zero_any"),
)
#: The kinds that remove commit lines: a reader may then give a subset of the episodes (each exactly).
LINES_REMOVED = ("line_drop", "log_tail", "log_truncate")
#: Values a changed JSON value takes.
_ODD_VALUES = [None, -1, 10**12, 0, 1, "x", 3.5, 2**63, 2**62, [], {}, True, 1e39]
#: Values ``line_int`` gives an integer of a commit line (besides one more and one less than it): 2**63 is past
#: a C long (a file offset).
INT_VALUES = (0, -1, 1 << 40, 1 << 63)


def mutate_packed_run(files: dict, kind: str, rng) -> dict:
    """A damaged copy of a packed run's files (name -> bytes), one way (``kind``, of :data:`FUZZ_KINDS`) drawn
    from ``rng``."""
    files = dict(files)
    segments = sorted(name for name in files if name.startswith("segment-"))
    lines = files["commits.jsonl"].split(b"\n")[:-1]
    if kind in ("flip", "truncate", "zero"):
        victim = segments[rng.integers(len(segments))]
        data = bytearray(files[victim])
        if kind == "flip":
            for _ in range(1 + rng.integers(8)):
                data[rng.integers(len(data))] ^= 1 << rng.integers(8)
        elif kind == "truncate":
            data = data[: rng.integers(len(data))]
        else:
            start, size = int(rng.integers(len(data))), int(rng.integers(1, 4097))
            data[start : start + size] = bytes(len(data[start : start + size]))  # the same length: zeroed, not cut
        files[victim] = bytes(data)
    elif kind == "zero_payload":  # a range inside one committed block, past its message's first 64 bytes
        commit = json.loads(lines[rng.integers(len(lines))])
        name = f"segment-{commit['segment']:06d}.arrows"
        data = bytearray(files[name])
        start = commit["offset"] + 64 + int(rng.integers(max(commit["length"] - 64, 1)))
        end = min(start + int(rng.integers(1, 513)), commit["offset"] + commit["length"])
        data[start:end] = bytes(max(end - start, 0))
        files[name] = bytes(data)
    elif kind.startswith("line_"):
        k = int(rng.integers(len(lines)))
        if kind == "line_value":
            commit = json.loads(lines[k])
            _change_value(commit, rng)
            lines[k] = json.dumps(commit).encode()
        elif kind == "line_int":
            commit = json.loads(lines[k])
            paths = integer_paths(commit)
            *parents, key = paths[rng.integers(len(paths))]
            parent = commit
            for step in parents:
                parent = parent[step]
            values = (*INT_VALUES, parent[key] + 1, parent[key] - 1)
            parent[key] = values[rng.integers(len(values))]
            lines[k] = json.dumps(commit, separators=(",", ":")).encode()
        elif kind == "line_drop":
            del lines[k]
        elif kind == "line_dup":
            lines.insert(int(rng.integers(len(lines) + 1)), lines[k])
        else:
            other = int(rng.integers(len(lines)))
            lines[k], lines[other] = lines[other], lines[k]
        files["commits.jsonl"] = b"".join(line + b"\n" for line in lines)
    elif kind == "log_tail":  # the last lines lost, as after a crash before their writes reached the disk
        files["commits.jsonl"] = b"".join(line + b"\n" for line in lines[: -1 - int(rng.integers(3))])
    elif kind in ("log_bytes", "manifest_bytes", "stats_bytes"):
        name = {"log": "commits.jsonl", "manifest": "run.json", "stats": "stats.json"}[kind.split("_")[0]]
        data = bytearray(files[name])
        data[rng.integers(len(data))] = int(rng.integers(256))
        files[name] = bytes(data)
    elif kind in ("log_truncate", "manifest_truncate", "stats_truncate"):
        name = {"log": "commits.jsonl", "manifest": "run.json", "stats": "stats.json"}[kind.split("_")[0]]
        files[name] = files[name][: rng.integers(len(files[name]))]
    elif kind == "zero_any":
        name = sorted(files)[rng.integers(len(files))]
        data = bytearray(files[name])
        start, size = int(rng.integers(max(len(data), 1))), int(rng.integers(1, 257))
        data[start : start + size] = bytes(len(data[start : start + size]))
        files[name] = bytes(data)
    else:  # manifest_key, stats_value
        name = "run.json" if kind == "manifest_key" else "stats.json"
        content = json.loads(files[name])
        _change_value(content, rng, drop=True)
        files[name] = json.dumps(content).encode()
    return files


def integer_paths(entry, path=()) -> list[tuple]:
    """The path of every integer (not bool) in a parsed JSON value: a key, or a key and an index into its list."""
    if type(entry) is int:
        return [path]
    if isinstance(entry, dict):
        return [p for key, value in entry.items() for p in integer_paths(value, (*path, key))]
    if isinstance(entry, list):
        return [p for k, value in enumerate(entry) for p in integer_paths(value, (*path, k))]
    return []


def _change_value(tree, rng, *, drop=False):
    """Change (or, with ``drop``, maybe remove) one value somewhere in the JSON object ``tree``, in place."""
    while True:
        keys = sorted(tree) if isinstance(tree, dict) else list(range(len(tree)))
        if not keys:
            return
        key = keys[rng.integers(len(keys))]
        if isinstance(tree[key], dict | list) and tree[key] and rng.random() < 0.7:
            tree = tree[key]
            continue
        if drop and isinstance(tree, dict) and rng.random() < 0.3:
            del tree[key]
        elif isinstance(tree[key], int | float) and not isinstance(tree[key], bool) and rng.random() < 0.5:
            tree[key] = type(tree[key])(tree[key] + [-1, 1][rng.integers(2)])  # a near miss
        else:
            tree[key] = _ODD_VALUES[rng.integers(len(_ODD_VALUES))]
        return


def run_files(directory) -> dict:
    """A run directory's files, name -> bytes (a file in a folder of the run, as a real run's ``task/``: its path
    relative to the run, ``task/cartpole.toml``)."""
    directory = Path(directory)
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def write_run_files(directory, files: dict, *, held: dict | None = None) -> None:
    """Make ``directory`` hold exactly ``files`` (name -> bytes; names as :func:`run_files` gives them). ``held``:
    what it holds now, where the caller knows (a file it holds already is not written again)."""
    directory = Path(directory)
    directory.mkdir(exist_ok=True)
    if held is not None:
        for name in held.keys() - files.keys():
            (directory / name).unlink()
        for name, data in files.items():
            if held.get(name) != data:
                (directory / name).parent.mkdir(parents=True, exist_ok=True)
                (directory / name).write_bytes(data)
        return
    for path in sorted(directory.rglob("*"), reverse=True):  # a folder's files before the folder
        name = path.relative_to(directory).as_posix()
        if path.is_dir():
            if not any(other.startswith(name + "/") for other in files):
                shutil.rmtree(path)
        elif name not in files:
            path.unlink()
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)


def make_episode(steps=4, *, env_id=2, episode_id=5, proprio_dim=3, action_dim=2, seed=0):
    """A valid episode (member -> array) and its marker."""
    rng = np.random.default_rng(seed)
    frames = {
        "env_id": np.full(steps + 1, env_id, np.int32),
        "episode_id": np.full(steps + 1, episode_id, np.int32),
        "step_id": np.arange(steps + 1, dtype=np.int32),
        "time": (np.arange(steps + 1) * CONTROL_DT).astype(np.float32),
        "proprio": rng.normal(size=(steps + 1, proprio_dim)).astype(np.float32),
    }
    arrays = {}
    for field, frame in frames.items():
        arrays[f"obs/{field}"] = frame[:-1]
        arrays[f"next/{field}"] = frame[1:]
    arrays["action"] = rng.uniform(-1, 1, (steps, action_dim)).astype(np.float32)
    arrays["reward"] = rng.normal(size=steps).astype(np.float32)
    arrays["terminated"] = np.arange(steps) == steps - 1
    arrays["truncated"] = np.zeros(steps, bool)
    return arrays, make_marker(env_id, episode_id, steps)


def make_description(num_envs=3, max_steps=6, *, transport="host_snapshot", **kwargs):
    """synthetic_description's description with another transport name."""
    return dataclasses.replace(synthetic_description(num_envs, max_steps, **kwargs), transport=transport)
