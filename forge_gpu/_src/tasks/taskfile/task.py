"""A task made of a model file and a TOML, no task code: ``spec.py`` reads it, ``model.py`` loads the model,
``plan.py`` binds the file's names to it.

:func:`file_task_class` makes the :class:`FileTask` subclass of one file (its :class:`TaskSpec` from the resolved
plan); the catalog registers it under the file's ``task`` id. Per step it launches three kernels whatever its
number of terms: the action onto the named joints (``kernels/taskfile.py``), the reset of the worlds that end,
and the generated observe kernel (``codegen.py``); its targets (``targets.py``), contact timers (``contacts.py``)
and cameras (``cameras.py``) add theirs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import warp as wp

from forge_gpu._src.core.checks import plain_number
from forge_gpu._src.sim.randomize import Parameter
from forge_gpu._src.sim.task import Task, TaskBinding, TaskSpec
from forge_gpu._src.sim.world import World
from forge_gpu._src.tasks.taskfile import actuators, codegen, distractors, ee_action, modelfile, penetration, stored
from forge_gpu._src.tasks.taskfile.cameras import FileCameras, camera_layout
from forge_gpu._src.tasks.taskfile.compose import compose
from forge_gpu._src.tasks.taskfile.contacts import ContactTimers
from forge_gpu._src.tasks.taskfile.model import add_model, model_file, model_info, per_world, probe_actuators
from forge_gpu._src.tasks.taskfile.objects import dimensions
from forge_gpu._src.tasks.taskfile.plan import Plan, plan_task
from forge_gpu._src.tasks.taskfile.spec import (
    CAMERA_OFFSETS,
    FileParams,
    catalog,
    check_color_pairs,
    color_entries,
    read_task_file,
    resolved,
    run_template,
)
from forge_gpu._src.tasks.taskfile.targets import Targets
from forge_gpu._src.tasks.taskfile.trust import check_import
from forge_gpu.kernels import ik as ik_kernels
from forge_gpu.kernels import taskfile as kernels
from forge_gpu.kernels import terms


@dataclass(frozen=True, kw_only=True)
class FileScene:
    """The scene of a task file: its model file (run.json's ``scene``) and the files a run stores of it."""

    kind: str = "task_file"
    model: str = ""
    """The model file's path (MJCF or URDF), or its builder (``module:function``)."""
    task_file: str = ""
    stored: dict = field(default_factory=dict)
    """The task's files a run stores in its ``task/`` folder, with their sha256 (``stored.listing``)."""


class _FileSpec:
    """A file task class's ``spec``, made from its file on first use (reading the model costs a moment); an
    instance's own (``FileTask.__init__``) follows its config's overrides."""

    def __get__(self, task, owner):
        if "_spec" not in owner.__dict__:
            config = read_task_file(owner.path)
            file = config.params.file
            owner._spec = _spec(config, plan_task(resolved(config.params, file), file))
        return owner._spec


class FileTask(Task):
    """The hooks of every file-based task, driven by its :class:`Plan`."""

    params_type = FileParams
    path: str = ""
    spec = _FileSpec()

    @classmethod
    def load_task_config(cls, overrides: dict | None = None):
        """The task's :class:`TaskConfig` from its file with ``overrides`` (``make``, ``task_config``)."""
        return read_task_file(cls.path, overrides)

    def __init__(self, config):
        self.file: FileParams = resolved(config.params, config.params.file)
        """The sections with their ``params.NAME`` references replaced by numbers."""
        self.plan: Plan = plan_task(self.file, config.params.file)
        check_color_pairs(config.params, config.randomize, config.params.file)
        self.__dict__["spec"] = _spec(config, self.plan)
        self.distractor_entry = distractors.distractor_entry(self.file.distractors, self.file.palette, self.file.file)
        """The checked ``[distractors]``, or None."""
        super().__init__(config)

    def make_scene(self) -> FileScene:
        """The scene; the task's files (``stored.gather``, read now: what the built task is) in ``stored_files``."""
        p = self.file
        model = model_file(p.model, p.file)
        read = compose(p.file, p.variant, p.robot).files
        self.stored_files, name = stored.gather(p.file, model, p.module, read)
        return FileScene(model=model[0], task_file=p.file, stored=stored.listing(self.stored_files, name))

    def randomizable(self) -> dict[str, Parameter]:
        """Physics (every ``randomize.PHYSICS`` entry) and ``command`` (shape (C,)) where ``[command]`` names one."""
        return catalog(self.config.params)

    def instruction_template(self) -> dict | None:
        """The file's ``[instruction_template]`` as this run draws it (``spec.run_template``: slots of fixed
        parameters written out or dropped), or None."""
        randomized = {r.name for r in self.config.randomize}
        return run_template(self.config.params.instruction_template, randomized, self.randomizable())

    def observation_fields(self) -> dict:
        fields = {}
        if self.plan.reward_names and self.plan.record_terms:
            fields["reward_terms"] = ((len(self.plan.reward_names),), "float32")
        if self.spec.has_success:
            fields["success"] = ((), "bool")
        fields.update({group: ((width,), "float32") for group, width in self.plan.groups.items()})
        return {**fields, **camera_layout(self.plan.cameras)}

    def build_world(self, builder) -> None:
        p = self.file
        notes = add_model(builder, p.model, p.file)
        distractors.add_distractors(builder, self.distractor_entry, p.palette)
        info = model_info(p.model, p.file)
        notes += modelfile.stepping(info, self.config, p.file)
        if info is not None and info.not_simulated:
            modelfile.warn(f"{Path(info.path).name}: not simulated: {'; '.join(info.not_simulated)}")
        if notes:
            modelfile.warn("; ".join(notes))
        import newton

        own = probe_actuators(p.model, p.file)
        if self.plan.action_kind == "actuators":
            if self.config.solver.name != "mujoco" and actuators.CTRL in own.modes:
                solver = self.config.solver.name
                raise ValueError(f"{p.file}: the model's motors act through MuJoCo's ctrl: solver.name = {solver!r} "
                                 "does not read it; use 'mujoco' or an [action] kind")  # fmt: skip
            return
        attrs = builder.custom_attributes  # an explicit [action] switches the tendon, site and body actuators off
        for key in ("mujoco:actuator_gainprm", "mujoco:actuator_biasprm"):
            values = attrs[key].values if key in attrs else None
            for k in own.other_index if values else ():
                if (k in values) if isinstance(values, dict) else k < len(values):
                    values[k] = type(values[k])(*([0.0] * len(values[k])))
        for d, mode in zip(own.dofs, own.modes, strict=True):  # an explicit [action] replaces the model's servos
            if mode in (actuators.TARGET, actuators.VELOCITY):
                builder.joint_target_mode[d] = int(newton.JointTargetMode.NONE)
                builder.joint_target_ke[d], builder.joint_target_kd[d] = 0.0, 0.0
        if self.plan.action_kind in ("position", ee_action.KIND):
            ik = self.plan.ik
            dofs = self.plan.action_dofs if ik is None else ik["all_dofs"]  # the action joints, in the model's order
            ke = _gains(p.action.get("stiffness", 100.0), len(dofs), "stiffness", p.file)
            kd = _gains(p.action.get("damping", 5.0), len(dofs), "damping", p.file)
            follow = [(dofs.index(self.plan.action_dofs[k]), d) for _, d, k in self.plan.follow]  # its leader's gains
            driven = [*enumerate(dofs), *follow]
            for k, d in driven:
                builder.joint_target_mode[d] = int(newton.JointTargetMode.POSITION)
                builder.joint_target_ke[d], builder.joint_target_kd[d] = ke[k], kd[k]

    def bind(self, world: World) -> TaskBinding:
        n, device, plan = world.num_envs, world.device, self.plan
        coords = world.joint_q.shape[1]

        def ints(values):
            return wp.array(np.asarray(values, np.int32), dtype=int, device=device)

        def floats(values):
            return wp.array(np.asarray(values, np.float32), dtype=float, device=device)

        self.default_q = wp.array(world.model.joint_q.numpy().reshape(n, coords), dtype=float, device=device)
        self.action_coord, self.action_dof = ints(plan.action_coords), ints(plan.action_dofs)
        self.reset_coord, self.reset_dof = ints(plan.reset_coords), ints(plan.reset_dofs)
        draws = np.asarray(plan.draws, np.float64).reshape(-1, 3)
        self.draw_kind, self.draw_index = ints(draws[:, 0]), ints(draws[:, 1])
        self.draw_range = floats(draws[:, 2])
        self.draw_low, self.draw_high = (floats(v) for v in _draw_limits(world.model, draws))
        self.lower, self.upper = floats(plan.lower), floats(plan.upper)
        self.last_action = wp.zeros_like(world.executed_action)
        self.previous_action = wp.zeros_like(world.executed_action)
        self.noise_key = wp.zeros((n, 2), dtype=float, device=device)
        self.reward_terms = wp.zeros((n, max(len(plan.reward_names), 1)), dtype=float, device=device)
        self.success = wp.zeros(n, dtype=wp.bool, device=device)
        self.subtask_flags = wp.zeros((n, max(len(plan.subtasks), 1)), dtype=wp.bool, device=device)
        """Per world and subtask: its conditions hold this frame (``[[subtasks]]``; bool [N, S])."""
        self.subtask_hold = wp.zeros((n, max(len(plan.subtask_rows), 1)), dtype=float, device=device)
        self.groups = {g: wp.zeros((n, width), dtype=float, device=device) for g, width in plan.groups.items()}
        """Each observation group beyond ``policy`` (``proprio``): its own field."""
        ti, tf = term_tables(plan)
        command = world.params.get("command")
        if command is None:
            command = wp.zeros((n, 0), dtype=float, device=device)
        frame = terms.Frame()
        frame.joint_q, frame.joint_qd, frame.default_q = world.joint_q, world.joint_qd, self.default_q
        bodies = world.model.body_count // n
        frame.body_q = world.state_0.body_q.reshape((n, bodies))
        frame.body_qd = world.state_0.body_qd.reshape((n, bodies))
        frame.action, frame.previous_action = self.last_action, self.previous_action
        frame.action_scale, frame.action_dof = world.action_scale, self.action_dof
        frame.command, frame.lower, frame.upper = command, self.lower, self.upper
        frame.ti, frame.tf = wp.array(ti, dtype=int, device=device), wp.array(tf, dtype=float, device=device)
        frame.seed, frame.noise_key = world.seed, self.noise_key
        frame.body_com = world.model.body_com.reshape((n, bodies))
        points = np.asarray([r.point for r in plan.all_rows], np.float32).reshape(-1, terms.TP_WIDTH)
        frame.tp, frame.root_body = wp.array(points, dtype=float, device=device), plan.root_body
        frame.dt = float(world.config.control_dt)
        self.contacts = ContactTimers(world, plan, bodies) if plan.contact else None
        frame.contact = self.contacts.timers if self.contacts else wp.zeros((n, 1, 3), dtype=float, device=device)
        frame.touch = self.contacts.touch if self.contacts else wp.zeros((n, 1), dtype=float, device=device)
        frame.hold = wp.zeros((n, len(plan.rows)), dtype=float, device=device)
        frame.hold_keep, self.hold_kept = 0, False
        self.targets = Targets(world, plan.targets)
        frame.target = self.targets.points
        self.frame = frame
        self.kernel = codegen.observe_kernel(plan)
        self.action_origin = self.default_q if plan.action_relative else wp.zeros_like(self.default_q)
        if plan.action_kind in ("position", "actuators", ee_action.KIND):
            self.joint_target_q = world.control.joint_target_q.reshape((n, -1))
        if plan.ik is not None:
            ik = plan.ik
            self.ik_tables = [ints(ik["coords"]), ints(ik["child"]), wp.array(np.asarray(ik["xc"], np.float32),
                              dtype=wp.transform, device=device), wp.array(np.asarray(ik["axis"], np.float32),
                              dtype=wp.vec3, device=device), ints(ik["slide"]), ints(ik["gripper_coords"])]  # fmt: skip
            self.ik_point = (
                ik["point_body"],
                wp.transform(wp.vec3(*ik["point_offset"][:3]), wp.quat(*ik["point_offset"][3:])),
            )
            self.joint_target = wp.zeros((n, len(ik["coords"]) + len(ik["gripper_coords"])), dtype=float, device=device)
        self.follow_tables = [
            ints([c for c, _, _ in plan.follow]),
            ints([plan.action_coords[k] for *_, k in plan.follow]),
        ]
        if plan.action_kind == "actuators":
            own = probe_actuators(self.file.model, self.file.file)
            self.actuator_tables = [ints(own.modes), ints(own.index), floats(own.gear), floats(own.low)]
            self.actuator_tables += [floats(own.high), ints(own.gain)]
            ctrl = getattr(getattr(world.control, "mujoco", None), "ctrl", None)
            self.ctrl = ctrl.reshape((n, -1)) if ctrl is not None and ctrl.shape[0] else wp.zeros((n, 1), device=device)
            self.joint_target_qd = world.control.joint_target_qd.reshape((n, -1))
        self.penetration_checked = not (self.spec.has_contacts and world.config.solver.name == "mujoco")
        fields = {"reward_terms": self.reward_terms} if plan.reward_names and plan.record_terms else {}
        if self.spec.has_success:
            fields["success"] = self.success
        fields.update(self.groups)
        state = {"last_action": self.last_action, "previous_action": self.previous_action} if plan.action_state else {}
        if plan.noise_state:
            state["observation_noise_key"] = self.noise_key
        if self.contacts is not None:
            state["contact_timers"] = self.contacts.timers
            if plan.pairs:
                state["contact_pairs"] = self.contacts.touch
        if any(r.hold > 0.0 for r in plan.rows):
            state["condition_timers"] = frame.hold
        state.update(self.targets.state)
        if plan.ik is not None:
            state["joint_target"] = self.joint_target
        calibration = {"reward_terms": plan.reward_names} if "reward_terms" in fields else {}
        randomized = {r.name for r in self.config.randomize}
        self.colors = {name: per_world(world.model.shape_label, shape, n, device)
                       for name, shape in self.file.shape_colors.items()
                       if name in randomized and isinstance(shape, str)}  # fmt: skip
        self.palette = self._palette_launches(world, randomized)
        self.distractors = None
        if self.distractor_entry is not None:
            colors = np.asarray(list(self.file.palette.values()), np.float32)
            palette = wp.array(colors, dtype=wp.vec3, device=world.device)
            self.distractors = distractors.Distractors(world, self.distractor_entry, self.config.randomize, palette)
        self.objects = [
            (o, per_world(world.model.shape_label, o["shape"], n, device), per_world(world.model.body_label, o["body"],
             n, device), bool(randomized & {f"{o['name']}_{k}" for k in (*dimensions(o), "mass", "friction")}))
            for o in plan.objects
        ]  # fmt: skip
        self.moves_camera = bool(randomized & set(CAMERA_OFFSETS))
        self.file_cameras = FileCameras(plan.cameras, world, jittered=self.moves_camera) if plan.cameras else None
        self.camera = self.file_cameras.front if self.file_cameras is not None else None
        """The ``front`` camera (:class:`FileCamera`), or None."""
        if self.file_cameras is not None:
            fields.update(self.file_cameras.fields)
            calibration.update(self.file_cameras.calibration)
        return TaskBinding(fields=fields, calibration=calibration, state=state)

    def _palette_launches(self, world: World, randomized: set[str]) -> list[tuple]:
        """One launch per ``[shape_colors]`` palette entry or pair (``differs_from``): its shapes, the other's
        name and the clash rule (1: this one moves, 2: the other, where drawn)."""
        entries = color_entries(self.file)
        if not entries:
            return []
        n, device = world.num_envs, world.device
        colors = np.asarray(list(self.file.palette.values()), np.float32)
        self.palette_colors = wp.array(colors, dtype=wp.vec3, device=device)
        paired = {e["differs_from"] for e in entries.values()}
        ranges = {r.name: r for r in self.config.randomize}
        launches = []
        for name, e in entries.items():
            other = e["differs_from"]
            if other is None and name in paired:
                continue  # its pair's launch writes it
            other = other or name
            # An entry alone (other is itself) keeps its value: nothing to differ from.
            resolve = 0 if other == name else 1 if name in randomized else 2 if other in randomized else 0
            shapes = [per_world(world.model.shape_label, entries[k]["shape"], n, device) for k in (name, other)]
            moving = ranges.get((name, name, other)[resolve])  # the drawn one moves, within its draw's colours
            allowed = np.zeros(len(colors), np.int32)
            allowed[moving.allowed(len(colors)) if moving is not None else slice(None)] = 1
            launches.append((name, other, *shapes, resolve, wp.array(allowed, dtype=wp.int32, device=device)))
        return launches

    def apply_action(self, world: World) -> None:
        if self.plan.action_kind == "actuators":
            kernel = kernels.apply_actuators_kernel
            inputs = [world.action_scale, *self.actuator_tables, self.default_q, world.params["actuator_gain_scale"]]
            inputs += [world.executed_action]
            outputs = [self.last_action, self.previous_action, self.ctrl, self.joint_target_q, self.joint_target_qd]
            outputs += [world.joint_f]
        elif self.plan.action_kind == "effort":
            kernel, inputs = kernels.apply_effort_kernel, [world.action_scale, self.action_dof]
            inputs += [world.params["actuator_gain_scale"], world.executed_action]
            outputs = [self.last_action, self.previous_action, world.joint_f]
        elif self.plan.ik is not None:
            ik, bodies = self.plan.ik, self.frame.body_q
            wp.launch(
                ik_kernels.ee_delta_kernel,
                dim=world.num_envs,
                inputs=[world.action_scale, *self.ik_tables, *self.ik_point, ik["base_body"], self.lower, self.upper]
                + [self.action_origin, ik["damping"], ik["max_joint_step"], ik["max_lag"], world.joint_q, bodies]
                + [world.executed_action],
                outputs=[self.last_action, self.previous_action, self.joint_target, self.joint_target_q],
                device=world.device,
            )
            kernel = None  # one thread per world: launched above
        else:
            kernel = kernels.apply_position_kernel
            inputs = [world.action_scale, self.action_coord, self.lower, self.upper, self.action_origin]
            inputs += [world.executed_action]
            outputs = [self.last_action, self.previous_action, self.joint_target_q]
        if kernel is not None:
            wp.launch(kernel, dim=world.executed_action.shape, inputs=inputs, outputs=outputs, device=world.device)
        if self.plan.follow:
            wp.launch(
                kernels.follow_targets_kernel,
                dim=(world.num_envs, len(self.plan.follow)),
                inputs=[*self.follow_tables, self.lower, self.upper],
                outputs=[self.joint_target_q],
                device=world.device,
            )

    def reset_worlds(self, world: World) -> None:
        plan = self.plan
        wp.launch(
            kernels.reset_kernel,
            dim=world.num_envs,
            inputs=[
                world.seed,
                7 if plan.root else 0,
                6 if plan.root else 0,
                self.reset_coord,
                self.reset_dof,
                self.draw_kind,
                self.draw_index,
                self.draw_range,
                self.draw_low,
                self.draw_high,
                self.default_q,
                world.reset_mask,
                world.draw_episode,
                world.draw_env,
            ],
            outputs=[world.joint_q, world.joint_qd, self.last_action, self.previous_action, self.noise_key],
            device=world.device,
        )
        self.targets.draw(world, len(plan.draws))
        if plan.ik is not None:
            wp.launch(
                ik_kernels.reset_targets_kernel,
                dim=world.num_envs,
                inputs=[self.ik_tables[0], self.ik_tables[-1], world.reset_mask, world.joint_q],
                outputs=[self.joint_target, self.joint_target_q],
                device=world.device,
            )
        for o, *_ in self.objects:
            tall = "height" if o["kind"] == "cylinder" else "size"  # its full height: upright on the table
            values = [world.params[f"{o['name']}_{k}"] for k in ("position", "yaw", tall)]
            wp.launch(
                kernels.place_object_kernel,
                dim=world.num_envs,
                inputs=[o["coord"], o["dof"], world.reset_mask, *values],
                outputs=[world.joint_q, world.joint_qd],
                device=world.device,
            )
        if not self.penetration_checked and not world.device.is_capturing:  # the first reset: once, on the host
            self.penetration_checked = True
            p = self.file
            found = penetration.penetrations(p.model, p.file, world.joint_q.numpy()[0])
            if found:
                modelfile.warn(penetration.report_line(found, Path(model_file(p.model, p.file)[0]).name))

    def apply_params(self, world: World) -> None:
        """The drawn visuals: ``[shape_colors]`` colours and the camera's offsets (those ``[randomize]`` names),
        palette colours (every reset) and the ``[objects]``' drawn size (a cube's edge, a cylinder's radius and height),
        mass and friction."""
        for name, other, shape, other_shape, resolve, allowed in self.palette:
            wp.launch(
                kernels.palette_color_kernel,
                dim=world.num_envs,
                inputs=[shape, other_shape, self.palette_colors, resolve, allowed, world.reset_mask],
                outputs=[world.params[name], world.params[other], world.model.shape_color],
                device=world.device,
            )
        if self.distractors is not None:  # after the colours they differ from
            self.distractors.apply(world)
        model = world.model
        for o, shape, body, physics in self.objects:
            if physics:
                values = [world.params[f"{o['name']}_{k}"] for k in (*dimensions(o), "mass", "friction")]
                wp.launch(
                    kernels.object_cylinder_kernel if o["kind"] == "cylinder" else kernels.object_physics_kernel,
                    dim=world.num_envs,
                    inputs=[shape, body, world.reset_mask, *values],
                    outputs=[model.shape_scale, model.shape_material_mu, model.body_mass, model.body_inv_mass]
                    + [model.body_inertia, model.body_inv_inertia],
                    device=world.device,
                )
        for name, shape in self.colors.items():
            wp.launch(
                kernels.shape_color_kernel,
                dim=world.num_envs,
                inputs=[shape, world.reset_mask, world.params[name].reshape((world.num_envs, 3))],
                outputs=[world.model.shape_color],
                device=world.device,
            )
        if self.moves_camera and self.camera is not None and self.camera.camera["follow"] < 0:
            c, offsets = (
                self.camera.camera,
                [world.params[name].reshape((world.num_envs, 3)) for name in CAMERA_OFFSETS],
            )
            wp.launch(
                kernels.jitter_camera_kernel,
                dim=world.num_envs,
                inputs=[wp.vec3(*c["position"]), wp.vec3(*c["look_at"]), wp.vec3(*c["up"]), world.reset_mask] + offsets,
                outputs=[self.camera.cameras.transforms],
                device=world.device,
            )

    def restore_state(self, world: World) -> None:
        self.targets.place(world)
        if self.contacts is not None:
            self.contacts.restored = True  # the next observe keeps the restored timers
        self.hold_kept = True  # and the conditions' hold timers
        wp.launch(
            kernels.restored_noise_key_kernel,
            dim=world.num_envs,
            inputs=[world.reset_mask],
            outputs=[self.noise_key],
            device=world.device,
        )

    def observe(self, world: World) -> None:
        if self.contacts is not None:
            self.contacts.update(world)
        self.frame.hold_keep, self.hold_kept = int(self.hold_kept), False
        wp.launch(
            self.kernel,
            dim=world.num_envs,
            inputs=[self.frame, world.reset_mask],
            outputs=[world.proprio, *self.groups.values(), self.reward_terms, world.task_reward, world.task_terminated]
            + [self.success]
            + ([self.subtask_hold, self.subtask_flags] if self.plan.subtasks else []),
            device=world.device,
        )
        if self.file_cameras is not None:
            self.file_cameras.render(world, self.frame.body_q)

    def success_flags(self, world: World):
        """The success terms' flag of each world's frame (a termination that is not one of them is no success)."""
        return self.success if self.spec.has_success else None

    def expert(self, world: World):
        """``[expert] factory = "module:function"``: ``function(task, world, settings)`` returns the policy."""
        settings = dict(self.file.expert)
        factory = settings.pop("factory", None)
        if factory is None:
            return None
        module, _, name = factory.partition(":")
        check_import(f"expert.factory = {factory!r}", factory)
        try:
            make = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"{self.config.params.file}: expert.factory = {factory!r}: cannot load it ({e})") from e
        return make(self, world, settings)


