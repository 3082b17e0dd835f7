"""The per-env episode state of a recording and the checks every batch must pass against it, whatever the
format it is written in. numpy and the standard library."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from forge_gpu._src.core.fields import (
    SPEC_GROUPS,
    check_layout,
    group_layout,
    leading,
    observation_layout,
    per_env_nbytes,
)
from forge_gpu._src.core.instructions import TEMPLATE_KEY, check_template, episode_instructions, slot_indices

# Action and reward are kept (and written) as float32, the dtype the env produces.
ACTION_DTYPE = np.dtype(np.float32)
REWARD_DTYPE = np.dtype(np.float32)


def result_groups(result: Any) -> dict[str, Any]:
    """The result's ``state`` and ``params`` dicts (:data:`core.fields.SPEC_GROUPS`); {} where it has none."""
    groups = {group: getattr(result, group, None) for group in SPEC_GROUPS}
    return {group: {} if value is None else value for group, value in groups.items()}


class EpisodeTracker:
    """Per-env episode state of a recording, and the checks each batch must pass against it.

    ``check`` looks at a batch without changing anything; ``commit`` then advances the state. All
    state is ``(num_envs,)`` arrays, updated with whole-array operations.

    ``fields`` is the observation's layout (field -> per-env shape, dtype), ``state`` and ``params`` the
    layouts of the result's ``state`` and ``params`` (env.spec's, {} where it has none); ``instruction`` the run's
    instruction and ``template`` the spec's instruction template (None: every episode has the run's), checked
    against the params.
    """

    def __init__(self, spec: Mapping, num_envs: int, max_steps: int):
        self.fields = observation_layout(spec)
        self.state = group_layout(spec, "state")
        self.params = group_layout(spec, "params")
        action_shape = spec.get("action_shape")
        if not isinstance(action_shape, list | tuple) or len(action_shape) != 1 or int(action_shape[0]) < 1:
            raise ValueError(f"env.spec['action_shape'] must be [A] with A >= 1, got {action_shape!r}")
        self.action_dim = int(action_shape[0])
        instruction = spec.get("instruction")
        self.instruction = instruction if isinstance(instruction, str) else ""
        self.template = spec.get(TEMPLATE_KEY)
        if self.template is not None:
            check_template(self.template, self.params, name=f"env.spec[{TEMPLATE_KEY!r}]")
        self.num_envs, self.max_steps = num_envs, max_steps
        # What every batch's observation fields, state and params must be: [N, ...].
        self._batch_layouts = {
            group: leading(layout, num_envs)
            for group, layout in (("observation", self.fields), ("state", self.state), ("params", self.params))
        }
        # The params of each env's current episode, which every active row must repeat.
        self._params = {name: np.zeros((num_envs, *shape), dtype) for name, (shape, dtype) in self.params.items()}
        self.episode = np.full(num_envs, -1, np.int64)  # -1 before the env's first frame
        self.steps = np.zeros(num_envs, np.int64)  # transitions recorded in the current episode
        self.last_time = np.zeros(num_envs, np.float64)  # time of the last frame [s]
        self.ended = np.zeros(num_envs, np.bool_)  # the last transition terminated or truncated
        self.abandoned: list[dict] = []  # episodes given up by a reset, with >= 1 transition
        self.transitions = 0  # transitions recorded
        self._env_ids = np.arange(num_envs)  # what every batch's observation['env_id'] must be

    @property
    def frame_bytes(self) -> int:
        """Bytes of one env's observation frame."""
        return sum(per_env_nbytes(shape, dtype) for shape, dtype in self.fields.values())

    @property
    def state_bytes(self) -> int:
        """Bytes of one env's state and params."""
        return sum(per_env_nbytes(shape, dtype) for shape, dtype in (*self.state.values(), *self.params.values()))

    @property
    def transition_bytes(self) -> int:
        """Bytes of one transition: action, reward and the two flags."""
        return self.action_dim * ACTION_DTYPE.itemsize + REWARD_DTYPE.itemsize + 2

    def check(self, observation, result, *, encoded: Mapping | None = None) -> tuple[np.ndarray, ...]:
        """Check a batch against the spec and each env's state; return (active, reward, terminated,
        truncated, action). Raises ValueError naming the rule and the env rows; changes nothing. ``encoded``:
        the observation fields the producer handed encoded (field -> the run's ``CodecSpec``): each must be
        ``core.codecs.EncodedFrames`` of N frames of that codec (their values are checked when decoded)."""
        n = self.num_envs
        if encoded:
            observation = _without_encoded(observation, encoded, n, self.fields)
        groups = {"observation": observation, **result_groups(result)}
        layouts = self._batch_layouts
        if encoded:  # the encoded fields the batch holds were checked above
            left = {k: v for k, v in layouts["observation"].items() if k in observation or k not in encoded}
            layouts = {**layouts, "observation": left}
        for group, arrays in groups.items():
            _check_group(group, arrays, layouts[group])
        info = getattr(result, "info", None)
        if not isinstance(info, Mapping) or "active" not in info or "executed_action" not in info:
            raise ValueError("result.info must be a dict with 'active' and 'executed_action'")
        active = _check_array("result.info['active']", info["active"], (n,), np.bool_)
        action = _check_array(
            "result.info['executed_action']", info["executed_action"], (n, self.action_dim), ACTION_DTYPE
        )
        reward = _check_array("result.reward", getattr(result, "reward", None), (n,), REWARD_DTYPE)
        terminated = _check_array("result.terminated", getattr(result, "terminated", None), (n,), np.bool_)
        truncated = _check_array("result.truncated", getattr(result, "truncated", None), (n,), np.bool_)

        env_id = observation["env_id"]
        episode_id = observation["episode_id"]
        step_id = observation["step_id"]
        seen = self.episode >= 0
        inactive = ~active
        known = active & seen & ~self.ended
        # Every rule's bad rows, in the order they are reported; one combined test for the batch, and only a
        # bad batch is looked at rule by rule (the first rule it breaks is named).
        rules = [
            (env_id != self._env_ids, "observation['env_id'] must equal arange(N)"),
            (terminated & truncated, "a row is both terminated and truncated"),
            (
                inactive & ((reward != 0) | terminated | truncated),
                "an inactive (reset) row has nonzero reward or a set flag",
            ),
            (inactive & (step_id != 0), "an inactive (reset) row has step_id != 0"),
            (inactive & (episode_id < 0), "an inactive (reset) row has a negative episode_id"),
            (
                inactive & seen & (episode_id != self.episode + 1),
                "an inactive (reset) row must have episode_id = the env's previous episode_id + 1",
            ),
            (active & ~seen, "an active row came before the env's first reset frame"),
            (
                active & seen & self.ended,
                "an active row came for an env whose previous transition ended; expected its reset frame",
            ),
            (known & (episode_id != self.episode), "an active row changed episode_id"),
            (known & (step_id != self.steps + 1), "an active row's step_id is not the previous step_id + 1"),
            (
                known & (step_id > self.max_steps),
                f"an active row's step_id exceeds max_steps={self.max_steps} (episodes must truncate there)",
            ),
            (known & ~(observation["time"] > self.last_time), "an active row's time does not advance"),
        ]
        for name, now in self._params.items():
            rules.append(
                (
                    known & (groups["params"][name] != now).reshape(n, -1).any(axis=1),
                    f"result.params[{name!r}] changed within an episode (an episode's params are drawn at its reset)",
                )
            )
        _reject_any(rules)
        if self.template is not None and inactive.any():  # a new episode's params must name its instruction's slots
            slot_indices(self.template, {k: v[inactive] for k, v in groups["params"].items()}, name="result.params")
        return active, reward, terminated, truncated, action

    def commit(self, observation, active, terminated, truncated, params: Mapping | None = None) -> np.ndarray:
        """Advance the state by a checked batch (``params``: its result's, where the spec has some); return the env
        rows whose episode ended in it."""
        for env_id in np.flatnonzero(~active & ~self.ended & (self.steps >= 1)):
            self.abandoned.append(
                {"env_id": int(env_id), "episode_id": int(self.episode[env_id]), "steps": int(self.steps[env_id])}
            )
        self.steps[:] = np.where(active, self.steps + 1, 0)
        self.episode[:] = observation["episode_id"]
        self.last_time[:] = observation["time"]
        for name, now in self._params.items():
            now[:] = params[name]
        self.ended[:] = active & (terminated | truncated)
        self.transitions += int(np.count_nonzero(active))
        return np.flatnonzero(self.ended)

    @property
    def episode_params(self) -> dict[str, np.ndarray]:
        """The params of each env's current episode (name -> [N, ...]), as of the last commit."""
        return self._params

    def instructions(self, params: Mapping[str, np.ndarray], count: int) -> list[str]:
        """The instruction of each of ``count`` episodes whose params are ``params`` (name -> [count, ...]): the
        template's (:func:`core.instructions.episode_instructions`), or the run's where the spec has none."""
        if self.template is None:
            return [self.instruction] * count
        return episode_instructions(self.template, params, count=count)

    def incomplete(self) -> list[dict]:
        """Episodes started and not completed: those abandoned by a reset and those still running;
        episodes with no transition yet are left out."""
        running = np.flatnonzero((self.episode >= 0) & ~self.ended & (self.steps >= 1))
        in_progress = [
            {"env_id": int(e), "episode_id": int(self.episode[e]), "steps": int(self.steps[e])} for e in running
        ]
        return self.abandoned + in_progress


