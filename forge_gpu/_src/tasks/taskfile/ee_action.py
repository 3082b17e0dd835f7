"""The end-effector action of a task file (``[action] kind = "ee_delta"``): a pose change of a site (or a body's
point) through differential inverse kinematics, plus the other action joints' position targets (the gripper's).

The action is ``[dx, dy, dz, droll, dpitch, dyaw]`` (each ``action * scale``: metres, then a rotation vector in
radians) in the world frame (``frame = "world"``) or the axes of the chain's base (``frame = "base"``: the body
the first IK joint hangs from), then one column per action joint (``joints``) that does not move the point: its
position target as ``kind = "position"`` gives it (``origin + action * scale``, ``relative`` choosing the origin;
``follow`` copies it to another joint), e.g. a gripper's width. ``kernels/ik.py``'s ``ee_delta_kernel`` turns it
into joint position targets, one launch for every world: the geometric Jacobian of the action joints on the
point's chain at the measured pose, a damped least squares step (``ik_damping``), each joint at most
``max_joint_step`` per step and ``max_lag`` from its measured position, clipped to its limits, added to the targets
applied the step before. Those targets are the task's recorded state ``joint_target`` (the chain's joints, then
the others), so ``replay --from state`` and ``--from actions`` both apply what the run applied. ``stiffness`` and
``damping`` are one number or one per action joint, in ``joints``' order (the model's).
"""

from __future__ import annotations

from forge_gpu._src.core.checks import finite_number, number_list
from forge_gpu._src.tasks.taskfile.modelfile import short_names

KIND = "ee_delta"
KEYS = ("site", "body", "offset", "frame", "ik_damping", "max_joint_step", "max_lag")
"""The keys ``kind = "ee_delta"`` takes beside ``joints``, ``low``, ``high``, ``scale``, ``stiffness``, ``damping``,
``relative`` and ``follow``."""
IK_DAMPING, MAX_JOINT_STEP, MAX_LAG = 0.05, 0.1, 0.2
"""The defaults: lambda of the damped least squares [m], the largest joint change per step and the largest
distance of a target from its joint's measured position [rad or m]."""


