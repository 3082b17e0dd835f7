"""The objects of a task file (``[objects]``): free boxes and cylinders of the model, placed at every reset and
drawn (their size, mass, friction and place) by ``[randomize]``. :func:`object_entries` checks them; the file task
(``task.py``) places them and writes what is drawn."""

from __future__ import annotations

from forge_gpu._src.core.checks import finite_number, number_list
from forge_gpu._src.tasks.taskfile.entries import named_entries, shown
from forge_gpu._src.tasks.taskfile.model import FREE, short_names

OBJECT_KEYS = ("body", "shape", "size", "radius", "height", "mass", "friction", "position", "yaw")
BOX_SHAPE, CYLINDER_SHAPE = 7, 6
"""Newton's box and cylinder (``newton.GeoType``): the shapes an ``[objects]`` entry may be."""


def object_entries(objects, source: str, builder) -> list[dict]:
    """The checked ``[objects]``: per name, its free ``body`` and its ``shape`` (names in the model, checked with
    ``builder``: a one-world probe, or None to check the numbers alone) and its numbers: a cube's ``size`` (its
    edge) or a cylinder's ``radius`` and ``height`` (its full height, along its axis: upright on the table), each
    > 0 [m]; ``mass`` (> 0) [kg], ``friction`` (>= 0), ``position = [x, y]`` [m], ``yaw`` [rad] (default 0). The
    entry's ``kind`` is ``"box"`` (``size``) or ``"cylinder"`` (``radius`` and ``height``); with ``builder`` the
    model's shape must be of that kind, and each entry gains ``coord`` and ``dof``: its free joint's first
    coordinate and dof in a world."""
    out = []
    for name, entry in named_entries(objects, "objects", OBJECT_KEYS, "an object takes", source):
        where = f"{source}: objects.{name}"
        item = {"name": name, "yaw": 0.0}
        for key in ("body", "shape"):
            if not isinstance(entry.get(key), str):
                raise ValueError(f'{where}: an object needs {key} = "<its {key} name in the model>"')
            item[key] = entry[key]
        round_keys = [k for k in ("radius", "height") if k in entry]
        if "size" in entry and round_keys:
            raise ValueError(f"{where}.{round_keys[0]}: a cube takes size (its edge), a cylinder radius and height, "
                             "not both")  # fmt: skip
        if round_keys and len(round_keys) < 2:
            missing = "height" if round_keys == ["radius"] else "radius"
            raise ValueError(f"{where}: a cylinder needs radius and height [m]; {missing} is missing")
        item["kind"] = "cylinder" if round_keys else "box"
        for key in (*dimensions(item), "mass", "friction", "yaw"):
            if key not in entry and key == "yaw":
                continue
            value = entry.get(key)
            low = 0.0 if key == "friction" else None
            positive = key in ("size", "radius", "height", "mass")
            if not finite_number(value) or (positive and value <= 0) \
                    or (low is not None and value < 0):  # fmt: skip
                what = "a number" if key == "yaw" else "a number >= 0" if key == "friction" else "a number > 0"
                raise ValueError(f"{where}.{key} = {shown(value)}: expected {what}")
            item[key] = float(value)
        value = entry.get("position")
        if not number_list(value, 2, finite=False):
            raise ValueError(f"{where}.position = {shown(value)}: expected [x, y] in metres")
        item["position"] = [float(v) for v in value]
        if builder is not None:
            bodies, shapes = short_names(builder.body_label), short_names(builder.shape_label)
            if item["body"] not in bodies:
                raise ValueError(f"{where}.body = {item['body']!r}: no such body; the model's are {', '.join(bodies)}")
            body = bodies.index(item["body"])
            joints = [j for j, child in enumerate(builder.joint_child) if int(child) == body]
            if not joints or int(builder.joint_type[joints[0]]) != FREE:
                raise ValueError(f"{where}.body = {item['body']!r}: not on a free joint; an object moves freely")
            if item["shape"] not in shapes or int(builder.shape_body[shapes.index(item["shape"])]) != body:
                raise ValueError(f"{where}.shape = {item['shape']!r}: no such shape on body {item['body']!r}")
            kind = int(builder.shape_type[shapes.index(item["shape"])])
            expected = CYLINDER_SHAPE if item["kind"] == "cylinder" else BOX_SHAPE
            if kind != expected:
                keys = "radius and height" if item["kind"] == "cylinder" else "size"
                other = "box" if kind == BOX_SHAPE else "cylinder" if kind == CYLINDER_SHAPE else "another shape"
                raise ValueError(f"{where}: {keys} describe a {item['kind']}, but shape {item['shape']!r} is a "
                                 f"{other} (a box takes size, a cylinder radius and height)")  # fmt: skip
            item["coord"] = int(builder.joint_q_start[joints[0]])
            item["dof"] = int(builder.joint_qd_start[joints[0]])
        out.append(item)
    return out


def dimensions(entry: dict) -> tuple[str, ...]:
    """An ``[objects]`` entry's size parameters (suffixes): a cube's edge, a cylinder's radius and height."""
    return ("radius", "height") if entry["kind"] == "cylinder" else ("size",)
