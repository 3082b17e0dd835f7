"""Normalization statistics of a run: count, mean, std, min, max and the 1st/99th percentiles, per channel.

The recorders count the episodes they publish, and only those, whole-array numpy, and write ``stats.json`` into
the run directory when they close:
  - the npz recorder's writers add each episode as they publish it, from its buffer;
  - the packed recorder's writer thread adds every block of rows as it writes it (one pass over the ring's raw
    rows; frames a producer handed encoded are decoded for it, and a lossy codec's field is counted as stored:
    ``quantized`` quantized whole-array, ``jpeg``/``webp`` the block's payloads decoded), and at close subtracts
    the rows of the episodes never published (still running when the run stopped, lost to a write failure,
    abandoned by a reset: about one episode per env), read back from the segments for just those rows (or from
    the ring, for a block counted but never committed): counts and sketch buckets subtract exactly, mean and m2
    un-merge (:meth:`ChannelStats.subtract`). Min and max cannot be subtracted: the writer keeps each env's running
    min and max of its current episode ([envs, channels] per field, whole-array per step) and merges them into the
    run's when the block that ends the episode is published.
So ``stats.json`` equals what ``compute_statistics`` computes from the run's published episodes.
``forge-gpu stats RUN`` computes the same file from the published episodes of a run recorded before
statistics existed (or one closed by ``repair``).

What is counted:
  - observation fields other than the ids and ``time`` (``obs/proprio``, ``obs/rgb``, ``obs/depth``):
    the T + 1 frames of each published episode;
  - ``action`` and ``reward``: its T transitions.
Channels: the last axis of a field with 3 or more axes per row counts as channels (``rgb`` [H, W, 3]:
3 channels, each over all its pixels); ``depth`` [H, W] is one channel; a vector [P] has P channels; a
scalar one.

Percentiles come from a mergeable quantile sketch. Integer fields of one byte (``rgb``) keep an exact
256-bin histogram per channel, so their percentiles are exact. Other values are cast to float32 and
counted in log-linear buckets: the sign, the 8 exponent bits and the top ``MANTISSA_BITS`` (7) mantissa
bits of the float32, so each bucket spans a relative width of at most 2^-7 and the reported value (the
bucket's midpoint, clipped to [min, max]) is within a relative 2^-8 (0.39%) of the exact percentile
(numpy's ``method="inverted_cdf"``: the value of rank ceil(q * count)); values below float32's normal
range (|x| < 1.2e-38) are within 1.2e-38 absolute. Mean and std are exact up to float64 rounding
(per-batch means and squared deviations merged with Chan's formula); std is the population std (ddof 0).

numpy and the standard library.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

import numpy as np

from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS
from forge_gpu._src.core.files import write_json_atomic

#: The file in a run directory.
STATS_FILE = "stats.json"
STATS_VERSION = 1
#: Percentiles kept (fractions), with their names in the summaries.
QUANTILES = {"q01": 0.01, "q99": 0.99}
#: Mantissa bits a float bucket keeps: relative bucket width 2^-7, reported error at most 2^-8.
MANTISSA_BITS = 7
RELATIVE_ERROR = 2.0 ** -(MANTISSA_BITS + 1)
_SHIFT = 23 - MANTISSA_BITS
_HALF = 1 << (31 - _SHIFT)  # buckets per sign
_FLOAT_BUCKETS = 2 * _HALF
_SKIPPED = BOOKKEEPING_FIELDS
#: Values (rows x channels) gathered from small batches before they are counted together.
BATCH_VALUES = 1 << 16


def _channels(shape: tuple[int, ...]) -> int:
    """Channels of a field whose per-row shape is ``shape`` (module docstring)."""
    if len(shape) == 0:
        return 1
    if len(shape) == 1:
        return shape[0]
    return shape[-1] if len(shape) >= 3 else 1


class ChannelStats:
    """Running statistics of one field, per channel: feed it ``[rows, channels]`` arrays with ``update``.

    ``kind``: ``"uint8"`` or ``"int8"`` (an exact 256-bin histogram per channel) or ``"float"`` (the
    log-linear float32 sketch).
    """

    def __init__(self, channels: int, kind: str):
        if kind not in ("uint8", "int8", "float"):
            raise ValueError(f"kind must be uint8, int8 or float, got {kind!r}")
        self.channels, self.kind = channels, kind
        self.count = 0
        self.mean = np.zeros(channels)
        self.m2 = np.zeros(channels)  # sum of squared deviations from the mean
        self.min = np.full(channels, np.inf)
        self.max = np.full(channels, -np.inf)
        self.offset = 128 if kind == "int8" else 0  # bucket = value + offset
        self.hist = np.zeros((channels, _FLOAT_BUCKETS if kind == "float" else 256), np.int64)
        self._pending: list[np.ndarray] = []  # small batches not counted yet
        self._pending_values = 0

    @classmethod
    def for_dtype(cls, channels: int, dtype: np.dtype) -> ChannelStats:
        dtype = np.dtype(dtype)
        if dtype.itemsize == 1 and dtype.kind in "ub":
            return cls(channels, "uint8")
        if dtype.itemsize == 1 and dtype.kind == "i":
            return cls(channels, "int8")
        return cls(channels, "float")

    def update(self, values: np.ndarray) -> None:
        """Add ``values`` [rows, channels]. Small batches are copied and counted together once they hold
        ``BATCH_VALUES`` values (the fixed cost of the numpy calls is then paid once for many batches)."""
        if values.shape[0] == 0:
            return
        if values.size >= BATCH_VALUES and not self._pending:
            self._add(values)
            return
        self._pending.append(np.array(values, copy=True))
        self._pending_values += values.size
        if self._pending_values >= BATCH_VALUES:
            self.flush()

    def flush(self) -> None:
        """Count the values held back by ``update``."""
        if self._pending:
            values = np.concatenate(self._pending)
            self._pending, self._pending_values = [], 0
            self._add(values)

    def _add(self, values: np.ndarray) -> None:
        rows = values.shape[0]
        if self.kind != "float":
            by_channel = values.T if self.channels > 1 else values.reshape(1, -1)
            counts = np.stack([np.bincount(c.view(np.uint8), minlength=256) for c in by_channel])
            if self.offset:  # int8 viewed as uint8: -128..-1 sit at 128..255
                counts = np.roll(counts, 128, axis=1)
            self.hist += counts
            levels = np.arange(256, dtype=np.float64) - self.offset
            mean = counts @ levels / rows
            m2 = (counts * (levels[None, :] - mean[:, None]) ** 2).sum(axis=1)
            seen = counts > 0
            lo = levels[np.argmax(seen, axis=1)]
            hi = levels[255 - np.argmax(seen[:, ::-1], axis=1)]
        else:
            # Channel-major (one contiguous row per channel): every reduction then runs along contiguous memory,
            # several times faster than down the columns of a [rows, channels] array, and releases the GIL.
            by_channel = np.ascontiguousarray(values.reshape(rows, -1).T)  # its own dtype: float64 stays exact
            mean = by_channel.mean(axis=1, dtype=np.float64)
            deviation = by_channel - mean[:, None]  # float64
            m2 = np.einsum("ij,ij->i", deviation, deviation)
            lo = by_channel.min(axis=1).astype(np.float64)
            hi = by_channel.max(axis=1).astype(np.float64)
            # Bucket = the float32's top 16 bits (sign, exponent, 7 mantissa bits); counted per channel over
            # the range of buckets the batch spans, which is narrow for real data.
            keys = by_channel.astype(np.float32, copy=False).view(np.uint32) >> np.uint32(_SHIFT)
            for c in range(self.channels):
                key = keys[c]
                first = int(key.min())
                counts = np.bincount(key - np.uint32(first))
                self.hist[c, first : first + counts.size] += counts
        self._merge(rows, mean, m2, lo, hi)

    def _merge(self, count, mean, m2, lo, hi) -> None:
        total = self.count + count
        delta = mean - self.mean
        self.mean = self.mean + delta * (count / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.count * count / total)
        self.count = total
        self.min = np.minimum(self.min, lo)
        self.max = np.maximum(self.max, hi)

    def merge(self, other: ChannelStats) -> None:
        """Add another accumulator of the same field (another run of a dataset, say)."""
        self.flush()
        other.flush()
        if other.channels != self.channels or other.kind != self.kind:
            raise ValueError(
                f"cannot merge statistics of {other.channels} {other.kind} channels into {self.channels} {self.kind}"
            )
        if other.count == 0:
            return
        self.hist += other.hist
        self._merge(other.count, other.mean, other.m2, other.min, other.max)

    def subtract(self, other: ChannelStats) -> None:
        """Take out values counted earlier (``other`` holds exactly a part of what this one counted): the count
        and the sketch subtract exactly, mean and m2 un-merge (Chan's formula run backwards, float64, m2 clamped
        at 0). Min and max cannot be subtracted and are left as they are: the caller sets them."""
        self.flush()
        other.flush()
        if other.channels != self.channels or other.kind != self.kind:
            raise ValueError(
                f"cannot subtract statistics of {other.channels} {other.kind} channels from {self.channels} {self.kind}"
            )
        if other.count == 0:
            return
        if other.count > self.count:
            raise ValueError(f"cannot subtract {other.count} values from {self.count}")
        hist = self.hist - other.hist
        if (hist < 0).any():
            raise ValueError("cannot subtract values that were never counted (a sketch bucket goes negative)")
        self.hist = hist
        total, removed = self.count, other.count
        kept = total - removed
        if kept == 0:
            self.count, self.mean, self.m2 = 0, np.zeros(self.channels), np.zeros(self.channels)
            return
        mean = (total * self.mean - removed * other.mean) / kept
        m2 = self.m2 - other.m2 - (other.mean - mean) ** 2 * (kept * removed / total)
        self.count, self.mean, self.m2 = kept, mean, np.maximum(m2, 0.0)

    def quantile(self, q: float) -> np.ndarray:
        """The ``q`` quantile per channel: numpy's ``inverted_cdf`` value, exact for bytes, else within a
        relative ``RELATIVE_ERROR``."""
        self.flush()
        rank = max(int(np.ceil(q * self.count)), 1)
        if self.kind != "float":
            index = np.argmax(np.cumsum(self.hist, axis=1) >= rank, axis=1)
            return (index - self.offset).astype(np.float64)
        # Buckets by value: negative ones (keys _HALF.._FLOAT_BUCKETS-1) by decreasing magnitude, then positive.
        ordered = np.concatenate([self.hist[:, : _HALF - 1 : -1], self.hist[:, :_HALF]], axis=1)
        index = np.argmax(np.cumsum(ordered, axis=1) >= rank, axis=1)
        key = np.where(index < _HALF, _FLOAT_BUCKETS - 1 - index, index - _HALF).astype(np.uint32)
        middle = (key << np.uint32(_SHIFT)) | np.uint32(1 << (_SHIFT - 1))
        value = middle.view(np.float32).astype(np.float64)
        value[key & np.uint32(_HALF - 1) == 0] = 0.0  # the bucket of +-0 and the tiniest subnormals
        return np.clip(value, self.min, self.max)

    def summary(self) -> dict:
        """``count`` and per-channel lists ``mean``, ``std``, ``min``, ``max``, ``q01``, ``q99``."""
        self.flush()
        out = {"count": int(self.count), "mean": self.mean, "std": np.sqrt(self.m2 / max(self.count, 1))}
        out.update(min=self.min, max=self.max)
        for name, q in QUANTILES.items():
            out[name] = self.quantile(q)
        return {k: v if k == "count" else np.asarray(v, np.float64).tolist() for k, v in out.items()}

    def to_json(self) -> dict:
        """The summary plus what merging needs: ``m2`` and the sketch (sparse: nonzero buckets, counts)."""
        out = self.summary()  # flushes
        out["m2"] = self.m2.tolist()
        out["sketch"] = {
            "kind": self.kind if self.kind != "float" else f"float32-log-linear-{MANTISSA_BITS}",
            "buckets": [np.flatnonzero(h).tolist() for h in self.hist],
            "counts": [h[h > 0].tolist() for h in self.hist],
        }
        return out

    @classmethod
    def from_json(cls, entry: Mapping, name: str) -> ChannelStats:
        """Rebuild from ``to_json``'s dict; raises ValueError naming ``name`` when it does not fit."""
        try:
            sketch = entry["sketch"]
            kind = {"uint8": "uint8", "int8": "int8", f"float32-log-linear-{MANTISSA_BITS}": "float"}.get(
                sketch["kind"]
            )
            if kind is None:
                raise ValueError(f"unknown sketch kind {sketch['kind']!r}")
            mean = np.asarray(entry["mean"], np.float64)
            if mean.ndim != 1:
                raise ValueError("mean must be a list")
            stats = cls(mean.shape[0], kind)
            stats.count = int(entry["count"])
            stats.mean = mean
            for key in ("m2", "min", "max"):
                setattr(stats, key, np.asarray(entry[key], np.float64).reshape(stats.channels))
            if len(sketch["buckets"]) != stats.channels or len(sketch["counts"]) != stats.channels:
                raise ValueError("the sketch needs one bucket list and one count list per channel")
            for c in range(stats.channels):
                buckets = np.asarray(sketch["buckets"][c], np.int64)
                counts = np.asarray(sketch["counts"][c], np.int64)
                bad = buckets.size and (buckets.min() < 0 or buckets.max() >= stats.hist.shape[1])
                if buckets.shape != counts.shape or bad or (counts < 0).any():
                    raise ValueError(f"the sketch of channel {c} is malformed")
                stats.hist[c, buckets] = counts
            if (stats.hist.sum(axis=1) != stats.count).any():
                raise ValueError("the sketch's counts do not add up to count")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{name}: malformed statistics entry: {exc}") from exc
        return stats


