"""Label fields: observation fields that hold a label of their frame (the expert's action for the frame's state), made
by the step beside what the env observed. A label field is an ordinary observation field (``obs/<name>``, stored and
read like any); run.json's ``env_spec.labels`` marks it, mapping each label field to its source
(``{"expert_action": "expert"}``), so that readers and exports know it and can train on it (:func:`target_column`)
or keep it out of a policy's input. The standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The env_spec key that marks the label fields: field -> source.
LABELS_KEY = "labels"
#: Each label source and the observation field it fills.
LABEL_SOURCES = {"expert": "expert_action"}
#: The per-episode param of a run whose episodes executed either the expert's or the learner's actions: 1 where
#: the episode executed the expert's, 0 where the learner's (``collect --mix``).
EXPERT_EXECUTED = "expert_executed"
#: A training target that is the recorded (executed) action.
ACTION_TARGET = "action"


def label_fields(spec: Any) -> dict[str, str]:
    """The label fields an env_spec marks (field -> source); {} where it marks none."""
    labels = spec.get(LABELS_KEY) if isinstance(spec, Mapping) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def target_column(spec: Any, target: Any, *, name: str) -> str:
    """The frame-table column a training ``target`` reads: ``action`` for ``"action"``, ``obs/<F>`` for a label
    field ``F`` of the run. ValueError in one line naming ``name`` (the run), the target, its label fields and its
    observation fields."""
    if target == ACTION_TARGET:
        return ACTION_TARGET
    labels = label_fields(spec)
    if isinstance(target, str) and target in labels:
        return f"obs/{target}"
    described = spec.get("observation") if isinstance(spec, Mapping) else None
    fields = ", ".join(described) if isinstance(described, Mapping) else "none described"
    raise ValueError(
        f"{name}: target {target!r} is not a label field of the run (its labels: {', '.join(labels) or 'none'}; "
        f"its observation fields: {fields}); a target is 'action' or a label field"
    )
