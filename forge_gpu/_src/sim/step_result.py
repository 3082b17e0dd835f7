"""The step result: a structure of arrays, one row per env. Pure Python; no Warp import."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class StepResult:
    """One step of ``N`` envs. On the device the arrays are Warp arrays that the next ``step``
    overwrites; :meth:`numpy` takes a host copy and :meth:`to_torch` zero-copy torch views."""

    observation: dict[str, Any]
    """Observation fields, each ``[N, ...]``: ``env_id``, ``episode_id``, ``step_id`` int32 ``[N]``,
    ``time`` float32 ``[N]`` [s since the episode's first frame], ``proprio`` float32 ``[N, P]``,
    and task fields."""
    reward: Any
    """Reward of the transition, float32 ``[N]``; zero on reset rows."""
    terminated: Any
    """The transition ended the episode in a terminal state, bool ``[N]``."""
    truncated: Any
    """The transition ended the episode at ``max_steps``, bool ``[N]``."""
    info: dict[str, Any]
    """``active`` bool ``[N]`` (false on rows that are the first frame of an episode),
    ``executed_action`` float32 ``[N, A]`` (the action after clipping; zero on reset rows) and
    ``action_nonfinite`` bool ``[N]`` (the given action held a NaN or inf; zeros were executed) and
    ``solver_overflow`` int32 ``[N]`` (MuJoCo-Warp's overflow bits of the step's substeps, ORed; on rows with
    ``active`` false they belong to no episode; zero for the other solvers: ``sim/solver.py``)."""
    state: dict[str, Any] = field(default_factory=dict)
    """The simulator state of each env after the step, each ``[N, ...]`` (``joint_q``, ``joint_qd`` and the
    task's own, e.g. ``target_pos``): what restores the world exactly (env.spec's ``state``); empty when the
    config's ``record_state`` is false."""
    params: dict[str, Any] = field(default_factory=dict)
    """The randomized values of each env's current episode, each ``[N, ...]`` float32 (env.spec's ``params``),
    drawn at the episode's reset and constant until its end; empty without a ``[randomize]`` table."""

    #: The prefixes of the flattened names of :meth:`arrays` that hold a dict of the result.
    GROUPS = {"obs/": "observation", "info/": "info", "state/": "state", "params/": "params"}

    def arrays(self) -> dict[str, Any]:
        """Every array of the result, flattened to ``obs/<field>``, ``reward``, ... ``info/<key>``,
        ``state/<name>``, ``params/<name>``."""
        out = {f"obs/{k}": v for k, v in self.observation.items()}
        out.update(reward=self.reward, terminated=self.terminated, truncated=self.truncated)
        out.update({f"info/{k}": v for k, v in self.info.items()})
        out.update({f"state/{k}": v for k, v in self.state.items()})
        out.update({f"params/{k}": v for k, v in self.params.items()})
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, Any]) -> StepResult:
        """The result whose :meth:`arrays` are ``arrays`` (the inverse of :meth:`arrays`)."""
        groups: dict[str, dict] = {name: {} for name in cls.GROUPS.values()}
        for key, value in arrays.items():
            prefix = key[: key.find("/") + 1]
            if prefix in cls.GROUPS:
                groups[cls.GROUPS[prefix]][key[len(prefix) :]] = value
        return cls(reward=arrays["reward"], terminated=arrays["terminated"], truncated=arrays["truncated"], **groups)

    def numpy(self) -> StepResult:
        """A host copy (numpy arrays), safe to keep across steps."""
        return self.map(lambda a: np.array(a.numpy() if hasattr(a, "numpy") else a, copy=True))

    def to_torch(self) -> StepResult:
        """Zero-copy torch views of the device arrays (imports torch).

        On CUDA, the caller's current torch stream is first made to wait for the env's Warp stream, so
        torch work queued after this call reads the step's values (no host sync).
        """
        import torch
        import warp as wp

        from forge_gpu._src.sim.streams import torch_stream_of

        for device in {str(a.device): a.device for a in self.arrays().values()}.values():
            if device.is_cuda:
                stream = torch.cuda.current_stream(wp.device_to_torch(device))
                stream.wait_stream(torch_stream_of(wp.get_stream(device)))
        return self.map(wp.to_torch)

    def map(self, fn) -> StepResult:
        """A new result with ``fn`` applied to every array."""
        return StepResult(
            observation={k: fn(v) for k, v in self.observation.items()},
            reward=fn(self.reward),
            terminated=fn(self.terminated),
            truncated=fn(self.truncated),
            info={k: fn(v) for k, v in self.info.items()},
            state={k: fn(v) for k, v in self.state.items()},
            params={k: fn(v) for k, v in self.params.items()},
        )