class StatsAccumulator:
    """Statistics of a recording: observation fields (every frame), ``action`` and ``reward`` (every
    transition), keyed ``obs/<field>``, ``action`` and ``reward`` as the packed run's columns.

    Args:
        fields: observation field -> (per-row shape, dtype), as ``EpisodeTracker.fields``.
        action_dim: A.
    """

    def __init__(self, fields: Mapping[str, tuple[tuple[int, ...], np.dtype]], action_dim: int):
        self.fields = {f: (tuple(s), np.dtype(d)) for f, (s, d) in fields.items() if f not in _SKIPPED}
        self.stats = {f"obs/{f}": ChannelStats.for_dtype(_channels(s), d) for f, (s, d) in self.fields.items()}
        self.stats["action"] = ChannelStats(action_dim, "float")
        self.stats["reward"] = ChannelStats(1, "float")

    def update_frames(self, observation: Mapping[str, np.ndarray], *, skip: Iterable[str] = ()) -> None:
        """Add observation frames: field -> [rows, ...], but for the fields ``skip`` names (added later)."""
        skip = set(skip)
        for field, (shape, _) in self.fields.items():
            if field in skip:
                continue
            values = observation[field]
            channels = self.stats[f"obs/{field}"].channels
            self.stats[f"obs/{field}"].update(values.reshape(-1, channels) if len(shape) != 1 else values)

    def update_transitions(self, action: np.ndarray, reward: np.ndarray) -> None:
        """Add transitions: ``action`` [rows, A], ``reward`` [rows]."""
        self.stats["action"].update(action)
        self.stats["reward"].update(reward.reshape(-1, 1))

    def update_episode(self, episode) -> None:
        """Add a read episode (:class:`forge_gpu.reading.Episode`): its T + 1 frames and T transitions."""
        self.update_frames({f: np.concatenate([episode.obs[f], episode.next[f][-1:]]) for f in self.fields})
        self.update_transitions(episode.action, episode.reward)

    def merge(self, other: StatsAccumulator) -> None:
        """Add another run's statistics (same fields)."""
        if set(other.stats) != set(self.stats):
            raise ValueError(f"cannot merge statistics of fields {sorted(other.stats)} into {sorted(self.stats)}")
        for key, stats in other.stats.items():
            self.stats[key].merge(stats)

    def subtract(self, other: StatsAccumulator) -> None:
        """Take out a part of what was counted (same fields): :meth:`ChannelStats.subtract`, min and max kept."""
        if set(other.stats) != set(self.stats):
            raise ValueError(f"cannot subtract statistics of fields {sorted(other.stats)} from {sorted(self.stats)}")
        for key, stats in other.stats.items():
            self.stats[key].subtract(stats)

    def summary(self) -> dict[str, dict[str, np.ndarray]]:
        """key -> {count, mean, std, min, max, q01, q99}: numpy arrays of shape [channels] (count an int)."""
        out = {}
        for key, stats in self.stats.items():
            out[key] = {k: v if k == "count" else np.asarray(v) for k, v in stats.summary().items()}
        return out

    def to_json(self, source: str) -> dict:
        """The content of ``stats.json``; ``source`` says how it was computed."""
        return {
            "version": STATS_VERSION,
            "source": source,
            "quantiles": QUANTILES,
            "relative_error": RELATIVE_ERROR,
            "fields": {key: stats.to_json() for key, stats in self.stats.items()},
        }

    def write(self, directory: str | os.PathLike, source: str, *, durable: bool = False) -> str:
        """Write ``stats.json`` into ``directory`` (atomically; synced with ``durable``); return its path."""
        path = os.path.join(os.fspath(directory), STATS_FILE)
        write_json_atomic(path, self.to_json(source), durable=durable, levels=3)  # one line per statistic
        return path

    @classmethod
    def from_json(cls, content: Mapping, name: str) -> StatsAccumulator:
        """Rebuild from ``stats.json``'s content; ValueError naming ``name`` if it is malformed."""
        if not isinstance(content, Mapping) or content.get("version") != STATS_VERSION:
            raise ValueError(f"{name}: not a version-{STATS_VERSION} statistics file")
        fields = content.get("fields")
        if not isinstance(fields, Mapping) or "action" not in fields or "reward" not in fields:
            raise ValueError(f"{name}: statistics need 'fields' with 'action' and 'reward'")
        accumulator = cls.__new__(cls)
        accumulator.fields = {}
        accumulator.stats = {key: ChannelStats.from_json(entry, f"{name}: {key}") for key, entry in fields.items()}
        return accumulator


def load_statistics(path: str | os.PathLike) -> StatsAccumulator:
    """The statistics stored with a run, or merged over the runs of a dataset root.

    Raises LookupError when a run has none (recorded before statistics existed, or not closed by its
    recorder) with the command that computes them, and ValueError for a malformed file.
    """
    from forge_gpu._src.core.dataset import run_directories

    merged = None
    for run_dir in run_directories(path):
        file = os.path.join(run_dir, STATS_FILE)
        if not os.path.isfile(file):
            raise LookupError(
                f"{run_dir} has no {STATS_FILE} (recorded before statistics existed, or repaired); "
                f"compute them with: forge-gpu stats {run_dir}"
            )
        try:
            with open(file, "rb") as f:
                content = json.loads(f.read())
        except ValueError as exc:
            raise ValueError(f"{file}: not valid JSON: {exc}") from exc
        stats = StatsAccumulator.from_json(content, file)
        if merged is None:
            merged = stats
        else:
            merged.merge(stats)
    if merged is None:
        raise LookupError(f"{os.fspath(path)}: a dataset without runs has no statistics")
    return merged
