"""The scripts of bench/ and tools/ loaded as ``python DIR/NAME.py`` runs them: their folder first on sys.path (where
they find their neighbours, e.g. bench/common.py), each module under a name of its own."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
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
