"""The layers of docs/ARCHITECTURE.md, read from the source: the library never imports the command line, and the
registry modules the command line reads to check its options load with the standard library alone."""

import ast
import subprocess
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


@pytest.mark.parametrize(
    "module", ["forge_gpu._src.formats.registry", "forge_gpu._src.formats.options", "forge_gpu._src.core.manifest"]
)
def test_the_registries_load_with_the_standard_library_alone(module):
    """The modules the command line reads for its choices import, with everything they import at load, nothing
    but the standard library and forge_gpu: loaded in a fresh interpreter that refuses every other package."""
    code = f"""
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.split('.')[0]
        if top not in sys.stdlib_module_names and top != 'forge_gpu':
            raise ImportError('refused: ' + name)
sys.meta_path.insert(0, Refuse())
import {module}
"""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
