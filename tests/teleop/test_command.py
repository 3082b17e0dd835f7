"""``forge-gpu teleop`` on the command line (forge_gpu/cli/_teleop.py): bad input is refused in one line with exit
status 2 and nothing created (a task without the end-effector action, a bad key map, a taken port, an unknown
camera); Ctrl-C closes the run with the episode kept (exit 130) and verify calls it ok."""

import json
import re
import signal
import subprocess
import sys
import time

import pytest

import forge_gpu
from forge_gpu._src.teleop.server import listen
from forge_gpu.cli import main

pytest.importorskip("websockets", reason="websockets is the cli extra: pip install 'forge-gpu[cli]'")
from websockets.sync.client import connect


def refused(capsys, *args: str) -> str:
    assert main(["teleop", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_bad_input_is_refused_in_one_line_and_creates_nothing(capsys, tmp_path):
    """lift without its ee variant, a bad key map file, a taken port, a camera the task does not record."""
    out = tmp_path / "run"
    err = refused(capsys, "lift", "--out", str(out))
    assert "teleop drives the end-effector action" in err and "add --variant ee" in err
    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\nKeyW = { move = "up", value = 1.0 }\n')
    err = refused(capsys, "lift", "--variant", "ee", "--out", str(out), "--keys", str(keys))
    assert err.startswith(f"forge-gpu: --keys {keys}: keys.KeyW.move = 'up': allowed values are dx")
    with listen("127.0.0.1", 0) as taken:
        port = str(taken.getsockname()[1])
        err = refused(capsys, "lift", "--variant", "ee", "--out", str(out), "--port", port)
    assert f"--port {port}: cannot listen there" in err
    err = refused(capsys, "lift", "--variant", "ee", "--out", str(out), "--port", "0", "--camera", "top",
                  "--device", "cpu", "--set", "params.render=false")  # fmt: skip
    assert err == "forge-gpu: --camera top: the task records no such camera; its cameras are none\n"
    assert not out.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_closes_the_run_with_the_episodes_kept(tmp_path):
    """An episode started, ended by the time limit and kept through the socket; SIGINT: exit 130, the run closed
    with that episode, marked teleoperated, verify ok."""
    out = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "forge_gpu.cli", "teleop", "lift", "--variant", "ee", "--out", str(out), "--port", "0",
         "--device", "cpu", "--set", "params.render=false", "--set", "max_steps=5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        lines = []
        while not (found := re.search(r"open http://127\.0\.0\.1:(\d+)/\?token=(\S+)", "\n".join(lines))):
            line = process.stdout.readline()
            assert line, "\n".join(lines)
            lines.append(line)
        port, token = found.groups()
        with connect(f"ws://127.0.0.1:{port}/socket?token={token}", origin=f"http://127.0.0.1:{port}") as ws:
            assert json.loads(ws.recv(timeout=30))["type"] == "hello"
            ws.send(json.dumps({"command": "start"}))
            deadline = time.monotonic() + 60
            while (message := json.loads(ws.recv(timeout=30)))["phase"] != "ended":
                assert time.monotonic() < deadline, message
            ws.send(json.dumps({"command": "keep"}))
            while json.loads(ws.recv(timeout=30))["kept"] != 1:
                pass
            process.send_signal(signal.SIGINT)  # the page still open: the signal, not its closing, ends the run
            rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, "".join(lines) + rest
    assert rest.splitlines()[-2:] == ["kept 1 episodes, discarded 0", f"run: {out}"]
    assert main(["verify", str(out)]) == 0
    (episode,) = forge_gpu.reading.read_episodes(out)
    assert episode.steps == 5 and episode.truncated[-1] and episode.params["teleoperated"] == 1.0
