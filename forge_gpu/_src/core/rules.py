"""The content rules every episode keeps, whatever its format (docs/FORMAT-v1.md "Invariants a valid episode
satisfies", docs/FORMAT.md "Checks a reader makes"), written once: every float value finite; ``step_id``
counting 0, 1, ..., T over the episode's frames; ``env_id`` and ``episode_id`` the episode's throughout;
``time`` rising; the end flags set at the last transition only, never both on one transition.

The checks run whole-column over many episodes laid end to end, so a reader checks a group of episodes with a
few numpy operations whatever their number. A break raises ValueError naming the file or run, the episode,
the rule and the values that break it. numpy and the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS


def _owner(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows laid end to end, ``counts[k]`` rows to episode ``k``: each row's episode and its index in it."""
    starts = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    owner = np.repeat(np.arange(counts.size), counts)
    return owner, np.arange(starts[-1]) - starts[:-1][owner]


def _broken(name: str, episodes: Mapping[str, np.ndarray], k: int, rule: str) -> ValueError:
    """The error for a break of ``rule`` in the ``k``-th of ``episodes``."""
    return ValueError(f"{name}: episode env {episodes['env_id'][k]} episode {episodes['episode_id'][k]}: {rule}")


def check_finite(
    columns: Mapping[str, np.ndarray], counts: np.ndarray, episodes: Mapping[str, np.ndarray], *, name: str
) -> None:
    """Every float value of ``columns`` is finite. Each column holds episode ``k``'s ``counts[k]`` rows, the
    episodes laid end to end; ``episodes`` gives their ``env_id`` and ``episode_id`` for the message."""
    for column, values in columns.items():
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            rows = values.reshape(len(values), -1)
            row = int(np.argmax(~np.isfinite(rows).all(axis=1)))
            value = rows[row][np.argmax(~np.isfinite(rows[row]))]
            owner, index = _owner(np.asarray(counts, np.int64))
            rule = f"{column} holds non-finite values ({value!s} in row {index[row]})"
            raise _broken(name, episodes, owner[row], rule)


def check_transitions(
    episodes: Mapping[str, np.ndarray],
    before: Mapping[str, np.ndarray],
    after: Mapping[str, np.ndarray],
    terminated: np.ndarray,
    truncated: np.ndarray,
    *,
    name: str,
    prefixes: tuple[str, str] = ("obs/", "next/"),
) -> None:
    """Check episodes laid end to end, one row per transition, against the content rules but finiteness
    (:func:`check_finite`).

    ``episodes`` maps ``env_id``, ``episode_id`` and ``steps`` (T) to one value per episode; episode ``k``'s
    transitions are the next ``steps[k]`` rows of every other argument. ``before`` and ``after`` map the
    bookkeeping fields (``env_id``, ``episode_id``, ``step_id``, ``time``) to their values in the frame each
    transition starts from and in the one it leads to (frames ``t`` and ``t + 1`` of the episode's ``T + 1``);
    ``prefixes`` name the two in messages (schema 1's members ``obs/`` and ``next/``; a packed run's frames are
    all ``obs/``). The first break raises ValueError naming ``name``, the episode, the rule and the values.
    """
    steps = np.asarray(episodes["steps"], np.int64)
    owner, t = _owner(steps)

    def fail(bad: np.ndarray, rule: Callable[[int], str]) -> None:
        if bad.any():
            row = int(np.argmax(bad))
            raise _broken(name, episodes, owner[row], rule(row))

    for frames, prefix, shift in ((before, prefixes[0], 0), (after, prefixes[1], 1)):
        frame, step_id = t + shift, frames["step_id"]
        fail(
            step_id != frame,
            lambda i, p=prefix, f=frame, s=step_id: (
                f"{p}step_id must count 0, 1, ..., T along the episode: frame {f[i]} holds {s[i]}"
            ),
        )
        for key in ("env_id", "episode_id"):
            due, found = np.repeat(np.asarray(episodes[key]), steps), frames[key]
            fail(
                found != due,
                lambda i, p=prefix, k=key, d=due, v=found, f=frame: (
                    f"{p}{k} must be the episode's {d[i]} throughout: frame {f[i]} holds {v[i]}"
                ),
            )
    early, late = before["time"], after["time"]
    fail(
        ~(late > early),
        lambda i: (
            f"{prefixes[1]}time must increase along the episode: frame {t[i] + 1} at {late[i]!s} "
            f"does not follow frame {t[i]} at {early[i]!s}"
        ),
    )
    fail(terminated & truncated, lambda i: f"transition {t[i]} is both terminated and truncated")
    done, last = terminated | truncated, t == steps[owner] - 1
    fail(
        done != last,
        lambda i: (
            f"terminated|truncated must be true at the last transition only: it is {bool(done[i])} at "
            f"transition {t[i]} of T={steps[owner[i]]}"
        ),
    )


def check_frames(
    columns: Mapping[str, np.ndarray], episodes: Mapping[str, np.ndarray], starts: np.ndarray, *, name: str
) -> None:
    """Check episodes laid end to end as frames, whole columns at once: episode ``k``'s ``T + 1`` frames are rows
    ``[starts[k], starts[k+1])`` of every column, ``obs/<F>`` each field's and a transition's values on the frame
    it leads to (so an episode's first row of ``action``, ``reward``, ``terminated`` and ``truncated`` is not
    its own; it is still checked for finiteness). ``columns`` holds at least the bookkeeping fields'
    ``obs/`` columns and the flags; ``episodes`` the episodes' ``env_id`` and ``episode_id``.

    Every float value of every column is checked (:func:`check_finite`), then the other rules
    (:func:`check_transitions`)."""
    counts = np.diff(starts)
    check_finite(columns, counts, episodes, name=name)
    last = np.zeros(int(starts[-1]), bool)
    last[starts[1:] - 1] = True
    first = np.zeros_like(last)
    first[starts[:-1]] = True
    before = {f: columns[f"obs/{f}"][~last] for f in BOOKKEEPING_FIELDS}
    after = {f: columns[f"obs/{f}"][~first] for f in BOOKKEEPING_FIELDS}
    transitions = dict(episodes, steps=counts - 1)
    check_transitions(
        transitions,
        before,
        after,
        columns["terminated"][~first],
        columns["truncated"][~first],
        name=name,
        prefixes=("obs/", "obs/"),
    )


def episode_success(spec: Mapping, last_terminated):
    """Whether episodes ended in success, from the ``terminated`` flag of their last transition (one bool, or an
    array of them, one per episode): None for a task without success (its env_spec's ``has_success`` false); else
    that flag, as a bool or a bool array (a task with success ends its successful episodes as terminated, e.g.
    reach: the target reached, and the others truncated)."""
    if not spec.get("has_success"):
        return None
    return np.asarray(last_terminated, bool) if np.ndim(last_terminated) else bool(last_terminated)
