"""forge_gpu.export: runs written in other projects' dataset layouts: LeRobot v3.0 and robomimic."""

from forge_gpu._surface import lazy_names

NAMES = {
    "export_lerobot": "forge_gpu._src.export.lerobot",
    "export_robomimic": "forge_gpu._src.export.robomimic",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, NAMES)
