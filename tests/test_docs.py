"""No page tells users to import ``forge_gpu._src``: the pages of docs/, README.md and bench/README.md reach every
feature through the public module of its domain (``forge_gpu.sim``, ``forge_gpu.reading``, ...), whose names stay
where they are when the private modules behind them move."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", ROOT / "bench" / "README.md"]
PRIVATE_IMPORT = re.compile(r"\bforge_gpu\._src\b")
"""A private module named as Python names it (``from``/``import`` statements, ``python -m``, ``import_module``, or a
dotted name in prose, which reads as one to import): a page names a file of the package as a path,
``forge_gpu/_src/...``, where it says where something is done."""


def private_imports(text: str) -> list[int]:
    """The numbers (from 1) of the lines of ``text`` that import a module of ``forge_gpu._src``."""
    return [n for n, line in enumerate(text.splitlines(), 1) if PRIVATE_IMPORT.search(line)]


def test_no_page_imports_forge_gpu_private_modules():
    found = [
        f"{page.relative_to(ROOT)}:{n}: {page.read_text().splitlines()[n - 1].strip()}"
        for page in PAGES
        for n in private_imports(page.read_text())
    ]
    assert not found, "pages that import forge_gpu._src (use the public name of its domain):\n" + "\n".join(found)


def test_the_check_sees_each_way_of_importing_and_not_a_file_path():
    text = "\n".join(
        [
            "from forge_gpu._src.sim.rl.rsl import export_policy",  # 1
            "import forge_gpu._src.sim.env as env",  # 2
            "python -m forge_gpu._src.sim.doctor",  # 3
            'importlib.import_module("forge_gpu._src.sim")',  # 4
            "from forge_gpu.sim import make",
            "`forge_gpu/_src/sim/overflow.py` counts it",
            "import forge_gpu._srcs",
            "`forge_gpu._src.core.cameras.mounted_camera_to_world` computes it",  # 8
        ]
    )
    assert private_imports(text) == [1, 2, 3, 4, 8]
