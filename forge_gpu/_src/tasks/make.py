"""``make``: a task id and options -> a ready :class:`VectorEnv`."""

from __future__ import annotations

import warp as wp

from forge_gpu._src.sim.config import load_config
from forge_gpu._src.sim.device import default_device
from forge_gpu._src.sim.env import VectorEnv
from forge_gpu._src.sim.output import init_warp
from forge_gpu._src.sim.task import Task
from forge_gpu._src.tasks.catalog import TASK_CONFIG_FILES, TASKS, resolve_task


def task_class(task: str | type[Task]) -> type[Task]:
    """The :class:`Task` class of ``task``: a registered id, a task file ``*.toml`` (registered on first use), or a
    task class itself (``replay`` builds a run's stored task file that way, registering nothing)."""
    if isinstance(task, type) and issubclass(task, Task):
        return task
    return TASKS[resolve_task(task)]


def task_config(task: str | type[Task], *, variant: str = "", **overrides):
    """The checked :class:`TaskConfig` of ``task`` (an id, a task file ``*.toml`` or a task class) with
    ``overrides`` (dotted keys allowed); ``variant`` names one of a task file's ``[variants.NAME]``."""
    cls = task_class(task)
    if hasattr(cls, "load_task_config"):  # a task file
        return cls.load_task_config({**overrides, "variant": variant} if variant else overrides)
    if variant:
        raise ValueError(f"variant {variant!r}: task {cls.spec.id!r} is code, not a task file; it has no variants")
    return load_config(cls.spec.id, cls.params_type, overrides, path=TASK_CONFIG_FILES.get(cls.spec.id))


def make(
    task: str | type[Task], *, num_envs: int, device: str | None = None, seed: int = 0, variant: str = "", **overrides
) -> VectorEnv:
    """Build ``num_envs`` environments of ``task`` on ``device``.

    Args:
        task: Task id (a file ``configs/<task>.toml``) or the path of a task file (``*.toml``: a model file and its
            terms, docs/ARCHITECTURE.md "A task from a file"), or a :class:`Task` class.
        num_envs: Number of environments.
        device: Warp device; ``None`` means ``cuda:0`` when Warp sees a CUDA device, else ``cpu``.
        seed: Seed of every random draw.
        variant: A task file's variant (``[variants.NAME]``, e.g. ``"play"``): its changes over the file, recorded
            in run.json's ``config.params.variant``; empty: none.
        overrides: Config values, e.g. ``max_steps=100`` or ``**{"solver.name": "featherstone"}``.

    Warp starts quietly: no greeting, no line per loaded kernel module, no warning that a machine
    without a GPU has no CUDA driver. ``FORGE_GPU_VERBOSE=1`` in the environment shows them.
    """
    init_warp()
    config = task_config(
        task, variant=variant, num_envs=num_envs, seed=seed, device=device or default_device(), **overrides
    )
    try:
        wp.get_device(config.device)
    except (RuntimeError, ValueError) as e:
        available = ", ".join(str(d) for d in wp.get_devices())
        raise ValueError(f"device {config.device!r} is not available to Warp ({e}); available here: {available}") from e
    return VectorEnv(task_class(task)(config), config)
