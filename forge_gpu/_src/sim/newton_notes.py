"""Newton's and MuJoCo Warp's own warnings at a build, in forge_gpu's words.

Building a model warns in the importer's and the solver's terms (a site-packages path, an issue number, advice to
construct the solver another way), once per geom or tendon entry: dozens of lines a task-file author cannot act
on. :func:`said_once` gathers them over one build and says each kind once, as one :class:`BuildWarning` line that
says what it means for the task file; with verbose output (``--verbose``, ``FORGE_GPU_VERBOSE=1``) the raw
warnings pass through as they are.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator

from forge_gpu._src.sim.output import is_verbose


class BuildWarning(UserWarning):
    """What Newton or MuJoCo Warp said while a model was built, as one line of forge_gpu's."""


_KINDS = (
    (
        re.compile(r"authored margin=\S+ zeroed"),
        "the contact margin of {n} geom(s) or pair(s) set to 0: MuJoCo Warp's convex collision takes none, so their "
        "contacts start at touch (a model's margin has no effect here)",
    ),
    (
        re.compile(r"Skipping joint entry \d+ for tendon"),
        None,  # the model's build names the tendon and its merged joints (tasks/taskfile/model.py)
    ),
    (
        re.compile(r"friction\[0\] \(\S+\) < MJ_MINMU"),
        "the sliding friction of {n} geom(s) is below MuJoCo's minimum (1e-5) with condim 3, which can make a step "
        "NaN: give them a friction, or condim 1 if they slide freely",
    ),
    (
        re.compile(r"Inertia validation corrected (\d+) bodies"),
        "the inertia of {count} body(ies) corrected to a physical one (a principal moment below the minimum or "
        "above the sum of the other two): check their mass and <inertial> in the model file",
    ),
)


_ENGINES = ("newton", "mujoco_warp")
_REGISTRY: dict = {}
"""The warnings registry of what :func:`said_once` passes on: Python's filters see each once per place, as they
would have seen it raised there."""


def _is_engine(caught: warnings.WarningMessage) -> bool:
    """A warning of Newton's or MuJoCo Warp's: its category is theirs, or their code raised it (a plain
    ``UserWarning`` of MuJoCo Warp's)."""
    parts = set(re.split(r"[\\/]", str(caught.filename)))
    return caught.category.__module__.split(".")[0] in _ENGINES or bool(parts & set(_ENGINES))


def lines(messages: list[str]) -> list[str]:
    """One line per kind of engine warning among ``messages`` (each kind counted once), in forge_gpu's words;
    a kind it does not know is its first line, without a path."""
    counts: dict[int, list[str]] = {}
    other: dict[str, list[str]] = {}  # one kind (its text with the numbers taken out) -> its messages
    for message in messages:
        for k, (pattern, _) in enumerate(_KINDS):
            match = pattern.search(message)
            if match:
                counts.setdefault(k, []).append(match.group(1) if match.groups() else "")
                break
        else:
            first = message.strip().splitlines()[0] if message.strip() else ""
            if first:
                other.setdefault(re.sub(r"\d+(\.\d+)?", "#", first), []).append(first)
    said = []
    for k, found in sorted(counts.items()):
        text = _KINDS[k][1]
        if text is not None:
            said.append(text.format(n=len(found), count=max(int(v) for v in found) if found[0] else len(found)))
    for found in other.values():
        said.append(f"Newton: {found[0]}" + (f" (and {len(found) - 1} more like it)" if len(found) > 1 else ""))
    return said


@contextlib.contextmanager
def said_once() -> Iterator[None]:
    """Gather the engine's warnings raised in the block and say each kind once (:func:`lines`) after it; every
    other warning is passed on as it was raised. With verbose output, nothing is gathered."""
    if is_verbose():
        yield
        return
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:  # also when the build fails: what was said before the failure is said
        _say(caught)


def _say(caught: list[warnings.WarningMessage]) -> None:
    engine = [str(w.message) for w in caught if _is_engine(w)]
    for w in caught:
        if not _is_engine(w):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, registry=_REGISTRY, source=w.source)
    for line in lines(engine):
        warnings.warn(f"forge_gpu: {line}", BuildWarning, stacklevel=4)
