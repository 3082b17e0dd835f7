"""Reading a packed run (schema 2, docs/FORMAT.md) as the reader's Episodes: the commit log's episodes (and their
params), gathered from the blocks (their observation, transition and asked-for state columns) and checked
whole-column, and, for random access, the blocks memory-mapped.
numpy, pyarrow and the standard library.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from forge_gpu._src.core.episode import Episode, EpisodeReadOptions, chosen, episode_stem
from forge_gpu._src.core.fields import check_layout, check_spec_layout
from forge_gpu._src.core.instructions import INSTRUCTION
from forge_gpu._src.core.rules import check_frames
from forge_gpu._src.formats.packed.blocks import (
    CHECK_COLUMNS,
    PackedRun,
    gather_episodes,
    read_blocks,
    read_episode_tables,
)
from forge_gpu._src.formats.packed.commits import PARAMS_PREFIX
from forge_gpu._src.formats.packed.scan import verify_packed
from forge_gpu._src.formats.packed.schema import PACKED_LAYOUT, TRANSITION_COLUMNS


class PackedRunReader:
    """A packed run: its committed episodes in commit-log order."""

    def __init__(self, run_dir: str, manifest: dict):
        self.directory, self.manifest = run_dir, manifest
        self.run = PackedRun(run_dir, manifest)
        self.state = self.run.groups["state"]  # the state/<S> columns

    def __len__(self) -> int:
        return len(self.run)

    def ids(self, k: int) -> tuple[int, int, int]:
        """``(env_id, episode_id, steps)`` of the ``k``-th episode."""
        episodes = self.run.episodes
        return int(episodes["env_id"][k]), int(episodes["episode_id"][k]), int(episodes["steps"][k])

    def instructions(self) -> list[str]:
        """Every episode's instruction, in reading order (from the commit log)."""
        return self.run.episodes[INSTRUCTION].tolist()

    def groups(self, ks: list[int], options: EpisodeReadOptions) -> tuple[list[str], list[str], Iterator]:
        """The observation fields and state entries to read, and the selected episodes (``ks`` ascending) in checked
        groups: ``(episodes, gathered, starts)`` of :func:`blocks.read_episode_tables`."""
        fields, state = self._chosen(options)
        names = list(dict.fromkeys(_names(fields, state) + list(CHECK_COLUMNS)))
        select = np.asarray(ks, dtype=np.int64)
        return fields, state, read_episode_tables(self.run, names, select, verify=options.verify)

    def frame_table(
        self, ks: list[int], options: EpisodeReadOptions, *, mmap: bool = False
    ) -> tuple[list[str], list[tuple[int, dict]], dict]:
        """The episodes ``ks`` (ascending), checked, as a frame table (``RunReader.frame_table``).

        In memory: the episodes' rows gathered group by group and joined end to end (stride 1), one block.
        With ``mmap``: every committed block as ``(first row, {"obs/<F>", "state/<S>" asked for and "action":
        [rows, ...] array})``, the arrays read-only views of the memory-mapped segments, and the episodes' own
        entries; the blocks are mapped (and, with ``options.verify``, their checksums checked) once, and the
        episodes checked from them as :meth:`read` checks them. An encoded column is an ``EncodedColumn`` over the
        mapped payloads: a batch decodes only the frames it gathers. An uncompressed run only: compressed buffers
        cannot be mapped (ValueError naming the convert command that writes an uncompressed copy)."""
        if not mmap:
            fields, state, groups = self.groups(ks, options)
            return (fields, *_joined(_names(fields, state) + list(TRANSITION_COLUMNS), list(groups)))
        compression = self.manifest.get("recorder", {}).get("compression", "none")
        if compression != "none":
            raise ValueError(
                f"{self.directory}: its segments are {compression}-compressed and cannot be memory-mapped; "
                f"write an uncompressed copy: forge-gpu convert {self.directory} OUT --to packed"
            )
        fields, state = self._chosen(options)
        names = _names(fields, state) + ["action"]
        mapped = list(
            read_blocks(
                self.run, self.run.commits, list(dict.fromkeys(names + list(CHECK_COLUMNS))), verify=options.verify
            )
        )
        select = np.asarray(ks, dtype=np.int64)
        checked = [(commit, {n: columns[n] for n in CHECK_COLUMNS}) for commit, columns in mapped]  # no frame decoded
        for group, gathered, starts, _ in gather_episodes(self.run, checked, select):  # checked, then let go
            check_frames(gathered, group, starts, name=self.directory)
        blocks = [(commit["first_row"], {n: columns[n] for n in names}) for commit, columns in mapped]
        episodes = {key: values[select] for key, values in self.run.episodes.items()}
        return fields, blocks, episodes

    def read(self, ks: list[int], options: EpisodeReadOptions) -> Iterator[Episode]:
        fields, state, groups = self.groups(ks, options)
        params = [k for k in self.run.episodes if k.startswith(PARAMS_PREFIX)]
        for episodes, gathered, starts in groups:
            for values in gathered.values():  # the episodes are views of one gather: an episode's obs and next share
                values.flags.writeable = False  # rows, so writing one would change the other (and its neighbours)
            for i in range(len(starts) - 1):
                s, e = int(starts[i]), int(starts[i + 1])
                env_id, episode_id = int(episodes["env_id"][i]), int(episodes["episode_id"][i])
                yield Episode(
                    env_id=env_id,
                    episode_id=episode_id,
                    steps=e - s - 1,
                    obs={f: gathered[f"obs/{f}"][s : e - 1] for f in fields},
                    next={f: gathered[f"obs/{f}"][s + 1 : e] for f in fields},
                    action=gathered["action"][s + 1 : e],
                    reward=gathered["reward"][s + 1 : e],
                    terminated=gathered["terminated"][s + 1 : e],
                    truncated=gathered["truncated"][s + 1 : e],
                    path=os.path.join(self.directory, episode_stem(env_id, episode_id)),
                    state={n: gathered[f"state/{n}"][s:e] for n in state},
                    params={k[len(PARAMS_PREFIX) :]: episodes[k][i, ...] for k in params},
                    instruction=episodes[INSTRUCTION][i],
                )

    def verify(self) -> dict:
        """Every block and every episode checked (``RunReader.verify``): :func:`scan.verify_packed`."""
        return verify_packed(self)

    def _chosen(self, options: EpisodeReadOptions) -> tuple[list[str], list[str]]:
        """The observation fields and state entries to read, after checking the segments' columns against
        run.json."""
        columns = self.run.columns(verify=options.verify)
        spec = self.manifest["env_spec"]
        state = {f"state/{n}": layout for n, layout in self.state.items()}
        described = spec.get("observation") if isinstance(spec.get("observation"), dict) else {}
        present = sorted(c[4:] for c in columns if c.startswith("obs/")) if columns else sorted(described)
        if columns:
            check_layout(
                columns,
                PACKED_LAYOUT,
                name=self.directory,
                what="column",
                source="the packed layout",
                extra=("obs/", "state/"),
            )
            check_spec_layout(columns, spec, name=self.directory, what="column", action_dtype=np.float32)
            found = {k: v for k, v in columns.items() if k.startswith("state/")}
            check_layout(found, state, name=self.directory, what="column", source="run.json's env_spec.state")
        fields = chosen(options.observation_keys, present, what="field", name=self.directory)
        return fields, chosen(options.state, list(self.state), what="state entry", name=self.directory)


def _names(fields: list[str], state: list[str]) -> list[str]:
    """The columns of the observation ``fields`` and the ``state`` entries."""
    return [f"obs/{f}" for f in fields] + [f"state/{n}" for n in state]


def _joined(names: list[str], groups: list[tuple[dict, dict, np.ndarray]]) -> tuple[list, dict]:
    """The ``names`` columns of groups of gathered episodes (:func:`blocks.read_episode_tables`) as one block of a
    frame table laid end to end (stride 1), and the episodes' entries in it (their params included)."""
    columns = {n: np.concatenate([g[n] for _, g, _ in groups]) for n in names}
    offsets = np.cumsum([0] + [int(s[-1]) for _, _, s in groups[:-1]])
    keys = [k for k in groups[0][0] if k not in ("first_row", "stride")]
    episodes = {key: np.concatenate([e[key] for e, _, _ in groups]) for key in keys}
    episodes["first_row"] = np.concatenate([s[:-1] + o for (_, _, s), o in zip(groups, offsets, strict=True)])
    episodes["stride"] = np.ones(episodes["steps"].size, np.int64)
    return [(0, columns)], episodes
