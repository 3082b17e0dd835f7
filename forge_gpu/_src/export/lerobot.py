"""Export a closed run (or a dataset root of runs) as a LeRobot dataset, format v3.0.

Written with pyarrow and PyAV alone (the ``export`` extra: ``pip install "forge-gpu[export]"``), so the
``lerobot`` package is not needed; LeRobot's ``LeRobotDataset`` loads the result as it is. The layout:

    meta/info.json                       codebase_version "v3.0", fps, features, totals, paths
    meta/stats.json                      normalization statistics (the run's stats.json, renamed)
    meta/tasks.parquet                   one row per task: each distinct instruction of the episodes, index "task"
    meta/episodes/chunk-000/file-000.parquet   one row per episode: length, where its rows and video lie, and
                                         ``params/<name>``: the values it was randomized with (where it was)
    data/chunk-CCC/file-FFF.parquet      the frames, many episodes per file, one row group per episode
    videos/observation.images.rgb/chunk-CCC/file-FFF.mp4   a camera, episodes one after another (one folder per
                                         camera: ``observation.images.<its image field>``, e.g. ``wrist_rgb``)

A forge_gpu episode of T transitions becomes T LeRobot frames: frame t holds ``observation.state`` =
``obs/proprio[t]``, ``observation.environment_state`` = the object and goal state (LeRobot's name for it in its own
simulated datasets, which ACT and diffusion take as input): the other vector observation fields at t, concatenated
in the spec's order (``cube_pose``, ``cube_velocity``, ``goal_position`` for push; a task may declare them in its spec
(``core/lerobot_features.py``), ``environment_state`` chooses
them, an empty list leaves the feature out; label fields, run.json's ``env_spec.labels``, are never among them),
``observation.images.rgb`` = ``obs/rgb[t]`` (and ``observation.images.NAME_rgb`` = ``obs/NAME_rgb[t]`` for each
named camera, ``core/cameras.py``), ``action`` = the executed action of transition t (with ``target`` a
label field: that label of frame t, e.g. the expert's action for the state of ``collect --label expert``),
``next.reward`` = its reward, ``next.done`` = whether it ended the episode (terminated or truncated; true on the
last frame only) and, for tasks with success, ``next.success`` = terminated;
``timestamp = frame_index / fps`` with fps = 1 / control_dt. The episode's last observation (the frame
after its last transition) has no action and is not a LeRobot frame. ``depth`` (every camera's depth field) is
left out: LeRobot v3.0
stores depth as quantized video with its own encoder settings, which this exporter does not write; so is
the simulator state (``state/``), which LeRobot has no feature for.

Videos: each camera's frames of an episode are encoded once and their packets appended to the open mp4
file of its part; a file is never re-encoded. Episodes are split into contiguous parts, one process
each (``workers``); a part starts a new file when its data or video file passes its size limit.
Everything is written into a temporary directory beside ``out`` that is renamed to ``out`` when complete.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from forge_gpu._src.core.cameras import depth_fields, image_fields
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.episode import EpisodeReadOptions
from forge_gpu._src.core.fields import observation_layout
from forge_gpu._src.core.files import new_partial, publish
from forge_gpu._src.core.instructions import factorize
from forge_gpu._src.core.labels import ACTION_TARGET, label_fields, target_column
from forge_gpu._src.core.lerobot_features import (
    ENVIRONMENT_STATE,
    declared_environment_state,
    environment_fields,
)
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.export.common import closed_runs, export_report, source_statistics
from forge_gpu._src.reading.runs import episode_index, index_instructions, open_run, read_index
from forge_gpu._src.recording.stats import StatsAccumulator

# The layout's names.
CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000  # files per chunk directory (LeRobot's default)
DATA_FILE_MB = 100  # LeRobot's default file sizes
VIDEO_FILE_MB = 200
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"

#: codec name -> (PyAV encoder, default CRF, encoder options). ``g`` (2): a keyframe every 2 frames, as
#: LeRobot's own encoder settings, so that a random frame decodes after at most one other.
CODECS = {
    "h264": ("libx264", 23, {"preset": "veryfast"}),
    # Preset 8, CRF 35: on 64x64 reach frames, smaller than h264 at CRF 23 with a smaller error (1.97 vs 2.02 MB,
    # mean absolute error 2.1 vs 2.6 levels), encoding 4.5x slower; presets 10-12 were larger than h264.
    "av1": ("libsvtav1", 35, {"preset": "8"}),
}
#: The largest constant rate factor each encoder takes (0 is lossless or nearly).
MAX_CRF = {"h264": 51, "av1": 63}


def check_video(codec: str, crf: int | None) -> None:
    """Refuse a codec this exporter does not name, or a ``crf`` outside the encoder's range (ValueError naming it),
    before anything is read or written."""
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {list(CODECS)}, got {codec!r}")
    if crf is not None:
        check_int(f"crf for {codec}", crf, minimum=0, maximum=MAX_CRF[codec])


def _require_av():
    try:
        import av
    except ImportError as exc:
        raise ImportError(
            'exporting to LeRobot needs PyAV: pip install "forge-gpu[export]" (or pip install av)'
        ) from exc
    return av


def frames_per_second(spec: dict, name: str) -> int:
    """LeRobot's integer fps from the run's control_dt; ValueError when 1 / control_dt is not an integer."""
    dt = float(spec.get("control_dt", 0.0))
    fps = round(1.0 / dt) if dt > 0 else 0
    if fps < 1 or abs(fps * dt - 1.0) > 1e-6:
        raise ValueError(f"{name}: control_dt={dt} gives no integer fps, which LeRobot needs")
    return fps


def export_lerobot(
    source: str | os.PathLike,
    out: str | os.PathLike,
    *,
    codec: str = "h264",
    crf: int | None = None,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
    data_file_mb: float = DATA_FILE_MB,
    video_file_mb: float = VIDEO_FILE_MB,
    environment_state: Sequence[str] | None = None,
    target: str = ACTION_TARGET,
) -> dict:
    """Write the episodes of ``source`` (a closed run directory or a dataset root) as the LeRobot v3.0
    dataset ``out`` (a new directory). Returns a report: episodes, frames, files, bytes, seconds,
    frames_per_s, codec, workers.

    Args:
        codec: ``"h264"`` (libx264: fast) or ``"av1"`` (SVT-AV1: smaller files).
        crf: the encoder's constant rate factor (lower: larger files, smaller error); default h264 23,
            av1 35.
        workers: processes encoding contiguous parts of the episodes in parallel.
        progress: called with (frames done, frames in all) after each episode.
        data_file_mb, video_file_mb: a part starts new files once its data or video file passes this size.
        environment_state: the observation fields written, concatenated in this order, as
            ``observation.environment_state``; default the fields the task declares (run.json's
            ``env_spec.environment_state``), else every vector field but ``proprio``, in the spec's order
            (``core/lerobot_features.py``); ``[]``: no environment state. Label fields are never among them.
        target: what ``action`` holds: ``"action"``, the executed actions, or a label field of the run (e.g.
            ``"expert_action"``): its value at each transition's first frame; ``meta/stats.json``'s ``action`` is
            then the label's statistics.

    Raises ValueError for a run that is not closed, runs of different tasks, a control_dt without
    integer fps or odd image sizes; FileExistsError when ``out`` exists; ImportError without PyAV.
    """
    check_video(codec, crf)
    check_int("workers", workers, minimum=1)
    av = _require_av()
    if CODECS[codec][0] not in av.codecs_available:
        raise ValueError(f"this PyAV build has no {CODECS[codec][0]} encoder for {codec}")
    source, out = os.fspath(source), os.fspath(out)
    runs = closed_runs(source)
    manifest = runs[0].manifest
    spec = manifest["env_spec"]
    fps = frames_per_second(spec, os.path.join(runs[0].directory, RUN_MANIFEST))
    layout = observation_layout(spec)
    cameras = image_fields(layout)
    for camera in cameras:
        height, width = layout[camera][0][:2]
        if height % 2 or width % 2 or layout[camera][1] != np.uint8 or layout[camera][0][2:] != (3,):
            raise ValueError(f"camera {camera!r} must be [H, W, 3] uint8 with even H and W, got {layout[camera]}")
    name = os.path.join(runs[0].directory, RUN_MANIFEST)
    target_column(spec, target, name=name)
    if environment_state is None:  # the fields the task declares in the spec, else the default
        environment_state = declared_environment_state(spec)
    state_fields = environment_fields(layout, environment_state, name=name, labels=tuple(label_fields(spec)))
    stats = source_statistics(source)
    start = time.perf_counter()
    index = episode_index(source)
    lengths = np.array([run.ids(k)[2] for run, k in index], dtype=np.int64)
    total = int(lengths.sum())
    if not index:
        raise ValueError(f"{source}: no published episode to export")
    tasks, task_of = factorize(index_instructions(index))  # each distinct instruction a task, first seen first
    partial = new_partial(out)
    try:
        settings = {
            "source": source,
            "partial": partial,
            "fps": fps,
            "codec": codec,
            "crf": CODECS[codec][1] if crf is None else int(crf),
            "cameras": cameras,
            "environment_state": state_fields,
            "target": target,
            "has_success": bool(spec.get("has_success")),
            "compute_stats": stats is None,
            "data_bytes": int(data_file_mb * 2**20),
            "video_bytes": int(video_file_mb * 2**20),
            "tasks": tasks,
        }
        starts = np.concatenate([[0], np.cumsum(lengths)])
        bounds = _split(starts, min(workers, max(len(index), 1)))
        jobs = [
            dict(
                settings,
                worker=w,
                first=int(a),
                stop=int(b),
                first_row=int(starts[a]),
                task_index=task_of[a:b].tolist(),
            )
            for w, (a, b) in enumerate(bounds)
        ]
        results = _run_jobs(jobs, total, progress)
        episodes, parts = [], []
        part_stats = []
        for result in results:
            episodes += result["episodes"]
            parts += result["parts"]
            if result["stats"] is not None:
                part_stats.append(StatsAccumulator.from_json(result["stats"], "an export worker's statistics"))
        if stats is None:
            stats = part_stats[0] if part_stats else None
            for other in part_stats[1:]:
                stats.merge(other)
        number_files(partial, parts, episodes, cameras)
        write_meta(partial, manifest, spec, layout, cameras, fps, episodes, total, stats, settings)
        nbytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(partial) for f in fs)
        publish(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return {
        **export_report(out, "lerobot", len(episodes), total, nbytes, start, computed=settings["compute_stats"]),
        "files": len(parts),
        "codec": codec,
        "workers": len(jobs),
        "left_out": depth_fields(layout),
        "environment_state": state_fields,
        "target": target,
    }


def _flat(values: np.ndarray) -> np.ndarray:
    """[T, ...] as [T, channels] (a scalar field: one channel)."""
    return values.reshape(values.shape[0], -1)


def _channel_names(layout: dict, fields: list[str]) -> list[str]:
    """``<field>_<i>`` per channel (a scalar field: ``<field>``)."""
    names = []
    for field in fields:
        shape = layout[field][0]
        names += [field] if not shape else [f"{field}_{i}" for i in range(shape[0])]
    return names


def _split(starts: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous episode ranges with about equal frames each."""
    count = len(starts) - 1
    cuts = np.searchsorted(starts, np.linspace(0, starts[-1], parts + 1)[1:-1])
    edges = [0, *sorted(set(int(c) for c in cuts) - {0, count}), count]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _run_jobs(jobs: list[dict], total: int, progress) -> list[dict]:
    """Run the export jobs: in this process for one, else one spawned process each; report progress."""
    if len(jobs) == 1:
        done = 0

        def report(frames: int) -> None:
            nonlocal done
            done += frames
            if progress is not None:
                progress(done, total)

        return [export_part(jobs[0], report)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with ProcessPoolExecutor(len(jobs), mp_context=context, initializer=_worker_init, initargs=(queue,)) as pool:
        futures = [pool.submit(_export_part_in_worker, job) for job in jobs]
        done = 0
        while not all(f.done() for f in futures):
            try:
                done += queue.get(timeout=0.2)
            except Exception:  # queue.Empty; a failed worker shows in its future
                continue
            if progress is not None:
                progress(done, total)
        results = [f.result() for f in futures]
    while not queue.empty():
        done += queue.get()
    if progress is not None:
        progress(done, total)
    return results


_QUEUE = None


def _worker_init(queue) -> None:
    global _QUEUE
    _QUEUE = queue


def _export_part_in_worker(job: dict) -> dict:
    return export_part(job, _QUEUE.put)


class VideoFile:
    """One open mp4 file of one camera: frames are encoded once, their packets appended as they come."""

    def __init__(self, path: str, codec: str, crf: int, fps: int, height: int, width: int):
        av = _require_av()
        encoder, _, options = CODECS[codec]
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its configuration at info level otherwise
        self.path = path
        self.container = av.open(path, "w", format="mp4")
        self.stream = self.container.add_stream(encoder, rate=fps)
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"
        self.stream.options = {**options, "crf": str(crf), "g": "2"}
        self.frames = 0
        self.bytes = 0  # of the packets muxed so far
        self._av = av

    def append(self, frames: np.ndarray) -> tuple[int, int]:
        """Encode ``frames`` [T, H, W, 3] uint8; return the file's frame numbers [first, end) they took."""
        first = self.frames
        for image in frames:
            frame = self._av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = self.frames
            self.frames += 1
            self._mux(self.stream.encode(frame))
        return first, self.frames

    def _mux(self, packets) -> None:
        self.bytes += sum(p.size for p in packets)
        self.container.mux(packets)

    def close(self) -> None:
        self._mux(self.stream.encode(None))
        self.container.close()


def _data_schema(job: dict, state_dim: int, environment_dim: int, action_dim: int):
    import pyarrow as pa

    fields = [pa.field("observation.state", _vector_type(state_dim))]
    if job["environment_state"]:
        fields.append(pa.field(ENVIRONMENT_STATE, _vector_type(environment_dim)))
    fields += [
        pa.field("action", _vector_type(action_dim)),
        pa.field("next.reward", pa.float32()),
        pa.field("next.done", pa.bool_()),
    ]
    if job["has_success"]:
        fields.append(pa.field("next.success", pa.bool_()))
    fields += [
        pa.field("timestamp", pa.float32()),
        pa.field("frame_index", pa.int64()),
        pa.field("episode_index", pa.int64()),
        pa.field("index", pa.int64()),
        pa.field("task_index", pa.int64()),
    ]
    return pa.schema(fields)


def export_part(job: dict, report: Callable[[int], None]) -> dict:
    """Export the episodes [first, stop) of the source into part files of the partial directory.

    Returns the episodes' metadata rows, the part files (renamed to their chunk/file names later) and,
    when the source has none stored, the statistics of these episodes.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    index = episode_index(job["source"])[job["first"] : job["stop"]]
    fps, cameras = job["fps"], job["cameras"]
    stats = None
    episodes_meta, parts = [], []
    writer = videos = None
    schema = None
    row = job["first_row"]

    def open_part():
        number = len(parts)
        name = f"part-{job['worker']:03d}-{number:04d}"
        part = {"worker": job["worker"], "number": number, "data": f"data/{name}.parquet", "videos": {}}
        os.makedirs(os.path.join(job["partial"], "data"), exist_ok=True)
        files = {}
        for camera in cameras:
            key = f"observation.images.{camera}"
            part["videos"][key] = f"videos/{key}/{name}.mp4"
            os.makedirs(os.path.join(job["partial"], "videos", key), exist_ok=True)
            height, width = shape_of[camera][:2]
            path = os.path.join(job["partial"], part["videos"][key])
            files[key] = VideoFile(path, job["codec"], job["crf"], fps, height, width)
        parts.append(part)
        return pq.ParquetWriter(os.path.join(job["partial"], part["data"]), schema, compression="snappy"), files

    def close_part():
        writer.close()
        for video in videos.values():
            video.close()

    shape_of = {}
    try:
        for number, episode in enumerate(read_index(index, EpisodeReadOptions()), start=job["first"]):
            steps = episode.steps
            if schema is None:
                environment_dim = sum(_flat(episode.obs[f]).shape[1] for f in job["environment_state"])
                schema = _data_schema(job, episode.obs["proprio"].shape[1], environment_dim, episode.action.shape[1])
                shape_of = {c: episode.obs[c].shape[1:] for c in cameras}
                if job["compute_stats"]:
                    spec = open_run(os.path.dirname(episode.path)).manifest["env_spec"]
                    stats = StatsAccumulator(observation_layout(spec), episode.action.shape[1])
            if writer is None or (
                episodes_meta
                and (
                    os.path.getsize(writer.where) >= job["data_bytes"]
                    or any(v.bytes >= job["video_bytes"] for v in videos.values())
                )
            ):
                if writer is not None:
                    close_part()
                writer, videos = open_part()
            frame_index = np.arange(steps, dtype=np.int64)
            task = job["task_index"][number - job["first"]]
            if episode.instruction != job["tasks"][task]:  # the index and the episode come from one reader
                raise ValueError(f"{episode.path}: its instruction differs from the one its run's index gives")
            columns = {"observation.state": _vector(episode.obs["proprio"])}
            if job["environment_state"]:
                environment = [_flat(episode.obs[f]) for f in job["environment_state"]]
                columns[ENVIRONMENT_STATE] = _vector(np.concatenate(environment, axis=1))
            action = episode.action if job["target"] == ACTION_TARGET else episode.obs[job["target"]]
            columns |= {
                "action": _vector(action),
                "next.reward": pa.array(episode.reward, pa.float32()),
                "next.done": pa.array(episode.terminated | episode.truncated),
            }
            if job["has_success"]:
                columns["next.success"] = pa.array(episode.terminated)
            columns.update(
                {
                    "timestamp": pa.array((frame_index / fps).astype(np.float32)),
                    "frame_index": pa.array(frame_index),
                    "episode_index": pa.array(np.full(steps, number, np.int64)),
                    "index": pa.array(row + frame_index),
                    "task_index": pa.array(np.full(steps, task, np.int64)),
                }
            )
            writer.write_table(pa.table(columns, schema=schema), row_group_size=steps)
            meta = {
                "episode_index": number,
                "task_index": task,
                "length": steps,
                "dataset_from_index": row,
                "dataset_to_index": row + steps,
                "part": len(parts) - 1,
                "worker": job["worker"],
                "env_id": episode.env_id,
                "source_episode_id": episode.episode_id,
                **{f"params/{name}": value for name, value in episode.params.items()},
            }
            for key, video in videos.items():
                first, end = video.append(episode.obs[key.rsplit(".", 1)[1]])
                meta[f"videos/{key}/from_timestamp"] = first / fps
                meta[f"videos/{key}/to_timestamp"] = end / fps
            episodes_meta.append(meta)
            if stats is not None:
                stats.update_episode(episode)
            row += steps
            report(steps)
    finally:
        if writer is not None:
            close_part()
    return {
        "episodes": episodes_meta,
        "parts": parts,
        "stats": None if stats is None else stats.to_json("computed while exporting"),
    }


def _vector_type(size: int):
    """A [size] float32 feature's column type as LeRobot reads it: a scalar for size 1 (its ``shape == (1,)``
    rule), else a fixed-size list."""
    import pyarrow as pa

    return pa.float32() if size == 1 else pa.list_(pa.float32(), size)


def _vector(values: np.ndarray):
    import pyarrow as pa

    flat = np.ascontiguousarray(values, dtype=np.float32)
    if flat.shape[1] == 1:
        return pa.array(flat[:, 0])
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


# The meta/ files (info.json, stats.json, tasks.parquet, the episodes table), and the final numbering of the parts'
# data and video files.


def number_files(partial: str, parts: list[dict], episodes: list[dict], cameras: list[str]) -> None:
    """Rename the part files, in episode order, to LeRobot's chunk-CCC/file-FFF names and record each
    episode's chunk and file indices."""
    number = {}
    for g, part in enumerate(parts):  # parts come in worker order, then in their order: episode order
        chunk, file = divmod(g, CHUNKS_SIZE)
        number[(part["worker"], part["number"])] = (chunk, file)
        target = os.path.join(partial, DATA_PATH.format(chunk_index=chunk, file_index=file))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(os.path.join(partial, part["data"]), target)
        for key, path in part["videos"].items():
            target = os.path.join(partial, VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(os.path.join(partial, path), target)
    for meta in episodes:
        chunk, file = number[(meta.pop("worker"), meta.pop("part"))]
        meta["data/chunk_index"], meta["data/file_index"] = chunk, file
        for camera in cameras:
            key = f"observation.images.{camera}"
            meta[f"videos/{key}/chunk_index"], meta[f"videos/{key}/file_index"] = chunk, file


def lerobot_stats(
    stats: StatsAccumulator | None, cameras: list[str], environment_state: list[str], target: str = ACTION_TARGET
) -> dict:
    """meta/stats.json's content: LeRobot's keys, per-channel image figures as [3, 1, 1] in [0, 1]; the
    environment state's figures are its fields' concatenated in order; ``action``'s are the ``target``'s (the
    recorded actions', or a label field's: ``obs/<target>``)."""
    if stats is None:
        return {}
    summary = stats.summary()
    if environment_state and all(f"obs/{f}" in summary for f in environment_state):
        parts = [summary[f"obs/{f}"] for f in environment_state]
        summary[ENVIRONMENT_STATE] = {
            figure: parts[0]["count"] if figure == "count" else np.concatenate([p[figure] for p in parts])
            for figure in parts[0]
        }
    names = {"obs/proprio": "observation.state", ENVIRONMENT_STATE: ENVIRONMENT_STATE}
    names |= {"action" if target == ACTION_TARGET else f"obs/{target}": "action", "reward": "next.reward"}
    names.update({f"obs/{c}": f"observation.images.{c}" for c in cameras})
    out = {}
    for key, name in names.items():
        if key not in summary:
            continue
        entry = summary[key]
        figures = {}
        for figure, value in entry.items():
            if figure == "count":
                figures[figure] = [int(value)]
            elif name.startswith("observation.images."):
                figures[figure] = (np.asarray(value) / 255.0).reshape(-1, 1, 1).tolist()
            else:
                figures[figure] = np.asarray(value).tolist()
        out[name] = figures
    return out


def write_meta(partial, manifest, spec, layout, cameras, fps, episodes, total, stats, settings) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    state_dim = layout["proprio"][0][0]
    action_dim = int(spec["action_shape"][0])
    features = {
        "observation.state": {
            "dtype": "float32",
            "shape": [state_dim],
            "names": [f"proprio_{i}" for i in range(state_dim)],
        },
    }
    environment = _channel_names(layout, settings["environment_state"])
    if environment:
        features[ENVIRONMENT_STATE] = {"dtype": "float32", "shape": [len(environment)], "names": environment}
    features |= {
        "action": {"dtype": "float32", "shape": [action_dim], "names": [f"action_{i}" for i in range(action_dim)]},
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
    }
    if settings["has_success"]:
        features["next.success"] = {"dtype": "bool", "shape": [1], "names": None}
    features.update(
        {
            "timestamp": {"dtype": "float32", "shape": [1], "names": None},
            "frame_index": {"dtype": "int64", "shape": [1], "names": None},
            "episode_index": {"dtype": "int64", "shape": [1], "names": None},
            "index": {"dtype": "int64", "shape": [1], "names": None},
            "task_index": {"dtype": "int64", "shape": [1], "names": None},
        }
    )
    for feature in features.values():
        feature["fps"] = fps
    for camera in cameras:
        height, width, channels = layout[camera][0]
        features[f"observation.images.{camera}"] = {
            "dtype": "video",
            "shape": [height, width, channels],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": height,
                "video.width": width,
                "video.codec": settings["codec"],
                "video.pix_fmt": "yuv420p",
                "is_depth_map": False,
                "video.fps": fps,
                "video.channels": channels,
                "video.crf": settings["crf"],
                "has_audio": False,
            },
        }
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": f"forge_gpu/{manifest['task']}",
        "total_episodes": len(episodes),
        "total_frames": total,
        "total_tasks": len(settings["tasks"]),
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": math.ceil(settings["data_bytes"] / 2**20),
        "video_files_size_in_mb": math.ceil(settings["video_bytes"] / 2**20),
        "fps": fps,
        "splits": {"train": f"0:{len(episodes)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cameras else None,
        "features": features,
    }
    meta = os.path.join(partial, "meta")
    os.makedirs(os.path.join(meta, "episodes", "chunk-000"), exist_ok=True)
    _write_json(os.path.join(meta, "info.json"), info)
    figures = lerobot_stats(stats, cameras, settings["environment_state"], settings["target"])
    _write_json(os.path.join(meta, "stats.json"), figures)
    _write_tasks(os.path.join(meta, "tasks.parquet"), settings["tasks"])
    columns = {
        "episode_index": pa.array([m["episode_index"] for m in episodes], pa.int64()),
        "tasks": pa.array([[settings["tasks"][m["task_index"]]] for m in episodes], pa.list_(pa.string())),
        "length": pa.array([m["length"] for m in episodes], pa.int64()),
        "data/chunk_index": pa.array([m["data/chunk_index"] for m in episodes], pa.int64()),
        "data/file_index": pa.array([m["data/file_index"] for m in episodes], pa.int64()),
        "dataset_from_index": pa.array([m["dataset_from_index"] for m in episodes], pa.int64()),
        "dataset_to_index": pa.array([m["dataset_to_index"] for m in episodes], pa.int64()),
    }
    for camera in cameras:
        key = f"observation.images.{camera}"
        for name, kind in (("chunk_index", pa.int64()), ("file_index", pa.int64())):
            columns[f"videos/{key}/{name}"] = pa.array([m[f"videos/{key}/{name}"] for m in episodes], kind)
        for name in ("from_timestamp", "to_timestamp"):
            columns[f"videos/{key}/{name}"] = pa.array([m[f"videos/{key}/{name}"] for m in episodes], pa.float64())
    columns["meta/episodes/chunk_index"] = pa.array(np.zeros(len(episodes), np.int64))
    columns["meta/episodes/file_index"] = pa.array(np.zeros(len(episodes), np.int64))
    # Where each episode came from in the forge_gpu run, and the values it was randomized with (extra columns;
    # LeRobot ignores them).
    columns["forge_gpu/env_id"] = pa.array([m["env_id"] for m in episodes], pa.int64())
    columns["forge_gpu/episode_id"] = pa.array([m["source_episode_id"] for m in episodes], pa.int64())
    for name in [k for k in episodes[0] if k.startswith("params/")]:
        columns[name] = nested_array(np.stack([m[name] for m in episodes]))
    pq.write_table(pa.table(columns), os.path.join(partial, EPISODES_PATH))


def nested_array(values: np.ndarray):
    """[E, ...] values as an Arrow column of E rows of their own dtype: a primitive column for [E], else fixed-size
    lists, nested once per dimension past the first (a [E, 2, 3] array: lists of 2 lists of 3)."""
    import pyarrow as pa

    column = pa.array(np.ascontiguousarray(values).reshape(-1))
    for size in reversed(values.shape[1:]):
        column = pa.FixedSizeListArray.from_arrays(column, size)
    return column


def _write_tasks(path: str, tasks: list[str]) -> None:
    """meta/tasks.parquet, one row per task (``tasks[i]`` has ``task_index`` i), as pandas writes a frame indexed by
    "task" with a ``task_index`` column, so that ``pandas.read_parquet`` (what LeRobot calls) restores the index."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    schema = pa.schema([pa.field("task_index", pa.int64()), pa.field("task", pa.string())])
    schema = schema.with_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    index = pa.array(np.arange(len(tasks)), pa.int64())
    table = pa.table({"task_index": index, "task": pa.array(tasks, pa.string())}, schema=schema)
    pq.write_table(table, path)


def _write_json(path: str, content: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(content, f, indent=2)
        f.write("\n")
