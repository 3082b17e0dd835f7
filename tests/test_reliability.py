"""Kills, full disks and repair: only whole episodes are ever visible, and nothing hangs."""

import contextlib
import errno
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from synthetic import published

import forge_gpu
from forge_gpu.cli import main

#: Recording options of each layout that stress its writers: compressed, and several npz writer threads.
FORMAT_ARGS = {
    "npz": ["--format", "npz", "--compression", "deflate", "--writers", "3"],
    "packed": ["--compression", "zstd"],
}


def collect_process(out: Path, *extra, format="npz"):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "forge_gpu",
            "collect",
            "cartpole",
            "--envs",
            "8",
            "--episodes",
            "1000000",
            "--set",
            "max_steps=12",
            *FORMAT_ARGS[format],
            "--out",
            str(out),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def has_marker(out: Path) -> bool:
    return published(out) > 0


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("format", ["packed", "npz"])
def test_sigkill_at_random_moments_leaves_only_whole_episodes(tmp_path, format):
    """SIGKILL at random moments: every visible episode is valid; repair closes the run, idempotently,
    and keeps every episode that was visible."""
    rng = random.Random(1234)
    for trial in range(3):
        out = tmp_path / f"run{trial}"
        proc = collect_process(out, format=format)
        assert wait_for(lambda out=out: has_marker(out), 240), proc.stderr
        time.sleep(rng.uniform(0.0, 1.5))
        proc.kill()
        proc.wait(timeout=60)
        visible = list(forge_gpu.read_episodes(out))  # raises on a torn or invalid episode
        assert forge_gpu.read_manifest(out)["status"] == "recording"
        assert main(["repair", str(out)]) == 0
        manifest = forge_gpu.read_manifest(out)
        repaired = list(forge_gpu.read_episodes(out))
        assert manifest["status"] == "closed" and manifest["completed_episodes"] == len(repaired)
        # packed: repair may also publish a block written whole just before the kill; it drops nothing
        assert len(repaired) == len(visible) >= 1 if format == "npz" else len(repaired) >= len(visible) >= 1
        keys = {(e.env_id, e.episode_id) for e in repaired}
        assert all((e.env_id, e.episode_id) in keys for e in visible)
        assert "repaired" in manifest and not list(out.glob("*.tmp"))
        before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in out.iterdir())
        assert main(["repair", str(out)]) == 0
        assert sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in out.iterdir()) == before
        assert len(list(forge_gpu.read_episodes(out))) == len(repaired)


def test_inspect_tells_to_repair_an_interrupted_run(tmp_path, capsys):
    """inspect of a run left at 'recording' says to run forge-gpu repair."""
    out = tmp_path / "run"
    proc = collect_process(out)
    assert wait_for(lambda: has_marker(out), 240)
    proc.kill()
    proc.wait(timeout=60)
    capsys.readouterr()
    assert main(["inspect", str(out), "--quick"]) == 0
    assert f"forge-gpu repair {out}" in capsys.readouterr().out


@contextlib.contextmanager
def small_filesystem(tmp_path, size="96k"):
    """A tiny tmpfs where the test may mount one (root); otherwise None."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def run_main_with_timeout(args, timeout=180):
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("code", main(args)), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the collection hung after a write error"
    return box["code"]


def inject_enospc(monkeypatch, format):
    """Make the recorder's writes fail with ENOSPC after a few (where no tmpfs can be mounted)."""
    import forge_gpu._src.packed_recorder as packed_module
    import forge_gpu._src.recorder as recorder_module

    owner, name = (recorder_module, "write_episode_file") if format == "npz" else (packed_module.PackedWriter, "write")
    real, calls = getattr(owner, name), []

    def filling(*a, **k):
        calls.append(1)
        if len(calls) > 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*a, **k)

    monkeypatch.setattr(owner, name, filling)


@pytest.mark.parametrize("format", ["packed", "npz"])
def test_full_disk_fails_fast_with_nothing_torn(tmp_path, capsys, monkeypatch, format):
    """A disk that fills up: exit 1 naming the directory, no torn episode, no temporaries, no hang."""
    with small_filesystem(tmp_path) as mount:
        if mount is None:
            inject_enospc(monkeypatch, format)
            out = tmp_path / "run"
        else:
            out = mount / "run"
        code = run_main_with_timeout(
            [
                "collect",
                "--format",
                format,
                "cartpole",
                "--envs",
                "8",
                "--episodes",
                "100000",
                "--set",
                "max_steps=40",
                "--policy",
                "expert",
                "--out",
                str(out),
            ]
        )
        err = capsys.readouterr().err
        assert code == 1
        assert str(out) in err and "No space left on device" in err
        assert not list(out.glob("*.tmp"))
        episodes = list(forge_gpu.read_episodes(out))  # whole and valid, or the reader raises
        manifest = forge_gpu.read_manifest(out)
        # The manifest is rewritten after the failure when the disk still allows it.
        assert manifest["status"] in ("failed", "recording")
        if manifest["status"] == "failed":
            assert "No space" in manifest["error"]
            assert manifest["completed_episodes"] == len(episodes)


def test_repair_refuses_a_non_run(tmp_path, capsys):
    """repair of a directory without a valid run.json exits non-zero and deletes nothing."""
    (tmp_path / "notes.tmp").write_text("mine")
    assert main(["repair", str(tmp_path)]) == 1
    assert (tmp_path / "notes.tmp").exists()
    assert main(["repair", str(tmp_path / "missing")]) == 2


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals")
def test_sigterm_exits_143_with_closed_manifest(tmp_path):
    """SIGTERM stops a collection cleanly with exit status 143."""
    out = tmp_path / "run"
    proc = collect_process(out)
    assert wait_for(lambda: has_marker(out), 240)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    assert forge_gpu.read_manifest(out)["status"] == "closed"
    assert len(list(forge_gpu.read_episodes(out))) == forge_gpu.read_manifest(out)["completed_episodes"]
    os.sync()
