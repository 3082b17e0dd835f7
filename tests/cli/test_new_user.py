"""What a new user hits, each as a test: one-line errors with their exit status where there were
tracebacks, and nothing created; ``--where`` arithmetic that overflows or divides by zero refused; a closed run whose
commit log lost its last lines found damaged and restored by repair; npz salvage; file modes that follow the umask;
collect's argument checks before Warp loads and its policy module found in the working directory; replay's and
``--workers``' progress; dataset roots that name their runs."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.scripts import BLOCKED_CLI
from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

import forge_gpu
from forge_gpu.cli import main
from forge_gpu.cli._common import Progress
from forge_gpu.curation import repair_run
from forge_gpu.reading import EpisodeReadOptions
from forge_gpu.recording import NpzRecorder, PackedRecorder, write_dataset_manifest

ALL = EpisodeReadOptions(state=True)


@pytest.fixture(scope="module")
def packed(synthetic_run):
    """A closed packed run of 3 envs, many short episodes over many blocks (a block per step)."""
    env = synthetic_description(num_envs=3, max_steps=6)
    return synthetic_run(env, 40, seed=3, end_prob=0.4, recorder=PackedRecorder)[0]


def _copy(run: Path, tmp_path: Path, name: str = "copy") -> Path:
    shutil.copytree(run, tmp_path / name)
    return tmp_path / name


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _one_line(capsys, code: int, status: int, *words: str) -> str:
    err = capsys.readouterr().err
    assert code == status, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("forge-gpu: "), err
    for word in words:
        assert word in err, err
    return err


# --- tracebacks that became one-line errors ---


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_select_help_prints_its_help(capsys, flag):
    """The --where help holds a % (Python's modulo), which argparse's formatting took for a placeholder."""
    with pytest.raises(SystemExit) as exited:
        main(["select", flag])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "--where EXPR" in out and "// % **" in out


@pytest.mark.parametrize(
    "command",
    [
        ["render", "{run}", "--out", "afile/x.gif"],
        ["report", "{run}", "--out", "afile/r.html"],
        ["export", "{run}", "afile/x", "--to", "lerobot"],
        ["export", "{run}", "afile/x.hdf5", "--to", "robomimic"],
        ["select", "{run}", "afile/x", "--where", "length > 1"],
        ["merge", "{run}", "{run}", "afile/x"],
        ["split", "{run}", "afile/x", "--val", "0.5"],
        ["convert", "{run}", "afile/x", "--to", "npz"],
        ["replay", "{run}", "afile/x"],
        ["view", "{run}", "--save", "afile/x.rrd"],
        ["collect", "cartpole", "--out", "afile/x"],
    ],
    ids=lambda c: c[0] + ("-" + c[3][2:] if c[0] == "export" else ""),
)
def test_an_output_under_a_regular_file_is_bad_input(packed, tmp_path, capsys, command, monkeypatch):
    """An output path below a regular file: exit 2, one line naming the path and why, nothing created."""
    run = _copy(packed, tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine")
    before = _listing(tmp_path)
    code = main([part.format(run=run) for part in command])
    out = next(part for part in command if part.startswith("afile/"))
    _one_line(capsys, code, 2, out, "cannot write in afile: not a directory")
    assert _listing(tmp_path) == before


def test_an_output_in_a_missing_directory_is_made(packed, tmp_path, capsys, monkeypatch):
    """render --out nodir/x.png: the directories above the file are made, as for every output directory."""
    monkeypatch.chdir(tmp_path)
    assert main(["render", str(packed), "--plot", "--out", "nodir/deeper/x.png"]) == 0
    assert (tmp_path / "nodir" / "deeper" / "x.png").stat().st_size > 0
    assert capsys.readouterr().out.splitlines()[-1] == "wrote nodir/deeper/x.png"  # after the no-frames line


def test_view_without_a_display_says_so_and_points_at_save(packed, capsys, monkeypatch):
    """view on a Linux machine without a display: one line, exit 1, before anything is read or sent."""
    pytest.importorskip("rerun", reason="rerun-sdk is the view extra: pip install 'forge-gpu[view]'")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    _one_line(capsys, main(["view", str(packed)]), 1, "no Rerun viewer can be reached", "--save FILE.rrd")


@pytest.mark.parametrize(("codec", "crf", "allowed"), [("h264", "-5", "[0, 51]"), ("av1", "64", "[0, 63]")])
def test_a_crf_outside_the_encoders_range_is_bad_input(packed, tmp_path, capsys, codec, crf, allowed):
    out = tmp_path / "lerobot"
    code = main(["export", str(packed), str(out), "--to", "lerobot", "--codec", codec, "--crf", crf])
    _one_line(capsys, code, 2, f"--crf for {codec} must be an integer in {allowed}, got {crf}")
    assert not out.exists()


# --- --where: arithmetic that overflows or divides by zero is refused ---


@pytest.mark.parametrize(
    ("where", "part", "what"),
    [
        ("length ** 1000000 > 1", "'length ** 1000000'", "overflows 64-bit integers"),
        ("10 ** 10 ** 10 > 1", "'10 ** 10 ** 10'", "overflows 64-bit integers"),
        ("length * 9223372036854775807 > 1", "'length * 9223372036854775807'", "overflows 64-bit integers"),
        ("1/0 > 1", "'1 / 0'", "divides by zero"),
        ("length // 0 > 1", "'length // 0'", "divides by zero"),
        ("length % (env - env) > 1", "'length % (env - env)'", "divides by zero"),
        ("return * 1e308 * 10 > 1", "'return * 1e+308'", "overflows 64-bit floats"),
        ("return / (length - length) > 1", "'return / (length - length)'", "divides by zero"),
    ],
)
def test_where_refuses_arithmetic_that_overflows_or_divides_by_zero(packed, tmp_path, capsys, where, part, what):
    """Each was a silent wrong answer (2 of 16 kept, 0 kept, all kept): now exit 2 naming the sub-expression."""
    out = tmp_path / "selected"
    code = main(["select", str(packed), str(out), "--where", where])
    _one_line(capsys, code, 2, f"--where {where!r}: {part} {what}", "allowed names")
    assert not out.exists()
    with pytest.raises(forge_gpu.curation.ExpressionError, match=what):
        forge_gpu.curation.select_run(packed, out, where)


def test_where_arithmetic_that_fits_keeps_what_it_says(packed, tmp_path):
    """The same operators within range give numpy's answers, compared with the values computed here."""
    values = forge_gpu.curation.episode_values(packed)
    length, ret = values["length"].astype(np.int64), values["return"]
    cases = {
        "length ** 3 > 27": length**3 > 27,
        "length * 2 // 3 % 2 == 1": length * 2 // 3 % 2 == 1,
        "return / length > 0.5": ret / length > 0.5,
        "2 ** 62 + length > 2 ** 62 + 3": length > 3,
    }
    for k, (where, expected) in enumerate(cases.items()):
        assert 0 < expected.sum() < len(expected) or where.startswith("2 **"), where  # a case that can tell
        report = forge_gpu.curation.select_run(packed, tmp_path / f"s{k}", where)
        assert report["episodes"] == int(expected.sum()), where


# --- verify of a closed run whose commit log lost its last lines; repair restores them ---


@pytest.mark.parametrize("cut", ["within a line", "at a line's start"])
def test_a_closed_run_whose_log_lost_lines_is_damaged_until_repair(packed, tmp_path, capsys, cut):
    """The log cut short (a copy interrupted, a disk that lost its tail) in the last line that publishes an
    episode, or before it: verify says damaged and exits 1, the reader refuses naming repair, and repair publishes
    the blocks again: the same episodes, bit for bit."""
    run = _copy(packed, tmp_path)
    log = run / "commits.jsonl"
    data = log.read_bytes()
    lines = data.split(b"\n")[:-1]
    last = max(k for k, line in enumerate(lines) if json.loads(line)["episodes"]["steps"])  # blocks follow timing
    keep = sum(len(line) + 1 for line in lines[:last]) + (30 if cut == "within a line" else 0)
    os.truncate(log, keep)
    expected = forge_gpu.formats.read_manifest(run)["completed_episodes"]
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert "damaged" in out and f"run.json says {expected} episodes were published" in out
    assert f"forge-gpu repair {run}" in out
    with pytest.raises(ValueError, match=f"damaged.*forge-gpu repair {run}"):
        forge_gpu.reading.open_run(run)
    with pytest.raises(ValueError, match="damaged"):
        list(forge_gpu.reading.read_episodes(run))
    assert main(["inspect", str(run)]) == 1
    assert "damaged" in capsys.readouterr().err
    assert main(["repair", str(run)]) == 0
    assert "published a whole block" in capsys.readouterr().out
    assert main(["verify", str(run)]) == 0
    assert log.read_bytes() == data  # the same lines again, byte for byte
    original, again = forge_gpu.reading.open_run(packed), forge_gpu.reading.open_run(run)
    assert len(again) == expected == len(original)
    for a, b in zip(original.read(list(range(len(original))), ALL), again.read(list(range(len(again))), ALL),
                    strict=True):  # fmt: skip
        assert (a.env_id, a.episode_id, a.steps) == (b.env_id, b.episode_id, b.steps)
        assert all(np.array_equal(a.obs[k], b.obs[k]) for k in a.obs) and np.array_equal(a.action, b.action)


# --- npz salvage ---


def test_npz_salvage_drops_the_damaged_episode_and_keeps_the_rest(tmp_path, capsys):
    """A truncated episode file: verify flags it (and names --salvage), plain repair changes nothing, --salvage
    drops that episode alone (listed, run.json recounted) and every other reads as before; again, nothing."""
    env = synthetic_description(num_envs=3, max_steps=6)
    run = tmp_path / "run"
    record(run, env, make_batches(SyntheticSim(env, seed=5, end_prob=0.4), 20), recorder=NpzRecorder)
    before = {(e.env_id, e.episode_id): e for e in forge_gpu.reading.read_episodes(run)}
    victim = sorted(run.glob("env*.npz"))[1]
    env_id, episode_id = (int(s) for s in victim.stem.replace("env", "").split("-episode"))
    os.truncate(victim, victim.stat().st_size // 2)
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert f"bad episode {env_id}:{episode_id}" in out and f"forge-gpu repair --salvage {run}" in out
    assert main(["repair", str(run)]) == 0 and "nothing to repair" in capsys.readouterr().out
    assert main(["repair", "--salvage", str(run)]) == 0
    assert f"1 episode(s) lost: {env_id}:{episode_id}" in capsys.readouterr().out
    assert not victim.exists() and not victim.with_suffix(".json").exists()
    manifest = forge_gpu.formats.read_manifest(run)
    assert manifest["completed_episodes"] == len(before) - 1
    assert manifest["repaired"]["lost_episodes"] == [f"{env_id}:{episode_id}"]
    assert main(["verify", str(run)]) == 0
    after = {(e.env_id, e.episode_id): e for e in forge_gpu.reading.read_episodes(run)}
    assert set(after) == set(before) - {(env_id, episode_id)}
    for key, episode in after.items():
        assert np.array_equal(episode.action, before[key].action)
        assert all(np.array_equal(episode.obs[k], before[key].obs[k]) for k in episode.obs)
    assert repair_run(run, salvage=True)["changed"] is False


# --- file modes follow the umask ---


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_every_file_a_run_holds_follows_the_umask(tmp_path, umask):
    """run.json, stats.json and the report were made 0600 whatever the umask (tempfile.mkstemp): a run shared with
    a colleague, or read by a training job under another user, could not be read. Now each file is 0666 & ~umask,
    as the segments, the log and the episode files are."""
    previous = os.umask(umask)
    try:
        env = synthetic_description(num_envs=2, max_steps=5)
        for recorder in (PackedRecorder, NpzRecorder):
            run = tmp_path / recorder.__name__
            record(run, env, make_batches(SyntheticSim(env, seed=1, end_prob=0.4), 12), recorder=recorder)
            assert main(["stats", str(run), "--recompute"]) == 0
        assert main(["report", str(tmp_path / "PackedRecorder"), "--out", str(tmp_path / "report.html")]) == 0
        assert main(["repair", str(tmp_path / "NpzRecorder")]) == 0
    finally:
        os.umask(previous)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"run.json", "stats.json", "commits.jsonl", "report.html"} <= names
    wrong = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in files
             if p.stat().st_mode & 0o777 != 0o666 & ~umask}  # fmt: skip
    assert not wrong