def ee_columns(action: dict, builder, joints, sites: dict, body_names: list[str], source: str):
    """Resolve ``[action] kind = "ee_delta"`` against one world's ``builder``: ``(coords, dofs, names, ik)``, the
    action's columns (-1 for the six pose columns, then the gripper joints') and the IK's tables (``ik``: the
    chain's coordinates, dofs, child bodies, joint frames on the child's side, axes, slides, the gripper's
    coordinates and dofs, the point, the base body and the numbers). ``joints(patterns, where)`` is the plan's
    joint resolver. ValueError in one line naming the file and the key."""
    key = f"{source}: action"
    for name in ("site", "body", "offset"):
        if name in action and name != "offset" and not isinstance(action[name], str):
            raise ValueError(f"{key}.{name} = {action[name]!r}: expected a name")
    if ("site" in action) == ("body" in action):
        raise ValueError(f'{key}: kind = "{KIND}" needs site = "<a site>" or body = "<a body>" (the point it moves)')
    if "site" in action:
        if "offset" in action:
            raise ValueError(f"{key}.offset: give site or body with offset, not both")
        name = action["site"]
        if name not in sites:
            raise ValueError(f"{key}.site = {name!r}: no such site; the model's sites are {', '.join(sites) or 'none'}")
        body, pose = sites[name]
        offset = [float(v) for v in pose]
    else:
        name = action["body"]
        if name not in body_names:
            raise ValueError(f"{key}.body = {name!r}: no such body; the model's bodies are {', '.join(body_names)}")
        body = body_names.index(name)
        value = action.get("offset", [0.0, 0.0, 0.0])
        if not number_list(value, 3):
            raise ValueError(f"{key}.offset = {value!r}: expected [x, y, z] in metres, the body's frame")
        offset = [float(v) for v in value] + [0.0, 0.0, 0.0, 1.0]
    frame = action.get("frame", "world")
    if frame not in ("world", "base"):
        raise ValueError(f"{key}.frame = {frame!r}: allowed values are 'world', 'base'")
    numbers = {}
    for name, default, low in (("ik_damping", IK_DAMPING, 0.0), ("max_joint_step", MAX_JOINT_STEP, 1e-9),
                               ("max_lag", MAX_LAG, 1e-9)):  # fmt: skip
        value = action.get(name, default)
        if value is not None and (not finite_number(value) or value < low):
            raise ValueError(f"{key}.{name} = {value!r}: expected a number >= {low:g}")
        numbers[name] = value
    if "joints" not in action:
        raise ValueError(f'{key}: kind = "{KIND}" needs joints = [...] (the arm joints the IK moves, and the others)')
    all_coords, all_dofs, all_names = joints(action["joints"], "action.joints")
    if len(all_coords) != len(all_names):
        raise ValueError(f"{key}.joints: the IK moves hinge and slide joints (one coordinate each)")
    on = on_chain(builder, body, all_names)
    if not any(on):
        raise ValueError(f"{key}.joints: none of {', '.join(all_names)} moves {_point_name(action)}")
    coords, dofs, names = ([v for v, o in zip(x, on, strict=True) if o] for x in (all_coords, all_dofs, all_names))
    g_coords, g_dofs, g_names = ([v for v, o in zip(x, on, strict=True) if not o]
                                 for x in (all_coords, all_dofs, all_names))  # fmt: skip
    base = int(builder.joint_parent[joint_labels(builder).index(names[0])]) if frame == "base" else -1
    ik = {
        **chain_tables(builder, names), "coords": coords, "dofs": dofs, "gripper_coords": g_coords,
        "gripper_dofs": g_dofs, "point_body": body, "point_offset": offset, "joint_names": names,
        "all_dofs": all_dofs, "base_body": base,
        "damping": float(numbers["ik_damping"]), "max_joint_step": float(numbers["max_joint_step"]),
        "max_lag": float(numbers["max_lag"]),
    }  # fmt: skip
    a_names = ["dx", "dy", "dz", "droll", "dpitch", "dyaw", *g_names]
    return [-1] * 6 + g_coords, [-1] * 6 + g_dofs, a_names, ik


def joint_labels(builder) -> list[str]:
    """The joints' short names (the last part of each label)."""
    return short_names(builder.joint_label)


def on_chain(builder, body: int, names: list[str]) -> list[bool]:
    """Per joint name: whether it moves ``body`` (its child is ``body`` or one of its ancestors)."""
    labels = joint_labels(builder)
    parent_of = {int(builder.joint_child[j]): int(builder.joint_parent[j]) for j in range(len(labels))}
    chain, b = set(), body
    while b >= 0:
        chain.add(b)
        b = parent_of.get(b, -1)
    return [int(builder.joint_child[labels.index(n)]) in chain for n in names]


def chain_tables(builder, names: list[str]) -> dict:
    """The Jacobian's tables of the joints ``names`` (hinges and slides): each one's child body (per-world index),
    its frame on the child's side (7 numbers: position, quaternion xyzw), its axis in that frame, whether it
    slides."""
    labels = joint_labels(builder)
    index = [labels.index(n) for n in names]
    dofs = [int(builder.joint_qd_start[j]) for j in index]
    return {
        "child": [int(builder.joint_child[j]) for j in index],
        "xc": [[float(v) for v in builder.joint_X_c[j]] for j in index],
        "axis": [[float(v) for v in builder.joint_axis[d]] for d in dofs],
        "slide": [int(int(builder.joint_type[j]) == 0) for j in index],  # newton.JointType.PRISMATIC
    }


def _point_name(action: dict) -> str:
    return f"site {action['site']!r}" if "site" in action else f"body {action['body']!r}"
