"""The cameras of a run, in one rule: which observation fields a camera records, and how a reader finds every
camera of a run from its fields. numpy and the standard library.

A camera has a name. The default camera, ``front`` (a task's unnamed camera), records the fields ``rgb`` (uint8
[H, W, 3]) and, with depth, ``depth`` (float32 [H, W], metres along the optical axis); every other camera ``NAME``
records ``NAME_rgb`` and ``NAME_depth``. Its calibration is run.json's ``calibration["cameras"][NAME]``. A run
recorded before named cameras existed holds ``rgb`` / ``depth`` only: it reads as the one camera ``front``.

A camera mounted on a body (:data:`MOUNT_KEY` in its calibration) moves with it: its camera-to-world pose of frame
``t`` is the body's recorded pose (``state/body_q[t, body]``) times the calibration's ``camera_to_body``
(:func:`mounted_camera_to_world`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

FRONT = "front"
"""The default camera's name: a task's unnamed camera, recording ``rgb`` and ``depth``."""
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
"""The names a camera may take (lower case letters, digits and underscores, a letter first)."""
MOUNT_KEY = "mounted_on"
"""A mounted camera's calibration key: ``{"body": name, "body_index": index within a world}``."""


def camera_fields(name: str) -> tuple[str, str]:
    """The (rgb, depth) field names camera ``name`` records."""
    return ("rgb", "depth") if name == FRONT else (f"{name}_rgb", f"{name}_depth")


def check_name(name, where: str) -> str:
    """``name`` when it is a valid camera name, else ValueError naming ``where`` and the names allowed."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(f"{where} = {name!r}: expected a camera name of lower case letters, digits and _ "
                         "(a letter first), e.g. \"wrist\"")  # fmt: skip
    if name.endswith(("_rgb", "_depth")) or name in ("rgb", "depth"):
        raise ValueError(f"{where} = {name!r}: a camera name must not end in _rgb or _depth")
    return name


def cameras(layout: Mapping) -> dict[str, dict]:
    """Every camera of a layout (field -> (per-frame shape, dtype)), in the layout's order: name -> {"rgb": its
    image field, "depth": its depth field or None}. A camera is an ``rgb`` or ``<name>_rgb`` field of shape
    [H, W, 3] and dtype uint8; its depth the matching ``depth`` / ``<name>_depth`` field of shape [H, W]."""
    out = {}
    for field, (shape, dtype) in layout.items():
        if field == "rgb":
            name = FRONT
        elif field.endswith("_rgb") and NAME_PATTERN.match(field[: -len("_rgb")]):
            name = field[: -len("_rgb")]
        else:
            continue
        if len(tuple(shape)) != 3 or tuple(shape)[2] != 3 or np.dtype(dtype) != np.uint8:
            continue
        depth = camera_fields(name)[1]
        has_depth = depth in layout and len(tuple(layout[depth][0])) == 2
        out[name] = {"rgb": field, "depth": depth if has_depth else None}
    return out


def frame_layout(frames: Mapping[str, np.ndarray]) -> dict:
    """The layout of an episode's frames (field -> [T, ...] array): field -> (per-frame shape, dtype)."""
    return {field: (tuple(np.shape(a)[1:]), np.asarray(a).dtype) for field, a in frames.items()}


def image_fields(layout: Mapping) -> list[str]:
    """The image fields (``rgb`` of every camera) of a layout."""
    return [c["rgb"] for c in cameras(layout).values()]


def depth_fields(layout: Mapping) -> list[str]:
    """The depth fields of a layout's cameras."""
    return [c["depth"] for c in cameras(layout).values() if c["depth"] is not None]


def mounted_camera_to_world(calibration: Mapping, body_q: np.ndarray) -> np.ndarray:
    """A mounted camera's camera-to-world pose of each frame [T, 4, 4] (OpenCV axes) from its calibration entry and
    an episode's ``state/body_q`` [T, bodies, 7] (position, quaternion xyzw); a fixed camera's nominal pose
    repeated. ValueError when the calibration names a body the state does not hold."""
    body_q = np.asarray(body_q, np.float64)
    mount = calibration.get(MOUNT_KEY)
    if mount is None:
        pose = np.asarray(calibration["camera_to_world"], np.float64)
        return np.broadcast_to(pose, (len(body_q), 4, 4)).copy()
    b = int(mount["body_index"])
    if body_q.ndim != 3 or body_q.shape[2] != 7 or not 0 <= b < body_q.shape[1]:
        raise ValueError(f"state body_q of shape {body_q.shape} holds no body {b} ({mount.get('body')!r})")
    p, q = body_q[:, b, :3], body_q[:, b, 3:]
    x, y, z, w = (q / np.linalg.norm(q, axis=1, keepdims=True)).T
    rotation = np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], axis=1)  # fmt: skip
    body = np.zeros((len(body_q), 4, 4))
    body[:, :3, :3], body[:, :3, 3], body[:, 3, 3] = rotation, p, 1.0
    return body @ np.asarray(calibration["camera_to_body"], np.float64)