# --- collect: checks before Warp, the policy module from the working directory, a factory that raises ---


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["collect", "juggling"], ["unknown task 'juggling'", "cartpole"]),
        (["collect", "cartpole", "--episodes", "0"], ["--episodes 0: must be >= 1"]),
        (["collect", "cartpole", "--envs", "0"], ["--envs 0: must be >= 1"]),
        (["collect", "cartpole", "--policy", "clever"], ["unknown policy 'clever'"]),
        (["collect", "cartpole", "--set", "max_steps"], ["KEY=VALUE"]),
        (["collect", "cartpole", "--format", "npz", "--compression", "zstd"], ["--compression zstd"]),
        (["collect", "cartpole", "--out", "afile/run"], ["cannot write in afile"]),
    ],
)
def test_collect_refuses_bad_arguments_before_loading_warp(tmp_path, args, words):
    """With warp, newton and torch unimportable the same one-line refusals come (so they come at once, not after
    the seconds that loading the simulator takes), exit 2, nothing created."""
    (tmp_path / "afile").write_text("mine")
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_CLI, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "blocked" not in done.stderr
    assert all(word in done.stderr for word in words), done.stderr
    assert _listing(tmp_path) == ["afile"]


_POLICY = """
import torch

def make(spec, device):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(spec["observation"]["proprio"]["shape"][0], 8), torch.nn.Tanh(),
                              torch.nn.Linear(8, spec["action_shape"][0]), torch.nn.Tanh())
    return lambda obs: net.to(device)(obs["proprio"])

def broken(spec, device):
    raise RuntimeError("the checkpoint is missing")
"""


