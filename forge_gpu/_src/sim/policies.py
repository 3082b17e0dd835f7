"""Built-in policies: ``random`` and the task's ``expert``, both Warp kernels.

A policy is a callable ``(observation: dict[str, wp.array]) -> wp.array [N, A]`` on the env's device, of the
shape of ``env.action_input`` (the buffer ``step`` stages actions in).
"""

from __future__ import annotations

import contextlib
import os
import sys

import warp as wp

from forge_gpu._src.sim.names import BUILTIN_POLICIES, check_policy_name
from forge_gpu._src.sim.streams import torch_stream_of
from forge_gpu.kernels import policies as kernels


class RandomPolicy:
    """Uniform actions within the bounds, deterministic under the (seed, env, episode, step) contract."""

    def __init__(self, env):
        self.env = env
        self.action = wp.zeros(env.action_input.shape, dtype=float, device=env.device)

    def __call__(self, observation: dict) -> wp.array:
        env = self.env
        wp.launch(
            kernels.random_policy_kernel,
            dim=env.num_envs,
            inputs=[
                env.seed,
                env.action_low,
                env.action_high,
                env.world.draw_episode,
                observation["step_id"],
                env.world.draw_env,
            ],
            outputs=[self.action],
            device=env.device,
        )
        return self.action


def make_policy(name: str, env):
    """The built-in policy ``name`` (``random`` or ``expert``) for ``env``."""
    if name == "random":
        return RandomPolicy(env)
    if name == "expert":
        policy = env.task.expert(env.world)
        if policy is None:
            raise ValueError(f"task {env.task.spec.id!r} has no expert policy; use 'random'")
        return policy
    raise ValueError(f"unknown policy {name!r}; built-in policies are {', '.join(BUILTIN_POLICIES)}")


def load_policy(name: str, env):
    """A built-in policy, or the torch policy that ``MODULE:FACTORY(env.spec, device)`` returns. ``MODULE`` is
    looked for on ``sys.path`` and then in the working directory (as ``python -m`` would find it: the
    ``forge-gpu`` script's own path does not hold it). ValueError naming the policy when the module or factory
    cannot be loaded, or when the factory raises (its error named as its own)."""
    check_policy_name(name)
    if name in BUILTIN_POLICIES:
        return make_policy(name, env)
    module_name, _, factory_name = name.partition(":")
    try:
        factory = getattr(_import_from_working_directory(module_name), factory_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"policy {name!r}: cannot load {factory_name} from {module_name}: {e}") from e
    return TorchPolicy(env, factory, name=name)


def _import_from_working_directory(module_name: str):
    import importlib

    here = os.getcwd()
    added = not any(p in ("", ".", here) for p in sys.path)
    if added:
        sys.path.append(here)  # after the installed packages: a file here never shadows one of them
    try:
        return importlib.import_module(module_name)
    finally:
        if added:
            sys.path.remove(here)


class TorchPolicy:
    """Drives the env with a torch callable ``(dict[str, torch.Tensor]) -> torch.Tensor [N, A]``.

    Observations reach it as zero-copy torch views of the env's device buffers, and the action it
    returns is handed to the env without a copy (``wp.from_torch``).
    """

    def __init__(self, env, factory, *, name: str | None = None):
        import torch

        self.env = env
        self.torch_device = wp.device_to_torch(env.device)
        try:
            self.fn = factory(env.spec, self.torch_device)
        except Exception as e:  # the user's code: said as theirs, in one line
            what = f"policy {name!r}: its factory" if name else f"policy factory {factory!r}"
            raise ValueError(f"{what} raised {type(e).__name__}: {e}") from e
        if not callable(self.fn):
            raise ValueError(f"policy factory {factory!r} returned {self.fn!r}, which is not callable")
        self.observation = {k: wp.to_torch(v) for k, v in env.observation.items()}
        self.shape = tuple(env.action_input.shape)
        self._torch = torch
        # On CUDA torch runs on the env's Warp stream, so that the policy reads observations after the
        # step that wrote them and the step reads the action after the policy wrote it, without a sync.
        self._stream = torch_stream_of(wp.get_stream(env.device)) if env.device.is_cuda else None

    def __call__(self, observation: dict):
        torch = self._torch
        on_stream = torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()
        with torch.no_grad(), on_stream:
            action = self.fn(self.observation)
            if isinstance(action, torch.Tensor):
                action = action.contiguous()  # on the env's stream too, so the step is ordered after it
        if not isinstance(action, torch.Tensor):
            raise ValueError(f"the torch policy returned a {type(action).__name__}; expected a torch.Tensor")
        if tuple(action.shape) != self.shape or action.dtype != torch.float32:
            raise ValueError(
                f"the torch policy returned {action.dtype} of shape {tuple(action.shape)}; "
                f"expected torch.float32 of shape {self.shape}"
            )
        if action.device != torch.device(self.torch_device):
            raise ValueError(f"the torch policy returned a tensor on {action.device}; expected {self.torch_device}")
        # On CUDA non-finite values are flagged by the step itself (env.action_nonfinite): checking here
        # would wait for the device every step.
        if self._stream is None and not bool(torch.isfinite(action).all()):
            raise ValueError("the torch policy returned non-finite actions (NaN or inf)")
        return wp.from_torch(action)
