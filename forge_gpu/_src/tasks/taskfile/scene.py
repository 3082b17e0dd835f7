"""A task file's scene objects: ``[model.scene.NAME]``, primitive shapes added to every world after the robot.

A task adds its table, bins and objects to a robot that comes from a robot file, so the robot's model file can be
swapped (a user's own Panda with meshes) and the task kept. Each entry is one shape:

- ``shape = "box"`` with ``size = [x, y, z]``, the full edges [m]; ``"cylinder"`` with ``radius`` and ``height``
  (full, along the object's z) [m]; ``"sphere"`` with ``radius`` [m];
- ``static = true``: welded to the world (a table, a bin's walls); else a free body (its own free joint) of
  ``mass`` [kg] with the solid shape's inertia;
- ``position = [x, y, z]`` [m] (its centre, world frame; default the origin) and ``rotation = [x, y, z, w]`` (a
  quaternion, default none); ``friction`` (MuJoCo's sliding coefficient, default 1.0) and ``color`` (linear RGB).

The entry's name is its body's and its shape's name (``[objects.NAME]`` and the terms bind to it). Every value may
be ``"params.X"``. A free object rests where ``position`` puts it until ``[objects]`` places it at each reset.
"""

from __future__ import annotations

import math

from forge_gpu._src.core.checks import finite_number, number_list
from forge_gpu._src.tasks.taskfile.entries import named_entries

SHAPES = ("box", "cylinder", "sphere")
SCENE_KEYS = ("shape", "size", "radius", "height", "static", "position", "rotation", "mass", "friction", "color")
_DIMENSIONS = {"box": ("size",), "cylinder": ("radius", "height"), "sphere": ("radius",)}


def scene_entries(scene, source: str) -> list[dict]:
    """The checked ``[model.scene]``: one dict per entry, in the file's order; ``ValueError`` (one line naming the
    key and what is allowed) for anything else."""
    if not isinstance(scene, dict):
        raise ValueError(f"{source}: model.scene = {scene!r}: expected tables [model.scene.NAME]")
    out = []
    for name, entry in named_entries(scene, "model.scene", SCENE_KEYS, "allowed keys are", source, show=repr):
        where = f"{source}: model.scene.{name}"
        shape = entry.get("shape")
        if shape not in SHAPES:
            raise ValueError(f"{where}.shape = {shape!r}: allowed values are {', '.join(map(repr, SHAPES))}")
        for key in SCENE_KEYS[1:4]:
            if key in entry and key not in _DIMENSIONS[shape]:
                raise ValueError(f"{where}.{key}: a {shape} takes {' and '.join(_DIMENSIONS[shape])}")
        item = {"name": name, "shape": shape}
        if shape == "box":
            size = entry.get("size")
            if not (number_list(size, 3) and all(v > 0 for v in size)):
                raise ValueError(f"{where}.size = {size!r}: expected [x, y, z], the box's full edges > 0 [m]")
            item["half"] = [0.5 * float(v) for v in size]
        else:
            for key in _DIMENSIONS[shape]:
                value = entry.get(key)
                if not (finite_number(value) and value > 0):
                    raise ValueError(f"{where}.{key} = {value!r}: a {shape} needs {key} > 0 [m]")
                item[key] = float(value)
        static = entry.get("static", False)
        if not isinstance(static, bool):
            raise ValueError(f"{where}.static = {static!r}: expected true or false")
        item["static"] = static
        mass = entry.get("mass")
        if static and mass is not None:
            raise ValueError(f"{where}.mass: a static object (welded to the world) has no mass; leave it out")
        if not static and not (finite_number(mass) and mass > 0):
            raise ValueError(f"{where}.mass = {mass!r}: a free object needs mass > 0 [kg] (or static = true)")
        item["mass"] = float(mass) if mass is not None else 0.0
        for key, count, default in (("position", 3, [0.0, 0.0, 0.0]), ("rotation", 4, [0.0, 0.0, 0.0, 1.0]),
                                    ("color", 3, [0.7, 0.7, 0.7])):  # fmt: skip
            value = entry.get(key, default)
            if not number_list(value, count):
                raise ValueError(f"{where}.{key} = {value!r}: expected a list of {count} numbers")
            item[key] = [float(v) for v in value]
        norm = math.sqrt(sum(v * v for v in item["rotation"]))
        if norm < 1e-6:
            raise ValueError(f"{where}.rotation = {entry['rotation']!r}: expected a unit quaternion [x, y, z, w]")
        item["rotation"] = [v / norm for v in item["rotation"]]
        friction = entry.get("friction", 1.0)
        if not (finite_number(friction) and friction >= 0):
            raise ValueError(f"{where}.friction = {friction!r}: expected a number >= 0")
        item["friction"] = float(friction)
        out.append(item)
    return out


def _inertia(item: dict) -> list[float]:
    """The solid shape's principal moments about its centre [kg m^2]."""
    m = item["mass"]
    if item["shape"] == "box":
        x, y, z = (2.0 * h for h in item["half"])
        return [m * (y * y + z * z) / 12.0, m * (x * x + z * z) / 12.0, m * (x * x + y * y) / 12.0]
    r = item["radius"]
    if item["shape"] == "sphere":
        return [0.4 * m * r * r] * 3
    h = item["height"]
    side = m * (3.0 * r * r + h * h) / 12.0
    return [side, side, 0.5 * m * r * r]


def add_scene(builder, scene, source: str) -> None:
    """Add ``[model.scene]``'s objects to one world's ``builder`` (after the robot): static shapes on the world,
    free bodies each on its own free joint."""
    import newton
    import numpy as np
    import warp as wp

    for item in scene_entries(scene, source):
        xform = wp.transform(tuple(item["position"]), tuple(item["rotation"]))
        cfg = newton.ModelBuilder.ShapeConfig(density=0.0, mu=item["friction"])
        if item["static"]:
            body, at = -1, xform
        else:
            body = builder.add_body(xform=xform, mass=item["mass"], inertia=wp.mat33(np.diag(_inertia(item))),
                                    lock_inertia=True, label=item["name"])  # fmt: skip
            at = wp.transform_identity()
        common = {"xform": at, "cfg": cfg, "color": tuple(item["color"]), "label": item["name"]}
        if item["shape"] == "box":
            hx, hy, hz = item["half"]
            builder.add_shape_box(body, hx=hx, hy=hy, hz=hz, **common)
        elif item["shape"] == "cylinder":
            builder.add_shape_cylinder(body, radius=item["radius"], half_height=0.5 * item["height"], **common)
        else:
            builder.add_shape_sphere(body, radius=item["radius"], **common)
