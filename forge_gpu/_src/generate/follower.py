"""The policy a generation steps the env with: every world follows transformed source segments through the task's
end-effector IK (``kernels/generate.py``, one launch per step), its choices, transforms and subtask progress in
device arrays, per world and per attempt row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import warp as wp

from forge_gpu._src.generate.sources import Sources
from forge_gpu._src.tasks.taskfile import ee_action
from forge_gpu._src.tasks.taskfile.model import probe
from forge_gpu._src.tasks.taskfile.model import sites as model_sites

SELECTIONS = ("nearest", "random")
"""How a world chooses each subtask's source segment: the one whose object pose at its start is nearest the object's
pose now (the default: one scene, one path, which behaviour cloning learns from best), or uniformly (keyed by the
attempt)."""


FOLLOWS = ("command", "pose")
"""How the follower turns a transformed segment into joint targets: ``pose``, a share (``gain``) of the error to the
next transformed pose per step, added to the targets (the pick expert's way toward its waypoints); ``command``, each
step's targets are the measured joints moved by the error to the transformed frame's pose and by the source's lead
at that frame (the pose change its own joint targets asked of its measured joints, turned with the transform), one
solve with nothing integrated, so the drives get the source's own commands carried into the new scene (joint-target
actions only: an end-effector action has no joint targets to lead). ``command`` does not overshoot
where a path stops (``pose`` does: its targets run ahead of a goal that moves every step), so more attempts succeed
and the contact solver iterates less (docs/generate.md "Following the source's commands")."""


@dataclass(frozen=True, kw_only=True)
class Motion:
    """How the follower moves the tcp (units as the pick expert's)."""

    follow: str | None = None
    """One of :data:`FOLLOWS`; None: ``command`` where the action is joint targets, ``pose`` for an end-effector
    action (:meth:`follow_for`)."""
    gain: float | None = None
    """``follow = "pose"``: the share of the pose error to the next transformed pose commanded per step (0 < gain <=
    1; None: :data:`POSE_GAIN`); ``command`` takes none (given one, it is refused)."""
    max_speed: float = 1.0
    """The largest tcp speed commanded [m/s]."""
    max_turn: float = 4.0
    """The largest turn commanded [rad/s]."""
    angle_weight: float = 0.05
    """``nearest``: metres one radian of the object's rotation counts as."""

    def follow_for(self, ee_mode: bool) -> str:
        """The follower used for an arm whose action is (``ee_mode``) or is not the end-effector's pose change."""
        return self.follow or ("pose" if ee_mode else "command")

    def check(self, follow: str | None = None, *, flags: bool = False) -> None:
        """ValueError (one line) naming a ``follow`` not in :data:`FOLLOWS`, a ``gain`` outside (0, 1], or a gain
        given to the command follower: ``follow`` the one resolved for the arm (:meth:`follow_for`), else
        ``self.follow``. ``flags``: named as the command line's options (``--gain 0.3``), not as fields
        (``gain = 0.3``)."""

        def named(key: str, value) -> str:
            return f"--{key} {value}" if flags else f"{key} = {value!r}"

        if self.follow is not None and self.follow not in FOLLOWS:
            raise ValueError(f"{named('follow', self.follow)}: expected one of {', '.join(FOLLOWS)}")
        gain = self.gain
        if gain is None:
            return
        if isinstance(gain, bool) or not isinstance(gain, int | float) or not math.isfinite(gain) or not 0 < gain <= 1:
            raise ValueError(f"{named('gain', gain)}: expected a number in (0, 1]")
        if (follow or self.follow) == "command":
            raise ValueError(f"{named('gain', gain)}: the command follower (the default for a joint-target action) "
                             f"takes no gain; {named('follow', 'pose')} does")  # fmt: skip

    @property
    def pose_gain(self) -> float:
        """The gain ``pose`` follows with."""
        return POSE_GAIN if self.gain is None else float(self.gain)


POSE_GAIN = 0.5
"""``follow = "pose"``'s gain when none is given: the pick expert's."""


@dataclass(frozen=True)
class Arm:
    """What the follower needs of the task's arm: the tcp's body and offset, the chain's joints, the gripper's
    action column and whether the action is the end-effector's pose change."""

    point_body: int
    offset: tuple
    chain: list[str]
    coords: list[int]
    columns: list[int]
    gripper_column: int
    ee_mode: bool
    tables: dict


def lead_chain(env, arm: Arm) -> dict | None:
    """What :func:`forge_gpu._src.generate.sources.joint_lead` needs of ``env``'s arm: its chain's coordinates,
    action columns, the action's origin and scale and the Jacobian's tables; None for an end-effector action."""
    if arm.ee_mode:
        return None
    return {"coords": arm.coords, "columns": arm.columns, **arm.tables, "origin": env.task.action_origin.numpy()[0],
            "scale": env.world.action_scale.numpy()}  # fmt: skip


def task_arm(task, site: str = "tcp") -> Arm:
    """The arm of ``task`` (a file task with a ``position`` or ``ee_delta`` action whose joints move ``site``):
    ValueError (one line) otherwise."""
    file, plan = task.config.params.file, task.plan
    kind = plan.action_kind
    if kind not in ("position", ee_action.KIND):
        raise ValueError(f"{file}: generation needs [action] kind = 'position' or '{ee_action.KIND}', not {kind!r}")
    builder = probe(task.file.model, file)
    found = model_sites(builder)
    if site not in found:
        raise ValueError(f"{file}: generation follows the site {site!r}; the model's sites are "
                         f"{', '.join(found) or 'none'}")  # fmt: skip
    point_body, offset = found[site]
    columns = list(plan.action_joints)
    if kind == ee_action.KIND:
        chain = plan.ik["joint_names"]
        others = columns[6:]
        joint_column = [-1] * len(chain)
    else:
        on = ee_action.on_chain(builder, point_body, columns)
        chain = [c for c, o in zip(columns, on, strict=True) if o]
        others = [c for c, o in zip(columns, on, strict=True) if not o]
        joint_column = [columns.index(c) for c in chain]
    if not chain:
        raise ValueError(f"{file}: no action joint moves the site {site!r}")
    if len(others) > 1:
        raise ValueError(f"{file}: generation drives one gripper column; the action has {', '.join(others)}")
    gripper = columns.index(others[0]) if others else -1
    coords = [int(builder.joint_q_start[ee_action.joint_labels(builder).index(c)]) for c in chain]
    return Arm(point_body, tuple(float(v) for v in offset), chain, coords, joint_column, gripper,
               kind == ee_action.KIND, ee_action.chain_tables(builder, chain))  # fmt: skip


class Follower:
    """The generation's policy: ``follower(observation) -> action`` on the env's device, one kernel launch per step.

    Attempt ``j`` (the world's draw key ``World.draw_env``) writes row ``j - first`` of a block of ``attempts``
    (:meth:`block`): its segment choice and transform per subtask and the number of subtasks whose conditions held
    in order."""

    def __init__(self, env, sources: Sources, arm: Arm, *, attempts: int, select: str, interpolation_steps: int,
                 action_noise: float, motion: Motion | None = None, first: int = 0):  # fmt: skip
        from forge_gpu.kernels import generate as kernels

        self.kernels = kernels
        task, world = env.task, env.world
        n, device = env.num_envs, env.device
        self.env, self.arm, self.attempts = env, arm, attempts
        motion = motion or Motion()
        self.follow = motion.follow_for(arm.ee_mode)
        """The follower used: ``motion.follow``, or the arm's default."""
        if self.follow == "command" and arm.ee_mode:
            raise ValueError(f"follow = 'command': {task.config.params.file}'s action is the end-effector's pose "
                             "change, with no joint targets to lead; follow = 'pose' follows it")  # fmt: skip
        motion.check(self.follow)
        dt = float(env.config.control_dt)
        subtasks = task.plan.subtasks
        count = len(subtasks)

        def ints(values):
            return wp.array(np.asarray(values, np.int32), dtype=int, device=device)

        def transforms(values):
            return wp.array(np.asarray(values, np.float32).reshape(-1, 7), dtype=wp.transform, device=device)

        numbers = [motion.pose_gain, motion.max_speed * dt, motion.max_turn * dt, action_noise,
                   float(task.plan.ik["damping"]) if task.plan.ik else ee_action.IK_DAMPING,
                   ee_action.MAX_JOINT_STEP, ee_action.MAX_LAG, motion.angle_weight]  # fmt: skip
        self.model = [
            transforms(sources.poses), wp.array(sources.grip, dtype=float, device=device),
            wp.array(sources.lead, dtype=wp.spatial_vector, device=device),
            wp.array(sources.first, dtype=int, device=device), wp.array(sources.last, dtype=int, device=device),
            wp.array(sources.objects.reshape(-1, count, 7), dtype=wp.transform, device=device),
            wp.array(sources.held.reshape(-1, count, 3), dtype=wp.vec3, device=device),
            ints([s.kind for s in subtasks]), ints([s.index for s in subtasks]), ints([s.held_index for s in subtasks]),
            ints(arm.coords), ints(arm.tables["child"]), transforms(arm.tables["xc"]),
            wp.array(np.asarray(arm.tables["axis"], np.float32), dtype=wp.vec3, device=device),
            ints(arm.tables["slide"]), ints(arm.columns), arm.point_body,
            wp.transform(wp.vec3(*arm.offset[:3]), wp.quat(*arm.offset[3:])), arm.gripper_column, int(arm.ee_mode),
            wp.array(np.asarray(numbers, np.float32), dtype=float, device=device),
            task.lower, task.upper, task.action_origin, world.action_scale, world.action_low, world.action_high,
            int(env.seed), kernels.SELECT_NEAREST if select == "nearest" else kernels.SELECT_RANDOM,
            int(interpolation_steps),
            int(self.follow == "command"),  # refused above for an end-effector action
        ]  # fmt: skip
        self.state = {
            "subtask": wp.zeros(n, dtype=int, device=device),
            "count": wp.zeros(n, dtype=int, device=device),
            "reached": wp.zeros(n, dtype=int, device=device),
            "choice": wp.zeros((n, count), dtype=int, device=device),
            "xform": wp.zeros((n, count), dtype=wp.transform, device=device),
            "hold_fix": wp.zeros((n, count), dtype=wp.vec3, device=device),
            "start_pose": wp.zeros(n, dtype=wp.transform, device=device),
            "joint_target": wp.zeros((n, len(arm.coords)), dtype=float, device=device),
        }
        self.count = count
        self.block(first, attempts)
        self.action = wp.zeros((n, task.spec.action_dim), dtype=float, device=device)
        self.points = task.targets.points if task.targets.count else wp.zeros((n, 1), dtype=wp.vec3, device=device)

    def block(self, first: int, attempts: int) -> None:
        """Rows for the attempts ``first .. first + attempts - 1`` (zeroed)."""
        device = self.env.device
        self.first, self.attempts = first, attempts
        self.row_reached = wp.zeros(attempts, dtype=int, device=device)
        """Per attempt: how many subtasks' conditions held in order."""
        self.row_choice = wp.zeros((attempts, self.count), dtype=int, device=device)
        """Per attempt and subtask: the chosen source episode (an index into ``Sources.indices``)."""
        self.row_transform = wp.zeros((attempts, self.count), dtype=wp.transform, device=device)
        """Per attempt and subtask: the transform applied to its segment (``T_obj_now * inv(T_obj_src)``)."""
        self.row_hold = wp.zeros((attempts, self.count), dtype=wp.vec3, device=device)
        """Per attempt and subtask: the held body's offset correction in the tcp's frame [m] (zero: none)."""

    def __call__(self, observation: dict) -> wp.array:
        env, world = self.env, self.env.world
        wp.launch(
            self.kernels.follow_kernel,
            dim=env.num_envs,
            inputs=[*self.model, self.first, self.attempts, world.draw_env, observation["step_id"], world.joint_q]
            + [env.task.frame.body_q]
            + [self.points, env.task.subtask_flags],
            outputs=[*self.state.values(), self.row_reached, self.row_choice, self.row_transform, self.row_hold]
            + [self.action],
            device=env.device,
        )
        return self.action
