"""Policies: the built-in ``random`` and the task's ``expert`` (Warp kernels), and torch policies (:class:`TorchPolicy`:
a user's callable with its observation history and its action chunks).

A policy is a callable ``(observation: dict[str, wp.array]) -> wp.array [N, A]`` on the env's device, of the
shape of ``env.action_input`` (the buffer ``step`` stages actions in). :func:`load_policy` makes one from a name:
``random``, ``expert``, ``MODULE:FACTORY`` (``FACTORY(spec, device, **args)`` returns a torch callable) or
``lerobot:PATH`` (a LeRobot checkpoint, ``sim/lerobot_policy.py``), ``pt2:PATH`` (a ``torch.export`` program
taking a dict of observation fields: an RL policy exported by ``export_policy`` or ``bench/ppo.py``) or
``torchscript:PATH`` (a TorchScript file, ``forward(observation: Dict[str, Tensor]) -> Tensor``).
docs/evaluation.md "Policies" is the contract.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import numbers
import os
import sys
import warnings

import warp as wp

from forge_gpu._src.core.checks import is_int
from forge_gpu._src.sim.names import (
    BUILTIN_POLICIES,
    EXECUTIONS,
    LEROBOT_PREFIX,
    PT2_PREFIX,
    TORCHSCRIPT_PREFIX,
    check_policy_name,
)
from forge_gpu._src.sim.streams import torch_stream_of
from forge_gpu.kernels import policies as kernels

ENSEMBLE_DECAY = 0.01
"""The default ``ensemble_decay`` m (ACT's): weights ``exp(-m * i)``, ``i = 0`` for the oldest prediction."""


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


def load_policy(
    name: str,
    env,
    args: dict | None = None,
    *,
    execution: str = "open_loop",
    steps_per_chunk: int | None = None,
    ensemble_decay: float | None = None,
):
    """The policy ``name`` for ``env``: a built-in one (``random``, ``expert``), or a :class:`TorchPolicy` around the
    callable that ``MODULE:FACTORY`` makes, ``FACTORY(env.spec, torch_device, **args)``, or that
    ``lerobot_policy(PATH, env, **args)`` makes of ``lerobot:PATH`` (a LeRobot checkpoint).

    ``MODULE`` is looked for on ``sys.path`` and then in the working directory (as ``python -m`` would find it: the
    ``forge-gpu`` script's own path does not hold it). ``args``: keyword arguments of the factory (the command
    line's ``--policy-arg KEY=VALUE``). ``execution``, ``steps_per_chunk`` and ``ensemble_decay``: how a policy
    with action chunks is executed (:class:`TorchPolicy`). ValueError in one line naming the policy when the module
    or factory cannot be loaded, when the factory takes no argument of a name in ``args`` (or needs one not
    there), when it raises (its error named as its own), or when an option does not apply to the policy."""
    check_policy_name(name)
    if args is None:
        args = {}
    if not isinstance(args, dict) or not all(isinstance(k, str) and k for k in args):
        raise ValueError(f"policy {name!r}: args must be a dict of argument names to values, got {args!r}")
    if name in BUILTIN_POLICIES:
        if args:
            raise ValueError(
                f"policy {name!r} is built in and takes no arguments; got {', '.join(map(repr, args))} (--policy-arg)"
            )
        given = _given_chunk_options(execution, steps_per_chunk, ensemble_decay, default_execution="open_loop")
        if given:
            raise ValueError(f"{given[0]} does not apply: the built-in policy {name!r} returns no action chunks")
        return make_policy(name, env)
    options = {"execution": execution, "steps_per_chunk": steps_per_chunk, "ensemble_decay": ensemble_decay}
    if name.startswith(LEROBOT_PREFIX):
        from forge_gpu._src.sim.lerobot_policy import lerobot_policy  # imports LeRobot itself only when loading

        fn = _make_callable(name, "loading it", lerobot_policy, (name[len(LEROBOT_PREFIX) :], env), args)
        return TorchPolicy(env, fn, name=name, **options)
    if name.startswith(TORCHSCRIPT_PREFIX):
        fn = _make_callable(name, "loading it", torchscript_policy, (name[len(TORCHSCRIPT_PREFIX) :], env), args)
        return TorchPolicy(env, fn, name=name, **options)
    if name.startswith(PT2_PREFIX):
        fn = _make_callable(name, "loading it", exported_policy, (name[len(PT2_PREFIX) :], env), args)
        return TorchPolicy(env, fn, name=name, **options)
    module_name, _, factory_name = name.partition(":")
    try:
        factory = getattr(_import_from_working_directory(module_name), factory_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"policy {name!r}: cannot load {factory_name} from {module_name}: {e}") from e
    fn = _make_callable(name, "its factory", factory, (env.spec, wp.device_to_torch(env.device)), args)
    return TorchPolicy(env, fn, name=name, **options)


def torchscript_policy(path: str, env):
    """The TorchScript module saved at ``path`` (``torch.jit.save``), on ``env``'s device, in eval mode: called with
    the env's observation dict (torch views), it returns float32 ``[N, A]``. ValueError in one line when the file is
    missing or is no TorchScript file."""
    import torch

    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path!r}")
    with warnings.catch_warnings():  # torch 2.10+ marks TorchScript deprecated; its files still load
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(path, map_location=wp.device_to_torch(env.device))
    return module.eval()


