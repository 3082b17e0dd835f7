"""Per-episode instructions: a task's instruction template (run.json's ``env_spec.instruction_template``), its
checks, and the instructions it makes from the episodes' params, whole-array.

A template is ``{"text": "push the {cube} cube to the {side}", "slots": {...}}``: each ``{slot}`` of the text is
filled from one per-episode param (``params[slot.param]``, flattened, its ``component``, 0 by default): with
``names`` alone, ``names[round(value)]`` (an index drawn as a number); with ``edges`` (ascending; one name more
than edges), ``names[numpy.digitize(value, edges)]`` (the bin the value falls in). docs/FORMAT.md "Instructions"
says how runs store what it makes. numpy and the standard library.
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from forge_gpu._src.core.checks import is_int

#: The env_spec key that holds a task's template (absent: every episode has the run's ``instruction``).
TEMPLATE_KEY = "instruction_template"
#: The key of an episode's instruction in an episode table (``core.frames``: an object array of strings, one per
#: episode) and in a packed commit line's ``episodes`` (its distinct texts and each episode's index into them).
INSTRUCTION = "instruction"
_TEMPLATE_KEYS = ("text", "slots")
_SLOT_KEYS = ("param", "names", "component", "edges")


def text_slots(text: str, *, name: str = TEMPLATE_KEY) -> list[str]:
    """The slot names of a template's ``text``, in order of first use; ValueError naming ``name`` for a text that
    does not parse, or a field that is not a plain ``{name}`` (no index, attribute, conversion or format spec)."""
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"{name}.text {text!r} does not parse: {exc} (write a literal brace as {{{{ or }}}})") from exc
    slots = []
    for _, field, spec, conversion in fields:
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            raise ValueError(f"{name}.text {text!r}: {{{field}}} is not a slot; allowed: {{name}} with a slot's name")
        if field not in slots:
            slots.append(field)
    return slots


def check_template(template: Any, params: Mapping[str, tuple] | None = None, *, name: str = TEMPLATE_KEY) -> None:
    """Check an instruction template; ValueError naming ``name``, the bad key or value and what is allowed.

    ``params``: the run's per-episode params (name -> (per-episode shape, dtype), as ``core.fields.group_layout``
    gives them) that the slots may read; None where the run stores none (schema 1), and only the template's own
    form is checked."""
    if not isinstance(template, Mapping):
        raise ValueError(f"{name} must be an object with keys {list(_TEMPLATE_KEYS)}, got {template!r}")
    if set(template) != set(_TEMPLATE_KEYS):
        raise ValueError(f"{name} has keys {sorted(map(str, template))}; allowed and required: {list(_TEMPLATE_KEYS)}")
    text, slots = template["text"], template["slots"]
    if not isinstance(text, str) or not text:
        raise ValueError(f"{name}.text must be a non-empty string, got {text!r}")
    if not isinstance(slots, Mapping):
        raise ValueError(f"{name}.slots must be an object (slot name -> slot), got {slots!r}")
    used = text_slots(text, name=name)
    unknown = [s for s in used if s not in slots]
    if unknown:
        raise ValueError(f"{name}.text uses {unknown}, which are not slots; the slots are {sorted(map(str, slots))}")
    unused = [s for s in slots if s not in used]
    if unused:
        raise ValueError(f"{name}.slots {unused} are not used in the text {text!r}; every slot must be")
    for slot, entry in slots.items():
        _check_slot(f"{name}.slots[{slot!r}]", entry, params)


def _check_slot(where: str, slot: Any, params: Mapping[str, tuple] | None) -> None:
    if not isinstance(slot, Mapping) or not {"param", "names"} <= set(slot) or set(slot) - set(_SLOT_KEYS):
        got = sorted(map(str, slot)) if isinstance(slot, Mapping) else repr(slot)
        raise ValueError(f"{where} has keys {got}; required: param, names; optional: component, edges")
    param, names = slot["param"], slot["names"]
    if not isinstance(param, str):
        raise ValueError(f"{where}.param must be a param's name, got {param!r}")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{where}.names must be a non-empty list of strings, got {names!r}")
    component = slot.get("component", 0)
    if not is_int(component) or component < 0:
        raise ValueError(f"{where}.component must be an integer >= 0, got {component!r}")
    if "edges" in slot:
        edges = slot["edges"]
        numbers = isinstance(edges, list) and all(isinstance(e, int | float) and not isinstance(e, bool) for e in edges)
        if not numbers or not edges or not all(math.isfinite(e) for e in edges):
            raise ValueError(f"{where}.edges must be a non-empty list of finite numbers, got {edges!r}")
        if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise ValueError(f"{where}.edges must be strictly ascending, got {edges}")
        if len(names) != len(edges) + 1:
            raise ValueError(
                f"{where}: {len(edges)} edges make {len(edges) + 1} bins, so names must hold {len(edges) + 1} "
                f"names, got {len(names)}"
            )
    if params is None:
        return
    if param not in params:
        raise ValueError(f"{where}.param {param!r} is not a param of the run; allowed: {sorted(params)}")
    size = math.prod(params[param][0])
    if component >= size:
        raise ValueError(
            f"{where}.component {component} is out of range: param {param!r} has {size} value(s) per episode "
            f"(shape {list(params[param][0])}); allowed: 0..{size - 1}"
        )


def slot_indices(
    template: Mapping, params: Mapping[str, np.ndarray], *, count: int | None = None, name: str = "params"
) -> np.ndarray:
    """``[n, slots]`` int64: the name each slot takes for each of ``n`` episodes (``params``: name -> [n, ...], the
    episodes' params; ``count``: n, where no slot's param says it; the template checked). ValueError naming the
    slot, the param and the value where a value without edges does not round to one of the slot's names."""
    slots = template["slots"]
    if count is None:
        count = len(params[next(iter(slots.values()))["param"]]) if slots else len(next(iter(params.values()), ()))
    out = np.zeros((count, len(slots)), np.int64)
    for column, (slot, entry) in enumerate(slots.items()):
        values = np.asarray(params[entry["param"]])
        if values.dtype.kind != "f":
            values = values.astype(np.float64)
        values = values.reshape(count, math.prod(values.shape[1:]))[:, entry.get("component", 0)]
        if "edges" in entry:  # compared in the param's dtype: a float32 value equal to an edge is in the upper bin
            out[:, column] = np.digitize(values, np.asarray(entry["edges"], values.dtype))
            continue
        index = np.rint(values)
        bad = ~((index >= 0) & (index < len(entry["names"])))
        if bad.any():
            value = float(values[np.flatnonzero(bad)[0]])
            raise ValueError(
                f"{name}[{entry['param']!r}] holds {value!r}, which names no {slot!r} of the instruction template: "
                f"allowed: a value that rounds to 0..{len(entry['names']) - 1} ({', '.join(entry['names'])})"
            )
        out[:, column] = index
    return out


