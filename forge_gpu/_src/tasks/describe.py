"""What ``forge-gpu tasks`` prints: every task in one line each, or one task's model, terms and fields."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from forge_gpu._src.core.cameras import FRONT, camera_fields
from forge_gpu._src.tasks.catalog import TASKS, resolve_task
from forge_gpu._src.tasks.taskfile import subtasks
from forge_gpu._src.tasks.taskfile.model import model_file
from forge_gpu._src.tasks.taskfile.task import FileTask
from forge_gpu._src.tasks.taskfile.term_rows import POLICY


def task_lines() -> list[str]:
    """One line per registered task: id, kind (a task file or code) and where it is defined."""
    lines = []
    for task_id in sorted(TASKS):
        cls = TASKS[task_id]
        kind = f"task file {cls.path}" if issubclass(cls, FileTask) else f"code {cls.__module__}.{cls.__name__}"
        lines.append(f"{task_id:<16} {kind}")
    lines.append("forge-gpu tasks ID describes one; forge-gpu collect path/to/task.toml collects a task file")
    return lines


def describe_task(name: str, variant: str = "", overrides: dict | None = None) -> list[str]:
    """The lines that describe task ``name`` (an id or a task file; ``variant``: one of its variants): the robot
    (model, joints, bodies, action, reset, expert) and the task on it (command, observations by group, rewards,
    terminations, success), fields, params, variants; ``overrides`` are ``--set``'s dotted keys."""
    from forge_gpu._src.sim.output import init_warp
    from forge_gpu._src.tasks.make import task_config
    from forge_gpu._src.tasks.taskfile.compose import compose

    init_warp()
    task_id = resolve_task(name)
    config = task_config(task_id, variant=variant, **(overrides or {}))
    task = TASKS[task_id](config)
    spec = task.spec
    lines = [f"task {task_id}: {config.instruction!r}", f"  defined by {_origin(TASKS[task_id])}"]
    if isinstance(task, FileTask):
        p, plan = config.params, task.plan
        if p.robot:
            where = Path(p.file).parent / p.robot
            lines.append(f"  robot: {p.robot} ({where.resolve()})")
        else:
            lines.append("  robot: in the task file")
        lines.append(f"    model: {model_file(task.file.model, p.file)[0]}")
        lines += _checked(task.file.model, p.file)
        lines.append(f"    joints: {', '.join(plan.joint_names)}")
        lines.append(f"    bodies: {', '.join(plan.body_names)}")
        lines.append(f"    action: {plan.action_kind} on {', '.join(plan.action_joints)} (A = {spec.action_dim})")
        if task.file.expert.get("factory"):
            lines.append(f"    expert: {task.file.expert['factory']}")
        lines.append("  task:" + (f" variant {p.variant!r}" if p.variant else ""))
        if plan.command_names:
            lines.append(f"    command: {', '.join(plan.command_names)} (drawn per episode by [randomize] command)")
        columns: dict[str, int] = {}
        for row in plan.rows:
            if row.stage == "observations":
                field = "proprio" if row.group == POLICY else row.group
                col = columns.get(field, 0)
                group = f" (group {row.group})" if row.group != POLICY else ""
                lines.append(f"    observation {field}[{col}:{col + row.width}]{group}: {_term(row)}")
                columns[field] = col + row.width
        for c in plan.cameras:
            where = f"following {c['follow_name']} at +{c['position']}" if c["follow"] >= 0 else f"at {c['position']}"
            where = f"on {c['mount_name']} at {c['position']} (its frame)" if c["mount"] >= 0 else where
            rgb, depth = camera_fields(c["name"])
            what = f"{rgb}{f' and {depth}' * c['depth']}"
            label = "" if c["name"] == FRONT else f" {c['name']!r}"
            lines.append(f"    observation {what}: a {c['size']}x{c['size']} camera{label} {where}")
        for row in plan.rows:
            if row.stage == "rewards":
                lines.append(f"    reward {row.floats[0]:+g} x {_term(row)}")
        for stage in ("terminations", "success"):
            for row in plan.rows:
                if row.stage == stage:
                    lines.append(f"    {stage[:-1] if stage == 'terminations' else stage}: {_term(row)}")
        for subtask in plan.subtasks:
            lines.append(subtasks.describe(subtask, plan.subtask_rows, _term))
        if p.values:
            lines.append("  params: " + ", ".join(f"{k} = {v!r}" for k, v in p.values.items()))
        offered = compose(p.file).variants
        if offered:
            lines.append(f"  variants: {', '.join(offered)} (forge-gpu tasks ID --variant NAME; collect --variant)")
    else:
        lines.append(f"  action: A = {spec.action_dim}; proprio: P = {spec.proprio_dim}")
        for f in dataclasses.fields(config.params):
            lines.append(f"  params.{f.name} = {getattr(config.params, f.name)!r}")
    lines.append(f"  fields: proprio [{spec.proprio_dim}] float32" + "".join(
        f", {name} {list(shape)} {dtype}" for name, (shape, dtype) in task.observation_fields().items()
    ))  # fmt: skip
    lines.append(f"  randomizable: {', '.join(sorted(task.randomizable())) or 'none'}")
    lines.append(f"  contacts: {spec.has_contacts}; success: {spec.has_success}; max_steps: {config.max_steps}")
    return lines


def _checked(model: dict, source: str) -> list[str]:
    """The model against MuJoCo's load of it (``check_cache.kept_check``: once per model files, then kept): each
    difference one line, or that there is none; nothing for a model with no MuJoCo reference (a builder, USD)."""
    from forge_gpu._src.tasks.taskfile.check_cache import kept_check

    found = kept_check(model, source)
    if found is None:
        return []
    if found.refused:
        return [f"    not compared with MuJoCo's load of it: {found.refused}"]
    if not found.differences:
        return ["    checked against MuJoCo's load of it: no differences"]
    return [f"    differs from MuJoCo's load of it: {line}" for line in found.differences]


def _origin(cls) -> str:
    return f"task file {cls.path}" if issubclass(cls, FileTask) else f"code {cls.__module__}.{cls.__name__}"


def _term(row) -> str:
    user = " (user @wp.func)" if row.user else ""
    if row.joints:
        user += f" of {', '.join(row.joints)}"
    if row.params:
        user += " {" + ", ".join(f"{k} = {v!r}" for k, v in row.params.items()) + "}"
    numbers = [f"{v:g}" for v in row.floats[2:]]
    return f"{row.name}{user}" + (f" [{', '.join(numbers)}]" if numbers else "")
