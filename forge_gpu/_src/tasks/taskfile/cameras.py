"""The cameras of a task file (``[[observations]] term = "camera"``): :func:`camera_entry` checks one, the
fields they add (:func:`camera_layout`), and :class:`FileCameras`, which renders them in every world each step."""

from __future__ import annotations

import warp as wp

from forge_gpu._src.core.cameras import FRONT, MOUNT_KEY, camera_fields, check_name
from forge_gpu._src.core.checks import is_int, plain_number
from forge_gpu._src.sim.camera import BACKGROUND, WorldCameras, check_pose, new_sensor, newton_transform
from forge_gpu._src.tasks.taskfile.entries import check_keys
from forge_gpu.kernels import taskfile as kernels

CAMERA_KEYS = ("term", "name", "size", "fov", "position", "look_at", "up", "follow", "mount", "depth", "enabled")
SIZES = (8, 512)
"""The square image sizes [px] a task file's camera takes."""


def camera_entry(entry: dict, where: str, source: str, body) -> dict:
    """The checked camera of ``entry`` (``body(name, key)`` resolves a body name to its index): its name (``front``
    when unnamed), image size, field of view, pose (``position`` looking at ``look_at`` with ``up`` toward image
    up; in the world frame, offsets from a ``follow`` body's position, or in a ``mount`` body's frame), depth on or
    off."""
    check_keys(entry, CAMERA_KEYS, where, "camera takes", source)
    name = check_name(entry.get("name", FRONT), f"{source}: {where}.name")
    size, fov, depth = entry.get("size", 64), entry.get("fov", 45.0), entry.get("depth", True)
    if not is_int(size) or not SIZES[0] <= size <= SIZES[1]:
        raise ValueError(f"{source}: {where}.size = {size!r}: expected a whole number of pixels in {list(SIZES)}")
    if not plain_number(fov) or not 5.0 <= fov <= 120.0:
        raise ValueError(f"{source}: {where}.fov = {fov!r}: expected a field of view in [5, 120] degrees")
    if not isinstance(depth, bool):
        raise ValueError(f"{source}: {where}.depth = {depth!r}: expected true or false")
    enabled = entry.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"{source}: {where}.enabled = {enabled!r}: expected true or false")
    for key in ("position", "look_at"):
        if not isinstance(entry.get(key), list):
            raise ValueError(f"{source}: {where}: camera needs {key} = [x, y, z] (metres)")
    up = entry.get("up", [0.0, 0.0, 1.0])
    if not isinstance(up, list):
        raise ValueError(f"{source}: {where}.up = {up!r}: expected 3 values (a direction)")
    check_pose(entry["position"], entry["look_at"], f"{source}: {where}.position", f"{where}.look_at", up=up,
               up_key=f"{where}.up")  # fmt: skip
    if "follow" in entry and "mount" in entry:
        raise ValueError(
            f"{source}: {where}: a camera takes follow (translates with a body) or mount (rides with "
            f"its full pose), not both; got follow = {entry['follow']!r}, mount = {entry['mount']!r}"
        )
    follow = body(entry["follow"], f"{where}.follow") if "follow" in entry else -1
    mount = body(entry["mount"], f"{where}.mount") if "mount" in entry else -1
    return {
        "name": name, "size": size, "fov": float(fov), "position": [float(v) for v in entry["position"]],
        "look_at": [float(v) for v in entry["look_at"]], "up": [float(v) for v in up], "follow": follow,
        "follow_name": entry.get("follow"), "mount": mount, "mount_name": entry.get("mount"), "depth": depth,
        "enabled": enabled,
    }  # fmt: skip


def camera_layout(cameras: list[dict]) -> dict:
    """The fields the cameras add: each camera's rgb and, with depth, its depth field (``core/cameras.py``: the
    ``front`` camera's ``rgb`` and ``depth``, another's ``NAME_rgb`` and ``NAME_depth``)."""
    fields = {}
    for camera in cameras:
        rgb, depth = camera_fields(camera["name"])
        s = camera["size"]
        fields[rgb] = ((s, s, 3), "uint8")
        if camera["depth"]:
            fields[depth] = ((s, s), "float32")
    return fields


