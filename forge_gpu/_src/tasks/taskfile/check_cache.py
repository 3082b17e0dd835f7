"""What ``forge-gpu collect`` and ``forge-gpu tasks`` say of a task's model against MuJoCo's own load of it: the
differences ``forge-gpu check-model`` lists (``mujoco_check.py``: the static ones and the zero-control rollout's),
computed once per model and kept.

The check loads the model with MuJoCo, builds it a second time as forge_gpu does and steps both, which costs a
command seconds; :func:`kept_check` keeps its result in ``$XDG_CACHE_HOME/forge_gpu/model_check`` (default
``~/.cache``), one JSON file per model, named by the hash of what the result depends on: the ``[model]`` table
(without its ``scene``), the model file's name and bytes, the versions of forge_gpu, MuJoCo, MuJoCo Warp and Newton,
and the sources of the check and of the model's build. The file lists every file MuJoCo's compile of the model
reads (includes, meshes, textures, with the model file itself) and its sha256; a result whose files changed since
is computed again. A model builder or a USD stage has no MuJoCo reference: nothing is checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from forge_gpu._src.core.files import cache_folder, load_json, write_json_atomic

FOLDER = "model_check"
"""The cache folder's name under forge_gpu's cache."""
_VERSIONS = ("forge-gpu", "mujoco", "mujoco-warp", "newton")
_CODE = ("mujoco_check.py", "model.py", "modelfile.py", "scene.py")
"""The modules of this folder whose code shapes the result (the check, and how forge_gpu builds the model)."""


@dataclass(frozen=True)
class KeptCheck:
    """The check of one task's model, as kept."""

    model: str
    """The model file's name."""
    differences: tuple[str, ...]
    """Each difference from MuJoCo's load of the file, one line each (``ModelCheck.differences``)."""
    notes: tuple[str, ...]
    """What the task chose that the file does not say (``ModelCheck.notes``)."""
    rollout: str
    """The rollout's summary line."""
    refused: str = ""
    """Why the two could not be compared (MuJoCo refuses the file, Newton cannot convert it), or empty."""
    computed: bool = False
    """Whether this command computed it (False: read from the cache)."""

    def lines(self) -> list[str]:
        """What a command says, one line each: every difference, or why the model could not be compared."""
        if self.refused:
            return [f"{self.model}: not compared with MuJoCo's load of it: {self.refused}"]
        return [f"{self.model} differs from MuJoCo's load of it: {line}" for line in self.differences]


def kept_check(model: dict, source: str) -> KeptCheck | None:
    """The check of ``[model]`` (a task's table, its references replaced; ``source``: the file it was read from),
    from the cache where its files are unchanged, else computed (``check_table``) and kept. None for a model with no
    MuJoCo reference (a model builder, a USD stage). A cache that cannot be read is computed again; one that
    cannot be written is not kept (the result is said all the same)."""
    from forge_gpu._src.tasks.taskfile.model import model_file

    path, kind = model_file(model, source)
    if kind not in ("mjcf", "urdf"):
        return None
    entry = os.path.join(cache_folder(FOLDER), f"{_key(model, Path(path))}.json")
    found = _read(entry, Path(path).parent)
    if found is not None:
        return found
    from forge_gpu._src.tasks.taskfile.mujoco_check import check_table
    from forge_gpu._src.tasks.taskfile.stored import model_files

    name = Path(path).name
    try:
        with warnings.catch_warnings():  # the second build's notes: the task's own build said them
            warnings.simplefilter("ignore")
            result = check_table(model, source)
        found = KeptCheck(name, tuple(result.differences), tuple(result.notes), result.rollout, computed=True)
    except ValueError as e:
        reason = str(e).removeprefix(f"{path}: ").removeprefix(f"{source}: ")
        found = KeptCheck(name, (), (), "", refused=reason, computed=True)
    except Exception as e:  # the check only informs: a failure of its own does not stop the command
        found = KeptCheck(name, (), (), "", refused=f"the check failed ({type(e).__name__}: {e})", computed=True)
    folder = Path(path).parent
    files = {os.path.relpath(p, folder): _digest(p) for p in model_files(Path(path).resolve(), kind)}
    kept = {"model": name, "differences": list(found.differences), "notes": list(found.notes),
            "rollout": found.rollout, "refused": found.refused, "files": files}  # fmt: skip
    try:
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        write_json_atomic(entry, kept)
    except OSError:
        pass
    return found


def _read(entry: str, folder: Path) -> KeptCheck | None:
    """The kept check in ``entry`` where every file it lists (relative to the model file's ``folder``) still has
    its sha256; else None."""
    if not os.path.isfile(entry):
        return None
    try:
        kept = load_json(entry)
        files = kept["files"]
        if not all(_digest(folder / name) == digest for name, digest in files.items()):
            return None
        return KeptCheck(str(kept["model"]), tuple(kept["differences"]), tuple(kept["notes"]), str(kept["rollout"]),
                         str(kept["refused"]))  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return None


def _digest(path: Path | str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def _key(model: dict, path: Path) -> str:
    """The hash of what a check's result depends on, but the files the model file references (its entry lists
    those)."""
    import importlib.metadata

    versions = {}
    for name in _VERSIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = ""
    here = Path(__file__).parent
    code = [_digest(here / name) for name in _CODE]
    table = {k: v for k, v in model.items() if k != "scene"}
    given = json.dumps([table, path.name, _digest(path), versions, code], sort_keys=True, default=str)
    return hashlib.sha256(given.encode()).hexdigest()[:32]
