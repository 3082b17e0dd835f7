"""Normalization for training from a run's statistics: the center and scale of a list of fields, concatenated in
order, as numpy arrays (``normalization``).

The statistics are the run's ``stats.json`` (a dataset root: its runs' merged), which count the frames of the
published episodes (``recording/stats.py``). ``"std"`` centers on the mean and divides by the population std;
``"minmax"`` centers on the middle of [min, max] and divides by half its width, so the recorded values land in
[-1, 1]. A channel whose spread is at most ``floor`` (a constant, e.g. push's goal height) gets scale 1, so it is
centered and never divided by zero, and is named in ``notes``.

numpy and the standard library.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np

from forge_gpu._src.recording.stats import load_statistics

#: The ways to scale, by name.
METHODS = ("std", "minmax")


@dataclasses.dataclass(frozen=True)
class Normalization:
    """The center and scale of ``fields`` concatenated in order: ``normalize(x) = (x - center) / scale``.

    Attributes:
        fields: the statistics' keys, in order (``obs/<field>``, ``action``, ``reward``).
        channels: each channel's name, ``<key>[<i>]``, shape (D,).
        center: float32, shape (D,): the mean (``"std"``) or the middle of [min, max] (``"minmax"``).
        scale: float32, shape (D,): the std or half of max - min; 1 where the spread is at most the floor.
        method: ``"std"`` or ``"minmax"``.
        notes: one line per channel given scale 1 for its spread, naming it.
    """

    fields: tuple[str, ...]
    channels: tuple[str, ...]
    center: np.ndarray
    scale: np.ndarray
    method: str
    notes: tuple[str, ...]

    def normalize(self, values: np.ndarray) -> np.ndarray:
        """``(values - center) / scale`` over the last axis (D channels)."""
        return (np.asarray(values) - self.center) / self.scale

    def denormalize(self, values: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`normalize`: ``values * scale + center``."""
        return np.asarray(values) * self.scale + self.center


def normalization(
    path: str | os.PathLike, fields: Sequence[str], *, method: str = "std", floor: float = 1e-6
) -> Normalization:
    """The :class:`Normalization` of ``fields`` (the statistics' keys: ``obs/<field>``, ``action``, ``reward``),
    concatenated in the order given, from the statistics stored with the run directory or dataset root ``path``.

    ``method``: ``"std"`` (mean and std) or ``"minmax"`` (to [-1, 1]). ``floor``: a spread (std, or half of
    max - min) at most this gets scale 1 and a line in ``notes``. Raises LookupError when the run has no
    statistics (with the command that computes them) and ValueError naming a field, method or floor not allowed.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not a normalization; use one of {', '.join(METHODS)}")
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not floor >= 0:
        raise ValueError(f"floor={floor!r} must be a number >= 0")
    if isinstance(fields, str) or not fields:
        raise ValueError(f"fields={fields!r} must be a non-empty list of statistics keys, e.g. ['obs/proprio']")
    summary = load_statistics(path).summary()
    for field in fields:
        if field not in summary:
            raise ValueError(
                f"field {field!r} has no statistics in {os.fspath(path)}; it has: {', '.join(sorted(summary))}"
            )
    if len(set(fields)) != len(fields):
        raise ValueError(f"fields={list(fields)!r} names a field twice")
    centers, scales, channels = [], [], []
    for field in fields:
        figures = summary[field]
        if method == "std":
            center, spread = figures["mean"], figures["std"]
        else:
            center, spread = (figures["max"] + figures["min"]) / 2, (figures["max"] - figures["min"]) / 2
        centers.append(center)
        scales.append(spread)
        channels += [f"{field}[{i}]" for i in range(center.shape[0])]
    center = np.concatenate(centers)
    spread = np.concatenate(scales)
    flat = spread <= floor
    what = "std" if method == "std" else "half of max - min"
    notes = tuple(
        f"{channels[i]}: {what} {spread[i]:.3g} is at most the floor {floor:g}; scale 1 (centered only)"
        for i in np.flatnonzero(flat)
    )
    scale = np.where(flat, 1.0, spread)
    return Normalization(
        fields=tuple(fields),
        channels=tuple(channels),
        center=center.astype(np.float32),
        scale=scale.astype(np.float32),
        method=method,
        notes=notes,
    )
