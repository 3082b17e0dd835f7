"""The arm tasks' shared code task (``ArmTask``) as it was before ``reach`` and ``push`` became task files: the
base of the frozen references ``reference_reach`` and ``reference_push``, kept for the equivalence tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import warp as wp
from forge_gpu.kernels import arm as kernels

from forge_gpu._src.sim.camera import BACKGROUND, WorldCameras, check_pose
from forge_gpu._src.sim.randomize import Parameter
from forge_gpu._src.sim.task import Task
from forge_gpu._src.tasks.arm import ArmParams, joint_limits
from forge_gpu._src.tasks.taskfile.model import per_world

__all__ = ["CAMERA_VISUALS", "ArmTask", "check_arm", "moves_camera", "per_world"]

CAMERA_VISUALS = {
    "camera_position_offset": Parameter((3,), (0.0, 0.0, 0.0), "added to params.camera_position [m]"),
    "camera_look_at_offset": Parameter((3,), (0.0, 0.0, 0.0), "added to params.camera_look_at [m]"),
}
"""The camera jitter every arm task offers (its ``apply_params`` kernel moves the world's camera)."""
CAMERA_PARAMS = tuple(CAMERA_VISUALS)


@dataclass(frozen=True, kw_only=True)
class ArmScene:
    """The arm on its table with one fixed pinhole RGB-D camera per world (``kind`` names the task's scene)."""

    kind: str
    joint_count: int = 4
    link_lengths: tuple[float, ...] = (0.3, 0.25, 0.1)
    shoulder_height: float = 0.2
    image_size: int = 64


def scene_of(p: ArmParams, kind: str) -> ArmScene:
    """The scene description of an arm task with parameters ``p``."""
    return ArmScene(
        kind=kind,
        link_lengths=(p.upper_arm_length, p.forearm_length, p.hand_length),
        shoulder_height=p.shoulder_height,
        image_size=p.image_size,
    )


def check_arm(config, task: str, action_dim: int) -> None:
    """ValueError naming an arm or camera parameter, or action bounds, that the arm cannot take."""
    p = config.params
    if len(p.home_q) != 4:
        raise ValueError(f"params.home_q = {p.home_q!r}: expected 4 values")
    check_pose(p.camera_position, p.camera_look_at, "params.camera_position", "params.camera_look_at")
    if len(config.action.low) != action_dim:
        raise ValueError(
            f"action.low = {list(config.action.low)}: {task} has {action_dim} joints; "
            "give one bound (and scale) per joint"
        )
    lo, hi = joint_limits(config)
    home = np.asarray(p.home_q)
    if not ((lo <= home - p.reset_noise) & (home + p.reset_noise <= hi)).all():
        raise ValueError(
            f"params.home_q {p.home_q} +- reset_noise {p.reset_noise} must lie within the joint limits "
            f"(action bounds times scale) {lo.tolist()} .. {hi.tolist()}"
        )


def image_fields(p: ArmParams) -> dict[str, tuple[tuple[int, ...], str]]:
    """``rgb`` uint8 [S, S, 3] and ``depth`` float32 [S, S] [m], S = ``params.image_size``; none when
    ``params.render`` is false (the camera is off)."""
    s = p.image_size
    return {"rgb": ((s, s, 3), "uint8"), "depth": ((s, s), "float32")} if p.render else {}


def make_camera(p: ArmParams, config, model, n: int) -> tuple[WorldCameras, dict]:
    """Every world's camera and the calibration the task contributes (``{"cameras": {"front": ...}}``)."""
    randomized = any(r.name in CAMERA_PARAMS for r in config.randomize)
    camera = WorldCameras(
        model, n, p.image_size, p.camera_fov, p.camera_position, p.camera_look_at, background=BACKGROUND
    )
    calibration = {"cameras": {"front": camera.calibration(randomized=randomized)}}
    if randomized:
        calibration["cameras"]["front"]["randomized"] = (
            "camera_to_world of an episode: the camera at params.camera_position + its camera_position_offset "
            "looking at params.camera_look_at + its camera_look_at_offset"
        )
    return camera, calibration


def moves_camera(config) -> int:
    """1 when the config randomizes the camera's pose (the apply kernels then move it), else 0."""
    return int(any(r.name in CAMERA_PARAMS for r in config.randomize))


class ArmTask(Task):
    """What the arm tasks share: the scene description, the observation's images, the arm's buffers and camera
    (:meth:`bind_arm`) and the joint position targets (:meth:`apply_action`). Subclasses set ``scene_kind``."""

    scene_kind: ClassVar[str]

    def make_scene(self) -> ArmScene:
        return scene_of(self.params, self.scene_kind)

    def observation_fields(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """``spec.extra_fields``, then ``rgb`` uint8 [S, S, 3] and ``depth`` float32 [S, S] [m], S =
        ``params.image_size``."""
        return {**self.spec.extra_fields, **image_fields(self.params)}

    def bind_arm(self, world) -> dict:
        """The hand body, the home pose, the joint targets' view and the camera (none when ``params.render`` is
        false: then ``images`` is empty and only the camera's poses are kept, for the apply kernels); returns
        the camera's calibration (empty without a camera)."""
        p, n = self.params, world.num_envs
        self.ee_body = per_world(world.model.body_label, "hand", n, world.device)
        self.home_q = wp.array(np.asarray(p.home_q, np.float32), device=world.device)
        self.joint_target_q = world.control.joint_target_q.reshape((n, -1))
        if not p.render:
            self.camera, self.images = None, {}
            self.camera_transforms = wp.zeros(n, dtype=wp.transformf, device=world.device)
            return {}
        self.camera, calibration = make_camera(p, self.config, world.model, n)
        self.images = {"rgb": self.camera.rgb, "depth": self.camera.depth}
        """The image fields the task contributes: ``rgb`` and ``depth``, or none without a camera."""
        self.camera_transforms = self.camera.transforms
        return calibration

    def apply_action(self, world) -> None:
        wp.launch(
            kernels.apply_action_kernel,
            dim=world.executed_action.shape,
            inputs=[world.action_scale, world.executed_action],
            outputs=[self.joint_target_q],
            device=world.device,
        )
