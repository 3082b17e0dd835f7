"""One pinhole RGB-D camera per world, all rendered in one call of Newton's ``SensorCamera``, and its
calibration in OpenCV's conventions. Used by the camera tasks (``reach``, ``push``) and by a task file's camera
(``tasks/taskfile/cameras.py``). :func:`count_frames`: each rendered frame's byte histogram, where it was rendered
(what the recorder's statistics count of frames a device encoder encodes)."""

from __future__ import annotations

import math

import numpy as np
import warp as wp
from newton.sensors import SensorCamera

from forge_gpu._src.core.checks import plain_number
from forge_gpu.kernels import camera as kernels

BACKGROUND = 0xFF << 24 | 52 << 16 | 44 << 8 | 40
"""Packed RGBA clear color of pixels that see no surface (dark blue-gray)."""


UP = (0.0, 0.0, 1.0)
"""The default image-up direction of a camera: +z."""


def check_pose(position, look_at, position_key: str, look_at_key: str, *, up=UP, up_key: str = "up") -> None:
    """ValueError (naming the keys) for a camera pose :func:`camera_to_world` cannot make: not 3 values each, the
    eye at the look-at point, a zero ``up`` or a view along ``up``."""
    for key, value in ((position_key, position), (look_at_key, look_at), (up_key, up)):
        if len(value) != 3 or not all(plain_number(v) for v in value):
            raise ValueError(f"{key} = {value!r}: expected 3 values [m]")
    if np.allclose(position, look_at):
        raise ValueError(f"{position_key} must differ from {look_at_key}")
    if np.linalg.norm(up) < 1e-9:
        raise ValueError(f"{up_key} = {list(up)!r}: expected a direction, not zero")
    forward = np.subtract(look_at, position)
    if np.linalg.norm(np.cross(forward, up)) < 1e-6 * np.linalg.norm(forward) * np.linalg.norm(up):
        if tuple(up) == UP:
            raise ValueError(f"{position_key}: the camera must not look straight up or down (+z is image up)")
        raise ValueError(f"{position_key}: the camera must not look along its {up_key} = {list(up)!r} (image up)")


def camera_to_world(position, look_at, up=UP) -> np.ndarray:
    """Camera-to-world 4x4 transform in the OpenCV axis convention (x right, y down, z forward), image up toward
    ``up``."""
    eye = np.asarray(position, np.float64)
    forward = np.asarray(look_at, np.float64) - eye
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, np.asarray(up, np.float64))
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    pose = np.eye(4)
    pose[:3, 0], pose[:3, 1], pose[:3, 2], pose[:3, 3] = right, down, forward, eye
    return pose


def pinhole_intrinsics(size: int, fov_deg: float) -> dict:
    """OpenCV pinhole intrinsics of Newton's ``compute_camera_rays_pinhole`` rays for a square image.

    Newton shoots pixel ``(px, py)``'s ray through ``px + 0.5, py + 0.5`` with focal length
    ``(size / 2) / tan(fov / 2)``; in OpenCV's convention (pixel centres at integers) the principal
    point is therefore ``(size - 1) / 2``.
    """
    f = 0.5 * size / math.tan(0.5 * math.radians(fov_deg))
    c = 0.5 * (size - 1)
    return {"model": "pinhole", "width": size, "height": size, "fx": f, "fy": f, "cx": c, "cy": c}


def newton_transform(pose: np.ndarray):
    """A 4x4 camera pose in OpenCV's axes as a Warp transform of Newton's camera frame (OpenGL's: x right, y up,
    looking along -z)."""
    gl = pose[:3, :3] @ np.diag([1.0, -1.0, -1.0])
    return wp.transform(wp.vec3(*pose[:3, 3]), wp.quat_from_matrix(wp.mat33(*gl.flatten())))


def new_sensor(model, *, background: int) -> SensorCamera:
    """A ``SensorCamera`` of ``model`` with the cameras' light and clear values (one may render several cameras)."""
    sensor = SensorCamera(model, load_textures=False)
    sensor.create_default_light(enable_shadows=False)
    sensor.default_clear_data = SensorCamera.ClearData(clear_color=background, clear_depth=0.0)
    return sensor


class WorldCameras:
    """A square ``size`` camera in each of ``n`` worlds, all at ``position`` looking at ``look_at`` (image up
    toward ``up``) until a kernel moves one (``transforms``); ``rgb`` and ``depth`` hold the last render. Cameras
    may share one ``sensor`` (:func:`new_sensor`)."""

    def __init__(self, model, n: int, size: int, fov_deg: float, position, look_at, *, background: int, up=UP,
                 sensor: SensorCamera | None = None):  # fmt: skip
        device = model.device
        self.size, self.fov_deg = size, fov_deg
        self.pose = camera_to_world(position, look_at, up)
        self.transforms = wp.array([newton_transform(self.pose)] * n, dtype=wp.transformf, device=device)
        """Each world's camera pose in Newton's convention, [N] transforms."""
        self.sensor = sensor if sensor is not None else new_sensor(model, background=background)
        self.rays = SensorCamera.compute_camera_rays_pinhole(
            size, size, camera_fov=math.radians(fov_deg), device=device
        )
        self.color = self.sensor.allocate_image_color(n, size, size)
        self.rgb = wp.zeros((n, size, size, 3), dtype=wp.uint8, device=device)
        """RGB image per world, uint8 [N, H, W, 3]."""
        self.depth = self.sensor.allocate_image_depth_forward(n, size, size)
        """Depth along the optical axis per world [m], float32 [N, H, W]; 0 where nothing is hit."""

    def calibration(self, *, randomized: bool) -> dict:
        """run.json's entry of the camera: intrinsics, the (nominal) camera-to-world pose, the conventions."""
        return {
            "intrinsics": pinhole_intrinsics(self.size, self.fov_deg),
            "camera_to_world": self.pose.tolist(),
            "axes": "OpenCV: x right, y down, z forward (optical axis); pixel (0, 0) centre at (0, 0)",
            "depth": "distance along the optical axis (camera z) [m]; 0 where the ray hits nothing",
            "same_for_all_worlds": not randomized,
        }

    def render(self, world, *, refit: bool = True) -> None:
        """Render every world's camera into ``rgb`` and ``depth`` with one ``SensorCamera`` call (after refitting
        the shapes' bounds to the state, unless a caller rendering several cameras did so: ``refit=False``)."""
        if refit:
            world.model.bvh_refit_shapes(world.state_0)
        self.sensor.update(
            world.state_0,
            self.transforms,
            self.rays,
            color_image=self.color,
            forward_depth_image=self.depth,
            sync_deformables=False,
        )
        wp.launch(
            kernels.unpack_color_kernel,
            dim=self.color.shape,
            inputs=[self.color],
            outputs=[self.rgb],
            device=world.device,
        )


def count_frames(frames: wp.array, out: wp.array | None = None) -> wp.array:
    """Each frame's per-channel histogram of its byte values, where ``frames`` (uint8 ``[n, H, W]`` or ``[n, H, W,
    C]``, a Warp array on any device) are: ``[n, C, 256]`` int32 on their device (into ``out`` where given), one
    launch on the device's current stream, issued and not waited for."""
    grid = frames if frames.ndim == 4 else frames.reshape((*frames.shape, 1))
    n, height, width, channels = grid.shape
    if out is None:
        out = wp.zeros((n, channels, 256), dtype=wp.int32, device=frames.device)
    else:
        out.zero_()
    wp.launch(
        kernels.frame_counts_kernel, dim=(n, height, width), inputs=[grid], outputs=[out], device=grid.device
    )
    return out