class ExportedPolicy:
    """A ``torch.export`` program (``ExportedProgram``) as a policy: called with the env's observation dict, it gives
    the program the fields its forward was exported with (``fields``, read from the program's input spec) and
    returns its ``[N, A]``."""

    def __init__(self, module, fields: list[str]):
        self.module = module
        self.fields = list(fields)
        """The observation fields the program takes, in its input's order."""

    def __call__(self, observation: dict):
        return self.module({name: observation[name] for name in self.fields})


def exported_policy(path: str, env) -> ExportedPolicy:
    """The ``torch.export`` program saved at ``path`` (``torch.export.save``: a ``.pt2`` file, what ``export_policy``
    writes), on ``env``'s device: its forward takes one argument, a dict of observation fields (torch tensors ``[N,
    ...]``, any batch size its export allows), and returns float32 ``[N, A]``. ValueError in one line when the file
    is missing, is no ``torch.export`` program, takes other arguments or names a field the env does not have."""
    import logging

    import torch

    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path!r}")
    quiet = logging.getLogger("torch.export")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # torch logs a traceback before raising on a file that is no archive
    try:
        program = torch.export.load(path)
    except Exception as e:
        raise ValueError(f"{path!r} is no torch.export program (.pt2): {type(e).__name__}: {e}") from None
    finally:
        quiet.setLevel(level)
    fields = _dict_input_fields(program.call_spec.in_spec)
    if fields is None:
        raise ValueError(
            f"{path!r}: its forward does not take one dict of observation fields (torch.export input spec "
            f"{program.call_spec.in_spec})"
        )
    unknown = [name for name in fields if name not in env.observation]
    if unknown:
        raise ValueError(
            f"{path!r} takes the observation field {unknown[0]!r}, which this env does not have; its fields are "
            f"{', '.join(env.observation)}"
        )
    device = wp.device_to_torch(env.device)
    if torch.device(device).type != "cpu":
        from torch.export.passes import move_to_device_pass

        program = move_to_device_pass(program, device)
    return ExportedPolicy(program.module(), fields)


def _dict_input_fields(in_spec) -> list[str] | None:
    """The keys of the one dict argument of an exported program's input spec ``((args...), {kwargs})``, or None
    when its inputs are anything else."""
    try:
        args, kwargs = _children(in_spec)
        (observation,) = _children(args)
    except (AttributeError, ValueError):
        return None
    if _children(kwargs) or observation.type is not dict:
        return None
    if any(_children(child) for child in _children(observation)):  # each value must be one tensor
        return None
    return list(observation.context)


def _children(spec) -> list:
    """A pytree ``TreeSpec``'s child specs (``children()`` in torch 2.10+, the ``children_specs`` list before)."""
    children = getattr(spec, "children", None)
    return list(children()) if callable(children) else list(spec.children_specs)


