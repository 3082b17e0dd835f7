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
    (block,) = [b for b in blocks if "forge_gpu.recording.replay(" in b]
    (tmp_path / "example.py").write_text(block)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert forge_gpu_manifest(tmp_path / "runs" / "randomized-check")["replayed_from"]["from"] == "actions"


def forge_gpu_manifest(path):
    import forge_gpu

    return forge_gpu.formats.read_manifest(path)


def _blocks(kind: str = "") -> list[str]:
    """The README's fenced blocks whose info string is ``kind`` (``""``: the plain ones, the outputs it shows)."""
    blocks, current, info = [], None, ""
    for line in README.read_text().splitlines():
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
    then convert --to npz. Their output has the README's shape: the same lines in the same order with the same keys,
    sections and columns (only the figures and paths may differ: other machines, other timings); the run holds the
    files the README names; the npz copy, as many files as it says."""
    text = README.read_text()
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
    shown_collect = next(b for b in _blocks() if "episodes published" in b).splitlines()
    shown_inspect = next(b for b in _blocks() if b.startswith("run            ")).splitlines()
    shapes = [_shape(line) for line in outputs[0]]
    shapes = [x for k, x in enumerate(shapes) if k == 0 or x != shapes[k - 1]]  # a slow run: a line every 10 s
    assert shapes == [_shape(line) for line in shown_collect]
    assert _keys(outputs[1]) == _keys(shown_inspect)
    assert [_shape(line).split()[:2] for line in outputs[1][:4]] == [
        _shape(line).split()[:2] for line in shown_inspect[:4]
    ]
    shown_verify = re.search(r"`verify` prints `([^`]*)`", text).group(1)
    assert [_shape(line) for line in outputs[2]] == [_shape(shown_verify)]
    said = r"`render` of cartpole, a task without a camera, prints `([^`]*)` and then `([^`]*)`".replace(" ", r"\s+")
    shown_render = re.search(said, text)
    shown_render = [" ".join(line.split()) for line in shown_render.groups()]
    assert [_shape(line) for line in outputs[3]] == [_shape(line) for line in shown_render]
    assert (tmp_path / "episode.png").stat().st_size > 0
    files = re.search(r"The run is four files:(.*?)\(normalization", text, re.S).group(1)
    assert sorted(re.findall(r"`([\w.-]+)`", files)) == sorted(
        p.name for p in (tmp_path / "runs/cartpole-demo").iterdir()
    )
    count = int(re.search(r"take [\d,]+ bytes in (\d+) files", text).group(1))
    # How many episodes a run publishes past its target depends on when the stepping loop hears of the last one
    # (the recorder publishes on its own threads), so the npz copy is compared per episode: the README's file count
    # less its two per episode, plus two per episode this run published.
    published = [int(next(x for x in lines if x.startswith("episodes published")).split()[-1])
                 for lines in (outputs[0], shown_collect)]  # fmt: skip
    count += 2 * (published[0] - published[1])
    done = subprocess.run(
        [sys.executable, "-m", "forge_gpu", "convert", "runs/cartpole-demo", "npz", "--to", "npz"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "npz").iterdir())) == count


ROOT = README.parent


def _cited(text: str) -> set[str]:
    """The repository files a document cites: its links (not web addresses), the paths under the repository's
    folders and every bare ``NAME.md``."""
    links = {t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"\w+:", t)}
    # a path, but not a pattern (``tests/test_<module>.py``, ``forge_gpu/stats/<key>``) nor what a run writes
    folders = "docs|bench|tools|tests|forge_gpu|configs|kernels"
    paths = set(re.findall(rf"(?<![\w./-])((?:{folders})/[\w./-]*\w)(?![\w</*])", text))
    paths = {p for p in paths if not p.startswith("bench/results")}  # the benchmarks' output (gitignored)
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
