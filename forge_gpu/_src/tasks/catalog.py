"""The task catalog: task id -> Task class, for :func:`forge_gpu.sim.make` and ``forge-gpu collect``.

A task file (a ``*.toml`` with a ``[model]`` section: a model file and its terms, ``tasks/taskfile/``) needs no
code: the shipped ones in ``configs/`` are registered below, another is registered by :func:`resolve_task` when
``make`` or ``forge-gpu collect`` is given its path. A task with its own code is one recipe (docs/ARCHITECTURE.md):
a config ``configs/<id>.toml``, its Warp kernels in
``kernels/<id>.py``, a module ``forge_gpu/_src/tasks/<id>.py`` with a :class:`Task` subclass (its hooks
take the :class:`~forge_gpu._src.sim.world.World`: see ``base.py``), and a registration: the tuple below for
a task shipped with forge_gpu, or :func:`register_task` (with the config file's path) for a task that lives
in another package. The env imports :mod:`tasks.base` alone, so it never loads this catalog or the tasks.
"""

from __future__ import annotations

import os
from pathlib import Path

from forge_gpu._src.sim.config import config_dir
from forge_gpu._src.sim.task import Task, TaskSpec
from forge_gpu._src.tasks.taskfile.task import FileTask, file_task_class

TASKS: dict[str, type[Task]] = {}
for _path in sorted(config_dir().glob("*.toml")):  # the shipped task files: a config with a [model] section
    if "\n[model]" in _path.read_text() or "\nrobot = " in _path.read_text():
        TASKS[_path.stem] = file_task_class(_path, check=False)
SHIPPED: tuple[str, ...] = tuple(sorted(TASKS))
"""The ids of the tasks forge_gpu ships (registered at import; TASKS also holds those registered since)."""
TASK_CONFIG_FILES: dict[str, Path] = {}
"""Config files of the tasks registered with a ``config`` path; the others use ``configs/<id>.toml``."""


def register_task(cls: type[Task], *, config: str | os.PathLike | None = None) -> type[Task]:
    """Make ``cls`` a task of :func:`forge_gpu.sim.make` and ``forge-gpu collect`` under ``cls.spec.id``.

    Args:
        cls: A :class:`Task` subclass with class attributes ``spec`` (a :class:`TaskSpec`) and
            ``params_type`` (the frozen dataclass of its config's ``[params]`` table).
        config: Its TOML config file; default ``configs/<id>.toml`` among forge_gpu's configs.

    Raises ValueError for a class that is not such a task, an id already taken, or a missing config file.
    Returns ``cls``, so it also serves as a class decorator (without ``config``).
    """
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ValueError(f"register_task({cls!r}): expected a subclass of forge_gpu.sim.Task")
    spec = getattr(cls, "spec", None)
    if not isinstance(spec, TaskSpec) or not isinstance(getattr(cls, "params_type", None), type):
        raise ValueError(f"{cls.__name__}: a task class needs spec = TaskSpec(...) and params_type = <dataclass>")
    if spec.id in TASKS:
        raise ValueError(f"task {spec.id!r} is already registered ({TASKS[spec.id].__name__}); choose another id")
    if config is not None:
        if not Path(config).is_file():
            raise ValueError(f"register_task({cls.__name__}, config={str(config)!r}): no such file")
        TASK_CONFIG_FILES[spec.id] = Path(config)
    TASKS[spec.id] = cls
    return cls


def is_task_file(name: str) -> bool:
    """Whether ``name`` names a task file (``*.toml``) rather than a registered task id."""
    return str(name).endswith(".toml")


def resolve_task(name: str | os.PathLike) -> str:
    """The task id of ``name``: a registered id, or a task file (``*.toml``: read, checked against its model and
    registered under its ``task`` id, once per file). ValueError for an unknown id or a bad file."""
    name = str(name)
    if not is_task_file(name):
        if name not in TASKS:
            known = ", ".join(sorted(TASKS))
            raise ValueError(f"unknown task {name!r}; known tasks are {known} (or the path of a task file *.toml)")
        return name
    path = Path(name).resolve()
    if not path.is_file():
        raise ValueError(f"task file {name}: no such file")
    for task_id, cls in TASKS.items():
        if issubclass(cls, FileTask) and Path(cls.path) == path:
            return task_id
    cls = file_task_class(path)
    if cls.task_id in TASKS:
        taken = TASKS[cls.task_id].__name__
        raise ValueError(f"{path}: task = {cls.task_id!r} is already a task ({taken}); choose another id")
    TASKS[cls.task_id] = cls
    return cls.task_id
