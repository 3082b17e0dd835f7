"""The README's Python example runs as written."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_runs(tmp_path):
    """The first python block of the README runs to completion and writes the run it reads back."""
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    (tmp_path / "example.py").write_text(block)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs" / "demo" / "run.json").exists()
    assert len(done.stdout.splitlines()) >= 2048
