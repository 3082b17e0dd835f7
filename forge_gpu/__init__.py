"""forge_gpu: collect robot-learning data at scale on batched Newton worlds.

The simulation side (``make``, ``VectorEnv``, policies, the transport) imports Warp and Newton on
first use; the data side (recorder, reader) works with numpy alone. Nothing here imports torch.
"""

from importlib import import_module

_EXPORTS = {
    "make": "forge_gpu._src.sim.make",
    "task_config": "forge_gpu._src.sim.make",
    "VectorEnv": "forge_gpu._src.sim.env",
    "default_device": "forge_gpu._src.sim.device",
    "StepResult": "forge_gpu._src.sim.step_result",
    "TaskConfig": "forge_gpu._src.sim.config",
    "make_policy": "forge_gpu._src.sim.policies",
    "TASKS": "forge_gpu._src.sim.tasks.registry",
    "Task": "forge_gpu._src.sim.tasks.base",
    "TaskSpec": "forge_gpu._src.sim.tasks.base",
    "register_task": "forge_gpu._src.sim.tasks.registry",
    "load_policy": "forge_gpu._src.sim.policies",
    "HostSnapshotTransport": "forge_gpu._src.collect.transport",
    "Transport": "forge_gpu._src.collect.transport",
    "Recorder": "forge_gpu._src.recording.base",
    "RunDescription": "forge_gpu._src.core.manifest",
    "describe_run": "forge_gpu._src.core.manifest",
    "make_recorder": "forge_gpu._src.collect.collector",
    "collect": "forge_gpu._src.collect.collector",
    "replay": "forge_gpu._src.collect.replay",
    "collect_distributed": "forge_gpu._src.collect.distributed",
    "DatasetSummary": "forge_gpu._src.collect.distributed",
    "CollectionSummary": "forge_gpu._src.collect.collector",
    "RecordingOptions": "forge_gpu._src.formats.options",
    "EpisodeRecorder": "forge_gpu._src.formats.npz.recorder",
    "NpzRecorder": "forge_gpu._src.formats.npz.recorder",
    "Episode": "forge_gpu._src.core.episode",
    "read_episodes": "forge_gpu._src.data.runs",
    "EpisodeReadOptions": "forge_gpu._src.core.episode",
    "read_manifest": "forge_gpu._src.formats.registry",
    "RunFormat": "forge_gpu._src.formats.registry",
    "FormatCapabilities": "forge_gpu._src.formats.registry",
    "RunReader": "forge_gpu._src.formats.registry",
    "register_format": "forge_gpu._src.formats.registry",
    "open_run": "forge_gpu._src.data.runs",
    "action_windows": "forge_gpu._src.data.runs",
    "WindowDataset": "forge_gpu._src.data.torch_data",
    "WindowMapDataset": "forge_gpu._src.data.torch_data",
    "device_batch": "forge_gpu._src.data.torch_data",
    "Windows": "forge_gpu._src.data.windows",
    "PackedRecorder": "forge_gpu._src.formats.packed.recorder",
    "convert_run": "forge_gpu._src.data.tools.convert",
    "select_run": "forge_gpu._src.data.tools.curate",
    "merge_runs": "forge_gpu._src.data.tools.curate",
    "split_run": "forge_gpu._src.data.tools.curate",
    "episode_values": "forge_gpu._src.data.tools.curate",
    "ExpressionError": "forge_gpu._src.data.tools.where",
    "verify_run": "forge_gpu._src.data.tools.verify",
    "report": "forge_gpu._src.data.tools.report",
    "view_run": "forge_gpu._src.data.tools.view",
    "export_lerobot": "forge_gpu._src.data.export.lerobot",
    "export_robomimic": "forge_gpu._src.data.export.robomimic",
    "run_statistics": "forge_gpu._src.data.tools.statistics",
    "compute_statistics": "forge_gpu._src.data.tools.statistics",
    "validate_episode": "forge_gpu._src.formats.npz.episode_file",
    "SCHEMA_VERSION": "forge_gpu._src.formats.npz.identity",
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
