"""What a recorder is told of the run it records: :func:`describe_run` reads a :class:`VectorEnv` into a
:class:`RunDescription` (plain data, core/manifest.py), so that the recorders never see an env. Loads no Warp."""

from __future__ import annotations

from typing import Any

from forge_gpu._src.core.manifest import RunDescription


def describe_run(env: Any, *, transport: str | None = None) -> RunDescription:
    """The :class:`RunDescription` of ``env`` (a :class:`VectorEnv`, or anything with its ``config``, ``spec``,
    ``calibration``, ``task.spec.id``, ``task.scene``, ``seed`` and ``step_mode``); ``transport``: how its batches
    reach the recorder (run.json's ``transport``, default ``host_snapshot``)."""
    return RunDescription(
        spec=env.spec,
        config=env.config.to_dict(),
        task=env.task.spec.id,
        scene=env.task.scene,
        seed=int(env.seed),
        calibration=env.calibration,
        transport=transport or "host_snapshot",
        step_mode=getattr(env, "step_mode", None),
    )
