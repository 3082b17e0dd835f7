"""A task file's camera: the observation ``[[observations]] term = "camera"``, rendered by the RGB-D machinery of
the arm tasks (``tasks/camera.py``: one pinhole camera per world, all worlds in one ``SensorCamera`` call).

It adds the fields ``rgb`` uint8 [S, S, 3] and (``depth = true``, the default) ``depth`` float32 [S, S] [m] instead
of proprio columns, and the camera's calibration (``calibration["cameras"]["front"]``). The camera sits at
``position`` looking at ``look_at`` (world frame [m]), or, with ``follow = "<body>"``, at those offsets from the
body's position (its orientation ignored: the view keeps its direction while the robot walks). It renders after
the observe kernel, each step and reset (and again on replay, from the restored state).
"""

from __future__ import annotations

import warp as wp

from forge_gpu._src.sim.tasks.camera import BACKGROUND, WorldCameras, check_pose
from forge_gpu.kernels import taskfile as kernels

CAMERA_KEYS = ("term", "size", "fov", "position", "look_at", "follow", "depth")
SIZES = (8, 512)
"""The square image sizes [px] a task file's camera takes."""


def camera_entry(entry: dict, where: str, source: str, body) -> dict:
    """The checked camera of ``entry`` (``body(name, key)`` resolves a body name to its index)."""
    for key in entry:
        if key not in CAMERA_KEYS:
            raise ValueError(f"{source}: unknown key {where}.{key}; camera takes {', '.join(CAMERA_KEYS)}")
    size, fov, depth = entry.get("size", 64), entry.get("fov", 45.0), entry.get("depth", True)
    if not isinstance(size, int) or isinstance(size, bool) or not SIZES[0] <= size <= SIZES[1]:
        raise ValueError(f"{source}: {where}.size = {size!r}: expected a whole number of pixels in {list(SIZES)}")
    if not isinstance(fov, int | float) or isinstance(fov, bool) or not 5.0 <= fov <= 120.0:
        raise ValueError(f"{source}: {where}.fov = {fov!r}: expected a field of view in [5, 120] degrees")
    if not isinstance(depth, bool):
        raise ValueError(f"{source}: {where}.depth = {depth!r}: expected true or false")
    for key in ("position", "look_at"):
        if not isinstance(entry.get(key), list):
            raise ValueError(f"{source}: {where}: camera needs {key} = [x, y, z] (metres)")
    check_pose(entry["position"], entry["look_at"], f"{source}: {where}.position", f"{where}.look_at")
    follow = body(entry["follow"], f"{where}.follow") if "follow" in entry else -1
    return {
        "size": size, "fov": float(fov), "position": [float(v) for v in entry["position"]],
        "look_at": [float(v) for v in entry["look_at"]], "follow": follow, "follow_name": entry.get("follow"),
        "depth": depth,
    }  # fmt: skip


def camera_fields(camera: dict | None) -> dict:
    """The fields a camera adds: ``rgb`` and, with depth, ``depth``."""
    if camera is None:
        return {}
    s = camera["size"]
    return {"rgb": ((s, s, 3), "uint8"), **({"depth": ((s, s), "float32")} if camera["depth"] else {})}


class FileCamera:
    """Every world's camera of a task file, its fields and its calibration."""

    def __init__(self, camera: dict, world):
        self.camera = camera
        self.cameras = WorldCameras(
            world.model, world.num_envs, camera["size"], camera["fov"], camera["position"], camera["look_at"],
            background=BACKGROUND,
        )  # fmt: skip
        self.fields = {"rgb": self.cameras.rgb}
        if camera["depth"]:
            self.fields["depth"] = self.cameras.depth
        front = self.cameras.calibration(randomized=camera["follow"] >= 0)
        if camera["follow"] >= 0:
            front["follows"] = (
                f"body {camera['follow_name']!r}: camera_to_world is the nominal pose translated by the body's "
                "position at each frame"
            )
        self.calibration = {"cameras": {"front": front}}

    def render(self, world, body_q: wp.array2d) -> None:
        """Move the cameras that follow a body, then render every world."""
        c = self.camera
        if c["follow"] >= 0:
            wp.launch(
                kernels.follow_camera_kernel,
                dim=world.num_envs,
                inputs=[c["follow"], wp.vec3(*c["position"]), wp.vec3(*c["look_at"]), body_q],
                outputs=[self.cameras.transforms],
                device=world.device,
            )
        self.cameras.render(world)
