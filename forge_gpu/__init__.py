"""forge_gpu: collect robot-learning data at scale on batched Newton worlds.

The public names live in one module per domain, each with its ``__all__``, and nowhere else:

- ``forge_gpu.sim``: tasks, configs, the env, the device, policies (Warp and Newton load on first use);
- ``forge_gpu.recording``: ``collect``, the recorders and ``RecordingOptions``, the transport, ``replay``;
- ``forge_gpu.formats``: the run formats, ``read_manifest``, and how a new format is added;
- ``forge_gpu.reading``: episodes, training windows, ``inspect_run``, ``verify_run``, ``report``, ``view_run``;
- ``forge_gpu.curation``: ``convert_run``, ``select_run``, ``merge_runs``, ``split_run``, ``repair_run``, statistics;
- ``forge_gpu.export``: LeRobot and robomimic;
- ``forge_gpu.testing``: synthetic runs without a simulator.

Each name is declared once, in its domain's table (tests/test_public.py checks that no name is in two), and is
reached one way: ``forge_gpu.sim.make``, ``from forge_gpu.reading import read_episodes``. ``forge_gpu.make`` is an
AttributeError that names the domain to use. The data side works with numpy alone; nothing here imports torch, and
``import forge_gpu`` imports no module of ``forge_gpu._src``.
"""

from importlib import import_module

DOMAINS = ("sim", "recording", "formats", "reading", "curation", "export", "testing")
"""The public modules, one per domain."""

__all__ = list(DOMAINS)


def __getattr__(name: str):
    if name in DOMAINS:
        return import_module(f"forge_gpu.{name}")
    homes = [d for d in DOMAINS if name in import_module(f"forge_gpu.{d}").NAMES]
    hint = f"; it is forge_gpu.{homes[0]}.{name}" if homes else ""
    raise AttributeError(f"module 'forge_gpu' has no attribute {name!r}{hint}")


def __dir__():
    return sorted(DOMAINS)
