"""forge_gpu: collect robot-learning data at scale on batched Newton worlds.

The public names live in one module per domain, each with its ``__all__``:

- ``forge_gpu.sim``: tasks, configs, the env, the device, policies (Warp and Newton load on first use);
- ``forge_gpu.recording``: ``collect``, the recorders and ``RecordingOptions``, the transport, ``replay``;
- ``forge_gpu.formats``: the run formats and how a new one is added;
- ``forge_gpu.reading``: episodes, training windows, ``inspect_run``, ``verify_run``, ``report``, ``view_run``;
- ``forge_gpu.curation``: ``convert_run``, ``select_run``, ``merge_runs``, ``split_run``, ``repair_run``, statistics;
- ``forge_gpu.export``: LeRobot and robomimic.

Each name is declared once, in its domain's table (tests/test_public.py checks that no name is in two). As a
shortcut, ``forge_gpu.NAME`` is the same object as ``forge_gpu.<domain>.NAME`` (``forge_gpu.make``,
``forge_gpu.collect``, ... as the README writes them); it is looked up in the domains, not listed again here.
The data side works with numpy alone; nothing here imports torch, and ``import forge_gpu`` imports no module of
``forge_gpu._src``.
"""

from importlib import import_module

DOMAINS = ("sim", "recording", "formats", "reading", "curation", "export", "testing")
"""The public modules, one per domain."""

__all__ = list(DOMAINS)


def _domain_of(name: str):
    """The public module whose table holds ``name``; None where none does."""
    for domain in DOMAINS:
        module = import_module(f"forge_gpu.{domain}")
        if name in module.NAMES:
            return module
    return None


def __getattr__(name: str):
    if name in DOMAINS:
        return import_module(f"forge_gpu.{name}")
    module = _domain_of(name)
    if module is None:
        raise AttributeError(f"module 'forge_gpu' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*DOMAINS, *(n for d in DOMAINS for n in import_module(f"forge_gpu.{d}").NAMES)})
