"""The LeRobot features a forge_gpu env's observation fields become: one rule, written by the LeRobot export
(``export/lerobot.py``) and read by the LeRobot policy adapter (``sim/lerobot_policy.py``).

- ``observation.state``: the ``proprio`` field.
- ``observation.environment_state``: the environment-state fields, flattened and concatenated in order. The task
  declares them (``env_spec["environment_state"]``: a list of field names, written into run.json); a spec without
  the key takes every vector or scalar observation field but ``proprio``, the bookkeeping fields and the cameras,
  in the spec's order. An empty list: no environment state.
- ``observation.images.<field>``: each camera's image field (``rgb``, a named camera's ``NAME_rgb``: the rule of
  ``core/cameras.py``), LeRobot's float CHW in [0, 1]. Depth fields are not features.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from forge_gpu._src.core.cameras import image_fields
from forge_gpu._src.core.fields import BOOKKEEPING_FIELDS

STATE_FIELD = "proprio"
"""The field written as ``observation.state``."""
STATE = "observation.state"
ENVIRONMENT_STATE = "observation.environment_state"
IMAGES = "observation.images."
"""The prefix of a camera's feature: ``observation.images.<its image field>``."""
SPEC_KEY = "environment_state"
"""The env spec's key (run.json's ``env_spec.environment_state``) through which a task declares its environment
state."""


def vector_fields(layout: Mapping, labels: Sequence[str] = ()) -> list[str]:
    """The observation fields that may go to ``observation.environment_state``: vector or scalar fields other than
    ``proprio``, the bookkeeping fields, the cameras and the fields of ``labels``, in the layout's order (``layout``:
    field -> (shape, dtype))."""
    cameras = image_fields(layout)
    return [
        f
        for f, (shape, _) in layout.items()
        if f not in BOOKKEEPING_FIELDS and f != STATE_FIELD and f not in cameras and f not in labels and len(shape) <= 1
    ]


def environment_fields(
    layout: Mapping, chosen: Sequence[str] | None, *, name: str, labels: Sequence[str] = ()
) -> list[str]:
    """The observation fields of ``observation.environment_state``, in order: ``chosen``, checked (fields of
    :func:`vector_fields`, each once), or by default all of :func:`vector_fields`. ValueError naming the field,
    ``name`` (where ``chosen`` came from) and the fields allowed."""
    allowed = vector_fields(layout, labels)
    if chosen is None:
        return allowed
    if isinstance(chosen, str) or not isinstance(chosen, Sequence):
        raise ValueError(f"environment_state={chosen!r} must be a list of observation fields, e.g. [{chosen!r}]")
    for field in chosen:
        if field not in allowed:
            raise ValueError(
                f"environment_state field {field!r} is not a vector observation field of {name} other than "
                f"{STATE_FIELD!r} and its labels; allowed: {', '.join(allowed) or 'none'}"
            )
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"environment_state={list(chosen)!r} names a field twice")
    return list(chosen)


def declared_environment_state(spec: Mapping) -> list[str] | None:
    """The environment-state fields the spec's task declares (``spec["environment_state"]``), or None."""
    declared = spec.get(SPEC_KEY)
    return None if declared is None else list(declared) if isinstance(declared, list | tuple) else declared
