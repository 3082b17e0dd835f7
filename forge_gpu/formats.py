"""forge_gpu.formats: the run formats (docs/FORMAT.md, docs/FORMAT-v1.md) and how a new one is added: the
``RunFormat`` and ``RunReader`` protocols, ``FormatCapabilities``, ``register_format``; run.json's checked
reading; schema 1's episode file check."""

from forge_gpu._surface import lazy_names

NAMES = {
    "RunFormat": "forge_gpu._src.formats.registry",
    "RunReader": "forge_gpu._src.formats.registry",
    "FormatCapabilities": "forge_gpu._src.formats.registry",
    "register_format": "forge_gpu._src.formats.registry",
    "read_manifest": "forge_gpu._src.formats.registry",
    "validate_episode": "forge_gpu._src.formats.npz.files",
    "SCHEMA_VERSION": "forge_gpu._src.formats.npz.identity",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, NAMES)
