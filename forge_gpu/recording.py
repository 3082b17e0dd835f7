"""forge_gpu.recording: collecting and writing runs: ``collect`` (and on Ray ``collect_distributed``, which writes
a dataset root), the recorders and their one options object, the transport, the re-simulation ``replay``, and
``evaluate`` (a policy scored over exactly N keyed episodes), and ``generate`` (many demonstrations from a few, by
their subtasks)."""

from forge_gpu._surface import lazy_names

NAMES = {
    "collect": "forge_gpu._src.collect.collector",
    "CollectionSummary": "forge_gpu._src.collect.collector",
    "make_recorder": "forge_gpu._src.collect.collector",
    "collect_distributed": "forge_gpu._src.collect.distributed",
    "DatasetSummary": "forge_gpu._src.collect.distributed",
    "write_dataset_manifest": "forge_gpu._src.core.dataset",
    "replay": "forge_gpu._src.collect.replay",
    "RolloutRecorder": "forge_gpu._src.collect.rollouts",
    "HostSnapshotTransport": "forge_gpu._src.collect.transport",
    "Transport": "forge_gpu._src.collect.transport",
    "Recorder": "forge_gpu._src.recording.base",
    "RunDescription": "forge_gpu._src.core.manifest",
    "RecordingOptions": "forge_gpu._src.formats.registry",
    "PackedRecorder": "forge_gpu._src.formats.packed.recorder",
    "NpzRecorder": "forge_gpu._src.formats.npz.write",
    "evaluate": "forge_gpu._src.evaluate.run",
    "Evaluation": "forge_gpu._src.evaluate.figures",
    "generate": "forge_gpu._src.generate.run",
    "GenerationSummary": "forge_gpu._src.generate.generation",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, NAMES)