class FileCamera:
    """One camera of a task file (``[[observations]] term = "camera"``) in every world, its fields and its
    calibration, rendered by the RGB-D machinery of the arm tasks (``sim/camera.py``: one pinhole camera per
    world, all worlds in one ``SensorCamera`` call).

    It adds the fields ``rgb`` uint8 [S, S, 3] and (``depth = true``, the default) ``depth`` float32 [S, S] [m]
    (a camera ``name = "NAME"``: ``NAME_rgb`` and ``NAME_depth``) instead of proprio columns, and its calibration
    (``calibration["cameras"][name]``, the unnamed camera's name ``front``). The camera sits at ``position``
    looking at ``look_at`` with ``up`` toward image up (world frame [m]); with ``follow = "<body>"``, at those
    offsets from the body's position (its orientation ignored: the view keeps its direction while the robot
    walks); with ``mount = "<body>"``, at that pose in the body's frame (it rides with the body's position and
    orientation: a wrist camera). It renders after the observe kernel, each step and reset (and again on replay,
    from the restored state)."""

    def __init__(self, camera: dict, world, *, jittered: bool = False, sensor=None):
        self.camera = camera
        self.name = camera["name"]
        mounted = camera["mount"] >= 0
        self.cameras = WorldCameras(
            world.model, world.num_envs, camera["size"], camera["fov"], camera["position"], camera["look_at"],
            up=camera["up"], background=BACKGROUND, sensor=sensor,
        )  # fmt: skip
        self.local = newton_transform(self.cameras.pose) if mounted else None
        """A mounted camera's pose in its body's frame, Newton's convention."""
        rgb, depth = camera_fields(self.name)
        self.fields = {rgb: self.cameras.rgb}
        if camera["depth"]:
            self.fields[depth] = self.cameras.depth
        entry = self.cameras.calibration(randomized=camera["follow"] >= 0 or mounted or jittered)
        if jittered:
            entry["randomized"] = (
                "camera_to_world of an episode: the camera at position + its camera_position_offset looking at "
                "look_at + its camera_look_at_offset"
            )
        if camera["follow"] >= 0:
            entry["follows"] = (
                f"body {camera['follow_name']!r}: camera_to_world is the nominal pose translated by the body's "
                "position at each frame"
            )
        if mounted:
            entry["camera_to_body"] = entry.pop("camera_to_world")
            entry[MOUNT_KEY] = {"body": camera["mount_name"], "body_index": camera["mount"]}
            entry["moves"] = (
                f"mounted on body {camera['mount_name']!r}: camera_to_world of frame t is the body's pose (recorded "
                "state body_q[t, body_index]: position, quaternion xyzw) times camera_to_body"
            )
        self.calibration = entry

    def place(self, world, body_q: wp.array2d) -> None:
        """Move the camera of every world with its body (``follow`` or ``mount``); a fixed camera stays."""
        c = self.camera
        if c["follow"] >= 0:
            wp.launch(
                kernels.follow_camera_kernel,
                dim=world.num_envs,
                inputs=[c["follow"], wp.vec3(*c["position"]), wp.vec3(*c["look_at"]), wp.vec3(*c["up"]), body_q],
                outputs=[self.cameras.transforms],
                device=world.device,
            )
        elif c["mount"] >= 0:
            wp.launch(
                kernels.mount_camera_kernel,
                dim=world.num_envs,
                inputs=[c["mount"], self.local, body_q],
                outputs=[self.cameras.transforms],
                device=world.device,
            )


class FileCameras:
    """Every camera of a task file (:class:`FileCamera` each, sharing one ``SensorCamera``): their fields, their
    calibration (``{"cameras": {name: ...}}``) and one render of them all per step (a refit of the shapes' bounds,
    then per camera at most one placing launch and one ``SensorCamera`` call with its colour unpacking)."""

    def __init__(self, cameras: list[dict], world, *, jittered: bool = False):
        sensor = new_sensor(world.model, background=BACKGROUND)
        self.all = [FileCamera(c, world, jittered=jittered and c["name"] == FRONT, sensor=sensor) for c in cameras]
        self.fields = {name: a for c in self.all for name, a in c.fields.items()}
        self.calibration = {"cameras": {c.name: c.calibration for c in self.all}}
        self.front = next((c for c in self.all if c.name == FRONT), None)
        """The ``front`` camera (the one the camera offsets of ``[randomize]`` move), or None."""

    def render(self, world, body_q: wp.array2d) -> None:
        """Move the cameras that follow or ride a body, then render every camera of every world."""
        world.model.bvh_refit_shapes(world.state_0)
        for camera in self.all:
            camera.place(world, body_q)
            camera.cameras.render(world, refit=False)
