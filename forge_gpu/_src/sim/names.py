"""The names ``collect`` checks before Warp and Newton load (which takes seconds): the built-in policies, the
``MODULE:FACTORY`` form of a torch policy, the ``lerobot:PATH`` form of a LeRobot checkpoint, the ``pt2:PATH`` form
of a ``torch.export`` program and the ``torchscript:PATH`` form of a TorchScript file, the executions of
action chunks, and the tasks whose configs ship with forge_gpu. The standard library only, so that a typo is refused
at once (and the command line's choices are known without them)."""

from __future__ import annotations

from forge_gpu._src.sim.config import config_dir

BUILTIN_POLICIES = ("random", "expert")
EXECUTIONS = ("open_loop", "ensemble")
"""How a policy's action chunks are executed (``load_policy``'s ``execution``; the command line's ``--chunk-exec``)."""
LEROBOT_PREFIX = "lerobot:"
"""``lerobot:PATH``: a LeRobot checkpoint (a directory or a hub id), not a module named ``lerobot``."""
TORCHSCRIPT_PREFIX = "torchscript:"
"""``torchscript:PATH``: a TorchScript file, ``forward(observation: Dict[str, Tensor]) -> Tensor [N, A]`` (what
``bench/ppo.py`` saved of an rsl_rl policy before ``pt2``), not a module named ``torchscript``."""
PT2_PREFIX = "pt2:"
"""``pt2:PATH``: a ``torch.export`` program (``.pt2``, an ``ExportedProgram``) whose forward takes a dict of the env's
observation fields and returns ``[N, A]`` (what ``export_policy`` and ``bench/ppo.py`` save), not a module named
``pt2``."""
PATH_PREFIXES = (LEROBOT_PREFIX, PT2_PREFIX, TORCHSCRIPT_PREFIX)
"""The forms ``PREFIX:PATH`` that name a file or checkpoint, not ``MODULE:FACTORY``."""


def check_policy_name(name: str) -> None:
    """Refuse a policy name that is neither built in, nor ``MODULE:FACTORY``, nor one of :data:`PATH_PREFIXES`
    with a path."""
    if name in BUILTIN_POLICIES:
        return
    if any(name.startswith(prefix) and name[len(prefix) :].strip() for prefix in PATH_PREFIXES):
        return
    module, sep, factory = name.partition(":")
    if not sep or not module or not factory.isidentifier():
        raise ValueError(
            f"unknown policy {name!r}; use {', '.join(BUILTIN_POLICIES)}, MODULE:FACTORY (a torch policy), "
            "lerobot:PATH (a LeRobot checkpoint), pt2:PATH (a torch.export policy file) or torchscript:PATH "
            "(a TorchScript policy file)"
        )


def shipped_tasks() -> list[str]:
    """The ids of the tasks whose config ships with forge_gpu (``configs/<id>.toml``), sorted: what the command line
    can collect without loading the task catalog (a task registered from Python comes with its own config)."""
    return sorted(path.stem for path in config_dir().glob("*.toml"))
