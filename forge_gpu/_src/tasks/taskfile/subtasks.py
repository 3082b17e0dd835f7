"""A task file's ``[[subtasks]]``: the object-centric steps a demonstration is made of, in order.

Each names its ``name``, the ``object`` its motion is relative to (a body of the model, a ``[targets]`` name, or
none for free motion), optionally the body it carries (``held``: a body grasped in an earlier subtask) and
``conditions``: condition terms with the keys ``[[success]]`` takes (``bodies_touch``,
``body_above``, ``joint_pos_beyond``, ``hold``, ...), all of which must hold for the subtask to end. The last
subtask may leave its conditions out: it ends with the task's success. The conditions are bound by the same
machinery as the success terms (``term_rows.term_row``) and evaluated by the same generated observe kernel, each
step, on the device (``codegen.py``: one flag per world and subtask, ``FileTask.subtask_flags``).

A source demonstration is cut at the first frame each subtask's conditions hold (demonstration generation,
docs/generate.md). A bad entry is a ``ValueError`` of one line naming the file and the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from forge_gpu._src.tasks.taskfile import terms
from forge_gpu._src.tasks.taskfile.entries import check_keys, shown
from forge_gpu._src.tasks.taskfile.term_rows import Row, Scope, term_row

NONE, BODY, TARGET = 0, 1, 2
"""What a subtask's motion is relative to: nothing (the world frame), a body's pose, a ``[targets]`` point (its
position; no rotation)."""
KEYS = ("name", "object", "held", "conditions")


@dataclass(frozen=True)
class Subtask:
    """One subtask, bound to the model."""

    name: str
    object: str
    """The body or ``[targets]`` name its motion is relative to; empty: none (free motion)."""
    kind: int
    """:data:`NONE`, :data:`BODY` or :data:`TARGET`."""
    index: int
    """The body's index in a world, or the target's in ``[targets]`` order; -1 for none."""
    first: int
    """Its first condition's index in ``Plan.subtask_rows``."""
    count: int
    """Its number of conditions; 0: it ends with the task's success (the last subtask only)."""
    held: str = ""
    """The body it carries (its segment moved so that body, where the hand holds it now, follows the source's);
    empty: none."""
    held_index: int = -1
    """That body's index in a world; -1 for none."""


def subtask_entries(entries, scope: Scope, targets: list[str], has_success: bool) -> tuple[list[Subtask], list[Row]]:
    """The subtasks of ``[[subtasks]]`` and their condition rows, in order (every condition required: all of a
    subtask's must hold)."""
    source = scope.source
    if entries in (None, []):
        return [], []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{source}: subtasks must be a list of tables ([[subtasks]]) with {', '.join(KEYS)}")
    out: list[Subtask] = []
    rows: list[Row] = []
    for i, entry in enumerate(entries):
        where = f"subtasks[{i}]"
        check_keys(entry, KEYS, where, "a subtask takes", source)
        name = entry.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{source}: {where}.name = {shown(name)}: expected a name (letters, digits, _)")
        if name in [s.name for s in out]:
            raise ValueError(f"{source}: {where}.name = {name!r}: a second subtask of that name")
        thing = entry.get("object", "")
        kind, index = NONE, -1
        if not isinstance(thing, str):
            raise ValueError(f"{source}: {where}.object = {shown(thing)}: expected a body or [targets] name")
        if thing and thing in targets:
            if thing in scope.body_names:
                raise ValueError(f"{source}: {where}.object = {thing!r}: both a body and a [targets] name; rename one")
            kind, index = TARGET, targets.index(thing)
        elif thing:
            if thing not in scope.body_names:
                held = ", ".join([*scope.body_names, *targets])
                raise ValueError(f"{source}: {where}.object = {thing!r}: no such body or [targets] name; the task has "
                                 f"{held}")  # fmt: skip
            kind, index = BODY, scope.body_names.index(thing)
        held = entry.get("held", "")
        if not isinstance(held, str) or (held and held not in scope.body_names):
            bodies = ", ".join(scope.body_names)
            raise ValueError(f"{source}: {where}.held = {shown(held)}: expected the name of a body the subtask "
                             f"carries; the model's bodies: {bodies}")  # fmt: skip
        if held and held == thing:
            raise ValueError(f"{source}: {where}.held = {held!r}: the body it carries cannot be the object its motion "
                             "is relative to")  # fmt: skip
        conditions = entry.get("conditions", [])
        last = i == len(entries) - 1
        if not isinstance(conditions, list) or not all(isinstance(c, dict) for c in conditions):
            raise ValueError(f"{source}: {where}.conditions = {shown(conditions)}: expected a list of condition "
                             "tables ([[subtasks.conditions]])")  # fmt: skip
        if not conditions and not last:
            raise ValueError(f"{source}: {where} ({name}): no conditions; only the last subtask may leave them out "
                             "(it ends with the task's success)")  # fmt: skip
        if not conditions and not has_success:
            raise ValueError(f"{source}: {where} ({name}): no conditions, and the task has no [[success]] to end it; "
                             "give it conditions, or subtasks = [] for none")  # fmt: skip
        first = len(rows)
        for k, condition in enumerate(conditions):
            at = f"{where}.conditions[{k}]"
            if condition.get("require", True) is not True:
                raise ValueError(f"{source}: {at}.require = {shown(condition['require'])}: every condition of a "
                                 "subtask must hold; drop the key")  # fmt: skip
            row = term_row("success", k, condition, terms.CONDITIONS, scope, where=at)
            rows.append(dataclasses.replace(row, stage="subtasks", require=True))
        held_index = scope.body_names.index(held) if held else -1
        out.append(Subtask(name, thing, kind, index, first, len(conditions), held, held_index))
    return out, rows


def describe(subtask: Subtask, rows: list[Row], term) -> str:
    """One line of ``forge-gpu tasks``: the subtask, what it is relative to and what ends it (``term`` spells a
    row)."""
    relative = {NONE: "free motion", BODY: f"relative to body {subtask.object}",
                TARGET: f"relative to target {subtask.object}"}[subtask.kind]  # fmt: skip
    relative += f", carrying body {subtask.held}" if subtask.held else ""
    chosen = rows[subtask.first : subtask.first + subtask.count]
    ends = " and ".join(term(r) + (f" held {r.hold:g} s" if r.hold else "") for r in chosen) or "the task's success"
    return f"    subtask {subtask.name} ({relative}): ends when {ends}"
