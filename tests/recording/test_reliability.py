"""Kills, full disks and repair: only whole episodes are ever visible, and nothing hangs."""

import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.synthetic import SyntheticSim, make_batches, published, record, synthetic_description

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
        visible = list(forge_gpu.reading.read_episodes(out))  # raises on a torn or invalid episode
        assert forge_gpu.formats.read_manifest(out)["status"] == "recording"
        assert main(["repair", str(out)]) == 0
        manifest = forge_gpu.formats.read_manifest(out)
        repaired = list(forge_gpu.reading.read_episodes(out))
        assert manifest["status"] == "closed" and manifest["completed_episodes"] == len(repaired)
        # packed: repair may also publish a block written whole just before the kill; it drops nothing
        assert len(repaired) == len(visible) >= 1 if format == "npz" else len(repaired) >= len(visible) >= 1
        keys = {(e.env_id, e.episode_id) for e in repaired}
        assert all((e.env_id, e.episode_id) in keys for e in visible)
        assert "repaired" in manifest and not list(out.glob("*.tmp"))
        before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in out.iterdir())
        assert main(["repair", str(out)]) == 0
        assert sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in out.iterdir()) == before
        assert len(list(forge_gpu.reading.read_episodes(out))) == len(repaired)


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
def small_filesystem(tmp_path, size="512k", options=""):
    """A tiny tmpfs (``options``: more mount options, e.g. ",ro") where the test may mount one (root);
    otherwise None."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}{options}", "tmpfs", str(mount)], capture_output=True
    )
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
    import forge_gpu._src.formats.npz.write as recorder_module
    import forge_gpu._src.formats.packed.write as packed_module

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
        assert not list(out.glob("*.tmp"))  # the room kept for run.json is given back too
        episodes = list(forge_gpu.reading.read_episodes(out))  # whole and valid, or the reader raises
        manifest = forge_gpu.formats.read_manifest(out)
        # The room kept for the final manifest lets it say `failed` even on a full disk.
        assert manifest["status"] == "failed" and "No space" in manifest["error"]
        assert manifest["completed_episodes"] == len(episodes)
        assert main(["repair", str(out)]) == 0  # cuts a torn last block, if any
        assert len(list(forge_gpu.reading.read_episodes(out))) == len(episodes)


def test_manifest_that_cannot_be_written_says_to_repair(tmp_path, capsys, monkeypatch):
    """When even the final run.json cannot be written, collect exits 1 saying so and naming the repair
    command, which then closes the run."""
    import forge_gpu._src.recording.base as recorder_base

    inject_enospc(monkeypatch, "packed")
    real, calls = recorder_base.write_json_atomic, []

    def first_only(path, obj, **kwargs):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, obj, **kwargs)

    monkeypatch.setattr(recorder_base, "write_json_atomic", first_only)
    out = tmp_path / "run"
    args = ["collect", "cartpole", "--envs", "4", "--episodes", "1000", "--set", "max_steps=10", "--out", str(out)]
    assert run_main_with_timeout(args) == 1
    err = capsys.readouterr().err
    assert "run.json could not be updated and still says 'recording'" in err and f"forge-gpu repair {out}" in err
    assert forge_gpu.formats.read_manifest(out)["status"] == "recording"
    monkeypatch.undo()
    assert main(["repair", str(out)]) == 0
    assert forge_gpu.formats.read_manifest(out)["status"] == "closed"


def fill(directory: Path) -> Path:
    """Write a file into ``directory`` until its file system is full; return it."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(bytes(4096))
    return filler


@pytest.mark.parametrize("reserve", [False, True])
def test_repair_on_a_full_disk(tmp_path, capsys, monkeypatch, reserve):
    """repair on a full disk: with the room a killed recorder kept for run.json (removed as a temporary) it
    closes the run; without it, one line and exit 1, then it succeeds once space is freed."""
    from forge_gpu._src.recording.base import MANIFEST_RESERVE

    env = synthetic_description(num_envs=2, max_steps=5)
    killed = tmp_path / "killed"
    record(str(killed), env, make_batches(SyntheticSim(env, seed=1, end_prob=0.4), 20))
    manifest = json.loads((killed / "run.json").read_text())
    (killed / "run.json").write_text(json.dumps(dict(manifest, status="recording")))
    if reserve:
        (killed / MANIFEST_RESERVE).write_bytes(bytes(64 << 10))
    with small_filesystem(tmp_path) as mount:
        if mount is None:
            if reserve:
                pytest.skip("a full disk needs a tmpfs")
            import forge_gpu._src.curation.repair as repair_module

            monkeypatch.setattr(repair_module, "write_json_atomic", inject_full_disk)
            run, filler = killed, None
        else:
            run = mount / "run"
            subprocess.run(["cp", "-r", str(killed), str(run)], check=True)
            filler = fill(mount)
        capsys.readouterr()
        code = main(["repair", str(run)])
        err = capsys.readouterr().err
        if reserve:
            assert code == 0 and forge_gpu.formats.read_manifest(run)["status"] == "closed", err
            return
        assert code == 1 and len(err.splitlines()) == 1 and "Traceback" not in err
        assert str(run) in err and "No space left on device" in err
        assert forge_gpu.formats.read_manifest(run)["status"] == "recording"
        if filler is not None:
            filler.unlink()
        monkeypatch.undo()
        assert main(["repair", str(run)]) == 0 and forge_gpu.formats.read_manifest(run)["status"] == "closed"


def inject_full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_recorder_that_cannot_keep_room_for_its_manifest_leaves_nothing(tmp_path, monkeypatch):
    """A disk too full for the room kept for run.json: the recorder raises OSError naming the directory and
    leaves no directory behind."""
    import forge_gpu._src.recording.base as recorder_base
    from forge_gpu.recording import PackedRecorder

    monkeypatch.setattr(recorder_base, "_preallocate", inject_full_disk)
    with pytest.raises(OSError, match="cannot start a run in .*run: No space left"):
        PackedRecorder(tmp_path / "run", synthetic_description())
    assert not (tmp_path / "run").exists()


def test_out_on_a_read_only_file_system_is_bad_input(tmp_path, capsys, monkeypatch):
    """--out on a read-only file system exits 2 in one line and creates nothing, even where os.access
    says the place is writable (as it can for some mounts)."""
    with small_filesystem(tmp_path, "64k", ",ro") as mount:
        if mount is None:
            pytest.skip("mounting a read-only tmpfs needs root")
        monkeypatch.setattr(os, "access", lambda *args, **kwargs: True)
        out = mount / "runs" / "run"
        assert main(["collect", "cartpole", "--envs", "2", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and f"--out {out}: cannot write in {mount}" in err and "Read-only" in err
        assert os.listdir(mount) == []


def test_repair_refuses_a_non_run(tmp_path, capsys):
    """repair of a directory without a run.json is bad input (2), with an unreadable one exits 1; it deletes
    nothing."""
    (tmp_path / "notes.tmp").write_text("mine")
    assert main(["repair", str(tmp_path)]) == 2
    (tmp_path / "run.json").write_text("{not json")
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
    assert forge_gpu.formats.read_manifest(out)["status"] == "closed"
    assert len(list(forge_gpu.reading.read_episodes(out))) == forge_gpu.formats.read_manifest(out)["completed_episodes"]
    os.sync()
