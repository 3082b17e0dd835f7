"""forge_gpu.testing: runs without a simulator, for tests and benchmarks: a synthetic run description and host
batches with the env's step semantics (the recorders and readers are tested and timed on them)."""

from forge_gpu._surface import lazy_names

_SYNTHETIC = "forge_gpu._src.testing.synthetic"
NAMES = {
    "synthetic_description": _SYNTHETIC,
    "SyntheticBatches": _SYNTHETIC,
    "make_batches": _SYNTHETIC,
    "CONTROL_DT": _SYNTHETIC,
    "INSTRUCTION": _SYNTHETIC,
    "STATE": _SYNTHETIC,
    "PARAMS": _SYNTHETIC,
}

__all__, __getattr__, __dir__ = lazy_names(__name__, NAMES)