def _make_callable(name: str, what: str, factory, positional: tuple, args: dict):
    """``factory(*positional, **args)``, its arguments checked against its signature first (so that a ``TypeError``
    of the factory's own code is said as its own): ValueError naming the policy and the argument."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a callable without a signature Python can read: called as it is
        signature = None
    if signature is not None:
        parameters = signature.parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        unknown = [k for k in args if not takes_any and (k not in parameters or parameters[k].kind in _NOT_BY_NAME)]
        if unknown:
            raise ValueError(
                f"policy {name!r}: {getattr(factory, '__name__', factory)}{signature} takes no argument "
                f"{unknown[0]!r} (--policy-arg {unknown[0]}=...)"
            )
        try:
            signature.bind(*positional, **args)
        except TypeError as e:
            raise ValueError(
                f"policy {name!r}: {getattr(factory, '__name__', factory)}{signature} cannot be called with the "
                f"arguments {sorted(args)} (--policy-arg KEY=VALUE): {e}"
            ) from e
    try:
        fn = factory(*positional, **args)
    except Exception as e:  # the user's code: said as theirs, in one line
        raise ValueError(f"policy {name!r}: {what} raised {type(e).__name__}: {e}") from e
    if not callable(fn):
        raise ValueError(f"policy {name!r}: {what} returned {fn!r}, which is not callable")
    return fn


_NOT_BY_NAME = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)


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


def _given_chunk_options(execution, steps_per_chunk, ensemble_decay, *, default_execution) -> list[str]:
    """The chunk options given (``name=value (--flag)``), ``execution`` counted where it is not the default."""
    given = []
    if execution != default_execution:
        given.append(f"execution={execution!r} (--chunk-exec)")
    if steps_per_chunk is not None:
        given.append(f"steps_per_chunk={steps_per_chunk!r} (--chunk-steps)")
    if ensemble_decay is not None:
        given.append(f"ensemble_decay={ensemble_decay!r} (--ensemble-decay)")
    return given


def _int_attribute(fn, attribute: str, label: str) -> int | None:
    """``fn``'s ``history`` or ``chunk``: None when absent (or None), else an int >= 1 (ValueError otherwise)."""
    value = getattr(fn, attribute, None)
    if value is None:
        return None
    if not is_int(value) or value < 1:
        raise ValueError(f"{label}: its {attribute} attribute is {value!r}; expected an int >= 1 (or no attribute)")
    return int(value)


