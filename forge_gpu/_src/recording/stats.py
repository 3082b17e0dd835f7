"""Normalization statistics of runs, in one place: count, mean, std, min, max and the 1st/99th percentiles, per
channel; what the recorders count while recording, the per-episode extremes, the stored file, the normalization
training takes from it, and the count of a closed run's episodes that ``forge-gpu stats`` recomputes.

  - :class:`ChannelStats` (one field) and :class:`StatsAccumulator` (a run's fields) count, merge, subtract and
    store (``stats.json``, :meth:`StatsAccumulator.write`); :func:`new_statistics` makes an empty one of a run's
    env_spec, :func:`count_rows` counts step-major rows, :func:`count_episodes` read episodes.
  - :class:`BlockStatistics`: the running statistics of a recorder that writes blocks of step-major rows and
    publishes an episode with the block that holds its last row (the packed recorder), with each env's current
    episode's min and max.
  - :func:`load_statistics` and :func:`run_statistics` read them back; :func:`normalization` gives the center and
    scale of a list of fields (:class:`Normalization`).

The recorders count the episodes they publish, and only those, whole-array numpy, and write ``stats.json`` into
the run directory when they close:
  - the npz recorder's writers add each episode as they publish it, from its buffer;
  - the packed recorder's writer thread adds every block of rows as it writes it (:class:`BlockStatistics`: one
    pass over the ring's rows, an encoded field's values as its encoder gave them, :func:`core.codecs.encode_frames`
    with ``values``), and at close subtracts the rows of the episodes never published (still running when the run
    stopped, lost to a write failure, abandoned by a reset: about one episode per env), read back from the segments
    for just those rows (or from the ring, for a block counted but never committed): counts and sketch buckets
    subtract exactly, mean and m2 un-merge (:meth:`ChannelStats.subtract`). Min and max cannot be subtracted:
    :class:`BlockStatistics` keeps each env's running min and max of its current episode ([envs, channels] per
    field, whole-array per step) and merges them into the run's when the block that ends the episode is published.
So ``stats.json`` equals what :func:`count_episodes` computes from the run's published episodes (``forge-gpu stats
RUN``, for a run recorded before statistics existed or one closed by ``repair``).

What is counted:
  - observation fields other than the ids and ``time`` (``obs/proprio``, ``obs/rgb``, ``obs/depth``):
    the T + 1 frames of each published episode, as a reader decodes them: the recorded values where the field is
    stored raw or with a lossless codec; what is stored where the codec is lossy (``quantized``: the values rounded
    to its step, taken whole-array from the frames before they are encoded; ``jpeg``/``webp``: each frame as its
    encoder's own decode gives it back, in the worker that encoded it), so that a run's statistics equal their
    recomputation from the run whatever its codecs; but for frames a device encoded (nvJPEG on CUDA), which never
    reach the host raw: counted on the device before the encode, as rendered (each frame's per-channel byte
    histogram, ``EncodedFrames.counts``), so their recomputation from the decoded frames differs by JPEG's error;
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

Normalization (:func:`normalization`): ``"std"`` centers on the mean and divides by the population std;
``"minmax"`` centers on the middle of [min, max] and divides by half its width, so the recorded values land in
[-1, 1]. A channel whose spread is at most ``floor`` (a constant, e.g. push's goal height) gets scale 1, so it is
centered and never divided by zero, and is named in ``notes``.

numpy and the standard library.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from forge_gpu._src.core.dataset import run_directories
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS, observation_layout
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

    def add_counts(self, counts: np.ndarray) -> None:
        """Add values of a one-byte field given by their histogram: ``counts`` [channels, 256], bucket = value +
        ``offset`` (the frames' values counted where they were made: ``EncodedFrames.counts``). Exact, as
        :meth:`update` of the values themselves."""
        if self.kind == "float":
            raise ValueError("a float field's values cannot be counted from byte histograms")
        counts = np.asarray(counts, np.int64).reshape(self.channels, 256)
        if counts[0].sum():
            self.flush()
            self._add_histogram(counts)

    def _add_histogram(self, counts: np.ndarray) -> None:
        """Add the values whose per-channel histogram is ``counts`` [channels, 256] (a byte kind)."""
        rows = int(counts[0].sum())
        self.hist += counts
        levels = np.arange(256, dtype=np.float64) - self.offset
        mean = counts @ levels / rows
        m2 = (counts * (levels[None, :] - mean[:, None]) ** 2).sum(axis=1)
        seen = counts > 0
        lo = levels[np.argmax(seen, axis=1)]
        hi = levels[255 - np.argmax(seen[:, ::-1], axis=1)]
        self._merge(rows, mean, m2, lo, hi)

    def _add(self, values: np.ndarray) -> None:
        rows = values.shape[0]
        if self.kind != "float":
            by_channel = values.T if self.channels > 1 else values.reshape(1, -1)
            counts = np.stack([np.bincount(c.view(np.uint8), minlength=256) for c in by_channel])
            if self.offset:  # int8 viewed as uint8: -128..-1 sit at 128..255
                counts = np.roll(counts, 128, axis=1)
            self._add_histogram(counts)
            return
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


def run_statistics(path: str | os.PathLike) -> dict[str, dict[str, np.ndarray]]:
    """Normalization statistics of a run directory or a dataset root, for training code.

    Returns key -> {``count``, ``mean``, ``std``, ``min``, ``max``, ``q01``, ``q99``} with keys
    ``obs/<field>`` (``proprio``, and ``rgb``/``depth`` where the task has a camera; per channel),
    ``action`` [A] and ``reward`` [1]. Percentiles: see this module's docstring for their accuracy.
    Raises LookupError when a run has none stored (``forge-gpu stats RUN`` computes them).
    """
    return load_statistics(path).summary()


def new_statistics(spec: Mapping) -> StatsAccumulator:
    """An empty accumulator of the statistics of runs of the env_spec ``spec``."""
    return StatsAccumulator(observation_layout(spec), int(spec["action_shape"][0]))


def count_episodes(spec: Mapping, episodes: Iterable) -> StatsAccumulator:
    """The statistics of read episodes (:class:`forge_gpu.reading.Episode`) of a run of the env_spec ``spec``: what
    its recorder wrote if they are its published episodes."""
    stats = new_statistics(spec)
    for episode in episodes:
        stats.update_episode(episode)
    return stats


def count_rows(
    into: StatsAccumulator, rows: Mapping[str, np.ndarray], counts: Mapping[str, np.ndarray] = {}, skip=frozenset()
) -> None:
    """Count step-major rows of a run into ``into``: every row's frame (``obs/<field>``, as a reader decodes it, or,
    for the keys of ``counts``, each row's byte histogram ``[rows, channels, 256]``: ``EncodedFrames.counts``), but
    the fields ``skip`` names, and the transitions (``action``, ``reward``) of the rows that hold one
    (``obs/step_id`` not 0: a reset row has none)."""
    skip = set(skip) | _fields(counts)
    into.update_frames({f: rows[f"obs/{f}"] for f in into.fields if f not in skip}, skip=skip)
    for key, per_row in counts.items():
        into.stats[key].add_counts(per_row.sum(axis=0))
    active = rows["obs/step_id"] != 0
    if active.all():
        into.update_transitions(rows["action"], rows["reward"])
    else:
        into.update_transitions(rows["action"][active], rows["reward"][active])


def _fields(keys: Iterable[str]) -> set[str]:
    return {key[len("obs/") :] for key in keys}


class BlockStatistics:
    """The statistics of a recorder that writes blocks of step-major rows (``num_envs`` rows a step) and publishes an
    episode with the block that holds its last row (the packed recorder).

    :meth:`count_block` counts a block's rows and follows each env's current episode's min and max; :meth:`published`
    merges the min and max of the episodes the block ended into the run's once it is committed; :meth:`finish` takes
    out the rows of the episodes never published (counted into :meth:`new_removed` by the caller, who knows where
    they are stored) and gives the run the published episodes' min and max. ``accumulator`` is then what
    :func:`count_episodes` computes from the published episodes.

    A field whose rows come as byte histograms (``count_block``'s ``counts``: frames counted where they were
    rendered, before a lossy encode on the device) is followed per env as well: each env's current episode's
    histogram ([envs, channels, 256]), so :meth:`finish` takes out its unpublished rows from those (the episodes
    still running, those a reset abandoned, those of blocks never published) and the caller reads none of them
    back: read back, they would be the decoded values, not the counted ones.

    Args:
        fields: observation field -> (per-row shape, dtype), as ``EpisodeTracker.fields``.
        action_dim: A.
        num_envs: rows per step.
    """

    def __init__(self, fields: Mapping[str, tuple[tuple[int, ...], np.dtype]], action_dim: int, num_envs: int):
        self.accumulator = StatsAccumulator(fields, action_dim)
        self.num_envs = num_envs
        self._layout = (dict(fields), action_dim)
        channels = {key: stats.channels for key, stats in self.accumulator.stats.items()}
        # key -> [envs, channels]: each env's current episode; key -> [channels]: the published episodes'.
        self._episode_lo = {k: np.full((num_envs, c), np.inf) for k, c in channels.items()}
        self._episode_hi = {k: np.full((num_envs, c), -np.inf) for k, c in channels.items()}
        self._published_lo = {k: np.full(c, np.inf) for k, c in channels.items()}
        self._published_hi = {k: np.full(c, -np.inf) for k, c in channels.items()}
        self._pending: dict | None = None  # the block being written: its ended episodes' extremes
        # key -> [envs, channels, 256]: each env's current episode's histogram, for the keys counted from histograms;
        # key -> [channels, 256]: the counted rows that no published episode holds (abandoned, or ended in a block
        # not yet published: ``_pending_counts``).
        self._episode_counts: dict[str, np.ndarray] = {}
        self._unpublished_counts: dict[str, np.ndarray] = {}
        self._pending_counts: dict[str, np.ndarray] = {}

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The observation fields counted (the ids and ``time`` left out)."""
        return self.accumulator.fields

    def new_removed(self) -> StatsAccumulator:
        """An empty accumulator of the same fields, for the rows :meth:`finish` takes out."""
        return StatsAccumulator(*self._layout)

    @property
    def counted_fields(self) -> set[str]:
        """The observation fields whose rows came as byte histograms: their unpublished rows are taken out by
        :meth:`finish` itself (the caller counts none of them into ``removed``)."""
        return _fields(self._episode_counts)

    def count_block(self, rows: Mapping[str, np.ndarray], count: int, counts: Mapping[str, np.ndarray] = {}) -> None:
        """Count a block of ``count`` steps (:func:`count_rows`: ``rows`` holds ``obs/step_id``, ``obs/<field>``,
        ``action``, ``reward``, ``terminated`` and ``truncated``, ``[count * num_envs, ...]`` each; ``counts``: key ->
        ``[count * num_envs, channels, 256]``, the byte histograms of the fields counted so, whose ``rows`` are not
        read) and follow each env's current episode's min and max; the min and max of the episodes that end in the
        block wait for :meth:`published`."""
        n = self.num_envs
        count_rows(self.accumulator, rows, counts)
        reset = (rows["obs/step_id"] == 0).reshape(count, n)  # a reset row has no transition
        ended = (rows["terminated"] | rows["truncated"]).reshape(count, n)
        self._follow_counts(counts, count, reset, ended)
        pending = {}
        for key, stats in self.accumulator.stats.items():
            if key in counts:
                lo, hi = _histogram_extremes(counts[key].reshape(count, n, stats.channels, 256), stats.offset)
            else:
                lo, hi = _row_extremes(rows[key].reshape(count, n, -1, stats.channels))  # [count, n, channels]
            if key in ("action", "reward"):
                lo[reset], hi[reset] = np.inf, -np.inf
            episode_lo, episode_hi = self._episode_lo[key], self._episode_hi[key]
            ended_lo, ended_hi = np.full(stats.channels, np.inf), np.full(stats.channels, -np.inf)
            for k in range(count):  # per step, whole-array over the envs
                episode_lo[reset[k]], episode_hi[reset[k]] = np.inf, -np.inf
                np.minimum(episode_lo, lo[k], out=episode_lo)
                np.maximum(episode_hi, hi[k], out=episode_hi)
                if ended[k].any():
                    ended_lo = np.minimum(ended_lo, episode_lo[ended[k]].min(axis=0))
                    ended_hi = np.maximum(ended_hi, episode_hi[ended[k]].max(axis=0))
            pending[key] = (ended_lo, ended_hi)
        self._pending = pending

    def _follow_counts(
        self, counts: Mapping[str, np.ndarray], count: int, reset: np.ndarray, ended: np.ndarray
    ) -> None:
        """Each env's current episode's histogram, per step whole-array over the envs: a reset row starts a new one
        (the one it replaces, never ended, is unpublished), an ended episode's waits for :meth:`published`."""
        n = self.num_envs
        for key in self._pending_counts:  # the last block was never published: its ended episodes are not
            self._unpublished_counts[key] += self._pending_counts[key]
        for key, per_row in counts.items():
            per_row = per_row.reshape(count, n, *per_row.shape[1:])
            if key not in self._episode_counts:
                self._episode_counts[key] = np.zeros((n, *per_row.shape[2:]), np.int64)
                self._unpublished_counts[key] = np.zeros(per_row.shape[2:], np.int64)
            episode, pending = self._episode_counts[key], np.zeros(per_row.shape[2:], np.int64)
            for k in range(count):
                if reset[k].any():
                    self._unpublished_counts[key] += episode[reset[k]].sum(axis=0)
                    episode[reset[k]] = 0
                episode += per_row[k]
                if ended[k].any():
                    pending += episode[ended[k]].sum(axis=0)
                    episode[ended[k]] = 0
            self._pending_counts[key] = pending

    def published(self) -> None:
        """The last counted block is committed: merge the min and max of the episodes it ended into the run's."""
        self._pending_counts = {}
        if self._pending is None:
            return
        for key, (lo, hi) in self._pending.items():
            np.minimum(self._published_lo[key], lo, out=self._published_lo[key])
            np.maximum(self._published_hi[key], hi, out=self._published_hi[key])
        self._pending = None

    def finish(self, removed: StatsAccumulator) -> None:
        """Take ``removed`` (the counted rows of the episodes never published, but for :attr:`counted_fields`) out,
        with the unpublished rows of the fields counted from histograms, and give every field the min and max of the
        published episodes."""
        for key, episode in self._episode_counts.items():
            unpublished = self._unpublished_counts[key] + episode.sum(axis=0)
            unpublished += self._pending_counts.get(key, 0)
            removed.stats[key].add_counts(unpublished)
        self._pending_counts = {}
        self.accumulator.subtract(removed)
        for key, stats in self.accumulator.stats.items():
            stats.min, stats.max = self._published_lo[key].copy(), self._published_hi[key].copy()


def _histogram_extremes(counts: np.ndarray, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Min and max of the values whose histograms are ``counts`` [count, n, channels, 256] (bucket = value +
    ``offset``), as float64 [count, n, channels]."""
    seen = counts > 0
    levels = np.arange(256, dtype=np.float64) - offset
    return levels[np.argmax(seen, axis=-1)], levels[255 - np.argmax(seen[..., ::-1], axis=-1)]


def _row_extremes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Min and max of ``rows`` [count, n, values, channels] over its values axis, as float64 [count, n, channels].
    Several channels: halving the values axis, each pass whole contiguous runs (numpy's reduction down a middle axis
    of a few interleaved channels runs one tiny inner loop per value: 40x slower on an [H*W, 3] image)."""
    count, n, _, channels = rows.shape
    if channels == 1:
        flat = rows.reshape(count, n, -1)
        return flat.min(axis=2, keepdims=True).astype(np.float64), flat.max(axis=2, keepdims=True).astype(np.float64)
    out = []
    for op in (np.minimum, np.maximum):
        x = rows.reshape(count * n, -1, channels)
        while x.shape[1] > 1:
            half = x.shape[1] // 2
            y = op(x[:, :half], x[:, half : 2 * half])
            if x.shape[1] % 2:
                y[:, :1] = op(y[:, :1], x[:, 2 * half :])
            x = y
        out.append(x[:, 0].reshape(count, n, channels).astype(np.float64))
    return out[0], out[1]


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
    summary = run_statistics(path)
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