def episode_instructions(template: Mapping, params: Mapping[str, np.ndarray], *, count: int | None = None) -> list[str]:
    """The instruction of each of ``n`` episodes (``params``: name -> [n, ...], their params; ``count``: n, needed
    only for a template without slots and no params) that the checked ``template`` makes: one text per distinct
    combination of slot values, formatted once each."""
    indices = slot_indices(template, params, count=count)
    if not len(indices):
        return []
    if not indices.shape[1]:  # a text without slots (its doubled braces still become single ones)
        return [template["text"].format()] * len(indices)
    slots = template["slots"]
    radices = [len(entry["names"]) for entry in slots.values()]
    if math.prod(radices) < 1 << 62:  # each combination as one integer: a 1-d unique, much faster than rows'
        code = np.zeros(len(indices), np.int64)
        for column, radix in enumerate(radices):
            code = code * radix + indices[:, column]
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        combinations = indices[first]
    else:
        combinations, inverse = np.unique(indices, axis=0, return_inverse=True)
    texts = [
        template["text"].format(**{slot: slots[slot]["names"][i] for slot, i in zip(slots, row, strict=True)})
        for row in combinations.tolist()
    ]
    return np.array(texts, dtype=object)[inverse.reshape(-1)].tolist()


def factorize(instructions: Iterable[str]) -> tuple[list[str], np.ndarray]:
    """The distinct instructions, in order of first appearance, and each one's position among them (int64): one
    hash lookup per instruction, no sort (the texts of a run repeat a few objects, whose hashes are cached)."""
    table: dict[str, int] = {}
    codes = [table.setdefault(text, len(table)) for text in instructions]
    return list(table), np.array(codes, dtype=np.int64)
