"""What ``forge-gpu tasks`` prints: every task in one line each, or one task's model, terms and fields."""

from __future__ import annotations

import dataclasses

from forge_gpu._src.sim.taskfile.model import model_file
from forge_gpu._src.sim.taskfile.task import FileTask
from forge_gpu._src.sim.tasks.catalog import TASKS, resolve_task


def task_lines() -> list[str]:
    """One line per registered task: id, kind (a task file or code) and where it is defined."""
    lines = []
    for task_id in sorted(TASKS):
        cls = TASKS[task_id]
        kind = f"task file {cls.path}" if issubclass(cls, FileTask) else f"code {cls.__module__}.{cls.__name__}"
        lines.append(f"{task_id:<16} {kind}")
    lines.append("forge-gpu tasks ID describes one; forge-gpu collect path/to/task.toml collects a task file")
    return lines


def describe_task(name: str) -> list[str]:
    """The lines that describe task ``name`` (an id or a task file): model, action, terms, fields, params."""
    from forge_gpu._src.sim.make import task_config
    from forge_gpu._src.sim.output import init_warp

    init_warp()
    task_id = resolve_task(name)
    config = task_config(task_id)
    task = TASKS[task_id](config)
    spec = task.spec
    lines = [f"task {task_id}: {config.instruction!r}", f"  defined by {_origin(TASKS[task_id])}"]
    if isinstance(task, FileTask):
        p, plan = config.params, task.plan
        lines.append(f"  model: {model_file(task.file.model, p.file)[0]}")
        lines.append(f"  joints: {', '.join(plan.joint_names)}")
        lines.append(f"  bodies: {', '.join(plan.body_names)}")
        lines.append(f"  action: {plan.action_kind} on {', '.join(plan.action_joints)} (A = {spec.action_dim})")
        col = 0
        for row in plan.rows:
            if row.stage == "observations":
                lines.append(f"  observation proprio[{col}:{col + row.width}]: {_term(row)}")
                col += row.width
        if plan.camera:
            c = plan.camera
            where = f"following {c['follow_name']} at +{c['position']}" if c["follow"] >= 0 else f"at {c['position']}"
            lines.append(f"  observation rgb{' and depth' * c['depth']}: a {c['size']}x{c['size']} camera {where}")
        for row in plan.rows:
            if row.stage == "rewards":
                lines.append(f"  reward {row.floats[0]:+g} x {_term(row)}")
        for stage in ("terminations", "success"):
            for row in plan.rows:
                if row.stage == stage:
                    lines.append(f"  {stage[:-1] if stage == 'terminations' else stage}: {_term(row)}")
        if p.values:
            lines.append("  params: " + ", ".join(f"{k} = {v!r}" for k, v in p.values.items()))
        if plan.command_names:
            lines.append(f"  command: {', '.join(plan.command_names)} (drawn per episode by [randomize] command)")
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


def _origin(cls) -> str:
    return f"task file {cls.path}" if issubclass(cls, FileTask) else f"code {cls.__module__}.{cls.__name__}"


def _term(row) -> str:
    user = " (user @wp.func)" if row.user else ""
    if row.joints:
        user += f" of {', '.join(row.joints)}"
    numbers = [f"{v:g}" for v in row.floats[2:]]
    return f"{row.name}{user}" + (f" [{', '.join(numbers)}]" if numbers else "")
