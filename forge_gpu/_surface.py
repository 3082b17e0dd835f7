"""How forge_gpu's public modules serve their names. Each (``forge_gpu.sim``, ``.recording``, ``.formats``,
``.reading``, ``.curation``, ``.export``) is a table, name -> the module of ``forge_gpu._src`` that defines it; a
name is imported on first use and kept, so the data side never loads Warp for a name it does not use."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module


def lazy_names(module: str, table: dict[str, str]) -> tuple[list[str], Callable, Callable]:
    """``__all__``, ``__getattr__`` and ``__dir__`` of the public module ``module`` serving ``table``."""
    names = sorted(table)

    def __getattr__(name: str):
        home = table.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        setattr(sys.modules[module], name, value)
        return value

    def __dir__() -> list[str]:
        return names

    return names, __getattr__, __dir__