class TorchPolicy:
    """Drives the env with a torch callable ``fn(dict[str, torch.Tensor]) -> torch.Tensor``.

    ``fn`` is called once per call of the policy (once per step, for every env), and may have two int attributes:

    - ``history`` (default 1): with 1, each observation field reaches ``fn`` as a zero-copy torch view of the env's
      device buffer ``[N, ...]``, overwritten by the next step (copy what you keep). With ``h > 1``, each field is
      ``[N, h, ...]``, the env's last ``h`` frames oldest first, ending with the current one; frames before the
      episode's first repeat its first (as ``Windows(pad=True)``'s windows do). These are new tensors every call,
      made on the device by one Warp kernel per field (``kernels/policies.py``): ``fn`` may keep them.
    - ``chunk`` (default none): ``fn`` returns ``[N, H, A]``, an action chunk per env, instead of ``[N, A]``.
      ``execution="open_loop"`` (default): each env executes actions ``0 .. K-1`` (``steps_per_chunk`` K in
      ``1 .. H``, default H) of the chunk it took at its last refresh, then takes the chunk of ``fn``'s current
      call. ``execution="ensemble"``: the action at step ``t`` of an episode is ``sum_i w_i a_i / sum_i w_i`` over
      the chunks predicted at steps ``t-H+1 .. t`` of the episode (fewer at its start), ``a_i`` each one's action
      for ``t``, ``w_i = exp(-m * i)``, ``i = 0`` for the oldest (``ensemble_decay`` m, default 0.01: ACT's
      temporal ensembling). Either way ``fn`` is called at every step for the whole batch (the envs are at
      different points of their chunks): chunks save no policy calls here. The chunk state is ``[N, H, A]`` on the
      device (open loop: the chunk held; ensemble: each coming step's weighted sum), updated by one kernel.

    An env's history and chunk start again at its episode's first frame (``step_id == 0``), so the policy's call on
    a terminal frame (whose action the auto-reset drops) leaves nothing behind in the next episode. The action it
    returns is handed to the env without a copy (``wp.from_torch``); with chunks it is the wrapper's own ``[N, A]``
    buffer, overwritten by the next call. On CUDA ``fn`` runs on the env's Warp stream.

    ``name``: what errors call the policy (``load_policy`` gives its name). ValueError in one line for a bad
    attribute or an option that does not apply (``steps_per_chunk`` or ``ensemble_decay`` for the other execution
    or for a policy without chunks; K out of range; a negative or non-finite decay).
    """

    def __init__(
        self,
        env,
        fn,
        *,
        name: str | None = None,
        execution: str = "open_loop",
        steps_per_chunk: int | None = None,
        ensemble_decay: float | None = None,
    ):
        import torch

        label = f"policy {name!r}" if name else f"policy {fn!r}"
        if not callable(fn):
            raise ValueError(f"{label} is {fn!r}, which is not callable")
        self.env, self.fn, self.name = env, fn, name
        self.history = _int_attribute(fn, "history", label) or 1
        """Frames per observation field that ``fn`` sees (1: the current one, no history axis)."""
        self.chunk = _int_attribute(fn, "chunk", label)
        """Actions per chunk ``fn`` returns (None: one action per env)."""
        self._set_execution(label, execution, steps_per_chunk, ensemble_decay)
        self.torch_device = wp.device_to_torch(env.device)
        self._torch = torch
        # On CUDA torch runs on the env's Warp stream, so that the policy reads observations after the
        # step that wrote them and the step reads the action after the policy wrote it, without a sync.
        self._stream = torch_stream_of(wp.get_stream(env.device)) if env.device.is_cuda else None
        labels = env.spec.get("labels", {})  # the expert's labels are the learner's targets, never its inputs
        self._views = {k: wp.to_torch(v) for k, v in env.observation.items() if k not in labels}
        self._step_id = env.observation["step_id"]
        self.observation = dict(self._views)
        """What ``fn`` is given: the views, or (``history > 1``) the last call's histories."""
        self._histories = [_History(name, view, self.history) for name, view in self._views.items()]
        n, a = env.action_input.shape
        self.shape = (n, a) if self.chunk is None else (n, self.chunk, a)
        """The shape ``fn`` must return."""
        self._restart = True  # the first call: every env starts its history and chunk afresh
        if self.chunk is not None:
            self.action = wp.zeros((n, a), dtype=float, device=env.device)
            self._state = wp.zeros((n, self.chunk, a), dtype=float, device=env.device)
            """Open loop: the chunk each env holds; ensemble: the weighted sums of each coming step's actions."""
            self._counter = wp.zeros(n, dtype=wp.int32, device=env.device)
            """Open loop: the next action's index in the chunk held; ensemble: the episode's step at the last call."""

    def _set_execution(self, label: str, execution, steps_per_chunk, ensemble_decay) -> None:
        if execution not in EXECUTIONS:
            raise ValueError(f"execution={execution!r} (--chunk-exec): expected one of {', '.join(EXECUTIONS)}")
        if self.chunk is None:
            given = _given_chunk_options(execution, steps_per_chunk, ensemble_decay, default_execution="open_loop")
            if given:
                raise ValueError(f"{given[0]} does not apply: {label} returns no action chunks (no chunk attribute)")
            self.execution, self.steps_per_chunk, self.ensemble_decay = execution, None, None
            return
        if execution == "open_loop":
            if ensemble_decay is not None:
                raise ValueError(
                    f"ensemble_decay={ensemble_decay!r} (--ensemble-decay) applies to execution='ensemble' only"
                )
            k = self.chunk if steps_per_chunk is None else steps_per_chunk
            if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= self.chunk:
                raise ValueError(
                    f"steps_per_chunk={steps_per_chunk!r} (--chunk-steps): must be an int in 1..{self.chunk}, the "
                    f"chunk of {label}"
                )
            self.execution, self.steps_per_chunk, self.ensemble_decay = execution, int(k), None
            return
        if steps_per_chunk is not None:
            raise ValueError(
                f"steps_per_chunk={steps_per_chunk!r} (--chunk-steps) applies to execution='open_loop' only"
            )
        m = ENSEMBLE_DECAY if ensemble_decay is None else ensemble_decay
        if isinstance(m, bool) or not isinstance(m, numbers.Real) or not math.isfinite(m) or m < 0:
            raise ValueError(f"ensemble_decay={ensemble_decay!r} (--ensemble-decay): must be a finite number >= 0")
        self.execution, self.steps_per_chunk, self.ensemble_decay = execution, None, float(m)

    def __call__(self, observation: dict | None = None):
        """The action ``[N, A]`` for the env's current observation (``observation`` is not read: ``fn`` is given
        the env's own buffers, or their histories)."""
        torch = self._torch
        on_stream = torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()
        restart = int(self._restart)
        with torch.no_grad(), on_stream:
            if self.history > 1:
                for history in self._histories:
                    self.observation[history.name] = history.update(restart, self._step_id, torch)
            action = self.fn(self.observation)
            if isinstance(action, torch.Tensor):
                action = action.contiguous()  # on the env's stream too, so the step is ordered after it
        self._restart = False
        if not isinstance(action, torch.Tensor):
            raise ValueError(f"the torch policy returned a {type(action).__name__}; expected a torch.Tensor")
        if tuple(action.shape) != self.shape or action.dtype != torch.float32:
            raise ValueError(
                f"the torch policy returned {action.dtype} of shape {tuple(action.shape)}; "
                f"expected torch.float32 of shape {self.shape}"
                + (f" (its chunk is {self.chunk})" if self.chunk is not None else "")
            )
        if action.device != torch.device(self.torch_device):
            raise ValueError(f"the torch policy returned a tensor on {action.device}; expected {self.torch_device}")
        # On CUDA non-finite values are flagged by the step itself (env.action_nonfinite): checking here
        # would wait for the device every step.
        if self._stream is None and not bool(torch.isfinite(action).all()):
            raise ValueError("the torch policy returned non-finite actions (NaN or inf)")
        if self.chunk is None:
            return wp.from_torch(action)
        predicted = wp.from_torch(action)
        if self.execution == "open_loop":
            kernel, option = kernels.open_loop_kernel, self.steps_per_chunk
        else:
            kernel, option = kernels.ensemble_kernel, self.ensemble_decay
        wp.launch(
            kernel,
            dim=self.shape[0],
            inputs=[restart, option, self._step_id, predicted],
            outputs=[self._state, self._counter, self.action],
            device=self.env.device,
        )
        return self.action


