"""forge_gpu.export: runs written in other projects' dataset layouts: LeRobot v3.0, robomimic and Minari."""

from forge_gpu._surface import lazy_names

NAMES = {
    "export_lerobot": "forge_gpu._src.export.lerobot",
    "export_robomimic": "forge_gpu._src.export.robomimic",
    "export_minari": "forge_gpu._src.export.minari",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, NAMES)
