"""forge_gpu's public surface (forge_gpu/__init__.py): every name of ``__all__`` resolves, from the module
``_EXPORTS`` names for it, which defines it or re-exports it; so a wrong path there fails here, not in a
user's first call."""

import ast
import importlib
import importlib.util
import subprocess
import sys

import pytest

import forge_gpu

EXPORTS = sorted(forge_gpu._EXPORTS.items())


def bound_at_top_level(tree: ast.Module) -> set[str]:
    """Names a module binds in its body: def, class, assignment, import (a re-export), under if/try too."""
    names = set()
    for node in tree.body:
        for inner in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(inner.name)
            elif isinstance(inner, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(inner, ast.Import | ast.ImportFrom):
                names |= {(a.asname or a.name).split(".")[0] for a in inner.names}
    return names


def test_all_is_the_exports():
    assert forge_gpu.__all__ == sorted(forge_gpu._EXPORTS)
    assert dir(forge_gpu) == forge_gpu.__all__


def export_problem(name: str, module: str) -> str | None:
    """What is wrong with ``_EXPORTS[name] = module``: no such module, or one that neither defines nor imports
    the name in its own source, or one whose object is not forge_gpu's; None where nothing is."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.origin:
        return f"_EXPORTS[{name!r}]: no module {module}"
    with open(spec.origin) as f:
        tree = ast.parse(f.read(), filename=spec.origin)
    if name not in bound_at_top_level(tree):
        return f"_EXPORTS[{name!r}]: {module} neither defines nor imports {name}"
    if getattr(importlib.import_module(module), name) is not getattr(forge_gpu, name):
        return f"forge_gpu.{name} is not {module}.{name}"
    return None


@pytest.mark.parametrize("name, module", EXPORTS, ids=[name for name, _ in EXPORTS])
def test_each_public_name_is_in_the_module_named_for_it(name, module):
    """The module exists, binds the name in its own source (a definition or an import that re-exports it),
    and forge_gpu.<name> is that module's object, kept as an attribute once loaded."""
    assert export_problem(name, module) is None  # which loaded it through forge_gpu's __getattr__
    assert vars(forge_gpu).get(name) is getattr(importlib.import_module(module), name)  # and kept it


def test_every_name_of_all_resolves():
    missing = [name for name in forge_gpu.__all__ if getattr(forge_gpu, name, None) is None]
    assert not missing


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        forge_gpu.not_a_name  # noqa: B018


@pytest.mark.parametrize(
    "name, module, expected",
    [
        ("read_episodes", "forge_gpu._src.core.episode", "neither defines nor imports"),  # moved, path stale
        ("read_episodes", "forge_gpu._src.data.gone", "no module"),
        ("read_episodes", "forge_gpu._src.gone.runs", "no module"),
    ],
)
def test_the_check_reports_a_wrong_path(name, module, expected):
    assert expected in export_problem(name, module)


def test_bound_at_top_level_sees_definitions_and_re_exports():
    tree = ast.parse("from a import b as c\nimport d.e\nx: int = 1\nif True:\n    def f(): pass\nclass K: pass\n")
    assert bound_at_top_level(tree) == {"c", "d", "x", "f", "K"}


def test_importing_forge_gpu_loads_none_of_its_modules():
    """Names load on first use: ``import forge_gpu`` imports no module of forge_gpu._src, Warp or torch."""
    code = (
        "import sys, forge_gpu; "
        "print(sorted(m for m in sys.modules if m.startswith('forge_gpu._src') or m in ('warp', 'newton', 'torch')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