def _without_encoded(observation: Any, encoded: Mapping, n: int, fields: Mapping) -> dict:
    """The observation without the encoded fields it holds, those checked: N frames each, of the run's codec, and
    their ``counts`` where given: each frame's histogram of a one-byte field, ``[N, channels, 256]``, every channel's
    counts adding up to the frame's pixels."""
    if not isinstance(observation, Mapping):
        raise ValueError(f"observation must be a dict of arrays, got {type(observation).__name__}")
    out = {}
    for key, value in observation.items():
        if hasattr(value, "offsets") and hasattr(value, "spec"):  # core.codecs.EncodedFrames
            if key not in encoded:
                raise ValueError(f"observation[{key!r}] is encoded frames; the run stores the field raw")
            if value.spec != encoded[key] or len(value) != n:
                raise ValueError(
                    f"observation[{key!r}]: encoded frames must be {n} frames of codec {encoded[key]}, got "
                    f"{len(value)} of {value.spec}"
                )
            if value.counts is not None:
                _check_counts(key, np.asarray(value.counts), n, *fields[key])
        else:
            out[key] = value
    return out


def _check_counts(key: str, counts: np.ndarray, n: int, shape: tuple, dtype: np.dtype) -> None:
    channels = shape[-1] if len(shape) >= 3 else 1
    pixels = int(np.prod(shape)) // channels
    if np.dtype(dtype).itemsize != 1:
        raise ValueError(f"observation[{key!r}].counts: byte histograms count one-byte fields, not {dtype}")
    if counts.shape != (n, channels, 256) or counts.dtype.kind not in "iu":
        raise ValueError(
            f"observation[{key!r}].counts must be an integer array [{n}, {channels}, 256], got "
            f"{counts.dtype}{list(counts.shape)}"
        )
    if (counts < 0).any() or (counts.sum(axis=2) != pixels).any():
        raise ValueError(f"observation[{key!r}].counts: each frame's channel must count its {pixels} pixels once")


