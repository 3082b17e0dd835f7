"""Choosing a task: the task arguments ``collect``, ``evaluate`` and ``replay`` share (``TASK``, ``--task-file``,
``--set``, ``--trust-code``), checked before Warp loads, ``forge-gpu tasks`` and ``forge-gpu check-model``."""

from __future__ import annotations

import sys
from pathlib import Path

from ._common import (
    UsageError,
    parse_set,
)


def task_arguments(args) -> tuple[dict, bool]:
    """``collect``'s and ``evaluate``'s task, ``--set`` and ``--policy``, checked without Warp: the overrides and
    whether the task is a task file."""
    from forge_gpu._src.sim.names import check_policy_name, shipped_tasks

    overrides = parse_set(args.set or [])
    _refuse_options(overrides, ("num_envs", "seed", "device", "variant"))
    task_file = str(args.task).endswith(".toml")  # a task file: read and checked against its model below
    if task_file and not Path(args.task).is_file():
        raise UsageError(f"task file {args.task}: no such file")
    if not task_file and args.task not in shipped_tasks():
        known = ", ".join(shipped_tasks())
        raise UsageError(f"unknown task {args.task!r}; known tasks are {known} (or the path of a task file *.toml)")
    try:
        check_policy_name(args.policy)
    except ValueError as e:
        raise UsageError(str(e)) from e
    if getattr(args, "variant", None):
        overrides["variant"] = args.variant
    return overrides, task_file


def _refuse_options(overrides: dict, names: tuple[str, ...]) -> None:
    """UsageError for a ``--set`` of what the command takes as an option of its own."""
    for name in names:
        if name in overrides:
            raise UsageError(f"--set {name}=...: use the --{name.replace('num_', '')} option instead")


def say_model_check(config) -> None:
    """``collect``'s lines of its task's model against MuJoCo's load of it (``check_cache.kept_check``: computed
    once per model files, then kept): each difference one ``forge-gpu: warning:`` line on stderr, where the build's
    other notes go; with ``--verbose`` also what the check noted and its rollout. Nothing for a task with no model
    file (a model builder) or a model MuJoCo has no reference for (USD)."""
    from forge_gpu._src.sim.output import is_verbose
    from forge_gpu._src.tasks.taskfile.check_cache import kept_check
    from forge_gpu._src.tasks.taskfile.spec import FileParams, resolved

    params = config.params
    if not isinstance(params, FileParams):
        return
    try:
        found = kept_check(resolved(params, params.file).model, params.file)
    except ValueError:  # a model the build refuses: the build said why
        return
    if found is None:
        return
    for line in found.lines():
        print(f"forge-gpu: warning: {line}", file=sys.stderr)
    if is_verbose():
        for note in found.notes:
            print(f"forge-gpu: {found.model} checked against MuJoCo: said: {note}", file=sys.stderr)
        if found.rollout and found.rollout not in found.differences:
            print(f"forge-gpu: {found.model} checked against MuJoCo: {found.rollout}", file=sys.stderr)
    sys.stderr.flush()


def cmd_tasks(args) -> int:
    """``forge-gpu tasks``: the tasks (id, kind, instruction); ``forge-gpu tasks ID``: one task's model, terms
    and fields."""
    from forge_gpu._src.tasks.describe import describe_task, task_lines

    overrides = parse_set(args.set or [])
    if overrides and args.task is None:
        raise UsageError("--set: name the task it changes (forge-gpu tasks TASK --set KEY=VALUE)")
    _refuse_options(overrides, ("variant",))
    try:
        lines = (
            task_lines()
            if args.task is None
            else describe_task(args.task, variant=args.variant or "", overrides=overrides)
        )
    except ValueError as e:
        raise UsageError(str(e)) from e
    print("\n".join(lines))
    return 0


def cmd_check_model(args) -> int:
    """``forge-gpu check-model FILE``: the model file (or a task or robot file's model) as forge_gpu builds it
    against MuJoCo's own load of it: each difference one line; exit 1 with differences, 0 without."""
    import mujoco

    from forge_gpu._src.tasks.taskfile.mujoco_check import check_model

    if args.steps < 0:
        raise UsageError(f"--steps {args.steps}: expected a number of steps >= 0")
    try:
        found = check_model(args.file, steps=args.steps)
    except ValueError as e:
        raise UsageError(str(e)) from e
    print(f"{found.path}: forge_gpu's model against MuJoCo {mujoco.__version__}'s")
    for line in found.notes:
        print(f"  said: {line}")
    for line in found.differences:
        print(f"  differs: {line}")
    if found.rollout and found.rollout not in found.differences:
        print(f"  same: {found.rollout}")
    count = len(found.differences)
    print(f"{count} difference(s)" if count else "no differences")
    return 1 if count else 0
