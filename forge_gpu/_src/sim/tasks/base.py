"""What a task provides to :class:`~forge_gpu._src.sim.env.VectorEnv`.

A task is data plus a few kernels: a config file ``configs/<id>.toml``, a scene builder for one
world, and launches of its action, reset and observation kernels over all worlds at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import newton

    from forge_gpu._src.sim.env import VectorEnv


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


class Task:
    """Base class of tasks. Subclasses set ``spec`` and ``params_type`` and implement the hooks."""

    spec: ClassVar[TaskSpec]
    params_type: ClassVar[type]

    def __init__(self, config):
        self.config = config
        self.params = config.params
        self.scene = self.make_scene()

    def observation_fields(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """This instance's observation fields beyond the required ones (default ``spec.extra_fields``)."""
        return dict(self.spec.extra_fields)

    def make_scene(self) -> Any:
        """The scene description: a dataclass with a ``kind`` field."""
        raise NotImplementedError

    def build_world(self, builder: newton.ModelBuilder) -> None:
        """Add one world's bodies, joints and shapes to ``builder``."""
        raise NotImplementedError

    def bind(self, env: VectorEnv) -> None:
        """Allocate task buffers once the model exists (device arrays, gains, cameras)."""

    def apply_action(self, env: VectorEnv) -> None:
        """Write ``env.executed_action`` into the control (efforts or targets) of every world."""
        raise NotImplementedError

    def reset_worlds(self, env: VectorEnv) -> None:
        """Write the randomized start state of the worlds selected by ``env.reset_mask``."""
        raise NotImplementedError

    def observe(self, env: VectorEnv) -> None:
        """Fill ``env.proprio``, task fields, ``env.task_reward`` and ``env.task_terminated``."""
        raise NotImplementedError

    def expert(self, env: VectorEnv):
        """A scripted policy ``(observation) -> wp.array [N, A]`` on the env's device; ``None`` if none."""
        return None
