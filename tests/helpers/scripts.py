"""The scripts of bench/ and tools/ loaded as ``python DIR/NAME.py`` runs them: their folder first on sys.path (where
they find their neighbours, e.g. bench/common.py), each module under a name of its own."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
TOOLS = REPO / "tools"


def load_script(path: Path, name: str | None = None):
    """The module of the script ``path``, executed (its ``main`` not called), as ``sys.modules[name]``."""
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name or f"{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


#: ``python -c BLOCKED_CLI ARGS...`` runs ``forge-gpu ARGS...`` in a process where Warp, Newton and torch cannot be
#: imported: the data commands work without them.
BLOCKED_CLI = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('warp', 'newton', 'torch'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
from forge_gpu.cli import main
status = main(sys.argv[1:])
assert not any(m.split('.')[0] in ('warp', 'newton', 'torch') for m in sys.modules), 'a simulator module loaded'
sys.exit(status)
"""