def _gains(value, columns: int, key: str, source: str) -> list[float]:
    """``[action] stiffness`` or ``damping``: one number for every action joint, or one per action column."""
    values = value if isinstance(value, list) else [value] * columns
    if len(values) != columns or not all(plain_number(v) and v >= 0 for v in values):
        raise ValueError(f"{source}: action.{key} = {value!r}: expected a number >= 0 or {columns} of them (one per "
                         "action column)")  # fmt: skip
    return [float(v) for v in values]


def _spec(config, plan: Plan) -> TaskSpec:
    contacts = bool(config.params.model.get("contacts", True))
    return TaskSpec(
        id=config.task,
        proprio_dim=plan.proprio_dim,
        action_dim=len(plan.action_coords),
        has_contacts=contacts,
        has_success=any(r.stage == "success" for r in plan.rows),
        environment_state=None if config.params.environment_state is None else tuple(config.params.environment_state),
    )


def term_tables(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """The ``ti`` and ``tf`` tables of the plan's rows, then its subtasks' (one row per term), zero-padded."""
    rows = plan.all_rows
    ni = max(len(r.ints) for r in rows)
    nf = max(len(r.floats) for r in rows)
    ti = np.zeros((len(rows), ni), np.int32)
    tf = np.zeros((len(rows), nf), np.float32)
    for t, r in enumerate(rows):
        ti[t, : len(r.ints)] = r.ints
        tf[t, : len(r.floats)] = r.floats
    return ti, tf


def file_task_class(path, *, check: bool = True) -> type[FileTask]:
    """The :class:`FileTask` subclass of the task file ``path``, read and checked against its model now (with
    ``check``; else only its ``task`` id is read, and the model when the class's ``spec`` is first asked for)."""
    path = str(Path(path).resolve())
    if check:
        task = read_task_file(path).task
    else:
        task = compose(path).table["task"]
    return type(f"FileTask_{task}", (FileTask,), {"path": path, "task_id": task})


def _draw_limits(model, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each reset draw's bounds: a hinge or slide coordinate's joint range (world 0's, the same in every world), no
    bound for a velocity or another joint's coordinate."""
    import newton

    low = np.full(len(draws), -np.inf)
    high = np.full(len(draws), np.inf)
    starts, dof_starts = model.joint_q_start.numpy(), model.joint_qd_start.numpy()
    types, lower, upper = model.joint_type.numpy(), model.joint_limit_lower.numpy(), model.joint_limit_upper.numpy()
    ranged = (int(newton.JointType.REVOLUTE), int(newton.JointType.PRISMATIC))
    for k, (kind, index, _) in enumerate(draws):
        j = int(np.searchsorted(starts[:-1], index, side="right")) - 1
        if int(kind) == 0 and 0 <= j < len(types) and int(types[j]) in ranged:
            d = dof_starts[j] + int(index) - starts[j]
            low[k], high[k] = lower[d], upper[d]
    return np.maximum(low, -3.0e38), np.minimum(high, 3.0e38)
