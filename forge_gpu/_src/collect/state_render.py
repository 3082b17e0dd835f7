"""An episode of a run without camera frames drawn from its recorded state (``forge-gpu render``): a default
camera on the robot.

The run's task is built again as ``replay`` builds it (from the task files the run stores, its recorded config),
in a batch of worlds; each frame's recorded state (``record_state``: ``joint_q``, ``joint_qd``, ``body_q`` and the
task's own) is restored into one world with ``VectorEnv.restore``, and one camera per world draws them all in one
call of Newton's ``SensorCamera`` (``sim/camera.py``'s ``WorldCameras``, the path the camera tasks and a task file's
``camera`` term render with). Per batch of frames: one restore, one render, one copy; nothing loops over worlds.

Where the camera stands: it looks at the centre of the bounding box of the robot's shapes (each body's shapes'
bounding spheres; shapes on no body, the ground and static scene shapes, left out) at the episode's first frame,
from the fixed direction :data:`DIRECTION` (in front, to the right and above: +x, -y, +z), at the distance where the
box's largest side (plus :data:`MARGIN` on each end) fills the field of view :data:`FOV_DEG` at the box's near
side. It stays there for the whole episode, so the robot's motion is seen against a still scene.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from forge_gpu._src.collect.replay import _config, _open, _task_of
from forge_gpu._src.core.episode import EpisodeReadOptions
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS
from forge_gpu._src.formats.registry import read_manifest
from forge_gpu._src.tasks.make import make
from forge_gpu._src.tasks.taskfile.trust import run_code

DIRECTION = (1.0, -1.0, 0.6)
"""Where the camera stands seen from what it looks at (normalized): in front (+x), to the right (-y), above."""
FOV_DEG = 45.0
"""The camera's vertical and horizontal field of view [degrees] (a square image)."""
MARGIN = 0.05
"""Room left around the robot's shapes on each side [m]."""
BATCH = 32
"""Frames drawn at once (worlds of the env built for it)."""


@dataclass(frozen=True)
class StateCamera:
    """The camera that drew an episode from its state."""

    position: tuple[float, float, float]
    """Where it stands [m]."""
    look_at: tuple[float, float, float]
    """The point it looks at, the centre of the bodies' bounding box at the first frame [m]."""
    size: int
    """Image width and height [px]."""
    fov_deg: float = FOV_DEG


def camera_on(body_q: np.ndarray, shapes: np.ndarray, size: int) -> StateCamera:
    """The camera that frames bodies whose poses are ``body_q`` ([bodies, 7]: position, quaternion xyzw) with
    their ``shapes`` ([S, 5]: body, offset x y z in the body's frame, bounding radius [m])."""
    poses = np.asarray(body_q, np.float64).reshape(-1, 7)
    body = shapes[:, 0].astype(int)
    centres = poses[body, :3] + _rotated(poses[body, 3:], shapes[:, 1:4])
    radii = shapes[:, 4:5]
    keep = np.isfinite(centres).all(axis=1) & np.isfinite(radii[:, 0])
    if not keep.any():  # no shape: the bodies' origins
        centres, radii = poses[:, :3], np.zeros((len(poses), 1))
        keep = np.isfinite(centres).all(axis=1)
    if not keep.any():
        raise ValueError("the first frame has no body with a finite position to point a camera at")
    low, high = (centres - radii)[keep].min(axis=0), (centres + radii)[keep].max(axis=0)
    centre = 0.5 * (low + high)
    radius = 0.5 * float((high - low).max()) + MARGIN
    distance = radius / math.tan(0.5 * math.radians(FOV_DEG)) + radius  # the box's near side fits too
    direction = np.asarray(DIRECTION) / np.linalg.norm(DIRECTION)
    position = centre + distance * direction
    return StateCamera(tuple(position.tolist()), tuple(centre.tolist()), size)


