"""What a task provides to the env: a spec, a scene builder for one world, and hooks over all worlds.

A task is data plus a few kernels: a config file ``configs/<id>.toml``, a scene builder for one world,
and launches of its action, reset and observation kernels over all worlds at once. Every hook takes the
:class:`~forge_gpu._src.sim.world.World` (the model, state, control and per-world buffers it shares with
the env), never the env. A task changes the world only through the device arrays its launches write; it
assigns no attribute of the world. What it adds (observation fields, calibration) it returns from
:meth:`Task.bind` as a :class:`TaskBinding`, which the env checks (:func:`bind_task`) and stores in the
world (``world.task_fields``, ``world.calibration``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import warp as wp

from forge_gpu._src.core.lerobot_features import STATE_FIELD, environment_fields
from forge_gpu._src.sim.randomize import Parameter, check_ranges

if TYPE_CHECKING:
    import newton

    from forge_gpu._src.sim.world import World


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """Static description of a task."""

    id: str
    """Task id, e.g. ``cartpole``."""
    proprio_dim: int
    """P, the width of the ``proprio`` field."""
    action_dim: int
    """A, the width of the action."""
    extra_fields: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    """Task observation fields beyond the required ones whose shapes do not depend on the config: name ->
    (per-env shape, numpy dtype). A task whose fields follow its config adds them in
    :meth:`Task.observation_fields`."""
    has_contacts: bool = False
    """Whether the scene needs contact handling."""
    has_success: bool = False
    """Whether the task defines success; a successful episode ends terminated (with success reached)."""
    environment_state: tuple[str, ...] | None = None
    """The observation fields that make LeRobot's ``observation.environment_state``, in order (the spec's
    ``environment_state``, which the LeRobot export and the LeRobot policy adapter read: ``core/lerobot_features.py``);
    ``None``: every vector field but ``proprio``, in the spec's order."""


@dataclass(frozen=True, kw_only=True)
class TaskBinding:
    """What :meth:`Task.bind` contributes to the env, which checks it and stores it in the world."""

    fields: dict[str, wp.array] = field(default_factory=dict)
    """The task's observation fields: name -> device array ``[N, *shape]``, one per entry of
    :meth:`Task.observation_fields` with its shape and dtype. ``observe`` (or its kernels) fills them."""
    calibration: dict[str, Any] = field(default_factory=dict)
    """Sensor calibration (camera intrinsics and poses, ...), JSON-serializable; ``env.calibration`` and
    run.json's ``calibration``."""
    state: dict[str, wp.array] = field(default_factory=dict)
    """The task's own simulator state beyond ``joint_q`` and ``joint_qd`` (the reach target's position, object
    poses): name -> float32 device array ``[N, ...]``, recorded with every frame (``state/<name>``) and written
    back by ``VectorEnv.restore`` (then :meth:`Task.restore_state` re-derives what follows from it)."""


