"""forge_gpu.curation: new runs made of other runs' episodes (``convert_run``, ``select_run``, ``merge_runs``,
``split_run``; ``--where`` expressions), a killed run's ``repair_run``, and a run's statistics."""

from forge_gpu._surface import lazy_names

NAMES = {
    "convert_run": "forge_gpu._src.curation.convert",
    "select_run": "forge_gpu._src.curation.curate",
    "merge_runs": "forge_gpu._src.curation.curate",
    "split_run": "forge_gpu._src.curation.curate",
    "episode_values": "forge_gpu._src.curation.curate",
    "ExpressionError": "forge_gpu._src.curation.where",
    "repair_run": "forge_gpu._src.curation.repair",
    "run_statistics": "forge_gpu._src.recording.stats",
    "compute_statistics": "forge_gpu._src.curation.curate",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, NAMES)
