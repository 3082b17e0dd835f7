"""The one integer check of the library: a value that must be an integer in a range, refused naming it.
The standard library only."""

from __future__ import annotations

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
