"""The model's own actuators as a task file's action (``[action] kind = "actuators"``, the default for a model
that has any): one action column per actuator, in the model's order.

An MJCF ``<motor>`` or ``<general>`` (any actuator MuJoCo reads its ``ctrl`` from) gets ``ctrl = action *
scale``, and MuJoCo applies its gear, ``ctrlrange`` and affine gain and bias as written; a ``<position>`` servo
gets the target ``pose + action * scale`` (the default pose: the keyframe ``pose`` names), clipped to its
``ctrlrange``, tracked with its ``kp`` and ``kv``; a ``<velocity>`` servo the target velocity ``action * scale``.
A URDF has no actuators: each joint with a ``<limit effort>`` is a motor whose gear is that limit (effort =
``action * scale * effort``, clipped to +-effort). ``kernels/taskfile.py``'s ``apply_actuators_kernel`` applies
them all in one launch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from forge_gpu._src.tasks.taskfile.modelfile import ModelFile, short_names

CTRL, TARGET, VELOCITY, EFFORT = 0, 1, 2, 3
"""How an action column reaches its actuator: MuJoCo's ``ctrl``, a position target, a velocity target, an effort."""
MODES = ("ctrl", "position target", "velocity target", "effort")


@dataclass
class Actuators:
    """The model's actuators that drive joints, in the model's order."""

    names: list[str] = field(default_factory=list)
    joints: list[str] = field(default_factory=list)
    coords: list[int] = field(default_factory=list)
    dofs: list[int] = field(default_factory=list)
    modes: list[int] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    """The ``ctrl`` column (CTRL), the coordinate (TARGET) or the dof (VELOCITY, EFFORT) the column writes."""
    gear: list[float] = field(default_factory=list)
    """EFFORT: the effort of one unit [N or N m]; 1 otherwise."""
    low: list[float] = field(default_factory=list)
    high: list[float] = field(default_factory=list)
    """The value's bounds: a servo's ``ctrlrange`` (target) or the effort limit; +-inf where the model has none."""
    gain: list[int] = field(default_factory=list)
    """1 where ``actuator_gain_scale`` multiplies the column (a force actuator: motors, URDF efforts)."""
    others: list[str] = field(default_factory=list)
    """The model's actuators that drive something other than a joint (a tendon, a site, a body), each as a phrase
    (``'lift' drives a tendon``): the default action cannot drive them; an explicit ``[action]`` switches them
    off."""
    other_index: list[int] = field(default_factory=list)
    """Their indices among the model's actuators (MuJoCo's order)."""

    def __len__(self) -> int:
        return len(self.names)


def model_actuators(builder, info: ModelFile | None, source: str) -> Actuators:
    """The actuators of one world's :class:`newton.ModelBuilder` ``builder`` (MJCF: Newton's ``mujoco:actuator``
    attributes; URDF: ``info``'s effort limits). An actuator that drives something other than a joint is a
    ``ValueError`` naming it."""

    names = short_names(builder.joint_label)
    qs, ds = list(builder.joint_q_start), list(builder.joint_qd_start)
    dofs = builder.joint_dof_count

    def joint_of(dof: int) -> int:
        return max(j for j in range(len(ds)) if ds[j] <= dof)

    out = Actuators()
    if info is not None and info.kind == "urdf":
        for j, name in enumerate(names):
            if name in info.efforts and ds[j] < (ds[j + 1] if j + 1 < len(ds) else dofs):
                effort = info.efforts[name]
                _add(out, name, name, qs[j], ds[j], EFFORT, ds[j], effort, -effort, effort, 1)
        return out
    attrs = builder.custom_attributes
    if "mujoco:actuator_trnid" not in attrs or not attrs["mujoco:actuator_trnid"].values:
        return out
    trnid = attrs["mujoco:actuator_trnid"].values
    count = len(trnid)

    def column(key: str, default):
        values = attrs[key].values if key in attrs else None
        return [values[k] if values and k < len(values) else default for k in range(count)]

    trntype, label = column("mujoco:actuator_trntype", 0), column("mujoco:actuator_label", "")
    source_kind, biastype = column("mujoco:ctrl_source", 1), column("mujoco:actuator_biastype", 0)
    ctrlrange, limited = column("mujoco:actuator_ctrlrange", (0.0, 0.0)), column("mujoco:actuator_ctrllimited", 2)
    has_range = column("mujoco:actuator_has_ctrlrange", 0)
    modes = list(builder.joint_target_mode)
    for k in range(count):
        dof = int(trnid[k][0])
        if int(trntype[k]) not in (0, 1) or not 0 <= dof < dofs:
            what = {2: "a tendon", 3: "a site", 4: "a body"}.get(int(trntype[k]), "no joint")
            out.others.append(f"model actuator {label[k] or k!r} drives {what}")
            out.other_index.append(k)
            continue
        j = joint_of(dof)
        coord = qs[j] + (dof - ds[j])
        bounded = int(limited[k]) == 1 or (int(limited[k]) == 2 and int(has_range[k]))
        low, high = (float(ctrlrange[k][0]), float(ctrlrange[k][1])) if bounded else (-math.inf, math.inf)
        name = label[k] or f"{names[j]} actuator"
        if int(source_kind[k]) == 0:  # a servo Newton tracks through the joint's target
            velocity = int(modes[dof]) == 2  # JointTargetMode.VELOCITY
            _add(out, name, names[j], coord, dof, VELOCITY if velocity else TARGET, dof if velocity else coord,
                 1.0, low, high, 0)  # fmt: skip
        else:
            _add(out, name, names[j], coord, dof, CTRL, k, 1.0, -math.inf, math.inf, int(int(biastype[k]) == 0))
    return out


def _add(out: Actuators, name, joint, coord, dof, mode, index, gear, low, high, gain) -> None:
    out.names.append(name)
    out.joints.append(joint)
    out.coords.append(coord)
    out.dofs.append(dof)
    out.modes.append(mode)
    out.index.append(index)
    out.gear.append(gear)
    out.low.append(low)
    out.high.append(high)
    out.gain.append(gain)


def describe(actuators: Actuators) -> str:
    """One phrase per actuator: ``name (joint, how)``."""
    return ", ".join(f"{n} ({j}: {MODES[m]})" for n, j, m in zip(actuators.names, actuators.joints,
                                                                  actuators.modes, strict=True))  # fmt: skip


def actuator_columns(action: dict, actuators: Actuators, source: str) -> tuple[list[int], list[int], list[str]]:
    """``[action] kind = "actuators"``: the plan's action coordinates, dofs and joint names, one per actuator;
    keys that choose joints or gains (the model's own) are refused."""
    if actuators.others:
        raise ValueError(f"{source}: {actuators.others[0]}; the default action (the model's joint actuators) cannot "
                         'drive it: set [action] kind = "effort" or "position" and its joints (which switches the '
                         "model's actuators off)")  # fmt: skip
    if not len(actuators):
        raise ValueError(f'{source}: action.kind = "actuators": the model has no actuators; set kind = "effort" '
                         'or "position" and its joints')  # fmt: skip
    for key in ("joints", "stiffness", "damping"):
        if key in action:
            raise ValueError(
                f'{source}: action.{key}: with kind = "actuators" the model\'s actuators choose the joints and '
                f'their gains; leave {key} out or set kind = "effort" or "position"'
            )
    return list(actuators.coords), list(actuators.dofs), list(actuators.joints)
