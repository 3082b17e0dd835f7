"""Synthetic host batches, without a simulator: a run description and the (observation, result) pairs the env's
transport hands a recorder, with the env's step semantics (next-step auto-reset), drawn with numpy from a seed.

The tests record them and compare what a reader returns with what was drawn (tests/helpers/synthetic.py adds the
bookkeeping of the episodes they form); the benchmarks feed them to the recorders at sizes no CPU simulator
reaches. Every batch is whole-array numpy: nothing here loops over envs."""

from __future__ import annotations

import dataclasses
import types

import numpy as np

from forge_gpu._src.core.manifest import RunDescription

CONTROL_DT = 0.05
INSTRUCTION = "push the red cube to the goal"

#: The simulator state and the randomized params of ``synthetic_description(..., state=True, params=True)``.
STATE = {"joint_q": {"shape": [2], "dtype": "float32"}, "body_q": {"shape": [2, 7], "dtype": "float32"}}
PARAMS = {"mass_scale": {"shape": [], "dtype": "float32"}, "target_color": {"shape": [3], "dtype": "float32"}}


@dataclasses.dataclass(frozen=True)
class Scene:
    """The scene the description names (a recorder writes it into run.json)."""

    kind: str = "tabletop"
    table_height: float = 0.4


def synthetic_description(
    num_envs=3,
    max_steps=6,
    *,
    proprio_dim=3,
    action_dim=2,
    images=False,
    image_shape=(4, 5),
    seed=7,
    state=False,
    params=False,
) -> RunDescription:
    """The RunDescription a recorder takes, built directly (no env object): ``proprio`` of ``proprio_dim``
    float32, with ``images`` an ``rgb`` (uint8) and a ``depth`` (float32) of ``image_shape`` (height, width),
    actions in [-1, 1]; with ``state`` and ``params``, its spec describes :data:`STATE` and :data:`PARAMS`."""
    observation = {
        "env_id": {"shape": [], "dtype": "int32"},
        "episode_id": {"shape": [], "dtype": "int32"},
        "step_id": {"shape": [], "dtype": "int32"},
        "time": {"shape": [], "dtype": "float32"},
        "proprio": {"shape": [proprio_dim], "dtype": "float32"},
    }
    if images:
        observation["rgb"] = {"shape": [*image_shape, 3], "dtype": "uint8"}
        observation["depth"] = {"shape": list(image_shape), "dtype": "float32"}
    config = {"num_envs": num_envs, "max_steps": max_steps, "seed": seed, "device": "cpu"}
    spec = {
        "action_shape": [action_dim],
        "action_low": [-1.0] * action_dim,
        "action_high": [1.0] * action_dim,
        "observation": observation,
        "instruction": INSTRUCTION,
        "control_dt": CONTROL_DT,
    }
    spec.update({key: group for key, group, wanted in (("state", STATE, state), ("params", PARAMS, params)) if wanted})
    return RunDescription(spec=spec, config=config, task="synthetic_push", scene=Scene(), seed=seed)


