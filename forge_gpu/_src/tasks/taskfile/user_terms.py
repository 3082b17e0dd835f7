"""``forge_gpu.sim.terms``: what a user needs to write a term of a task file (docs/robots.md "A term of your own").

A term is a Warp function over one world's :class:`Frame` (``forge_gpu.kernels.terms``: its fields are documented
there and in docs/tasks.md "Writing a term"), of one signature per stage:

- an observation: ``(f: Frame, worldid: int, t: int, out: wp.array2d[float], col: int) -> int`` (writes its
  values at ``out[worldid, col:]``, returns the next column);
- a reward: ``(f: Frame, worldid: int, t: int) -> float`` (its unweighted value);
- a termination or success condition: ``(f: Frame, worldid: int, t: int) -> bool``.

:func:`term` makes one (a ``@wp.func``) and declares its named parameters, so that a task file gives them by name
(``params = { std = 0.25 }``) and ``forge-gpu tasks path.toml`` checks the signature, each parameter's name and type
before any kernel is compiled. The term reads its parameters with :func:`param` (``param(f, t, 0)`` the first
declared, and so on). :func:`library` lists the library's terms by stage.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import warp as wp

from forge_gpu._src.core.checks import finite_number, is_int
from forge_gpu.kernels.terms import TF_ARGS, TF_NOISE, TF_WEIGHT, TI_AXIS, TI_BODY, TI_BODY2, TI_COUNT, TI_LIST, Frame

__all__ = ["Frame", "term", "param", "library", "TermDeclaration", "declaration",
           "TF_ARGS", "TF_NOISE", "TF_WEIGHT", "TI_AXIS", "TI_BODY", "TI_BODY2", "TI_COUNT", "TI_LIST"]  # fmt: skip

_TYPES = {float: "a number", int: "a whole number", bool: "true or false"}
_ATTRIBUTE = "__forge_gpu_term__"


@dataclass(frozen=True)
class TermDeclaration:
    """What :func:`term` declares of a user's term: its named parameters and, for an observation, its width."""

    params: dict = field(default_factory=dict)
    """name -> (type: float, int or bool; its default, or None where the task file must give it), in order: the
    term reads the i-th with ``param(f, t, i)``."""
    width: int | None = None
    """An observation's number of columns (None: the task file's ``width``, default 1)."""

    def values(self, given: dict, where: str, term_name: str) -> list[float]:
        """The ``tf`` columns of ``given`` (the entry's ``params`` table), in declared order; ValueError (one line
        naming ``where``: the file and key) for an unknown name, a wrong type or a missing parameter."""
        held = ", ".join(f"{n} ({_TYPES[t]})" for n, (t, _) in self.params.items()) or "none"
        for name in given:
            if name not in self.params:
                raise ValueError(f"{where}.params.{name}: unknown parameter of {term_name}; it takes {held}")
        out = []
        for name, (kind, default) in self.params.items():
            value = given.get(name, default)
            if value is None:
                raise ValueError(f"{where}.params: {term_name} needs {name} ({_TYPES[kind]}); it takes {held}")
            if not _is(value, kind):
                raise ValueError(f"{where}.params.{name} = {_shown(value)}: {term_name} takes {_TYPES[kind]}")
            out.append(float(value))
        return out


def term(func=None, *, params: dict | None = None, width: int | None = None):
    """Make ``func`` a term of task files: a ``@wp.func`` (``func`` as written, or already one) that declares its
    named parameters.

    Args:
        params: name -> a type (``float``, ``int``, ``bool``: the task file must give it) or a default value (of
            one of those types: optional), in the order the term reads them (``param(f, t, i)``).
        width: An observation term's number of columns (else the task file's ``width``, default 1).

    Use it as ``@term`` or ``@term(params={"std": float, "scale": 1.0})`` above the function. ValueError for a
    declaration that is not one (a parameter of another type, a width below 1).
    """
    declared = {}
    for name, spec in (params or {}).items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"term(params=...): {name!r} is not a parameter name (an identifier)")
        if spec in _TYPES:
            declared[name] = (spec, None)
        elif isinstance(spec, bool):
            declared[name] = (bool, spec)
        elif isinstance(spec, int | float) and math.isfinite(spec):
            declared[name] = (type(spec), spec)
        else:
            raise ValueError(f"term(params=...): {name} = {spec!r}: expected float, int, bool or a default of one")
    if width is not None and (not is_int(width) or width < 1):
        raise ValueError(f"term(width={width!r}): expected a whole number of columns >= 1")
    declaration = TermDeclaration(params=declared, width=width)

    def register(f):
        made = f if isinstance(f, wp.Function) else wp.func(f)
        setattr(made, _ATTRIBUTE, declaration)
        return made

    return register(func) if func is not None else register


def declaration(func) -> TermDeclaration | None:
    """What :func:`term` declared of ``func``; None for a plain ``@wp.func``."""
    return getattr(func, _ATTRIBUTE, None)


@wp.func
def param(f: Frame, t: int, i: int) -> float:
    """The ``i``-th declared parameter of term ``t`` (``f.tf[t, TF_ARGS + i]``; an int or a bool arrives as a
    float: 1.0 for true)."""
    return f.tf[t, TF_ARGS + i]


def library() -> dict[str, dict[str, str]]:
    """The library's terms: stage (``observations``, ``rewards``, ``conditions``: terminations and success) ->
    name -> what it is (docs/tasks.md lists them with their keys)."""
    from forge_gpu._src.tasks.taskfile import terms as index

    stages = {"observations": index.OBSERVATIONS, "rewards": index.REWARDS, "conditions": index.CONDITIONS}
    return {stage: {name: info.doc for name, info in table.items()} for stage, table in stages.items()}


def _is(value, kind) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return finite_number(value)


def _shown(value) -> str:
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


terms = sys.modules[__name__]
"""This module, as ``forge_gpu.sim.terms`` serves it."""
