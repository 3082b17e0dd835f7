"""The README's code blocks run as written (the quick start, the Python example) and print what it shows, in
structure: the same keys and lines, whatever the figures; the docs' Python examples run; every file the README and
docs/ cite is in the repository."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
DOCS = README.parent / "docs"


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def _run_python(block: str, cwd: Path) -> subprocess.CompletedProcess:
    (cwd / "example.py").write_text(block)
    return subprocess.run([sys.executable, "example.py"], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_readme_python_example_runs(tmp_path):
    """The README's Python example collects a run, prints a line per episode it reads back, then the shapes of one
    DataLoader batch: [batch, history, proprio] and [batch, horizon, action], as its own arguments make them."""
    block = _python_blocks(README)[0]
    done = _run_python(block, tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "runs" / "demo"
    published = forge_gpu_manifest(run)["completed_episodes"]
    episodes = int(re.search(r"episodes=(\d+)", block).group(1))
    lines = done.stdout.splitlines()
    assert published >= episodes and len(lines) == published + 1
    assert all(len(line.split()) == 4 for line in lines[:-1])
    batch = int(re.search(r"batch_size=(\d+)", block).group(1))
    history, horizon = (int(re.search(rf"{k}=(\d+)", block).group(1)) for k in ("history", "horizon"))
    shapes = [tuple(int(n) for n in t.split(",")) for t in re.findall(r"\(([\d, ]+)\)", lines[-1])]
    assert [s[:2] for s in shapes] == [(batch, history), (batch, horizon)]


def test_docs_reading_example_runs(tmp_path):
    """docs/reading.md's first Python block (stepping, recording, episodes, windows, torch datasets) runs to
    completion and prints a line per episode it reads back."""
    block = _python_blocks(DOCS / "reading.md")[0]
    done = _run_python(block, tmp_path)
    assert done.returncode == 0, done.stderr
    published = forge_gpu_manifest(tmp_path / "runs" / "demo")["completed_episodes"]
    assert published >= int(re.search(r"episodes=(\d+)", block).group(1))
    assert len(done.stdout.splitlines()) == published


def test_docs_replay_example_runs(tmp_path):
    """docs/tasks.md's Python block of state, randomization and replay runs to completion."""
    (block,) = [b for b in _python_blocks(DOCS / "tasks.md") if "forge_gpu.recording.replay(" in b]
    done = _run_python(block, tmp_path)
    assert done.returncode == 0, done.stderr
    assert forge_gpu_manifest(tmp_path / "runs" / "randomized-check")["replayed_from"]["from"] == "actions"


def forge_gpu_manifest(path):
    import forge_gpu

    return forge_gpu.formats.read_manifest(path)


def _blocks(kind: str = "", path: Path = README) -> list[str]:
    """The fenced blocks of ``path`` whose info string is ``kind`` (``""``: the plain ones, the outputs it shows)."""
    blocks, current, info = [], None, ""
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            if current is None:
                current, info = [], line[3:].strip()
            else:
                if info == kind:
                    blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _shape(line: str) -> str:
    """A line of output with its figures (and paths) taken out: what must match whatever the run holds."""
    line = re.sub(r"runs/\S+|(?<![\w/])/\S+", "PATH", line)
    line = re.sub(r"-?\d[\d,]*(\.\d+)?(e[-+]?\d+)?%?", "N", line)
    return re.sub(r"\[[N ]*\]", "[N]", line)  # a vector of figures, whatever its length


def _keys(lines: list[str]) -> list[str]:
    """The keys of a key-value listing (the text before the first run of two spaces; for a statistics row, its
    column names too) and its section headers."""
    keys = []
    for line in lines:
        head = re.split(r"\s{2,}", line.strip())[0]
        if re.match(r"^\s*N\s", _shape(line)):  # an indented count (instructions): its place, not its text
            head = "N"
        columns = re.findall(r"\s{2}([a-z]\w*) ", line) if " count " in line else []
        keys.append(" ".join([("  " if line.startswith("  ") else "") + head, *columns]))
    return keys


