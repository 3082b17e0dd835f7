"""``forge-gpu view``: a run's episodes in Rerun (``rerun-sdk``, the ``view`` extra, imported when used). Each episode
is logged under ``episodes/<name>`` on a timeline of its own named for it (``env00003-episode00000012``; its
sequence is the frame index ``0..T``): each camera's images (``rgb`` and ``depth`` under ``world/camera``, a
named camera's ``NAME_rgb`` and ``NAME_depth`` under ``world/camera_NAME``), ``proprio``, ``action``, ``reward`` and
the flags as time series (a transition at the index of the frame it starts from), the instruction and the drawn
randomized values as text, and, where the run records state, each body at its recorded pose (``state/body_q``) and
the task's other positions (``[3]`` state entries, e.g. reach's ``target_pos``) in 3D, with each camera's pinhole
and pose from the run's calibration (a camera mounted on a body at its pose of each frame, from
``state/body_q``). numpy and the reader.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from forge_gpu._src.core.cameras import FRONT, MOUNT_KEY, cameras, frame_layout, mounted_camera_to_world
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.episode import Episode, EpisodeReadOptions, episode_stem
from forge_gpu._src.reading.runs import open_run
from forge_gpu._src.reading.summary import run_identity

#: Episodes logged when none are named.
DEFAULT_LIMIT = 16
#: Half the side of the cube each body is drawn as [m] (run.json does not describe the bodies' shapes).
BODY_HALF_SIZE = 0.02


def _rerun():
    try:
        import rerun as rr
    except ImportError as exc:
        raise ImportError("forge-gpu view needs the rerun-sdk package: pip install 'forge-gpu[view]'") from exc
    return rr


def check_viewer() -> None:
    """Refuse, before anything is read, to open a viewer where none can show: on Linux without a display the
    viewer Rerun spawns exits at once and what is sent is lost (or the send waits on it for minutes)."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise ConnectionError(
            "no Rerun viewer can be reached: this machine has no display (DISPLAY and WAYLAND_DISPLAY are unset); "
            "write a file instead with --save FILE.rrd and open it where there is one (rerun FILE.rrd)"
        )


def choose_episodes(run, episodes: list[tuple[int, int]] | None, limit: int) -> list[int]:
    """The indices into ``run`` of the named ``(env_id, episode_id)`` episodes (LookupError naming one that is not
    there), or of its first ``limit``."""
    if episodes is None:
        return list(range(min(limit, len(run))))
    where = {run.ids(k)[:2]: k for k in range(len(run))}
    missing = [e for e in episodes if tuple(e) not in where]
    if missing:
        some = ", ".join("{}:{}".format(*run.ids(k)[:2]) for k in range(min(5, len(run))))
        held = f"; it holds {some}, ..." if some else ""
        raise LookupError(f"{run.directory} holds no published episode {missing[0][0]}:{missing[0][1]}{held}")
    return sorted({where[tuple(e)] for e in episodes})


def view_run(
    path: str | os.PathLike,
    *,
    episodes: list[tuple[int, int]] | None = None,
    save: str | os.PathLike | None = None,
    limit: int = DEFAULT_LIMIT,
) -> dict:
    """Show a run's episodes in Rerun: the named ``episodes`` (``(env_id, episode_id)`` pairs) or its first
    ``limit``. With ``save``, write them to that ``.rrd`` file instead of opening a viewer. Returns ``{"episodes",
    "frames", "save"}``. Raises LookupError for an episode the run does not hold, ValueError for a damaged run or a
    bad ``limit``, ImportError without rerun-sdk, ConnectionError (before anything is read) when no viewer can be
    reached."""
    check_int("limit", limit, minimum=1)
    rr = _rerun()
    if save is None:
        check_viewer()
    run = open_run(os.fspath(path))
    ks = choose_episodes(run, episodes, limit)
    manifest = run.manifest
    rec = rr.RecordingStream("forge_gpu", recording_id=manifest["run_id"])
    if save is not None:
        os.makedirs(os.path.dirname(os.path.abspath(save)), exist_ok=True)
        rec.save(os.fspath(save))
    else:
        try:
            rec.spawn()
        except Exception as exc:  # rerun-sdk raises RuntimeError when it finds no viewer executable
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConnectionError(
                f"no Rerun viewer can be reached ({first}); write a file instead with --save FILE.rrd"
            ) from exc
    identity = {k: v for k, v in run_identity(run).items() if k not in ("progress", "config", "params")}
    rec.log("run", rr.TextDocument("```json\n" + json.dumps(identity, indent=2) + "\n```", media_type="text/markdown"),
            static=True)  # fmt: skip
    frames = 0
    for episode in run.read(ks, EpisodeReadOptions(state=True)):
        log_episode(rec, rr, episode, manifest)
        frames += episode.steps + 1
    rec.flush()
    if save is not None:
        rec.disconnect()
    return {"episodes": len(ks), "frames": frames, "save": None if save is None else os.fspath(save)}


