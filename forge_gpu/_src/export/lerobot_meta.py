"""The LeRobot v3.0 layout's names and its ``meta/`` files (info.json, stats.json, tasks.parquet, the episodes
table), and the final numbering of the parts' data and video files; the frames themselves are written by
:mod:`data.export.lerobot`."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from forge_gpu._src.recording.stats import StatsAccumulator

CODEBASE_VERSION = "v3.0"


CHUNKS_SIZE = 1000  # files per chunk directory (LeRobot's default)


DATA_FILE_MB = 100  # LeRobot's default file sizes


VIDEO_FILE_MB = 200


DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"


VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"


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


def lerobot_stats(stats: StatsAccumulator | None, cameras: list[str]) -> dict:
    """meta/stats.json's content: LeRobot's keys, per-channel image figures as [3, 1, 1] in [0, 1]."""
    if stats is None:
        return {}
    summary = stats.summary()
    names = {"obs/proprio": "observation.state", "action": "action", "reward": "next.reward"}
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
    _write_json(os.path.join(meta, "stats.json"), lerobot_stats(stats, cameras))
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