def test_the_quick_start_prints_what_the_readme_shows(tmp_path):
    """The quick start's commands, as the README writes them (in a fresh directory): collect, inspect, verify, render,
    then convert --to npz. Their output has the shape the README (and docs/commands.md, for inspect) shows: the same
    lines in the same order with the same keys, sections and columns (only the figures and paths may differ); the
    run holds the packed layout's four files; the npz copy, two files per episode and two for the run."""
    install = next(b for b in _blocks("bash") if "forge-gpu collect cartpole --envs" in b)
    collect = install[install.index("forge-gpu collect") :].split()
    commands = next(b for b in _blocks("bash") if "forge-gpu inspect runs/cartpole-demo" in b)
    later = [line.split("#")[0].split() for line in commands.splitlines() if line.startswith("forge-gpu")]
    outputs = []
    for command in [collect, *later]:
        done = subprocess.run(
            [sys.executable, "-m", "forge_gpu", *command[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout.splitlines())
    assert [c[1] for c in later] == ["inspect", "verify", "render"]
    shown_collect = next(b for b in _blocks() if "episodes published" in b).splitlines()
    shown_inspect = next(b for b in _blocks(path=DOCS / "commands.md") if b.startswith("run ")).splitlines()
    shown_after = next(b for b in _blocks() if ": ok (" in b).splitlines()
    shapes = [_shape(line) for line in outputs[0]]
    shapes = [x for k, x in enumerate(shapes) if k == 0 or x != shapes[k - 1]]  # a slow run: a line every 10 s
    assert shapes == [_shape(line) for line in shown_collect]
    assert _keys(outputs[1]) == _keys(shown_inspect)
    assert [_shape(line).split()[:2] for line in outputs[1][:4]] == [
        _shape(line).split()[:2] for line in shown_inspect[:4]
    ]
    assert [_shape(line) for line in outputs[2] + outputs[3]] == [_shape(line) for line in shown_after]
    assert (tmp_path / "episode.gif").stat().st_size > 0
    run = tmp_path / "runs/cartpole-demo"
    assert sorted(p.name for p in run.iterdir()) == [
        "commits.jsonl", "run.json", "segment-000000.arrows", "stats.json", "task"
    ]  # fmt: skip
    published = int(next(x for x in outputs[0] if x.startswith("episodes published")).split()[-1])
    done = subprocess.run(
        [sys.executable, "-m", "forge_gpu", "convert", "runs/cartpole-demo", "npz", "--to", "npz"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = [p.name for p in (tmp_path / "npz").iterdir()]
    assert len(names) == 2 * published + 3 and {"run.json", "instructions.jsonl", "task"} <= set(names)


ROOT = README.parent


def _cited(text: str) -> set[str]:
    """The repository files a document cites: its links (not web addresses), the paths under the repository's
    folders and every bare ``NAME.md``."""
    links = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"\w+:", t)}
    # a path, but not a pattern (``tests/test_<module>.py``, ``forge_gpu/stats/<key>``) nor what a run writes
    folders = "docs|bench|tools|tests|forge_gpu|configs|kernels"
    paths = set(re.findall(rf"(?<![\w./-])((?:{folders})/[\w./-]*\w)(?![\w</*])", text))
    paths = {p for p in paths if not p.startswith("bench/results/tmp")}  # the benchmarks' scratch folder (ignored)
    markdown = set(re.findall(r"(?<![\w./-])([\w-]+\.md)\b", text))
    return {c for c in links | paths | markdown if c}


def test_the_docs_cite_only_files_the_repository_holds():
    """README, docs/ and bench/README.md: every file they cite is in the repository (a clone's user can follow
    every reference; they cited a DESIGN.md that lived beside the project, not in it)."""
    docs = [README, ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = []
    for doc in docs:
        for cited in sorted(_cited(doc.read_text())):
            if not any((where / cited).exists() for where in (doc.parent, ROOT, ROOT / "docs")):
                missing.append(f"{doc.relative_to(ROOT)}: {cited}")
    assert not missing
    assert "docs/DESIGN.md" in _cited(README.read_text()) and (ROOT / "docs" / "DESIGN.md").is_file()
