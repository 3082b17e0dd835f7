"""What every reader of a task file's tables shares: a value as the file spells it (:func:`shown`), a number read
from a table (:func:`number`), the unknown-key check (:func:`check_keys`) and the sections of named tables
(:func:`named_entries`: ``[model.scene.NAME]``, ``[targets.NAME]``, ``[objects.NAME]``). Each refusal is a
``ValueError`` of one line naming the file and the key."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from forge_gpu._src.core.checks import plain_number


def shown(value) -> str:
    """``value`` as the TOML file spells it (``true``, ``"x"``, ``["a", "b"]``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def number(entry: dict | list, key: str | int, default: float, where: str, source: str) -> float:
    """``entry[key]`` (or ``default``) as a float: a TOML number, not a boolean or a string."""
    value = entry.get(key, default) if isinstance(entry, dict) else entry[key]
    if not plain_number(value):
        at = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}"
        raise ValueError(f"{source}: {at} = {shown(value)}: expected a number")
    return float(value)


def check_keys(entry: dict, allowed, where: str, takes: str, source: str) -> None:
    """Refuse a key of ``entry`` (the table at ``where``) that is not in ``allowed``: "unknown key WHERE.KEY; TAKES
    ALLOWED" (``takes``: "allowed keys are", "a target takes", ...)."""
    for key in entry:
        if key not in allowed:
            raise ValueError(f"{source}: unknown key {where}.{key}; {takes} {', '.join(allowed)}")


def named_entries(table, section: str, keys, takes: str, source: str, *, show: Callable = shown) -> Iterator:
    """``(name, entry)`` of each ``[SECTION.NAME]`` table of ``table``, in the file's order, each checked as it
    comes: ``table`` a table of tables, each a table of ``keys`` alone (:func:`check_keys`; ``show`` spells a
    value that is no table)."""
    if not isinstance(table, dict):
        raise ValueError(f"{source}: [{section}] must be a table of [{section}.NAME] tables")
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{source}: {section}.{name} = {show(entry)}: expected a table of {', '.join(keys)}")
        check_keys(entry, keys, f"{section}.{name}", takes, source)
        yield name, entry
