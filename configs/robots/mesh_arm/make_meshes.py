"""Write mesh_arm's mesh files: a hexagonal prism base (base.obj), and a tapered link (link.stl, binary STL).

Run from anywhere: ``python configs/robots/mesh_arm/make_meshes.py``; it writes beside itself. Units: metres.
The files are small (tens of triangles) and committed; this script is how they were made.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

HERE = Path(__file__).parent


def prism(sides: int, radius_bottom: float, radius_top: float, z0: float, z1: float):
    """Vertices and triangles (outward, counter-clockwise) of a closed prism along z."""
    ring = [(math.cos(2 * math.pi * k / sides), math.sin(2 * math.pi * k / sides)) for k in range(sides)]
    vertices = [(radius_bottom * c, radius_bottom * s, z0) for c, s in ring]
    vertices += [(radius_top * c, radius_top * s, z1) for c, s in ring]
    vertices += [(0.0, 0.0, z0), (0.0, 0.0, z1)]
    bottom, top = 2 * sides, 2 * sides + 1
    faces = []
    for k in range(sides):
        n = (k + 1) % sides
        faces += [(k, n, sides + n), (k, sides + n, sides + k), (bottom, n, k), (top, sides + k, sides + n)]
    return vertices, faces


def write_obj(path: Path, vertices, faces) -> None:
    lines = ["# mesh_arm base, written by make_meshes.py"]
    lines += [f"v {x:.5f} {y:.5f} {z:.5f}" for x, y, z in vertices]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in faces]
    path.write_text("\n".join(lines) + "\n")


def write_stl(path: Path, vertices, faces) -> None:
    data = bytearray(b"mesh_arm link, written by make_meshes.py".ljust(80, b" "))
    data += struct.pack("<I", len(faces))
    for face in faces:
        a, b, c = (vertices[i] for i in face)
        u = [b[i] - a[i] for i in range(3)]
        v = [c[i] - a[i] for i in range(3)]
        n = [u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]]
        norm = math.sqrt(sum(x * x for x in n)) or 1.0
        data += struct.pack("<3f", *(x / norm for x in n))
        for p in (a, b, c):
            data += struct.pack("<3f", *p)
        data += struct.pack("<H", 0)
    path.write_bytes(bytes(data))


if __name__ == "__main__":
    write_obj(HERE / "base.obj", *prism(6, 0.08, 0.06, 0.0, 0.1))
    write_stl(HERE / "link.stl", *prism(8, 0.03, 0.02, 0.0, 0.3))
