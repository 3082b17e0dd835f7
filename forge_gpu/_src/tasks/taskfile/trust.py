"""The one rule of trust: code a run names is imported only when its user says so.

A task file names code: its term ``module`` (a ``.py`` path or a dotted name), ``[model] builder`` and ``[expert]
factory`` (``module:function``). A task file the user gives to ``make`` or ``collect`` is the user's own choice, so
its code runs. A recorded run is data that anyone may have written: replaying it builds its task again, and that
imports what it names. Code inside the installed forge_gpu package is trusted; any other is imported only under
``trust_code=True`` (``forge-gpu replay --trust-code``), as Hugging Face's ``trust_remote_code``. Without it the
refusal is one line naming every module or file that would be imported, and the flag.

Two places apply the rule: :func:`check_run_code` before a run's task is built (every name at once), and
:func:`check_import`, called by each importer of a task's code (``taskfile/model.py``'s model builder and term
module, ``taskfile/task.py``'s expert), which refuses inside :func:`run_code` unless the run is trusted. Reading,
inspecting, reporting and exporting never reach either: the data side imports no task.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from pathlib import Path

TRUST_FLAG = "--trust-code"
"""The command line's flag (``trust_code=True`` in Python)."""

_PACKAGE = Path(__file__).resolve().parents[3]
"""The installed forge_gpu package's directory (this file is ``forge_gpu/_src/tasks/taskfile/trust.py``)."""
#: The run whose code is being built without trust (its directory), or None: everything may be imported.
_UNTRUSTED_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("forge_gpu_untrusted_run", default=None)


class UntrustedCode(ValueError):
    """A run names code outside forge_gpu and its user did not trust it (one line: what, and the flag)."""


def inside_forge_gpu(target: str | os.PathLike) -> bool:
    """Whether ``target`` is code of the installed forge_gpu package: a dotted module name (``module`` or
    ``module:function``) under ``forge_gpu``, or a file inside its directory."""
    text = os.fspath(target)
    if text.endswith(".py") or os.sep in text:
        return Path(text).resolve().is_relative_to(_PACKAGE)
    return text.partition(":")[0].split(".")[0] == "forge_gpu"


def named_code(sections: dict, task_file: str | os.PathLike) -> list[str]:
    """What a task's sections (a task file's tables, or run.json's ``config.params``) would import that is not
    forge_gpu's: ``module = 'terms.py' (/abs/terms.py)``, ``model.builder = 'pkg.mod:build'``, ``expert.factory =
    ...``, in that order. ``task_file``: where a ``.py`` module's path is relative to."""
    found = []
    module = sections.get("module")
    if isinstance(module, str) and module:
        target = str((Path(task_file).parent / module).resolve()) if module.endswith(".py") else module
        if not inside_forge_gpu(target):
            found.append(f"module = {module!r}" + (f" ({target})" if target != module else ""))
    for section, key in (("model", "builder"), ("expert", "factory")):
        value = sections.get(section, {}).get(key) if isinstance(sections.get(section), dict) else None
        if isinstance(value, str) and not inside_forge_gpu(value):
            found.append(f"{section}.{key} = {value!r}")
    return found


def refusal(run_dir: str, names: list[str]) -> str:
    """The one line that refuses a run's code: the run, what would be imported, and the flag."""
    return (
        f"{run_dir}: the run's task imports code from outside forge_gpu: {'; '.join(dict.fromkeys(names))}; "
        f"replay it only if you trust that code, with {TRUST_FLAG} (trust_code=True)"
    )


def check_run_code(run_dir: str, names: list[str], *, trusted: bool) -> None:
    """UntrustedCode (:func:`refusal`) where ``names`` (:func:`named_code`) is not empty and the run is not trusted."""
    if names and not trusted:
        raise UntrustedCode(refusal(run_dir, names))


@contextlib.contextmanager
def run_code(run_dir: str, *, trusted: bool) -> Iterator[None]:
    """While a run's task is built in this thread (and its context): :func:`check_import` refuses code outside
    forge_gpu unless ``trusted``."""
    token = _UNTRUSTED_RUN.set(None if trusted else os.fspath(run_dir))
    try:
        yield
    finally:
        _UNTRUSTED_RUN.reset(token)


def check_import(what: str, target: str | os.PathLike) -> None:
    """Called right before a task's code is imported: ``what`` the key as the task names it (``module =
    'terms.py'``), ``target`` the dotted name or file. UntrustedCode inside an untrusted :func:`run_code` for
    code outside forge_gpu; nothing otherwise."""
    run = _UNTRUSTED_RUN.get()
    if run is not None and not inside_forge_gpu(target):
        shown = what if os.fspath(target) in what else f"{what} ({os.fspath(target)})"
        raise UntrustedCode(refusal(run, [shown]))
