"""The end-effector action of a task file (``[action] kind = "ee_delta"``): a pose change of a site (or a body's
point) through differential inverse kinematics, plus the gripper's columns.

The action is ``[dx, dy, dz, droll, dpitch, dyaw]`` (each ``action * scale``: metres, then a rotation vector in
radians) in the world frame (``frame = "world"``) or the axes of the chain's base (``frame = "base"``: the body
the first IK joint hangs from), then one gripper column (``gripper``: all its joints together) or one per gripper
joint: ``action * scale`` -1 is closed (each joint's lower limit), +1 open (its upper). ``kernels/ik.py``'s
``ee_delta_kernel`` turns it into joint position targets, one launch for every world: the geometric Jacobian of
the ``joints`` at the measured pose, a damped least squares step (``ik_damping``), each joint at most
``max_joint_step`` per step and ``max_lag`` from its measured position, clipped to its limits, added to the
targets applied the step before. Those targets are
the task's recorded state ``joint_target`` (the arm's joints, then the gripper's), so ``replay --from state`` and
``--from actions`` both apply what the run applied.
"""

from __future__ import annotations

import math

KIND = "ee_delta"
KEYS = ("site", "body", "offset", "frame", "gripper", "ik_damping", "max_joint_step", "max_lag",
        "gripper_stiffness", "gripper_damping")  # fmt: skip
"""The keys ``kind = "ee_delta"`` takes beside ``joints``, ``low``, ``high``, ``scale``, ``stiffness``, ``damping``."""
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
        if not (isinstance(value, list) and len(value) == 3 and all(_finite(v) for v in value)):
            raise ValueError(f"{key}.offset = {value!r}: expected [x, y, z] in metres, the body's frame")
        offset = [float(v) for v in value] + [0.0, 0.0, 0.0, 1.0]
    frame = action.get("frame", "world")
    if frame not in ("world", "base"):
        raise ValueError(f"{key}.frame = {frame!r}: allowed values are 'world', 'base'")
    numbers = {}
    for name, default, low in (("ik_damping", IK_DAMPING, 0.0), ("max_joint_step", MAX_JOINT_STEP, 1e-9),
                               ("max_lag", MAX_LAG, 1e-9),
                               ("gripper_stiffness", None, 0.0), ("gripper_damping", None, 0.0)):  # fmt: skip
        value = action.get(name, default)
        if value is not None and (not _finite(value) or value < low):
            raise ValueError(f"{key}.{name} = {value!r}: expected a number >= {low:g}")
        numbers[name] = value
    if "joints" not in action:
        raise ValueError(f'{key}: kind = "{KIND}" needs joints = [...] (the arm joints the IK moves)')
    coords, dofs, names = joints(action["joints"], "action.joints")
    g_coords, g_dofs, g_names = joints(action["gripper"], "action.gripper") if "gripper" in action else ([], [], [])
    if set(g_names) & set(names):
        raise ValueError(f"{key}.gripper: {sorted(set(g_names) & set(names))[0]!r} is also in action.joints")
    if len(coords) != len(names) or len(g_coords) != len(g_names):
        raise ValueError(f"{key}.joints: the IK moves hinge and slide joints (one coordinate each)")
    labels = [str(s).rsplit("/", 1)[-1] for s in builder.joint_label]
    index = [labels.index(n) for n in names]
    parent_of = {int(builder.joint_child[j]): int(builder.joint_parent[j]) for j in range(len(labels))}
    chain, b = set(), body
    while b >= 0:
        chain.add(b)
        b = parent_of.get(b, -1)
    for n, j in zip(names, index, strict=True):
        if int(builder.joint_child[j]) not in chain:
            raise ValueError(f"{key}.joints: joint {n!r} does not move {_point_name(action)} (not on its chain)")
    slide = [int(int(builder.joint_type[j]) == 0) for j in index]  # newton.JointType.PRISMATIC
    ik = {
        "coords": coords, "dofs": dofs, "child": [int(builder.joint_child[j]) for j in index],
        "xc": [[float(v) for v in builder.joint_X_c[j]] for j in index],
        "axis": [[float(v) for v in builder.joint_axis[d]] for d in dofs], "slide": slide,
        "gripper_coords": g_coords, "gripper_dofs": g_dofs, "point_body": body, "point_offset": offset,
        "base_body": int(builder.joint_parent[index[0]]) if frame == "base" else -1,
        "damping": float(numbers["ik_damping"]), "max_joint_step": float(numbers["max_joint_step"]),
        "max_lag": float(numbers["max_lag"]),
        "gripper_stiffness": numbers["gripper_stiffness"], "gripper_damping": numbers["gripper_damping"],
    }  # fmt: skip
    columns = 1 if g_names else 0
    a_names = ["dx", "dy", "dz", "droll", "dpitch", "dyaw"] + (["gripper"] if columns else [])
    return [-1] * 6 + g_coords[:columns], [-1] * 6 + g_dofs[:columns], a_names, ik


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _point_name(action: dict) -> str:
    return f"site {action['site']!r}" if "site" in action else f"body {action['body']!r}"