def _check_group(group: str, arrays: Any, layout: Mapping) -> None:
    """A batch's observation, state or params (``group``): a dict of numpy arrays, each of the ``layout`` (the
    spec's, ``N`` rows before), and finite."""
    name = "observation" if group == "observation" else f"result.{group}"
    if not isinstance(arrays, Mapping):
        raise ValueError(f"{name} must be a dict of arrays, got {type(arrays).__name__}")
    for key, array in arrays.items():
        if not isinstance(array, np.ndarray):
            raise ValueError(f"{name}[{key!r}] must be a numpy array, got {type(array).__name__}")
    found = {key: (array.shape, array.dtype) for key, array in arrays.items()}
    what = "field" if group == "observation" else "entry"
    check_layout(found, layout, name=name, what=what, source=f"env.spec[{group!r}]")
    for key in found:
        _check_finite(f"{name}[{key!r}]", arrays[key])


def _check_array(name: str, array: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(array).__name__}")
    if array.shape != shape or array.dtype != dtype:
        raise ValueError(f"{name} must be {np.dtype(dtype)}{list(shape)}, got {array.dtype}{list(array.shape)}")
    _check_finite(name, array)
    return array


def _check_finite(name: str, array: np.ndarray) -> None:
    """ValueError naming the rows of ``array`` that hold a NaN or an infinity. A finite sum means every value is
    finite (a NaN or an infinity makes it NaN or infinite): one pass without a temporary for a good batch; a sum
    that is not finite (a bad value, or finite values that overflow it) is looked at row by row."""
    if array.dtype.kind == "f" and array.size and not np.isfinite(np.add.reduce(array, axis=None)):
        finite = np.isfinite(array).reshape(len(array), -1).all(axis=1)
        _reject(~finite, f"{name} holds non-finite values")


def _reject_any(rules: list[tuple[np.ndarray, str]]) -> None:
    """:func:`_reject` for each ``(bad_rows, message)`` in order, after one combined test of all of them."""
    combined = rules[0][0].copy()
    for bad_rows, _ in rules[1:]:
        np.logical_or(combined, bad_rows, out=combined)
    if combined.any():
        for bad_rows, message in rules:
            _reject(bad_rows, message)


def _reject(bad_rows: np.ndarray, message: str) -> None:
    if bad_rows.any():
        rows = np.flatnonzero(bad_rows)
        shown = ", ".join(str(r) for r in rows[:10]) + (", ..." if rows.size > 10 else "")
        raise ValueError(f"{message} (env rows {shown})")
