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


def test_readme_replay_example_runs(tmp_path):
    """The README's python block of state, randomization and replay runs to completion."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (block,) = [b for b in blocks if "forge_gpu.replay(" in b]
    (tmp_path / "example.py").write_text(block)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert forge_gpu_manifest(tmp_path / "runs" / "randomized-check")["replayed_from"]["from"] == "actions"


def forge_gpu_manifest(path):
    import forge_gpu

    return forge_gpu.read_manifest(path)
