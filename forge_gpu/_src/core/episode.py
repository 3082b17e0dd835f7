"""What a reader gives back, whatever the run's format: :class:`Episode`, and the :class:`EpisodeReadOptions`
that say which fields, which state and which shard to read; the choice of entries a reader makes from them
(:func:`chosen`); and an episode's name, ``env{E:05d}-episode{K:08d}`` (schema 1's file stem, docs/FORMAT-v1.md,
and the name every reader gives its episodes' ``path``). numpy and the standard library."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.rules import episode_success

#: Default per-member limit of the reader [bytes]: a member whose header claims more is refused
#: before anything is allocated. Override with ``read_episodes(..., max_member_bytes=...)``.
MAX_MEMBER_BYTES = 4 << 30

EPISODE_STEM = "env{env_id:05d}-episode{episode_id:08d}"
EPISODE_STEM_RE = re.compile(r"^env(\d{5})-episode(\d{8})$")


def episode_stem(env_id: int, episode_id: int) -> str:
    """The name of an episode, e.g. ``env00003-episode00000012`` (schema 1's file name without suffix)."""
    return EPISODE_STEM.format(env_id=int(env_id), episode_id=int(episode_id))


def parse_episode_stem(stem: str) -> tuple[int, int] | None:
    """``(env_id, episode_id)`` of an episode name, or None if the name is not an episode's."""
    match = EPISODE_STEM_RE.match(stem)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


@dataclasses.dataclass(frozen=True)
class Episode:
    """One checked episode of ``steps`` (T) transitions.

    ``obs[F]`` and ``next[F]`` are ``[T, ...]`` arrays of observation field ``F`` before and after each
    transition; ``action`` is ``[T, A]``, ``reward``, ``terminated`` and ``truncated`` are ``[T]``.
    ``state[S]`` is ``[T + 1, ...]``: the simulator state ``S`` at every frame ``0..T`` (read where
    ``EpisodeReadOptions.state`` asks for it); ``params[P]`` the episode's randomized value ``P``, of its
    per-episode shape (``[]`` for a scalar, ``[3]`` for a colour, ...). Both are empty where the run has none.
    ``instruction`` is the episode's language instruction: its own where the run records one per episode
    (docs/FORMAT.md "Instructions"), else the run's (``env_spec.instruction``).
    """

    env_id: int
    episode_id: int
    steps: int
    obs: dict[str, np.ndarray]
    next: dict[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    path: str
    state: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    params: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    instruction: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class EpisodeReadOptions:
    """What :func:`read_episodes` and :func:`action_windows` read, and which partition."""

    observation_keys: Sequence[str] | None = None
    """Observation fields to load and value-check; ``None`` loads all. The full member schema, the
    required fields and the transition members are checked either way."""
    shard_index: int = 0
    """This reader's partition: the ``k``-th counted episode belongs to shard ``k % num_shards``."""
    num_shards: int = 1
    """Number of partitions."""
    max_member_bytes: int = MAX_MEMBER_BYTES
    """A member whose header claims more bytes is refused before anything is allocated."""
    state: bool | Sequence[str] = False
    """The simulator state to read into ``Episode.state``: none (``False``, the default), every entry the run has
    (``True``) or the named ones. ``Episode.params`` is always filled (it costs nothing to read)."""
    verify: bool = True
    """Check every block's checksum before trusting any value of it (packed runs of layout_version 3 on; older ones
    have none and are read unverified). ``False`` skips the check; see docs/FORMAT.md "Checksums" for its cost."""

    def __post_init__(self):
        check_int("num_shards", self.num_shards, minimum=1)
        index = self.shard_index
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < self.num_shards:
            raise ValueError(f"shard_index must be an integer in [0, {self.num_shards - 1}], got {index!r}")
        keys = self.observation_keys
        if keys is not None:
            if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
                raise ValueError(f"observation_keys must be a sequence of field names, got {keys!r}")
            object.__setattr__(self, "observation_keys", tuple(keys))
        state = self.state
        if not isinstance(state, bool):
            if isinstance(state, str) or not isinstance(state, Sequence) or not all(isinstance(k, str) for k in state):
                raise ValueError(f"state must be True, False or a sequence of state names, got {state!r}")
            object.__setattr__(self, "state", tuple(state))
        if not isinstance(self.verify, bool):
            raise ValueError(f"verify must be True or False, got {self.verify!r}")
        if not isinstance(self.max_member_bytes, int) or self.max_member_bytes < 1:
            raise ValueError(f"max_member_bytes must be a positive integer, got {self.max_member_bytes!r}")


def chosen(requested: bool | Sequence[str] | None, present: Sequence[str], *, what: str, name: str) -> list[str]:
    """The entries a reader reads of those ``present``: all for ``None`` or ``True``, none for ``False``, else the
    ``requested`` ones, each of which must be present (ValueError naming ``name``, the ``what`` and both lists)."""
    if requested is None or requested is True:
        return list(present)
    if requested is False:
        return []
    unknown = [k for k in requested if k not in present]
    if unknown:
        raise ValueError(f"{name}: requested {what}(s) {unknown} are not there (it has {list(present)})")
    return list(requested)


def episode_return(episode: Episode) -> float:
    """The episode's return: the sum of its rewards, in float64."""
    return float(episode.reward.astype(np.float64).sum())


def episode_succeeded(episode: Episode, spec: dict) -> bool:
    """Whether the episode ended in success: its task defines success (``env_spec.has_success``) and the episode
    ended terminated (a task with success ends its successful episodes so, e.g. reach: target reached)."""
    return bool(episode_success(spec, episode.terminated[-1]))