class _History:
    """One observation field's history ``[N, h, ...]``: a new tensor each call, written by one kernel from the
    field's current frame and the previous history, as 4-byte words (or bytes where a frame is not whole words)."""

    def __init__(self, name: str, view, history: int):
        import torch

        self.name, self.view, self.history = name, view, history
        n = view.shape[0]
        frame_bytes = view[0].numel() * view.element_size() if n else 0
        words = frame_bytes % 4 == 0 and frame_bytes > 0
        self.unit = torch.int32 if words else torch.uint8
        self.frame = wp.from_torch(view.reshape(n, -1).view(self.unit))
        units = self.frame.shape[1]
        # A thread per word on CUDA; on the CPU, where each thread costs more than a word, one per frame.
        self.per_thread = 1 if self.frame.device.is_cuda else max(units, 1)
        self.parts = -(-units // self.per_thread)
        self.previous = None

    def update(self, restart: int, step_id: wp.array, torch):
        view = self.view
        n = view.shape[0]
        new = torch.empty((n, self.history, *view.shape[1:]), dtype=view.dtype, device=view.device)
        out = wp.from_torch(new.view(n, self.history, -1).view(self.unit))
        previous = out if self.previous is None else self.previous
        wp.launch(
            kernels.history_kernel,
            dim=(n, self.history, self.parts),
            inputs=[restart, self.per_thread, step_id, self.frame, previous],
            outputs=[out],
            device=self.frame.device,
        )
        self.previous = out  # holds ``new`` (from_torch keeps its tensor) until the next call has read it
        return new
