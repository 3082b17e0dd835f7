"""What forge_gpu prints: Warp starts quietly, collect says once which device and why, and a pipe gets plain
progress lines. Each case runs in a fresh process, since Warp starts once per process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
#: What Warp prints when it is not kept quiet: its no-driver warning (on a machine without an NVIDIA driver),
#: its greeting and a line per loaded kernel module (stdout).
NO_DRIVER, GREETING, MODULE_LOAD = "Could not find or load the NVIDIA CUDA driver", "initialized:", "load on device"


def run(args: list[str], verbose: str = "0") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(TESTS), FORGE_GPU_VERBOSE=verbose)
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_piped_collect_is_quiet_with_one_device_line_and_plain_progress(tmp_path):
    """collect into a pipe: no Warp output on stderr, one device line, whole plain progress lines (no bar)."""
    args = ["collect", "cartpole", "--envs", "2", "--episodes", "4", "--set", "max_steps=10", "--out"]
    done = run(["-m", "forge_gpu", *args, str(tmp_path / "run")])
    assert not [word for word in (NO_DRIVER, GREETING, MODULE_LOAD) if word in done.stdout + done.stderr], done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("device: ")] == [lines[0]]
    progress = [line for line in lines if line.startswith("cartpole x2  ")]
    assert progress and progress[-1].startswith("cartpole x2  4/4 episodes  ") and progress[-1].endswith(" s")
    assert "\u2501" not in done.stdout and "\u2026" not in done.stdout  # the rich bar's line and its cut


@pytest.mark.parametrize("verbose", ["0", "1"])
def test_make_keeps_warp_quiet_unless_asked(verbose):
    """forge_gpu.sim.make prints nothing of Warp's; FORGE_GPU_VERBOSE=1 brings its greeting and module-load lines
    back."""
    done = run(["-c", "import forge_gpu; forge_gpu.sim.make('cartpole', num_envs=1).reset()"], verbose)
    if verbose == "0":
        assert done.stdout + done.stderr == ""
    else:
        assert GREETING in done.stdout and MODULE_LOAD in done.stdout


def test_verbose_flag_shows_warp_output(tmp_path):
    """forge-gpu collect --verbose shows Warp's output, as FORGE_GPU_VERBOSE=1 does."""
    args = ["collect", "cartpole", "--envs", "1", "--steps", "1", "--verbose", "--out", str(tmp_path / "run")]
    done = run(["-m", "forge_gpu", *args])
    assert GREETING in done.stdout and MODULE_LOAD in done.stdout
