"""The layers of docs/ARCHITECTURE.md, read from the source: the library never imports the command line, and the
registry modules the command line reads to check its options load with the standard library alone."""

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "forge_gpu" / "_src"


def imported(path: Path, *, top_level_only: bool = False) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved inside forge_gpu._src)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = ".".join(("forge_gpu", "_src", *path.relative_to(SRC).parent.parts))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            names.add(".".join([*base, node.module] if node.module else base))
    return names


LIBRARY = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(SRC)))
def test_the_library_never_imports_the_command_line(path):
    """No module of forge_gpu._src imports forge_gpu.cli, anywhere in it (no import circle)."""
    cli = [name for name in imported(path) if name == "forge_gpu.cli" or name.startswith("forge_gpu.cli.")]
    assert not cli, f"{path.name} imports {cli}"


@pytest.mark.parametrize("module", ["formats/registry.py", "core/manifest.py", "formats/options.py"])
def test_the_registries_load_with_the_standard_library_alone(module):
    """formats, manifest and options import, at module level, only the standard library and each other."""
    allowed = {"forge_gpu._src.formats.registry", "forge_gpu._src.core.manifest", "forge_gpu._src.formats.options"}
    names = imported(SRC / module, top_level_only=True)
    foreign = sorted(n for n in names if n.split(".")[0] not in sys.stdlib_module_names and n not in allowed)
    assert not foreign, f"{module} imports {foreign} at load"