class SyntheticBatches:
    """Makes host batches like the env's for ``description``: :meth:`reset` is ``env.reset()``'s batch (every env
    starts an episode), :meth:`step` is ``env.step(a)``'s (an env whose episode ended the step before starts a new
    one with an inactive row). Each active env ends its episode with probability ``end_prob`` per step
    (terminated), or at ``max_steps`` (truncated). Observations, actions and rewards are drawn anew every step,
    state every frame, params at every episode's first frame.

    Subclasses see each batch through :meth:`began` and :meth:`stepped` (no-ops here)."""

    def __init__(self, description: RunDescription, *, seed=0, end_prob=0.25):
        self.env = description
        self.n = description.num_envs
        self.rng = np.random.default_rng(seed)
        self.end_prob = end_prob
        self.episode_id = np.zeros(self.n, np.int32)
        self.step_id = np.zeros(self.n, np.int32)
        self.ended = np.zeros(self.n, bool)
        self.started = False
        self.params = {
            name: np.zeros((self.n, *e["shape"]), np.float32) for name, e in description.spec.get("params", {}).items()
        }

    def _observe(self):
        n, obs = self.n, {}
        for field, entry in self.env.spec["observation"].items():
            shape, dtype = (n, *entry["shape"]), np.dtype(entry["dtype"])
            if dtype.kind == "f":
                obs[field] = self.rng.normal(size=shape).astype(dtype)
            else:
                obs[field] = self.rng.integers(0, 256, size=shape).astype(dtype)
        obs["env_id"] = np.arange(n, dtype=np.int32)
        obs["episode_id"] = self.episode_id.copy()
        obs["step_id"] = self.step_id.copy()
        obs["time"] = (self.step_id * np.float32(CONTROL_DT)).astype(np.float32)
        return obs

    def _groups(self, starts):
        """The batch's state (drawn anew) and params (drawn anew on the rows ``starts`` that begin an episode), for
        the groups the spec has."""
        state = {
            name: self.rng.normal(size=(self.n, *e["shape"])).astype(np.float32)
            for name, e in self.env.spec.get("state", {}).items()
        }
        for values in self.params.values():
            values[starts] = self.rng.uniform(0.5, 1.5, values[starts].shape).astype(np.float32)
        groups = {"state": state, "params": {name: values.copy() for name, values in self.params.items()}}
        return {group: values for group, values in groups.items() if group in self.env.spec}

    def _result(self, obs, active, action, reward, terminated, truncated, groups):
        info = {"active": active, "executed_action": action}
        result = types.SimpleNamespace(
            observation=obs, reward=reward, terminated=terminated, truncated=truncated, info=info
        )
        for group, values in groups.items():  # only the groups the spec has: results without them lack the key
            setattr(result, group, values)
        return result

    def reset(self):
        """The batch of ``env.reset()``: every env starts a new episode."""
        if self.started:
            self.abandoning()
            self.episode_id += 1
        self.started = True
        self.step_id[:] = 0
        self.ended[:] = False
        obs = self._observe()
        groups = self._groups(np.ones(self.n, bool))
        self.began(obs, groups)
        zeros = np.zeros(self.n, bool)
        action = np.zeros((self.n, self.env.spec["action_shape"][0]), np.float32)
        return obs, self._result(obs, zeros, action, np.zeros(self.n, np.float32), zeros, zeros.copy(), groups)

    def step(self):
        """The batch of ``env.step(a)``."""
        active = ~self.ended
        self.episode_id[self.ended] += 1
        self.step_id[self.ended] = 0
        self.step_id[active] += 1
        terminated = active & (self.rng.random(self.n) < self.end_prob)
        truncated = active & ~terminated & (self.step_id == self.env.max_steps)
        action = self.rng.uniform(-1, 1, (self.n, self.env.spec["action_shape"][0])).astype(np.float32)
        reward = np.where(active, self.rng.normal(size=self.n), 0).astype(np.float32)
        obs = self._observe()
        groups = self._groups(~active)
        self.stepped(obs, groups, active, (action, reward, terminated, truncated))
        self.ended = terminated | truncated
        return obs, self._result(obs, active, action, reward, terminated, truncated, groups)

    def abandoning(self) -> None:
        """Called by :meth:`reset` before it gives up every env's episode (``ended`` says which had ended)."""

    def began(self, obs: dict, groups: dict) -> None:
        """Called by :meth:`reset` with its batch's observation and state/params groups."""

    def stepped(self, obs: dict, groups: dict, active, transition: tuple) -> None:
        """Called by :meth:`step` with its batch; ``transition`` is (action, reward, terminated, truncated)."""


def make_batches(source: SyntheticBatches, steps: int, *, resets_at=()) -> list:
    """A reset batch, then ``steps`` step batches; ``source.reset()`` again before each step index in
    ``resets_at``."""
    batches = [source.reset()]
    for k in range(steps):
        batches.append(source.reset() if k in resets_at else source.step())
    return batches