def log_episode(rec, rr, episode: Episode, manifest: dict) -> None:
    """Log one episode under ``episodes/<name>`` on its own timeline (see the module docstring)."""
    stem = episode_stem(episode.env_id, episode.episode_id)
    root = f"episodes/{stem}"
    count = episode.steps + 1
    frames = [rr.TimeColumn(stem, sequence=np.arange(count))]
    transitions = [rr.TimeColumn(stem, sequence=np.arange(episode.steps))]

    def every_frame(field: str) -> np.ndarray:
        return np.concatenate([episode.obs[field], episode.next[field][-1:]])

    def series(name: str, values: np.ndarray, index, names: list[str]) -> None:
        values = np.asarray(values, np.float64).reshape(len(values), -1)
        rec.log(f"{root}/{name}", rr.SeriesLines(names=names[: values.shape[1]]), static=True)
        rec.send_columns(f"{root}/{name}", indexes=index, columns=rr.Scalars.columns(scalars=values))

    rec.log(f"{root}/instruction", rr.TextDocument(episode.instruction), static=True)
    if episode.params:
        lines = ["| param | value |", "| --- | --- |"]
        lines += [f"| {name} | {np.asarray(v).tolist()} |" for name, v in episode.params.items()]
        rec.log(f"{root}/params", rr.TextDocument("\n".join(lines), media_type="text/markdown"), static=True)
    if "proprio" in episode.obs:
        proprio = every_frame("proprio")
        series("proprio", proprio, frames, [f"proprio[{i}]" for i in range(proprio.reshape(count, -1).shape[1])])
    series("action", episode.action, transitions, [f"action[{i}]" for i in range(episode.action.shape[1])])
    series("reward", episode.reward, transitions, ["reward"])
    flags = np.stack([episode.terminated, episode.truncated], axis=1)
    series("flags", flags, transitions, ["terminated", "truncated"])
    calibration = manifest.get("calibration", {})
    entries = calibration.get("cameras") if isinstance(calibration, dict) else None
    for name, fields in cameras(frame_layout(episode.obs)).items():
        camera = f"{root}/world/camera" if name == FRONT else f"{root}/world/camera_{name}"
        entry = (entries or {}).get(name)
        if entry is None and name == FRONT and entries:  # a run of one camera, whatever its calibration's name
            entry = next(iter(entries.values()))
        _log_camera(rec, rr, camera, entry or {}, episode.state.get("body_q"), frames)
        rgb = every_frame(fields["rgb"])
        image = rr.components.ImageFormat(width=rgb.shape[2], height=rgb.shape[1], color_model="RGB",
                                          channel_datatype="U8")  # fmt: skip
        rec.log(f"{camera}/rgb", rr.Image.from_fields(format=image), static=True)
        rec.send_columns(f"{camera}/rgb", indexes=frames, columns=rr.Image.columns(buffer=rgb.reshape(count, -1)))
        if fields["depth"] is not None:
            depth = np.ascontiguousarray(every_frame(fields["depth"]), dtype=np.float32)
            image = rr.components.ImageFormat(width=depth.shape[2], height=depth.shape[1], channel_datatype="F32")
            rec.log(f"{camera}/depth", rr.DepthImage.from_fields(format=image, meter=1.0), static=True)
            buffer = depth.reshape(count, -1).view(np.uint8)
            rec.send_columns(f"{camera}/depth", indexes=frames, columns=rr.DepthImage.columns(buffer=buffer))
    _log_state(rec, rr, f"{root}/world", episode.state, frames)


def _log_camera(rec, rr, entity: str, camera: dict, body_q, frames) -> None:
    """A camera's pinhole and its camera-to-world pose (OpenCV axes) from its calibration entry: the nominal pose,
    or, for a camera mounted on a body with the run's ``state/body_q``, its pose at every frame."""
    if not camera:
        return
    if MOUNT_KEY in camera and body_q is not None:
        poses = mounted_camera_to_world(camera, body_q)
        columns = rr.Transform3D.columns(translation=poses[:, :3, 3], mat3x3=poses[:, :3, :3])
        rec.send_columns(entity, indexes=frames, columns=columns)
    else:
        pose = np.asarray(camera.get("camera_to_world", np.eye(4)), np.float64)
        rec.log(entity, rr.Transform3D(translation=pose[:3, 3], mat3x3=pose[:3, :3]), static=True)
    intrinsics = camera.get("intrinsics", {})
    if {"fx", "fy", "cx", "cy", "width", "height"} <= intrinsics.keys():
        pinhole = rr.Pinhole(
            focal_length=[intrinsics["fx"], intrinsics["fy"]],
            principal_point=[intrinsics["cx"], intrinsics["cy"]],
            width=intrinsics["width"],
            height=intrinsics["height"],
            camera_xyz=rr.ViewCoordinates.RDF,
        )
        rec.log(entity, pinhole, static=True)


def _log_state(rec, rr, world: str, state: dict[str, np.ndarray], frames) -> None:
    """Each body of ``state/body_q`` ([T + 1, B, 7]: position, quaternion xyzw) as a cube at its pose, and every
    other ``[3]`` state entry as a point."""
    body_q = state.get("body_q")
    if body_q is not None and body_q.ndim == 3 and body_q.shape[2] == 7:
        for b in range(body_q.shape[1]):
            entity = f"{world}/bodies/body_{b}"
            rec.log(entity, rr.Boxes3D(half_sizes=[[BODY_HALF_SIZE] * 3]), static=True)
            pose = rr.Transform3D.columns(translation=body_q[:, b, :3], quaternion=body_q[:, b, 3:])
            rec.send_columns(entity, indexes=frames, columns=pose)
    for name, values in state.items():
        if name != "body_q" and values.ndim == 2 and values.shape[1] == 3:
            points = rr.Points3D.columns(positions=values).partition([1] * len(values))
            rec.send_columns(f"{world}/{name}", indexes=frames, columns=points)
