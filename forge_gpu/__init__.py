"""forge_gpu: collect robot-learning data at scale on batched Newton worlds.

The simulation side (``make``, ``VectorEnv``, policies, the transport) imports Warp and Newton on
first use; the data side (recorder, reader) works with numpy alone. Nothing here imports torch.
"""

from importlib import import_module

_EXPORTS = {
    "make": "forge_gpu._src.make",
    "task_config": "forge_gpu._src.make",
    "VectorEnv": "forge_gpu._src.env",
    "default_device": "forge_gpu._src.env",
    "StepResult": "forge_gpu._src.batch",
    "TaskConfig": "forge_gpu._src.config",
    "make_policy": "forge_gpu._src.policies",
    "TASKS": "forge_gpu._src.tasks",
    "Task": "forge_gpu._src.tasks",
    "TaskSpec": "forge_gpu._src.tasks",
    "register_task": "forge_gpu._src.tasks",
    "load_policy": "forge_gpu._src.policies",
    "HostSnapshotTransport": "forge_gpu._src.transport",
    "Transport": "forge_gpu._src.transport",
    "Recorder": "forge_gpu._src.tracker",
    "RunDescription": "forge_gpu._src.tracker",
    "describe_run": "forge_gpu._src.tracker",
    "make_recorder": "forge_gpu._src.collector",
    "collect": "forge_gpu._src.collector",
    "collect_distributed": "forge_gpu._src.distributed",
    "DatasetSummary": "forge_gpu._src.distributed",
    "CollectionSummary": "forge_gpu._src.collector",
    "RecordingOptions": "forge_gpu._src.options",
    "EpisodeRecorder": "forge_gpu._src.recorder",
    "Episode": "forge_gpu._src.reader",
    "read_episodes": "forge_gpu._src.reader",
    "EpisodeReadOptions": "forge_gpu._src.reader",
    "read_manifest": "forge_gpu._src.manifest",
    "RunFormat": "forge_gpu._src.formats",
    "RunReader": "forge_gpu._src.formats",
    "register_format": "forge_gpu._src.formats",
    "open_run": "forge_gpu._src.reader",
    "action_windows": "forge_gpu._src.reader",
    "WindowDataset": "forge_gpu._src.torch_data",
    "WindowMapDataset": "forge_gpu._src.torch_data",
    "Windows": "forge_gpu._src.windows",
    "PackedRecorder": "forge_gpu._src.packed_recorder",
    "convert_run": "forge_gpu._src.convert",
    "export_lerobot": "forge_gpu._src.export_lerobot",
    "export_robomimic": "forge_gpu._src.export_robomimic",
    "run_statistics": "forge_gpu._src.stats",
    "compute_statistics": "forge_gpu._src.stats",
    "validate_episode": "forge_gpu._src.episode_format",
    "SCHEMA_VERSION": "forge_gpu._src.episode_format",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'forge_gpu' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
