"""A task file's ``[model]``: the robot of one world, from a model file (MJCF or URDF, a path or a Newton example
asset) or a model builder in code (``builder = "module:function"``, for a model made of parameters).

:func:`add_model` adds it to a builder as ``[model]`` says; :func:`probe` builds one world of it, once per process,
for ``plan.plan_task`` to bind the file's names to.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import sys
import zlib
from pathlib import Path
from typing import Any

from forge_gpu._src.sim.trust import check_import

MODEL_KEYS = (
    "asset", "file", "builder", "args", "position", "rotation", "floating", "ground", "contacts", "ignore_names",
    "pose", "randomizable",
)  # fmt: skip
FREE, BALL, FIXED = 4, 2, 3
"""Newton's joint types that ``plan_task`` treats apart (``newton.JointType``)."""


def model_file(model: dict, source: str) -> tuple[str, str]:
    """``(path, kind)`` of ``[model]``'s ``asset`` (a Newton example asset) or ``file`` (relative to the TOML),
    kind ``mjcf`` or ``urdf``; or ``(builder, "code")`` for a model ``builder``."""
    given = [k for k in ("asset", "file", "builder") if k in model]
    if len(given) != 1:
        raise ValueError(
            f"{source}: [model] needs exactly one of asset (a Newton example asset), file (a path) or builder"
        )
    if "builder" in model:
        _builder(model, source)
        return model["builder"], "code"
    if "args" in model:
        raise ValueError(f"{source}: model.args: only a model builder takes args")
    if "asset" in model:
        import newton.examples

        name = model["asset"]
        folder = Path(newton.examples.get_asset("nv_ant.xml")).parent
        if not isinstance(name, str) or not (folder / name).is_file():
            shipped = ", ".join(sorted(p.name for p in folder.iterdir() if p.suffix in (".xml", ".urdf")))
            raise ValueError(f"{source}: model.asset = {name!r}: not a Newton example asset; shipped: {shipped}")
        path = str(folder / name)
    else:
        path = str(Path(source.split(" (")[0]).parent / model["file"])
        if not Path(path).is_file():
            raise ValueError(f"{source}: model.file = {model['file']!r}: no such file ({path})")
    kinds = {".xml": "mjcf", ".mjcf": "mjcf", ".urdf": "urdf"}
    kind = kinds.get(Path(path).suffix.lower())
    if kind is None:
        raise ValueError(f"{source}: model: {Path(path).name}: expected an MJCF (.xml) or URDF (.urdf) file")
    return path, kind


def _builder(model: dict, source: str):
    given = model["builder"]
    module, _, name = str(given).partition(":")
    check_import(f"model.builder = {given!r}", str(given))
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ValueError(f"{source}: model.builder = {given!r}: cannot load it ({e}); expected module:function") from e
    args = model.get("args", {})
    if not isinstance(args, dict):
        raise ValueError(f"{source}: model.args = {args!r}: expected a table of the builder's arguments")
    return function, args


def add_model(builder, model: dict, source: str) -> None:
    """Add one world's robot (and ground) as ``[model]`` says; set the default pose ``[model.pose]``."""
    import warp as wp

    path, kind = model_file(model, source)
    xform = wp.transform(tuple(model.get("position", (0.0, 0.0, 0.0))), tuple(model.get("rotation", (0, 0, 0, 1))))
    if kind == "code":
        function, args = _builder(model, source)
        function(builder, source=source, **args)
    elif kind == "mjcf":
        ignore = list(model.get("ignore_names", ["floor", "ground"]))
        builder.add_mjcf(path, xform=xform, override_root_xform=True, ignore_names=ignore)
    else:
        builder.add_urdf(path, xform=xform, floating=bool(model.get("floating", True)))
    names = short_names(builder.joint_label)
    for pattern, value in model.get("pose", {}).items():
        hits = [j for j, name in enumerate(names) if fnmatch.fnmatchcase(name, pattern)]
        if not hits or not isinstance(value, int | float):
            what = "matches no joint" if not hits else "expected a number"
            raise ValueError(f"{source}: model.pose.{pattern} = {value!r}: {what}; the model has {', '.join(names)}")
        for j in hits:
            start, end = builder.joint_q_start[j], end_of(builder.joint_q_start, j, len(builder.joint_q))
            for c in range(start, end):
                builder.joint_q[c] = float(value)
    if model.get("ground", True):
        builder.add_ground_plane()


def end_of(starts, j: int, total: int) -> int:
    """Where joint ``j``'s run of ``starts`` (coordinates or dofs) ends."""
    return starts[j + 1] if j + 1 < len(starts) else total


def short_names(labels) -> list[str]:
    """A label's last path component (``ant/worldbody/torso/hip_1`` -> ``hip_1``)."""
    return [str(label).rsplit("/", 1)[-1] for label in labels]


_PROBES: dict[str, Any] = {}


def probe(model: dict, source: str):
    """One world's :class:`newton.ModelBuilder` of ``[model]`` (kept per process: a file is imported once)."""
    import json

    from forge_gpu._src.sim.output import init_warp

    init_warp()  # quietly, before Newton's import starts Warp
    import newton

    for key in model:
        if key not in MODEL_KEYS:
            raise ValueError(f"{source}: unknown key model.{key}; allowed keys are {', '.join(MODEL_KEYS)}")
    key = json.dumps(model, sort_keys=True) + source.split(" (")[0]
    if key not in _PROBES:
        builder = newton.ModelBuilder()
        add_model(builder, model, source)
        _PROBES[key] = builder
    return _PROBES[key]


def params_module_name(module) -> str:
    return getattr(module, "__forge_gpu_given__", module.__name__)


def user_module(given: str, source: str):
    """The user's module of terms: a ``.py`` path (relative to the task file) or an importable dotted name."""
    if given.endswith(".py"):
        path = (Path(source.split(" (")[0]).parent / given).resolve()
        if not path.is_file():
            raise ValueError(f"{source}: module = {given!r}: no such file ({path})")
        check_import(f"module = {given!r}", path)
        name = f"forge_gpu_terms_{zlib.crc32(str(path).encode()):08x}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as e:
                del sys.modules[name]
                raise ValueError(f"{source}: module = {given!r}: importing it failed ({type(e).__name__}: {e})") from e
        module = sys.modules[name]
    else:
        check_import(f"module = {given!r}", given)
        try:
            module = importlib.import_module(given)
        except ImportError as e:
            raise ValueError(f"{source}: module = {given!r}: cannot import it ({e})") from e
    module.__forge_gpu_given__ = given
    return module
