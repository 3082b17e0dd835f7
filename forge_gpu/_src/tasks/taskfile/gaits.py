"""The experts any task file may name (``[expert] factory``): :func:`hold_pose` holds the default pose,
:func:`sinusoid_gait` walks with sinusoid joint targets (both public: ``forge_gpu.sim``)."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

import numpy as np
import warp as wp

from forge_gpu._src.sim.world import World
from forge_gpu._src.tasks.taskfile import actuators
from forge_gpu._src.tasks.taskfile.model import probe_actuators
from forge_gpu.kernels import taskfile as kernels

if TYPE_CHECKING:
    from forge_gpu._src.tasks.taskfile.task import FileTask


def hold_pose(task: FileTask, world: World, settings: dict):
    """An ``[expert]`` factory for any task file: hold the default pose (``factory =
    "forge_gpu.sim:hold_pose"``; effort actions take ``stiffness`` [N m / rad] and ``damping``
    [N m s / rad]: PD torques; position actions: the pose itself, action 0)."""
    if set(settings) - {"stiffness", "damping"}:
        raise ValueError(f"{task.config.params.file}: [expert] hold_pose takes stiffness and damping")
    gains = [float(settings.get("stiffness", 50.0)), float(settings.get("damping", 2.0))]
    action = wp.zeros((world.num_envs, task.spec.action_dim), dtype=float, device=world.device)
    kind, scale = task.plan.action_kind, world.action_scale
    own = probe_actuators(task.file.model, task.file.file) if kind == "actuators" else None
    servos = own is not None and set(own.modes) == {actuators.TARGET}
    if own is not None and set(own.modes) == {actuators.EFFORT}:  # URDF efforts: action units of scale * effort
        scale = wp.array(world.action_scale.numpy() * np.asarray(own.gear, np.float32), device=world.device)
    elif own is not None and not servos:
        raise ValueError(f"{task.config.params.file}: [expert] hold_pose needs effort or position actions, or the "
                         "model's position servos or URDF efforts; the model's actuators are a mix")  # fmt: skip
    mode = int(kind == "position" or servos)

    def act(observation: dict) -> wp.array:
        wp.launch(
            kernels.hold_pose_kernel,
            dim=action.shape,
            inputs=[*gains, mode, scale, task.action_coord, task.action_dof, world.action_low]
            + [world.action_high, task.default_q, world.joint_q, world.joint_qd],
            outputs=[action],
            device=world.device,
        )
        return action

    return act


def sinusoid_gait(task: FileTask, world: World, settings: dict):
    """An ``[expert]`` factory for position actions: a gait of sinusoid joint targets around the default pose
    (``factory = "forge_gpu.sim:sinusoid_gait"``; ``frequency`` [Hz]; ``joints``: a table of
    joint pattern -> [amplitude (rad), phase (cycles)], unlisted joints hold the pose; ``command`` (optional): a
    command name whose value, times ``command_scale``, scales every amplitude)."""
    file = task.config.params.file
    if task.plan.action_kind != "position" or set(settings) - {"frequency", "joints", "command", "command_scale"}:
        raise ValueError(f"{file}: [expert] sinusoid_gait takes frequency, joints, command, command_scale and "
                         "needs position actions")  # fmt: skip
    amplitude, phase = [0.0] * task.spec.action_dim, [0.0] * task.spec.action_dim
    for pattern, pair in settings.get("joints", {}).items():
        hits = [k for k, name in enumerate(task.plan.action_joints) if fnmatch.fnmatchcase(name, pattern)]
        if not hits or not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"{file}: expert.joints.{pattern} = {pair!r}: expected [amplitude, phase] of an "
                             f"action joint ({', '.join(task.plan.action_joints)})")  # fmt: skip
        for k in hits:
            amplitude[k], phase[k] = float(pair[0]), float(pair[1])
    name = settings.get("command")
    if name is not None and name not in task.plan.command_names:
        raise ValueError(f"{file}: expert.command = {name!r}: not in [command] names {task.plan.command_names}")
    column = task.plan.command_names.index(name) if name is not None else -1
    command = world.params.get("command", task.frame.command)
    gait = [float(settings.get("frequency", 1.0)), wp.array(amplitude, dtype=float, device=world.device)]
    gait += [wp.array(phase, dtype=float, device=world.device), column, float(settings.get("command_scale", 1.0))]
    action = wp.zeros((world.num_envs, task.spec.action_dim), dtype=float, device=world.device)

    def act(observation: dict) -> wp.array:
        wp.launch(
            kernels.sinusoid_gait_kernel,
            dim=action.shape,
            inputs=[world.config.control_dt, *gait, world.action_scale, world.action_low, world.action_high]
            + [command, observation["step_id"]],
            outputs=[action],
            device=world.device,
        )
        return action

    return act
