"""The forge-gpu command: collect, interrupt, inspect, render, torch policies, bad input."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.scripts import BLOCKED_CLI
from helpers.synthetic import published

import forge_gpu
from forge_gpu.cli import main

TESTS = Path(__file__).resolve().parents[1]


def run_cli(*args, cwd=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    return subprocess.run(
        [sys.executable, "-m", "forge_gpu", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


@pytest.mark.parametrize("layout", [["--compression", "lz4"], ["--format", "npz", "--compression", "deflate"]])
def test_collect_inspect_render_end_to_end(tmp_path, layout):
    """collect through a subprocess writes a valid run (either layout) that inspect checks and render draws (the
    packed run's cartpole from its state, the npz run's numbers)."""
    out = tmp_path / "run"
    done = run_cli(
        "collect", "cartpole", "--envs", "4", "--episodes", "6", "--set", "max_steps=15", *layout, "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert f"run: {out}" in done.stdout and "episodes published" in done.stdout
    manifest = forge_gpu.formats.read_manifest(out)
    assert manifest["status"] == "closed" and manifest["completed_episodes"] >= 6
    assert manifest["config"]["max_steps"] == 15
    report = run_cli("inspect", str(out), "--json")
    assert report.returncode == 0, report.stderr
    summary = json.loads(report.stdout)
    assert summary["episodes"] == manifest["completed_episodes"]
    assert summary["episode_length"]["max"] <= 15 and summary["fields"]["proprio"]["shape"] == [4]
    picture = tmp_path / "ep.png"
    plot = ["--plot"] if "npz" in layout else []  # an npz run records no state to draw the cartpole from
    drawn = run_cli("render", str(out), "--episode", "0:0", *plot, "--out", str(picture))
    assert drawn.returncode == 0, drawn.stderr
    assert picture.stat().st_size > 1000 and picture.read_bytes()[:4] == b"\x89PNG"


def test_sigint_keeps_completed_episodes(tmp_path):
    """SIGINT during collect: exit 130, manifest closed with incomplete episodes, every episode valid."""
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "forge_gpu",
            "collect",
            "cartpole",
            "--envs",
            "8",
            "--episodes",
            "100000",
            "--policy",
            "random",
            "--set",
            "max_steps=30",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and published(out) < 4:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "stopped by SIGINT" in stdout
    manifest = forge_gpu.formats.read_manifest(out)
    assert manifest["status"] == "closed" and manifest["incomplete_episodes"]
    episodes = list(forge_gpu.reading.read_episodes(out))
    assert len(episodes) == manifest["completed_episodes"] >= 4
    assert not list(out.glob("*.tmp"))


def test_inspect_reports_corrupted_episode(tmp_path, capsys):
    """inspect exits 1 and names the file and rule when an episode is corrupted."""
    out = tmp_path / "run"
    args = ["collect", "cartpole", "--envs", "2", "--episodes", "2", "--set", "max_steps=10", "--format", "npz"]
    assert main([*args, "--out", str(out)]) == 0
    assert main(["inspect", str(out)]) == 0
    victim = sorted(out.glob("env*.npz"))[0]
    with np.load(victim) as archive:
        arrays = dict(archive)
    arrays["reward"] = arrays["reward"].copy()
    arrays["reward"][0] = np.nan
    np.savez(victim, **arrays)
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 1
    err = capsys.readouterr().err
    assert victim.name in err and "reward" in err
    assert main(["inspect", str(out), "--quick"]) == 0


def test_torch_mlp_policy_drives_cartpole(tmp_path):
    """A tiny torch MLP named MODULE:FACTORY drives the envs and its actions are what is recorded."""
    sys.path.insert(0, str(TESTS))
    try:
        out = tmp_path / "run"
        assert (
            main(
                [
                    "collect",
                    "cartpole",
                    "--envs",
                    "3",
                    "--steps",
                    "12",
                    "--policy",
                    "helpers.torch_policies:tiny_mlp",
                    "--set",
                    "max_steps=5",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        import torch
        from helpers.torch_policies import tiny_mlp

        spec = forge_gpu.formats.read_manifest(out)["env_spec"]
        net = tiny_mlp(spec, "cpu")
        episodes = list(forge_gpu.reading.read_episodes(out))
        assert episodes
        for ep in episodes:
            with torch.no_grad():
                want = net({"proprio": torch.tensor(ep.obs["proprio"])}).numpy()
            np.testing.assert_allclose(ep.action, np.clip(want, -1, 1), rtol=1e-5, atol=1e-6)
    finally:
        sys.path.remove(str(TESTS))


@pytest.mark.parametrize(
    "args, words",
    [
        (["collect", "juggling"], ["unknown task", "cartpole"]),
        (["collect", "cartpole", "--policy", "clever"], ["unknown policy", "MODULE:FACTORY"]),
        (["collect", "cartpole", "--policy", "no_such_module:make"], ["no_such_module"]),
        (["collect", "cartpole", "--set", "max_steps"], ["KEY=VALUE"]),
        (["collect", "cartpole", "--set", "max_steps=-3"], ["max_steps", "-3"]),
        (["collect", "cartpole", "--set", "solver.name=bullet"], ["solver.name", "bullet"]),
        (["collect", "cartpole", "--envs", "0"], ["--envs 0", ">= 1"]),
        (["collect", "cartpole", "--writers", "0"], ["--writers"]),
        (["collect", "cartpole", "--compression", "deflate"], ["--compression deflate", "packed", "lz4"]),
        (["collect", "cartpole", "--format", "npz", "--compression", "zstd"], ["--compression zstd", "npz"]),
        (["collect", "cartpole", "--format", "parquet"], ["--format", "packed", "npz"]),
        (["convert", "missing-run", "out", "--to", "npz"], ["not a run directory"]),
        (["collect", "cartpole", "--bogus"], ["--bogus"]),
        (["collect", "cartpole", "--policy", "helpers.torch_policies:wrong_shape"], ["shape"]),
        (["collect", "cartpole", "--policy", "helpers.torch_policies:nan_actions"], ["non-finite"]),
        (["render", "missing-run"], ["not a run directory"]),
        (["collect", "cartpole", "--policy", "helpers.torch_policies:wrong_dtype"], ["float64"]),
        (["collect", "cartpole", "--policy", "helpers.torch_policies:wrong_device"], ["meta"]),
        (["collect", "reach", "--set", "params.image_size=100"], ["image_size", "100", "64"]),
        (["collect", "cartpole", "--set", "max_steps=0"], ["max_steps", "0"]),
        (["collect", "cartpole", "--set", "substeps=true"], ["substeps", "integer"]),
        (["collect", "cartpole", "--set", "control_dt=0"], ["control_dt"]),
        (["collect", "cartpole", "--slots", "0"], ["--slots"]),
        (["collect", "cartpole", "--max-buffer-bytes", "10"], ["max_buffer_bytes", "bytes"]),
        (["collect", "cartpole", "--format", "npz", "--max-buffer-bytes", "1000"], ["max_buffer_bytes", "bytes"]),
        (["collect", "ant", "--set", "solver.name=featherstone"], ["contacts", "mujoco"]),
        (["collect", "cartpole", "--compression-level", "12"], ["--compression-level 12", "[0, 9]"]),
        (["collect", "cartpole", "--device", "tpu"], ["'tpu'", "available here: cpu"]),
        (["collect", "cartpole", "--steps", "3", "--episodes", "3"], ["--steps", "--episodes", "collect --help"]),
        (["inspect", "missing-run"], ["missing-run: not a run directory or dataset root (no such directory)"]),
        (["repair", "missing-run"], ["missing-run: not a run directory (no such directory)"]),
    ],
)
def test_bad_input_exits_2_and_creates_nothing(tmp_path, capsys, args, words):
    """Each bad input gives a one-line error with exit status 2 and leaves nothing on disk."""
    out = tmp_path / "run"
    sys.path.insert(0, str(TESTS))
    try:
        full = args + (["--out", str(out), "--envs", "2"] if args[0] == "collect" and "--envs" not in args else [])
        code = main(full)
    finally:
        sys.path.remove(str(TESTS))
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and not err.startswith("forge-gpu: forge-gpu")
    for word in words:
        assert word in err
    assert not out.exists()


def test_existing_out_is_refused(tmp_path, capsys):
    """--out naming an existing directory is refused with exit 2 and the directory is left alone."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["collect", "cartpole", "--envs", "2", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_unwritable_out_is_refused(tmp_path, capsys):
    """An --out that cannot be created (its parent is a file) is refused with exit 2."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    assert main(["collect", "cartpole", "--envs", "2", "--out", str(blocker / "run")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert blocker.read_text() == "not a directory"


def test_doctor_checks_this_machine(capsys):
    """forge-gpu doctor runs every check that applies here, the CPU capture among them, and exits 0 when all pass."""
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "capture and replay on cpu" in out and "kernel cache" in out and "default device" in out
    assert "ok   solver loop capture on cpu" in out and "capture_while loop (10 iterations)" in out
    assert "collection runs as designed here" in out and "BAD" not in out


def test_doctor_says_what_eager_stepping_costs_when_the_solver_loop_cannot_be_captured(capsys, monkeypatch):
    """A capture_while that cannot be captured (here: made to raise) is BAD, with the eager cost as the fix."""
    import warp as wp

    def refuse(*args, **kwargs):
        raise RuntimeError("conditional nodes are not supported")

    monkeypatch.setattr(wp, "capture_while", refuse)
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert code == 1 and "BAD  solver loop capture on cpu" in out and "conditional nodes are not supported" in out
    assert "-> the step will run eagerly: every step then pays Python's launch cost" in out


def test_doctor_solver_loop_on_cuda_counts_the_host_syncs_eager_stepping_would_make(monkeypatch):
    """On CUDA the solver-loop check adds what eager stepping costs, in the default cartpole config's numbers
    (4 substeps x (10 solver iterations + 1) = 44 waits a step); run here on the CPU as if it were CUDA."""
    import warp as wp

    from forge_gpu._src.machine.doctor import _solver_loop_capture
    from forge_gpu._src.sim import capture
    from forge_gpu.sim import task_config

    cpu = wp.get_device("cpu")
    as_cuda = SimpleNamespace(is_cuda=True)  # what the check asks of its device, besides handing it to capture_step
    warp_as_cuda = SimpleNamespace(**{k: getattr(wp, k) for k in dir(wp) if not k.startswith("__")})
    warp_as_cuda.get_device = lambda name=None: as_cuda
    real_capture_step = capture.capture_step
    monkeypatch.setattr(capture, "capture_step", lambda device, body: real_capture_step(cpu, body))
    check = _solver_loop_capture(warp_as_cuda, "cpu", task_config("cartpole"))
    assert check.ok, check
    assert "wait for the GPU up to 44 times a step (cartpole defaults: 4 substeps x (10 solver iterations + 1))" in (
        check.found
    )


def test_doctor_exits_1_and_says_what_to_do_when_a_check_fails(capsys, monkeypatch):
    """A failing check (here: a GPU present that Warp cannot use) is marked BAD with a fix, and the exit is 1."""
    import forge_gpu._src.sim.device as env_module

    monkeypatch.setattr(env_module, "gpu_present", lambda: True)
    code = main(["doctor"])
    captured = capsys.readouterr()
    assert code == 1 and "BAD  default device" in captured.out and "->" in captured.out
    assert "would not run as designed" in captured.err


@pytest.mark.parametrize(
    "command", [["inspect"], ["render"], ["repair"], ["convert", "--to", "npz"], ["stats"], ["report"], ["view"]]
)
def test_a_directory_without_a_run_is_bad_input(tmp_path, capsys, command):
    """A directory that holds no run.json (nor dataset.json) is bad input: exit 2, one line, nothing touched."""
    (tmp_path / "notes.tmp").write_text("mine")
    args = [command[0], str(tmp_path), *([str(tmp_path / "out")] if command[0] == "convert" else []), *command[1:]]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"{tmp_path}: not a run directory" in err and "run.json" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.tmp"]


def test_render_of_a_run_without_episodes_says_so(tmp_path, capsys):
    """render of a run with no published episode (or without the asked one) exits 2 saying which it holds."""
    from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

    env = synthetic_description(num_envs=2, max_steps=50)
    record(str(tmp_path / "empty"), env, make_batches(SyntheticSim(env, seed=0, end_prob=0.0), 3))
    assert main(["render", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err == f"forge-gpu: {tmp_path / 'empty'} holds no published episode\n"
    record(str(tmp_path / "run"), env, make_batches(SyntheticSim(env, seed=0, end_prob=0.5), 10))
    assert main(["render", str(tmp_path / "run"), "--episode", "9:9"]) == 2
    assert "holds no published episode 9:9; it holds 0:0" in capsys.readouterr().err
    for out in ("pics", "pics.mp4"):  # what render cannot write: refused before anything is drawn
        assert main(["render", str(tmp_path / "run"), "--out", str(tmp_path / out)]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and f"--out {tmp_path / out}: expected a file name ending in .gif" in err
        assert not (tmp_path / out).exists()


def test_render_and_report_of_a_run_without_frames_say_so(tmp_path, capsys):
    """A run with no image field (params.render = false) and a run whose rgb is all zero (an older forge_gpu's
    state-only run): render --plot and report say there are no frames, in one line, and plot instead (exit 0);
    render without --plot refuses such a run that records no simulator state in one line (exit 2)."""
    from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

    class BlackFrames(SyntheticSim):
        def _observe(self):
            obs = super()._observe()
            return {**obs, "rgb": np.zeros_like(obs["rgb"]), "depth": np.zeros_like(obs["depth"])}

    state_only = synthetic_description(num_envs=2, max_steps=8)
    record(str(tmp_path / "state"), state_only, make_batches(SyntheticSim(state_only, seed=0, end_prob=0.5), 10))
    black = synthetic_description(num_envs=2, max_steps=8, images=True)
    record(str(tmp_path / "black"), black, make_batches(BlackFrames(black, seed=0, end_prob=0.5), 10))
    camera = synthetic_description(num_envs=2, max_steps=8, images=True)
    record(str(tmp_path / "camera"), camera, make_batches(SyntheticSim(camera, seed=0, end_prob=0.5), 10))
    for name, why in (("state", "stores no camera frames"), ("black", "rgb frames are all zero")):
        run = tmp_path / name
        assert main(["render", str(run), "--out", str(tmp_path / f"{name}.png")]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "records no simulator state" in err[0] and "render --plot" in err[0], err
        assert main(["render", str(run), "--plot", "--out", str(tmp_path / f"{name}.png")]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 2 and why in lines[0] and "plotted proprio" in lines[0], lines
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert main(["report", str(run), "--out", str(tmp_path / f"{name}.html")]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 2 and why in lines[0] and lines[1].startswith("wrote"), lines
        page = (tmp_path / f"{name}.html").read_text()
        assert "No frames: " in page and "image/webp" not in page
    assert main(["render", str(tmp_path / "camera"), "--out", str(tmp_path / "camera.gif")]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'camera.gif'}\n"
    assert main(["report", str(tmp_path / "camera"), "--out", str(tmp_path / "camera.html")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert "image/webp" in (tmp_path / "camera.html").read_text()


def test_data_commands_run_without_warp_newton_or_torch(tmp_path):
    """inspect, stats, convert, repair, select, merge, split, report and view run with warp, newton and torch
    unimportable: a machine that only trains needs no simulator to read, curate or look at its runs."""
    pytest.importorskip("rerun")  # view (rerun-sdk, the [view] extra)
    from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

    from forge_gpu.recording import PackedRecorder

    env = synthetic_description(num_envs=3, max_steps=6)
    record(tmp_path / "run", env, make_batches(SyntheticSim(env, seed=1, end_prob=0.4), 30), recorder=PackedRecorder)
    commands = [
        ["inspect", str(tmp_path / "run")],
        ["stats", str(tmp_path / "run")],
        ["convert", str(tmp_path / "run"), str(tmp_path / "npz"), "--to", "npz"],
        ["repair", str(tmp_path / "npz")],
        ["select", str(tmp_path / "run"), str(tmp_path / "sel"), "--where", "length > 1 and return < 9"],
        ["merge", str(tmp_path / "run"), str(tmp_path / "npz"), str(tmp_path / "merged")],
        ["split", str(tmp_path / "merged"), str(tmp_path / "split"), "--val", "0.2"],
        ["report", str(tmp_path / "run"), "--out", str(tmp_path / "report.html")],
    ]
    for command in commands:
        _run_blocked(command)


def _run_blocked(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", BLOCKED_CLI, *command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (command, done.stdout, done.stderr)


def test_view_runs_without_warp_newton_or_torch(tmp_path):
    """view --save too; it needs the view extra, so (as every test of an optional extra) it skips as a whole, at its
    start, where rerun-sdk is not installed."""
    pytest.importorskip("rerun", reason="rerun-sdk is the view extra: pip install 'forge-gpu[view]'")
    from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

    env = synthetic_description(num_envs=3, max_steps=6)
    record(tmp_path / "run", env, make_batches(SyntheticSim(env, seed=1, end_prob=0.4), 30))
    _run_blocked(["view", str(tmp_path / "run"), "--save", str(tmp_path / "run.rrd")])
    assert (tmp_path / "run.rrd").stat().st_size > 0


def test_inspect_into_a_closed_pipe_exits_quietly(tmp_path):
    """forge-gpu inspect RUN | head: when the reader stops early the command ends without a traceback."""
    from helpers.synthetic import SyntheticSim, make_batches, record, synthetic_description

    env = synthetic_description(num_envs=3, max_steps=6)
    record(tmp_path / "run", env, make_batches(SyntheticSim(env, seed=1, end_prob=0.4), 30))
    code = "import sys; from forge_gpu.cli import main; sys.exit(main(sys.argv[1:]))"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line, whatever the scheduling
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "inspect", str(tmp_path / "run"), "--json"],
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_collect_has_one_flag_per_recording_option_and_builds_them_from_it():
    """collect's recording flags are RecordingOptions' fields, one each, with the fields' defaults; two command
    lines that between them change every field give RecordingOptions of exactly those values."""
    from forge_gpu.cli import build_parser
    from forge_gpu.cli._recording import FIELDS, flag, recording_options_of

    parser = build_parser()
    collect = parser._subparsers._group_actions[0].choices["collect"]  # argparse keeps subparsers here
    flags = {s for action in collect._actions for s in action.option_strings}
    assert {flag(name) for name in FIELDS} <= flags
    assert FIELDS == tuple(f.name for f in dataclasses.fields(forge_gpu.recording.RecordingOptions))
    assert recording_options_of(parser.parse_args(["collect", "cartpole"])) == forge_gpu.recording.RecordingOptions()
    packed = ["--compression", "lz4", "--writers", "3", "--max-buffer-bytes", "4096", "--no-statistics"]
    packed += ["--codec", "rgb=jpeg:90", "--durability", "machine"]
    npz = ["--format", "npz", "--compression", "deflate", "--compression-level", "3"]
    a, b = (recording_options_of(parser.parse_args(["collect", "cartpole", *extra])) for extra in (packed, npz))
    assert a == forge_gpu.recording.RecordingOptions(
        compression="lz4",
        writers=3,
        max_buffer_bytes=4096,
        statistics=False,
        codecs={"rgb": "jpeg:90"},
        durability="machine",
    )
    assert b == forge_gpu.recording.RecordingOptions(format="npz", compression="deflate", compression_level=3)
    default = forge_gpu.recording.RecordingOptions()
    changed = {name for name in FIELDS for o in (a, b) if getattr(o, name) != getattr(default, name)}
    assert changed == set(FIELDS)


def test_the_command_lines_docstring_names_every_subcommand():
    """forge_gpu/cli/__init__.py's docstring lists the subcommands: each one the parser has (nineteen)."""
    import re

    import forge_gpu.cli
    from forge_gpu.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)
    listed = forge_gpu.cli.__doc__.split("\n\n")[0]
    named = set(re.findall(r"[a-z][a-z-]*", listed)) & commands
    assert named == commands and len(commands) == 21, sorted(commands - named)
