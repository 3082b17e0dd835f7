"""Curation: new closed runs made of the episodes of others (docs/FORMAT.md "Curated runs").

- :func:`select_run`: the episodes of a run (or dataset root) that a ``--where`` expression (:mod:`where`) keeps,
  over per-episode values (:func:`episode_values`);
- :func:`merge_runs`: the episodes of runs of one task and one env_spec as one run;
- :func:`split_run`: a deterministic train/validation split by episode, as two runs;
- :func:`compute_statistics`: a closed run's statistics counted again from its published episodes (``forge-gpu
  stats``; the counting is :mod:`recording.stats`'s).

Each writes a packed run (episodes end to end, statistics recomputed from what it holds) through ``convert``'s
:func:`writing.write_run`. The episodes keep their values, state, params and instruction; their ids are kept but
for the env offset of every source after the first (``env_id + env_offset``), so that no two collide, and run.json's
``curated`` names each source run and its offset, which traces every episode back. numpy and the standard library
(pyarrow for packed runs).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence

import numpy as np

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.dataset import run_directories
from forge_gpu._src.core.episode import Episode, EpisodeReadOptions, episode_return, episode_succeeded
from forge_gpu._src.core.fields import without_groups
from forge_gpu._src.core.files import new_partial, publish
from forge_gpu._src.curation.where import Where
from forge_gpu._src.curation.writing import check_target, new_manifest, now, open_closed_run, write_run
from forge_gpu._src.formats.registry import FORMATS, RunReader, format_of
from forge_gpu._src.recording.stats import StatsAccumulator, count_episodes, new_statistics

#: The per-episode values every run has, beside its params (each by its name).
BUILT_IN = ("success", "return", "length", "env", "episode", "instruction")
#: What a curated run is written as.
_TO = "packed"
#: The run.json keys two runs must agree on to be merged (env_spec as each stores it).
_MATCHED = ("task", "env_spec", "calibration")


@dataclasses.dataclass(frozen=True)
class Source:
    """One run curation reads: its reader, its episodes' ids (``env_id``, ``episode_id``, ``steps``: int64 arrays,
    in reading order) and the offset added to its env ids in the new run."""

    path: str
    run: RunReader
    ids: dict[str, np.ndarray]
    env_offset: int

    @property
    def envs(self) -> int:
        """The env ids it spans: its largest ``env_id`` + 1 (0 for a run without episodes)."""
        return int(self.ids["env_id"].max()) + 1 if len(self.run) else 0


def open_sources(paths: Sequence[str | os.PathLike]) -> list[Source]:
    """The closed runs of ``paths`` (run directories and dataset roots, each root's runs in dataset.json order),
    checked to be of one task and one env_spec (ValueError naming the first difference), each with its env
    offset: 0 for the first, then the previous offset plus the previous run's :attr:`Source.envs`."""
    directories = [d for p in paths for d in run_directories(os.fspath(p))]
    if not directories:
        raise ValueError("no run given")
    sources, offset = [], 0
    for directory in directories:
        run = open_closed_run(directory)
        ids = np.array([run.ids(k) for k in range(len(run))], np.int64).reshape(-1, 3)
        ids = {"env_id": ids[:, 0], "episode_id": ids[:, 1], "steps": ids[:, 2]}
        if sources:
            _check_compatible(sources[0], directory, run.manifest)
        sources.append(Source(directory, run, ids, offset))
        offset += sources[-1].envs
    if offset >= 2**31:
        raise ValueError(f"the runs span {offset} env ids together; a run holds env ids below 2^31")
    return sources


def _stored(manifest: dict) -> dict:
    """The keys of :data:`_MATCHED`, with the env_spec as the run's format stores it."""
    found = {key: manifest.get(key) for key in _MATCHED}
    found["env_spec"] = without_groups(manifest["env_spec"], keep=format_of(manifest).capabilities.spec_groups)
    return found


def _check_compatible(first: Source, directory: str, manifest: dict) -> None:
    difference = _difference(_stored(first.run.manifest), _stored(manifest), "")
    if difference is not None:
        where, theirs, mine = difference[0], *(repr(v) if v is not _ABSENT else "none" for v in difference[1:])
        raise ValueError(
            f"{directory} cannot be merged with {first.path}: run.json's {where} differs "
            f"({first.path}: {theirs}; {directory}: {mine})"
        )


_ABSENT = object()  # a key one side lacks


def _difference(a, b, where: str):
    """The first place where the JSON values ``a`` and ``b`` differ, as ``(path, a's, b's)``, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            found = _difference(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{where}.{key}" if where else key)
            if found is not None:
                return found
        return None
    return None if a == b else (where, a, b)


def value_names(manifest: dict) -> tuple[dict[str, tuple], dict[str, str]]:
    """The names an expression over the episodes of a run may use, with each one's per-episode shape (``()``; a
    param's own; ``("str",)`` for the instruction), and those it may not, with the reason."""
    spec = manifest["env_spec"]
    allowed: dict[str, tuple] = {name: () for name in BUILT_IN}
    allowed["instruction"] = ("str",)
    unavailable = {}
    if not spec.get("has_success"):
        del allowed["success"]
        unavailable["success"] = f"task {manifest['task']!r} defines no success"
    params = without_groups(spec, keep=format_of(manifest).capabilities.spec_groups).get("params") or {}
    allowed.update({name: tuple(entry["shape"]) for name, entry in params.items() if name not in allowed})
    return allowed, unavailable


def episode_values(
    path: str | os.PathLike | Sequence[str | os.PathLike], names: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """The per-episode values of a run or dataset root (or of several, as :func:`merge_runs` lays them out), one
    array per name, in reading order: ``env`` and ``episode`` (the ids, env offsets added), ``length`` (steps),
    ``return`` (float64), ``success`` (tasks with success), ``instruction`` (str) and each param. ``names``: only
    these (the index alone is read where they need no episode data)."""
    sources = open_sources([path] if isinstance(path, str | os.PathLike) else path)
    return _values(sources, names)


def _values(sources: list[Source], names: Sequence[str] | None) -> dict[str, np.ndarray]:
    allowed, _ = value_names(sources[0].run.manifest)
    wanted = list(allowed) if names is None else list(names)
    values = {
        "env": np.concatenate([s.ids["env_id"] + s.env_offset for s in sources]),
        "episode": np.concatenate([s.ids["episode_id"] for s in sources]),
        "length": np.concatenate([s.ids["steps"] for s in sources]),
        "instruction": np.array([text for s in sources for text in s.run.instructions()], dtype=str),
    }
    read = [n for n in wanted if n not in values]
    if read:  # one pass over the runs, reading no observation field and no state
        rows: dict[str, list] = {n: [] for n in read}
        for source in sources:
            manifest = source.run.manifest
            for episode in source.run.read(list(range(len(source.run))), EpisodeReadOptions(observation_keys=())):
                for name in read:
                    rows[name].append(_value(name, episode, manifest))
        for name in read:
            shape = allowed[name] if allowed[name] != ("str",) else ()
            values[name] = np.array(rows[name]).reshape(-1, *shape) if rows[name] else _empty(name, shape)
    return {name: values[name] for name in wanted}


def _value(name: str, episode: Episode, manifest: dict):
    if name == "return":
        return episode_return(episode)
    if name == "success":
        return episode_succeeded(episode, manifest["env_spec"])
    return episode.params[name]


def _empty(name: str, shape: tuple) -> np.ndarray:
    """No episodes' values of ``name``, of its kind."""
    kinds = {"success": bool, "return": np.float64, "instruction": str, **dict.fromkeys(BUILT_IN[2:5], np.int64)}
    return np.zeros((0, *shape), kinds.get(name, np.float32))


def select_run(path: str | os.PathLike, out: str | os.PathLike, where: str, *, compression: str | None = None) -> dict:
    """Write the episodes of the closed run (or dataset root) ``path`` that the expression ``where`` keeps
    (:mod:`where`; names: :func:`value_names`) as the new packed run ``out``. ``compression``: the packed one (by
    default the source's, where packed takes it, else none). Returns ``{"episodes", "of", "out"}``.

    A bad expression raises :class:`where.ExpressionError` (a ValueError) naming the allowed names, before any
    episode is read; a run that does not read, ValueError; FileExistsError when ``out`` exists."""
    sources = open_sources([path])
    allowed, unavailable = value_names(sources[0].run.manifest)
    expression = Where(where, allowed, unavailable)
    expression.evaluate({n: _empty(n, s if s != ("str",) else ()) for n, s in allowed.items()})  # kinds, up front
    mask = expression.evaluate(_values(sources, ["length", *expression.names]))  # length: the count, always
    return _write(sources, mask, os.fspath(out), {"op": "select", "where": where}, compression)


def merge_runs(paths: Sequence[str | os.PathLike], out: str | os.PathLike, *, compression: str | None = None) -> dict:
    """Write every episode of the closed runs ``paths`` (run directories and dataset roots, of one task and one
    env_spec: ValueError naming the difference otherwise) as the new packed run ``out``, source by source in
    order, each source's env ids moved by its env offset (:func:`open_sources`). Returns ``{"episodes", "of",
    "out"}``."""
    if isinstance(paths, str | os.PathLike) or not paths:
        raise ValueError(f"paths must be a list of runs, got {paths!r}")
    sources = open_sources(paths)
    everything = np.ones(sum(len(s.run) for s in sources), bool)
    return _write(sources, everything, os.fspath(out), {"op": "merge"}, compression)


def split_run(
    path: str | os.PathLike, out: str | os.PathLike, *, val: float, seed: int = 0, compression: str | None = None
) -> dict:
    """Split the episodes of the closed run (or dataset root) ``path`` into the packed runs ``out/train`` and
    ``out/val``: the ``round(val * N)`` episodes (at least 1 and at most N - 1 where N >= 2) with the smallest
    :func:`split_keys` go to ``val``, the others to ``train``, each part in reading order. The same run and seed give
    the same split, whatever order its episodes are read in. ``out`` appears whole. Returns ``{"train", "val",
    "out"}``."""
    if isinstance(val, bool) or not isinstance(val, int | float) or not 0 < val < 1:
        raise ValueError(f"val must be a fraction in (0, 1), got {val!r}")
    check_int("seed", seed, minimum=0, maximum=2**64 - 1)
    out = os.fspath(out)
    sources = open_sources([path])
    values = _values(sources, ["env", "episode"])
    count = values["env"].size
    take = min(max(round(val * count), 1), count - 1) if count >= 2 else 0
    order = np.lexsort((values["episode"], values["env"], split_keys(values["env"], values["episode"], seed)))
    in_val = np.zeros(count, bool)
    in_val[order[:take]] = True
    work = new_partial(out)
    try:
        made = {}
        for part, mask in (("train", ~in_val), ("val", in_val)):
            record = {"op": "split", "part": part, "val": float(val), "seed": int(seed)}
            made[part] = _write(sources, mask, os.path.join(work, part), record, compression)["episodes"]
        publish(work, out)
    except BaseException:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
        raise
    return {**made, "out": out}


_M1, _M2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, over uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def split_keys(env_id: np.ndarray, episode_id: np.ndarray, seed: int) -> np.ndarray:
    """The uint64 key of each episode for :func:`split_run` (docs/FORMAT.md "Curated runs"):
    ``mix((env_id << 32 | episode_id) ^ mix(seed + 0x9E3779B97F4A7C15))``, ``mix`` SplitMix64's finalizer, all
    modulo 2^64. It depends on the episode's ids and the seed alone."""
    salt = _mix(np.array([seed], np.uint64) + _GOLDEN)
    key = (np.asarray(env_id).astype(np.uint64) << np.uint64(32)) | np.asarray(episode_id).astype(np.uint64)
    return _mix(key ^ salt)


def _write(sources: list[Source], mask: np.ndarray, out: str, record: dict, compression: str | None) -> dict:
    """The episodes ``mask`` keeps (over the sources' episodes in order) as the new packed run ``out``, its
    statistics computed from them, its run.json the first source's with ``curated`` = ``record`` and the sources."""
    first = sources[0].run.manifest
    if compression is None:
        compression = first.get("recorder", {}).get("compression", "none")
        compression = compression if compression in FORMATS[_TO].capabilities.compressions else "none"
    check_target(_TO, compression)
    starts = np.cumsum([0] + [len(s.run) for s in sources])
    picks = [np.flatnonzero(mask[a:b]) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    record = {
        **record,
        "at": now(),
        "sources": [_described(s, ks, first) for s, ks in zip(sources, picks, strict=True)],
    }
    manifest = new_manifest(first, _TO, curated=record, incomplete_episodes=[])
    manifest.pop("converted_from", None)  # the first source's history: kept in its entry of the sources
    stats, written = new_statistics(manifest["env_spec"]), [0]

    def episodes() -> Iterator[Episode]:
        for source, ks in zip(sources, picks, strict=True):
            if ks.size:
                for episode in source.run.read(ks.tolist(), EpisodeReadOptions(state=True)):
                    episode = _moved(episode, source.env_offset)
                    stats.update_episode(episode)
                    written[0] += 1
                    yield episode

    count = write_run(
        out,
        manifest,
        episodes(),
        to=_TO,
        compression=compression,
        before_publish=lambda work: written[0] and stats.write(work, f"computed from its episodes ({record['op']})"),
        carried_from=sources[0].path,
    )
    return {"episodes": count, "of": int(mask.size), "out": out}


def _described(source: Source, ks: np.ndarray, first: dict) -> dict:
    """A source in run.json's ``curated.sources``: its run id, path, env offset and span, the episodes taken, its
    config where it differs from the new run's, and its own history (``curated``, ``converted_from``)."""
    manifest = source.run.manifest
    entry = {
        "run_id": manifest["run_id"],
        "path": os.path.abspath(source.path),
        "env_offset": source.env_offset,
        "envs": source.envs,
        "episodes": int(ks.size),
    }
    if manifest["config"] != first["config"]:
        entry["config"] = manifest["config"]
    entry.update({key: manifest[key] for key in ("curated", "converted_from") if key in manifest})
    return entry


def _moved(episode: Episode, offset: int) -> Episode:
    """``episode`` with ``offset`` added to its env id (its ``env_id`` and its ``obs``/``next`` ``env_id``)."""
    if not offset:
        return episode
    env_id = episode.env_id + offset
    obs, following = dict(episode.obs), dict(episode.next)
    for fields in (obs, following):
        if "env_id" in fields:
            fields["env_id"] = np.full_like(fields["env_id"], env_id)
    return dataclasses.replace(episode, env_id=env_id, obs=obs, next=following)


def compute_statistics(path: str | os.PathLike, *, write: bool = True) -> StatsAccumulator:
    """Compute the statistics of a closed run from its published episodes (one read of the run,
    :func:`recording.stats.count_episodes`) and, with ``write``, store them as its ``stats.json``. A dataset root:
    each run in turn; the merged statistics are returned."""
    merged = None
    for run_dir in run_directories(path):
        run = open_closed_run(run_dir)
        stats = count_episodes(run.manifest["env_spec"], run.read(list(range(len(run))), EpisodeReadOptions()))
        if write:
            stats.write(run_dir, "computed from the published episodes")
        if merged is None:
            merged = stats
        else:
            merged.merge(stats)
    return merged
