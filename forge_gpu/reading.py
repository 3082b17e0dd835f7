"""forge_gpu.reading: reading runs (numpy alone; torch on first use of the torch datasets): episodes, training
windows, and what checks or shows a run: ``inspect_run``, ``verify_run``, ``report``, ``view_run``;
``mounted_camera_to_world``: a mounted camera's pose at each frame from the recorded state."""

from forge_gpu._surface import lazy_names

NAMES = {
    "open_run": "forge_gpu._src.reading.runs",
    "read_episodes": "forge_gpu._src.reading.runs",
    "action_windows": "forge_gpu._src.reading.windows",
    "Episode": "forge_gpu._src.core.episode",
    "EpisodeReadOptions": "forge_gpu._src.core.episode",
    "Windows": "forge_gpu._src.reading.windows",
    "WindowSpec": "forge_gpu._src.reading.windows",
    "WindowDataset": "forge_gpu._src.reading.torch_data",
    "WindowMapDataset": "forge_gpu._src.reading.torch_data",
    "device_batch": "forge_gpu._src.reading.torch_data",
    "normalization": "forge_gpu._src.recording.stats",
    "Normalization": "forge_gpu._src.recording.stats",
    "inspect_run": "forge_gpu._src.reading.inspection",
    "verify_run": "forge_gpu._src.reading.verify",
    "report": "forge_gpu._src.reading.report",
    "view_run": "forge_gpu._src.reading.view",
    "mounted_camera_to_world": "forge_gpu._src.core.cameras",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, NAMES)
