"""forge_gpu.curation: new runs made of other runs' episodes (``convert_run``, ``select_run``, ``merge_runs``,
``split_run``; ``--where`` expressions), a killed run's ``repair_run``, and a run's statistics."""

from forge_gpu._surface import lazy_names

NAMES = {
    "convert_run": "forge_gpu._src.data.tools.convert",
    "select_run": "forge_gpu._src.data.tools.curate",
    "merge_runs": "forge_gpu._src.data.tools.curate",
    "split_run": "forge_gpu._src.data.tools.curate",
    "episode_values": "forge_gpu._src.data.tools.curate",
    "ExpressionError": "forge_gpu._src.data.tools.where",
    "repair_run": "forge_gpu._src.data.tools.repair",
    "run_statistics": "forge_gpu._src.data.tools.statistics",
    "compute_statistics": "forge_gpu._src.data.tools.statistics",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, NAMES)