class Task:
    """Base class of tasks. Subclasses set ``spec`` and ``params_type`` and implement the hooks."""

    spec: ClassVar[TaskSpec]
    params_type: ClassVar[type]

    def __init__(self, config):
        self.config = config
        self.params = config.params
        self.scene = self.make_scene()
        check_ranges(config.randomize, self.randomizable(), self.spec.id)

    def randomizable(self) -> dict[str, Parameter]:
        """The parameters a ``[randomize]`` table may name: a subset of ``randomize.PHYSICS`` (the env applies
        them) and the task's own (its :meth:`apply_params` applies them). Default: none."""
        return {}

    def instruction_template(self) -> dict | None:
        """How each episode's instruction is made from its drawn params (``core.instructions``; run.json's
        ``env_spec.instruction_template``), or None: every episode has the config's ``instruction``."""
        return None

    def observation_fields(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """This instance's observation fields beyond the required ones (default ``spec.extra_fields``)."""
        return dict(self.spec.extra_fields)

    def environment_state(self) -> list[str] | None:
        """``spec.environment_state`` checked against this instance's fields (ValueError naming the task, the field
        and the fields allowed), or None where the task declares none."""
        if self.spec.environment_state is None:
            return None
        layout = {STATE_FIELD: ((self.spec.proprio_dim,), "float32"), **self.observation_fields()}
        return environment_fields(layout, self.spec.environment_state, name=f"task {self.spec.id!r}")

    def make_scene(self) -> Any:
        """The scene description: a dataclass with a ``kind`` field."""
        raise NotImplementedError

    def build_world(self, builder: newton.ModelBuilder) -> None:
        """Add one world's bodies, joints and shapes to ``builder``."""
        raise NotImplementedError

    def bind(self, world: World) -> TaskBinding | None:
        """Allocate task buffers once the model exists (device arrays, gains, cameras) and return what the
        task contributes: its observation fields and calibration (``None``: nothing)."""
        return None

    def apply_action(self, world: World) -> None:
        """Write ``world.executed_action`` into the control (efforts or targets) of every world."""
        raise NotImplementedError

    def reset_worlds(self, world: World) -> None:
        """Write the randomized start state of the worlds selected by ``world.reset_mask``."""
        raise NotImplementedError

    def apply_params(self, world: World) -> None:
        """Apply the task's own randomized values (``world.params``) of the worlds in ``world.reset_mask``."""

    def restore_state(self, world: World) -> None:
        """After ``VectorEnv.restore`` wrote the state of the worlds in ``world.reset_mask``: re-derive what follows
        from the task's state (a marker's shape transform from its recorded position)."""

    def observe(self, world: World) -> None:
        """Fill ``world.proprio``, the task's fields, ``world.task_reward`` and ``world.task_terminated``."""
        raise NotImplementedError

    def success_flags(self, world: World) -> wp.array | None:
        """Whether each world's current frame is a success, bool [N], filled by :meth:`observe`; ``None`` (the
        default): success is ``terminated`` (the task's episodes end terminated only when they succeed)."""
        return None

    def expert(self, world: World):
        """A scripted policy ``(observation) -> wp.array [N, A]`` on the world's device; ``None`` if none."""
        return None


def bind_task(task: Task, world: World) -> TaskBinding:
    """``task.bind(world)``, checked: ``ValueError`` names a field that ``observation_fields`` does not
    declare, or that is missing, or has another shape, dtype or device, and a calibration JSON cannot hold."""
    binding = task.bind(world)
    name = type(task).__name__
    if binding is None:
        binding = TaskBinding()
    if not isinstance(binding, TaskBinding):
        raise ValueError(f"{name}.bind returned {binding!r}; expected a TaskBinding or None")
    declared = task.observation_fields()
    if set(binding.fields) != set(declared):
        raise ValueError(
            f"{name}.bind returned fields {sorted(binding.fields)}; observation_fields() declares {sorted(declared)}"
        )
    for key, array in binding.state.items():
        if not isinstance(array, wp.array) or array.dtype != wp.float32 or array.shape[0] != world.num_envs:
            raise ValueError(
                f"{name}.bind: state {key!r} must be a float32 Warp array [N, ...] of N = {world.num_envs}"
            )
        if key in ("joint_q", "joint_qd"):
            raise ValueError(f"{name}.bind: state {key!r} is the env's; name the task's state otherwise")
    for key, (shape, dtype) in declared.items():
        array = binding.fields[key]
        want = (world.num_envs, *shape)
        if not isinstance(array, wp.array):
            raise ValueError(f"{name}.bind: field {key!r} is a {type(array).__name__}; expected a Warp array")
        got = np.dtype(wp.dtype_to_numpy(array.dtype))
        if tuple(array.shape) != want or got != np.dtype(dtype) or array.device != world.device:
            raise ValueError(
                f"{name}.bind: field {key!r} is {got} {tuple(array.shape)} on {array.device}; "
                f"expected {np.dtype(dtype)} {want} on {world.device}"
            )
    try:
        json.dumps(binding.calibration)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}.bind: calibration is not JSON-serializable ({e})") from e
    return binding
