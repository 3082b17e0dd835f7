"""The value checks of the library, each once: an integer in a range (:func:`check_int`), a number as TOML gives
it (:func:`plain_number`, :func:`finite_number`, :func:`number_list`), a value within a config field's range or
choices (:func:`bounded` describes them, :func:`check_range` refuses what lies outside). A value that fails is
refused in one line naming it. The standard library only.

TOML gives ints, floats (``inf`` and ``nan`` included) and booleans; Python counts a boolean as an int, so each
check says ``not bool`` explicitly."""

from __future__ import annotations

import math
import numbers
from typing import Any


def is_int(value: Any) -> bool:
    """An integer (numpy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int, maximum: int | None = None) -> None:
    """Refuse a ``value`` that is not an integer in ``[minimum, maximum]``, naming it: the one "integer >= 1"
    check of the library."""
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def plain_number(value: Any) -> bool:
    """A TOML number: an int or a float, not a boolean (``inf`` and ``nan`` allowed: the caller decides)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite_number(value: Any) -> bool:
    """A TOML number that is neither infinite nor ``nan``."""
    return plain_number(value) and math.isfinite(value)


def number_list(value: Any, count: int, *, finite: bool = True) -> bool:
    """A list of ``count`` TOML numbers: finite ones (:func:`finite_number`), or any (:func:`plain_number`) with
    ``finite=False``."""
    number = finite_number if finite else plain_number
    return isinstance(value, list) and len(value) == count and all(number(v) for v in value)


def bounded(lo: float | None = None, hi: float | None = None, *, choices: tuple | None = None) -> dict:
    """A config field's range ``[lo, hi]`` (either bound may be None) or its ``choices``: the field's ``metadata``
    that :func:`check_range` reads."""
    return {"min": lo, "max": hi, "choices": choices}


def check_range(value: Any, meta: dict, where: str) -> None:
    """Refuse a ``value`` (or each of a tuple's) outside the range or choices of ``meta`` (:func:`bounded`), naming
    ``where``."""
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ValueError(f"{where} = {value!r}: allowed values are {', '.join(map(repr, choices))}")
    lo, hi = meta.get("min"), meta.get("max")
    values = value if isinstance(value, tuple) else (value,)
    for v in values:
        if v is None:
            continue
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise ValueError(f"{where} = {value!r}: allowed range is [{lo}, {hi}]")