def test_collect_takes_a_policy_module_from_the_working_directory(tmp_path, capsys, monkeypatch):
    """--policy newuser_policy:make as the README writes it, with the file in the working directory and no
    PYTHONPATH: it drives the run. A factory that raises is named as the user's, in one line, exit 2, no run."""
    pytest.importorskip("torch")
    (tmp_path / "newuser_policy.py").write_text(_POLICY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert str(tmp_path) not in sys.path
    common = ["collect", "cartpole", "--envs", "2", "--episodes", "2", "--set", "max_steps=8"]
    assert main([*common, "--policy", "newuser_policy:make", "--out", "run"]) == 0
    capsys.readouterr()
    assert forge_gpu.formats.read_manifest(tmp_path / "run")["completed_episodes"] >= 2
    assert str(tmp_path) not in sys.path  # the working directory was on the path for the import only
    code = main([*common, "--policy", "newuser_policy:broken", "--out", "again"])
    _one_line(capsys, code, 2, "policy 'newuser_policy:broken': its factory raised RuntimeError: the checkpoint")
    assert not (tmp_path / "again").exists()


# --- progress ---


def test_a_plain_progress_line_is_not_printed_twice(capsys):
    """Into a pipe: the final line is printed at close unless it is the line already printed (collect --workers
    polls its workers once more at the end, with the same counters)."""
    counters = dict(episodes_ended=4, unit="episodes", target=4, steps=9, env_steps_per_s=1000.0,
                    stall_fraction=0.0, backlog=0, bytes_written=2_000_000, seconds=1.0)  # fmt: skip
    display = Progress("cartpole", type("Envs", (), {"num_envs": 2}), None)
    display.update(counters)
    display.update(counters)
    display.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["cartpole x2  4/4 episodes  1,000 env-steps/s  stall 0%  backlog 0  2.0 MB  1 s"]
    display = Progress("cartpole", type("Envs", (), {"num_envs": 2}), None)
    display.update(counters)
    display.update({**counters, "seconds": 2.0})
    display.close()
    assert len(capsys.readouterr().out.splitlines()) == 2  # a line that changed is printed


def test_replay_limit_progress_counts_to_the_limit(tmp_path, capsys):
    """replay --limit 2: every progress line counts to 2, and the last one reaches it."""
    env = forge_gpu.sim.make("cartpole", num_envs=3, device="cpu", seed=0, max_steps=10)
    forge_gpu.recording.collect(env, forge_gpu.sim.load_policy("random", env), str(tmp_path / "run"), episodes=6)
    assert main(["replay", str(tmp_path / "run"), str(tmp_path / "again"), "--limit", "2", "--batch", "2"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("replay state:")]
    assert lines and all("/2 episodes" in line for line in lines) and lines[-1].startswith("replay state: 2/2")
    assert len(forge_gpu.reading.open_run(tmp_path / "again")) == 2


# --- a dataset root given to a command of one run ---


@pytest.mark.parametrize("command", [["render"], ["view"], ["convert", "{out}", "--to", "npz"], ["repair"]])
def test_a_dataset_root_names_the_runs_it_holds(packed, tmp_path, capsys, command):
    root = tmp_path / "dataset"
    root.mkdir()
    for worker in (0, 1):
        shutil.copytree(packed, root / f"worker-00{worker}")
    keys = {"run_id": "r", "device": "cpu", "status": "closed", "episodes": 0, "seed": 0, "error": None}
    write_dataset_manifest(root, [dict(keys, path=f"worker-00{i}", worker=i) for i in (0, 1)])
    before = _listing(tmp_path)
    args = [command[0], str(root), *(part.format(out=tmp_path / "out") for part in command[1:])]
    _one_line(capsys, main(args), 2, "it is a dataset root of 2 run(s)", str(root / "worker-000"))
    assert _listing(tmp_path) == before


def test_the_workers_summary_rate_is_the_progress_lines(tmp_path):
    """collect --workers 2: one progress line at the end (not two), no note from Ray about token authentication,
    and the summary's env-steps/s the same figure as the progress line's (each worker's own collection, summed;
    it was the wall time's, warm-ups included: 1,021 beside 15,424)."""
    pytest.importorskip("ray", reason="scale-out is the ray extra: pip install 'forge-gpu[ray]'")
    out = tmp_path / "dataset"
    done = subprocess.run(
        [sys.executable, "-m", "forge_gpu", "collect", "cartpole", "--workers", "2", "--envs", "2",
         "--episodes", "4", "--set", "max_steps=8", "--out", str(out)],
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Token authentication" not in done.stderr + done.stdout
    progress = [line for line in done.stdout.splitlines() if line.startswith("cartpole (2 workers)")]
    assert len(progress) == len(set(progress)) >= 1
    shown = float(progress[-1].split("episodes  ")[1].split(" env-steps/s")[0].replace(",", ""))
    summary = next(line for line in done.stdout.splitlines() if line.startswith("env-steps/s"))
    figure = float(summary.split()[1].replace(",", ""))
    runs = json.loads((out / "dataset.json").read_text())["runs"]
    assert len(runs) == 2 and figure > 0
    # the same definition (equal when the last poll has every worker's final counters; under load it may lag)
    assert 0.5 <= figure / shown <= 2, (summary, progress[-1])


def test_every_command_prints_its_help(capsys):
    """A bare % in any help (argparse formats help with %) crashed that command's --help and every usage error."""
    from forge_gpu.cli import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert {"collect", "select", "report", "view"} <= set(commands)
    for name in commands:
        with pytest.raises(SystemExit) as exited:
            main([name, "--help"])
        assert exited.value.code == 0, name
        assert capsys.readouterr().out.startswith(f"usage: forge-gpu {name}"), name
