"""Crash states of a packed recording, in the spirit of ALICE ("All File Systems Are Not Created Equal", OSDI
2014): record the file operations a recording makes, then build every directory a crash could leave.

:func:`trace_recording` records a small packed run and returns the operations it made, in order: each block's
segment write and its commit-log append (from the one place that publishes a block, ``append_commit``), every
``fsync``/``fdatasync`` (of a file or a directory), and every ``run.json`` rewrite (atomic: a rename). The
contents come from the finished files: an operation is a byte range of one of them.

:func:`crash_states` builds, for every crash point (every prefix of the operations), the state where all of them
reached the disk, and, for each data operation no later sync covers (POSIX: unsynced writes may be lost or
reordered), the states where it alone was lost while later ones persisted: its range read back as zeros (the
file's size reached the disk, its data did not), or its file cut at its offset (a lost tail); and a commit
line torn in the middle. A run.json rewrite no later sync covers may be lost too (the previous one stays).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Op:
    kind: str
    """``write`` (bytes [offset, offset + length) of ``name``), ``sync`` (of ``name``: a file, or ``.`` for the
    run directory) or ``manifest`` (``run.json`` replaced by ``content``)."""
    name: str
    offset: int = 0
    length: int = 0
    content: bytes = b""


def trace_recording(directory: Path, record, monkeypatch) -> list[Op]:
    """Run ``record()`` (which writes the packed run ``directory``) with its file operations traced."""
    from forge_gpu._src.formats.packed import write as writer_module
    from forge_gpu._src.recording import base as base_module

    ops: list[Op] = []
    real_append, real_manifest = writer_module.append_commit, base_module.write_json_atomic
    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    sizes: dict[str, int] = {}

    def grown() -> None:
        """The segment bytes pyarrow wrote since the last traced call: one write each (blocks are appended)."""
        for path in sorted(directory.glob("segment-*.arrows")):
            size, known = path.stat().st_size, sizes.get(path.name, 0)
            if size > known:
                ops.append(Op("write", path.name, known, size - known))
                sizes[path.name] = size

    def name_of(fd: int) -> str:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        return "." if path == directory.resolve() else path.name

    def append_commit(log, **kwargs):
        grown()
        start = os.fstat(log).st_size
        real_append(log, **kwargs)
        ops.append(Op("write", "commits.jsonl", start, os.fstat(log).st_size - start))

    def write_json_atomic(path, obj, **kwargs):
        grown()
        mark = len(ops)
        real_manifest(path, obj, **kwargs)
        if os.path.basename(path) == "run.json":  # the rename comes before the directory's sync made inside
            ops.insert(mark, Op("manifest", "run.json", content=Path(path).read_bytes()))

    def traced(real):
        def sync(fd):
            grown()
            real(fd)
            name = name_of(fd)
            if not name.endswith(".tmp"):  # run.json's new content, synced before its rename: the rename is the op
                ops.append(Op("sync", name))

        return sync

    monkeypatch.setattr(writer_module, "append_commit", append_commit)
    monkeypatch.setattr(base_module, "write_json_atomic", write_json_atomic)
    monkeypatch.setattr(os, "fsync", traced(real_fsync))
    monkeypatch.setattr(os, "fdatasync", traced(real_fdatasync))
    record()
    monkeypatch.undo()
    return ops


@dataclasses.dataclass(frozen=True)
class State:
    crash: int
    """The operations issued before the crash: ``ops[:crash]``."""
    lost: int | None = None
    """The one issued operation that did not persist (None: all did)."""
    how: str = "all"
    """``all``, ``zeroed``, ``cut`` (its file ends at its offset), ``torn`` (the log ends half way into the line)
    or ``lost`` (a run.json rewrite: the previous one stays)."""

    def durable(self, ops: list[Op]) -> int:
        """Commit lines that a sync of the log made durable before the crash: at durability ``machine``, the
        commits that had returned (each returns after its sync)."""
        last_sync = max((i for i, op in enumerate(ops[: self.crash]) if op == Op("sync", "commits.jsonl")), default=-1)
        return sum(1 for op in ops[: last_sync + 1] if op.kind == "write" and op.name == "commits.jsonl")


def _synced(ops: list[Op], i: int, crash: int) -> bool:
    """Whether a sync issued after ``ops[i]`` and before the crash covers it: its file's (a run.json rename: the
    directory's)."""
    covering = "." if ops[i].kind == "manifest" else ops[i].name  # a rename is made durable by its directory's sync
    return any(op.kind == "sync" and op.name == covering for op in ops[i + 1 : crash])


def crash_states(ops: list[Op]) -> list[State]:
    """Every crash state of the recording (see the module docstring)."""
    states = []
    for crash in range(len(ops) + 1):
        states.append(State(crash))
        for i in range(crash):
            op = ops[i]
            if op.kind == "sync" or _synced(ops, i, crash):
                continue
            if op.kind == "manifest":
                states.append(State(crash, i, "lost"))
            else:
                states += [State(crash, i, how) for how in ("zeroed", "cut")]
                if op.name == "commits.jsonl":
                    states.append(State(crash, i, "torn"))
    return states


def build(state: State, ops: list[Op], final: Path, out: Path) -> None:
    """Write the directory ``state`` leaves into the new directory ``out``, from the finished run ``final``."""
    out.mkdir()
    files: dict[str, bytearray] = {}
    cut: dict[str, int] = {}
    manifest = None
    for i, op in enumerate(ops[: state.crash]):
        lost = i == state.lost
        if op.kind == "manifest":
            manifest = manifest if lost else op.content
            continue
        if op.kind != "write":
            continue
        data = files.setdefault(op.name, bytearray())
        chunk = (final / op.name).read_bytes()[op.offset : op.offset + op.length]
        if lost and state.how == "zeroed":
            chunk = bytes(len(chunk))
        if lost and state.how in ("cut", "torn"):  # the file ends at the op's offset (or half way into its line)
            end = op.offset + (len(chunk) // 2 if state.how == "torn" else 0)
            cut[op.name] = min(cut.get(op.name, end), end)
        data[op.offset : op.offset + len(chunk)] = chunk
    for name, data in files.items():
        (out / name).write_bytes(bytes(data[: cut.get(name, len(data))]))
    if manifest is not None:
        (out / "run.json").write_bytes(manifest)


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