def _rotated(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectors ``v`` [n, 3] rotated by unit quaternions ``q`` [n, 4] (x, y, z, w)."""
    u, w = q[:, :3], q[:, 3:4]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def world_shapes(model, worlds: int) -> np.ndarray:
    """The shapes on the first world's bodies ([S, 5]: body, offset in the body's frame [m], bounding radius [m]);
    shapes on no body (the ground plane, a static table) are the scene's, not the robot's."""
    per_world = model.body_count // worlds
    body = model.shape_body.numpy()
    chosen = (body >= 0) & (body < per_world)
    offset = model.shape_transform.numpy()[chosen, :3]
    radius = model.shape_collision_radius.numpy()[chosen]
    radius = np.where(radius < 1e3, radius, 0.0)  # an unbounded shape counts by its origin
    return np.column_stack([body[chosen], offset, radius]).astype(np.float64)


def draw_from_state(
    run_dir: str | os.PathLike,
    episode: tuple[int, int],
    *,
    size: int = 128,
    device: str | None = None,
    trust_code: bool = False,
) -> tuple[np.ndarray, StateCamera]:
    """The frames of episode ``episode`` (``(env_id, episode_id)``) of the closed run ``run_dir`` drawn from its
    recorded state by a camera on the robot (:func:`camera_on`): uint8 ``[T + 1, size, size, 3]``, and the camera.
    ValueError (one line) for a run that records no state, a task this forge_gpu cannot build, or (without
    ``trust_code``) code outside forge_gpu that the run's task names; LookupError for an episode it does not
    hold."""
    if not isinstance(size, int) or isinstance(size, bool) or not 8 <= size <= 2048:
        raise ValueError(f"size must be an integer number of pixels in [8, 2048], got {size!r}")
    run_dir = os.fspath(run_dir)
    manifest = read_manifest(run_dir)
    if not manifest["env_spec"].get("state"):
        raise ValueError(
            f"{run_dir}: the run has no camera frames and records no simulator state (record_state = false, or an "
            "older forge_gpu) to draw the robot from; render --plot draws proprio, action and reward"
        )
    built, own = _task_of(run_dir, manifest, {}, trust_code)
    with run_code(run_dir, trusted=trust_code or own):
        reader = _open(run_dir, manifest, built)
        index = next((k for k in range(len(reader)) if tuple(reader.ids(k)[:2]) == tuple(episode)), None)
        if index is None:
            raise LookupError(f"{run_dir} holds no published episode {episode[0]}:{episode[1]}")
        options = EpisodeReadOptions(observation_keys=list(BOOKKEEPING_FIELDS), state=True)
        ep = next(reader.read([index], options))
        frames = ep.steps + 1
        worlds = min(BATCH, frames)
        config = _config(built, manifest, {}, device)
        settings = {k: v for k, v in config.to_overrides().items() if k != "task"}
        env = make(built, **{**settings, "num_envs": worlds})
    from forge_gpu._src.sim.camera import BACKGROUND, WorldCameras

    if "body_q" not in ep.state:
        raise ValueError(f"{run_dir}: the run's state has no body_q (body poses) to point a camera at")
    camera = camera_on(ep.state["body_q"][0], world_shapes(env.world.model, worlds), size)
    cameras = WorldCameras(env.world.model, worlds, size, camera.fov_deg, camera.position, camera.look_at,
                           background=BACKGROUND)  # fmt: skip
    names = env.spec.get("params") or {}
    params = {name: np.repeat(np.asarray(ep.params[name], np.float32)[None], worlds, axis=0) for name in names}
    out = np.empty((frames, size, size, 3), np.uint8)
    for start in range(0, frames, worlds):  # batches of frames, one world each
        rows = np.minimum(np.arange(start, start + worlds), frames - 1)
        env.restore({name: np.ascontiguousarray(values[rows]) for name, values in ep.state.items()}, params)
        cameras.render(env.world)
        count = min(worlds, frames - start)
        out[start : start + count] = cameras.rgb.numpy()[:count]
    return out, camera
