"""``GymVectorEnv``: gymnasium 1.x's vector interface over a :class:`VectorEnv`, in torch tensors on the env's device.

Every tensor it returns is a zero-copy view (``wp.to_torch``, made once) of the env's own buffers: a step copies
nothing, on the host or on the device, and the views are overwritten by the next ``step`` (copy what you keep).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from forge_gpu._src.sim.streams import torch_stream_of

INSTALL = "pip install 'forge-gpu[rl]'"
"""What installs the RL extras (gymnasium, rsl-rl-lib)."""

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode
    from gymnasium.vector.utils import batch_space
except ImportError as e:  # said once, with the one command that fixes it
    raise ImportError(f"forge_gpu.sim.GymVectorEnv needs gymnasium>=1.0 ({e}): {INSTALL}") from e


def network_fields(spec: dict) -> list[str]:
    """The env's observation fields a policy network can take, in the spec's order: float32 vectors (``[N, D]``)
    that are no expert's label (``proprio``, a task file's ``critic`` group, an object's pose, ...)."""
    labels = spec.get("labels", {})
    return [
        name
        for name, field in spec["observation"].items()
        if name not in labels and field["dtype"] == "float32" and len(field["shape"]) == 1
    ]


def field_space(shape, dtype: str) -> gymnasium.spaces.Box:
    """The space of one env's value of a field of env.spec: a ``Box`` of the field's shape and dtype, bounded by
    what the dtype holds (floats unbounded, bools 0..1, integers their type's range)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        low, high = 0, 1
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        low, high = info.min, info.max
    else:
        low, high = -np.inf, np.inf
    return gymnasium.spaces.Box(low=low, high=high, shape=tuple(shape), dtype=dtype)


class GymVectorEnv(gymnasium.vector.VectorEnv):
    """``env`` (a :class:`VectorEnv`, e.g. ``forge_gpu.sim.make(...)``) as a ``gymnasium.vector.VectorEnv``.

    - Observations are a dict: every observation field of the env under its own name (``proprio`` is the policy's
      group; a task file's other groups, e.g. ``critic``, are fields of their names; ``env_id``, ``episode_id``,
      ``step_id``, ``time`` and the task's fields beside them); ``observation_space`` is the ``Dict`` of their
      batched ``Box`` es, from ``env.spec``.
    - ``step(actions)``: ``actions`` float32 ``[N, A]`` (a torch tensor on the env's device, a Warp array or a
      numpy array; clipped to ``action_space``'s bounds) -> ``(observation, reward, terminated, truncated, info)``,
      torch tensors on the env's device: reward float32 ``[N]``, terminated and truncated bool ``[N]``; ``info``
      holds the env's ``active``, ``executed_action``, ``action_nonfinite``, ``solver_overflow`` and the dicts
      ``params`` (each episode's randomized values) and ``state`` (when the config records it).
    - Autoreset: ``metadata["autoreset_mode"]`` is ``AutoresetMode.NEXT_STEP``, which is the env's own: the step
      that ends an episode returns its final observation (that row of ``observation`` is the final observation;
      nothing is moved to ``info``), and the next step resets that env, ignoring its action, and returns the new
      episode's first observation with reward 0, terminated and truncated false (and ``info["active"]`` false).
    - ``reset(seed=None)``: the env's draws are keyed by the seed it was made with; a ``seed`` other than that
      one is refused (make a new env with ``make(..., seed=...)``).

    On CUDA each call orders torch's current stream after the env's Warp stream (no host sync). The tensors are
    views of the env's buffers: the next ``step`` overwrites them.

    ``recorder``: a ``forge_gpu.recording.RolloutRecorder`` of the same env, or None (nothing is recorded and
    nothing copied). With one, every ``reset`` and ``step`` is recorded as a run (one host copy per step, in
    ``collect``'s transport), each episode with the recorder's ``policy_version``; :meth:`close` (or leaving a
    ``with`` block) closes the run.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, env, *, recorder=None):
        import torch

        if recorder is not None and getattr(recorder, "env", None) is not env:
            raise ValueError("GymVectorEnv(recorder=...): the recorder records another env; make it with this env")
        self.env = env
        self.recorder = recorder
        """The ``RolloutRecorder`` that records every reset and step, or None."""
        self.num_envs = env.num_envs
        self.device = wp.device_to_torch(env.device)
        """The torch device of every tensor returned (the env's)."""
        spec = env.spec
        self.single_observation_space = gymnasium.spaces.Dict(
            {name: field_space(f["shape"], f["dtype"]) for name, f in spec["observation"].items()}
        )
        low = np.asarray(spec["action_low"], dtype=np.float32)
        high = np.asarray(spec["action_high"], dtype=np.float32)
        self.single_action_space = gymnasium.spaces.Box(low=low, high=high, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        views = env.result.map(wp.to_torch)  # once: the env's buffers never move
        self._observation = dict(views.observation)
        self._reward, self._terminated, self._truncated = views.reward, views.terminated, views.truncated
        self._info = {**views.info, "params": dict(views.params), "state": dict(views.state)}
        self._torch = torch
        self._env_stream = torch_stream_of(wp.get_stream(env.device)) if env.device.is_cuda else None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """A fresh episode in every env: ``(observation, info)``. ``seed``: None or the env's own seed."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed != self.env.seed):
            raise ValueError(
                f"reset(seed={seed!r}): this env's draws are keyed by its seed {self.env.seed} (make(..., seed=)); "
                "make a new env for another seed"
            )
        if options:
            raise ValueError(f"reset(options={options!r}): this env takes no reset options")
        if self.recorder is not None:
            self.recorder.before(reset=True)
        self.env.reset()
        if self.recorder is not None:
            self.recorder.after()
        self._order()
        return self._observation, self._info

    def step(self, actions):
        """One control step of every env (next-step autoreset): ``(observation, reward, terminated, truncated,
        info)``, views of the env's buffers."""
        if self.recorder is not None:
            self.recorder.before(reset=False)
        self.env.step(actions)
        if self.recorder is not None:
            self.recorder.after()
        self._order()
        return self._observation, self._reward, self._terminated, self._truncated, self._info

    def close_extras(self, **kwargs) -> None:
        """``close()``: the recorder's run is closed (its last step published); the env itself stays usable."""
        if self.recorder is not None:
            self.recorder.close(error=kwargs.get("error"))

    def __enter__(self) -> GymVectorEnv:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        """Leaving a ``with`` block closes the recording; with an exception, the run is closed as failed with it
        (what was published stays)."""
        self.close(error=value)

    def _order(self) -> None:
        """CUDA: torch work queued after this call runs after the env's step (a stream wait, no host sync)."""
        if self._env_stream is not None:
            self._torch.cuda.current_stream(self.device).wait_stream(self._env_stream)
