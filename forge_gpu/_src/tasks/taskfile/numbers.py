"""What a number in a task file is: the checks every reader of task files shares.

TOML gives ints, floats (``inf`` and ``nan`` included) and booleans; Python counts a boolean as an int, so each
check says ``not bool`` explicitly. A value that fails is refused by the caller in one line naming its key.
"""

from __future__ import annotations

import math


def plain_number(value) -> bool:
    """A TOML number: an int or a float, not a boolean (``inf`` and ``nan`` allowed: the caller decides)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite_number(value) -> bool:
    """A TOML number that is neither infinite nor ``nan``."""
    return plain_number(value) and math.isfinite(value)
