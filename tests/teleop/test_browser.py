"""``forge-gpu teleop`` in headless Chromium (tools/browser.py), driven over the DevTools protocol as a person
would: without the token the page is refused; with it the page shows the camera frames; a scripted key sequence
lifts lift's cube (seed 0, whose drawn cube is known) and keeps the episode, whose recorded actions are the key
map's values; a second episode is discarded; closing the page closes the run, which holds exactly the kept
episode, marked teleoperated and successful, and which ``verify`` calls ok. lift on the Panda's ee variant at 128 px,
on the CPU, stepped at the control rate."""

import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers.scripts import load_script

import forge_gpu
from forge_gpu.cli import main

TOOLS = Path(__file__).resolve().parents[2] / "tools"
browser = load_script(TOOLS / "browser.py", "tools_browser")
needs_chromium = pytest.mark.skipif(browser.chromium() is None, reason="no chromium: .ci/run installs it (apt-get)")

CUBE = (0.5886, 0.0290)
"""lift's cube at seed 0, episode 0: its drawn centre x, y [m] (the test checks the run's param against it)."""
GRASP_Z = 0.03
"""The tcp's height when the gripper closes: about the cube's centre [m]."""
AXES = {0: ("KeyW", "KeyS"), 1: ("KeyA", "KeyD"), 2: ("KeyR", "KeyF")}
"""Per axis of the tcp's position, the keys that move it + and -."""


class Command:
    """``forge-gpu teleop`` in a process of its own; its printed lines gathered by a thread."""

    def __init__(self, *args: str):
        self.lines: list[str] = []
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen([sys.executable, "-m", "forge_gpu.cli", "teleop", *args], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def url(self, timeout: float = 240) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if found := re.search(r"open (http://\S+)", line):
                    return found.group(1)
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError("no URL printed:\n" + "\n".join(self.lines))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def status(page) -> dict:
    return page.evaluate("window.teleop.status")


def hold_until(page, key: str, done, timeout: float = 20.0) -> dict:
    """Hold ``key`` until ``done(status)``; the last status."""
    page.key(key, True)
    deadline = time.monotonic() + timeout
    try:
        while not done(s := status(page)):
            assert time.monotonic() < deadline, f"{key} held {timeout:g} s without reaching it: {s}"
            time.sleep(0.01)
    finally:
        page.key(key, False)
    return s


def approach(page, axis: int, target: float, fine: float = 0.006) -> None:
    """Move the tcp along ``axis`` to ``target``: fast (speed 1: 1 cm a step) to within 3 cm, then at speed 0.25
    (2.5 mm a step) by holds of as many steps as about 70% of the error asks, each followed by a pause while the
    arm settles, until it rests within ``fine`` of it."""
    plus, minus = AXES[axis]
    error = target - status(page)["point"][axis]
    if abs(error) > 0.03:
        page.tap("Digit3")
        key = plus if error > 0 else minus
        hold_until(page, key, lambda s: (target - s["point"][axis]) * error < 0.03 * abs(error))
    page.tap("Digit1")
    for _ in range(20):
        time.sleep(0.3)  # the arm settles on its targets
        error = target - status(page)["point"][axis]
        if abs(error) < fine:
            return
        start = status(page)["step"]
        steps = max(1, round(0.7 * abs(error) / 0.0025))
        hold_until(page, plus if error > 0 else minus, lambda s, n=start + steps: s["step"] >= n)
    raise AssertionError(f"the tcp did not come within {fine} m of {target} on axis {axis}: {status(page)}")


@needs_chromium
def test_a_person_at_the_page_lifts_the_cube_and_keeps_the_episode(tmp_path):
    """Refused without the token; frames shown; a scripted key sequence lifts the cube (success), kept; a second
    episode discarded; the page's close closes the run: one episode, successful, teleoperated, its actions the key
    map's values at the speeds used, and verify ok; the run is a source for generation as it is."""
    out = tmp_path / "run"
    command = Command("lift", "--variant", "ee", "--out", str(out), "--port", "0", "--device", "cpu", "--seed", "0",
                      "--set", "params.image_size=128", "--set", "max_steps=1500")  # fmt: skip
    try:
        url = command.url()
        bare = url.split("?")[0]
        try:
            urllib.request.urlopen(bare, timeout=10)
            raise AssertionError("the page was served without its token")
        except urllib.error.HTTPError as e:
            assert e.code == 403
        with browser.LivePage(bare) as page:
            assert page.text().startswith("forbidden: the token is missing or wrong")
            page.navigate(url)
            page.wait_for("window.teleop.frames >= 1 && document.getElementById('camera').naturalWidth === 128", 60)
            hello = page.evaluate("window.teleop.hello")
            assert hello["cameras"] == ["front", "wrist"] and hello["action"][:3] == ["dx", "dy", "dz"]
            assert page.evaluate("document.querySelectorAll('#keytable tbody tr').length") == len(hello["keys"])
            assert status(page)["phase"] == "ready" and page.evaluate("window.teleop.errors.length") == 0

            page.tap("Enter")
            page.wait_for("window.teleop.status.phase === 'running'")
            for axis, target in ((0, CUBE[0]), (1, CUBE[1]), (2, 0.10), (2, GRASP_Z), (0, CUBE[0]), (1, CUBE[1])):
                approach(page, axis, target)
            page.tap("Space")  # close the gripper
            page.wait_for("window.teleop.status.gripper === 'closed'")
            time.sleep(0.8)
            page.tap("Digit3")
            hold_until(page, "KeyR", lambda s: s["point"][2] > 0.2 or s["phase"] != "running")
            fps, rate = page.evaluate("window.teleop.fps"), status(page)["rate"]
            ended = page.wait_for("window.teleop.status.phase === 'ended' && window.teleop.status", 20)
            assert ended["outcome"] == "success" and ended["success"], ended
            page.tap("KeyK")
            page.wait_for("window.teleop.status.kept === 1 && window.teleop.status.phase === 'ready'")

            page.tap("Enter")
            page.wait_for("window.teleop.status.phase === 'running'")
            hold_until(page, "KeyS", lambda s: s["step"] >= 5)
            page.tap("KeyX")
            page.wait_for("window.teleop.status.discarded === 1 && window.teleop.status.phase === 'ready'")
            assert page.evaluate("window.teleop.errors.length") == 0, page.console()
            page.evaluate("document.getElementById('close').click()")
            assert command.process.wait(timeout=60) == 0, "\n".join(command.lines)
        print(f"lift at 128 px, CPU: the page showed {fps} frames/s, the world stepped {rate} steps/s")
    finally:
        command.close()
    assert command.lines[-2:] == ["kept 1 episodes, discarded 1", f"run: {out}"]
    assert main(["verify", str(out)]) == 0
    (episode,) = forge_gpu.reading.read_episodes(out)
    np.testing.assert_allclose(episode.params["cube_position"], CUBE, atol=1e-4)
    assert episode.params["teleoperated"] == 1.0 and episode.next["success"][-1] and episode.terminated[-1]
    pose = episode.action[:, :6]
    allowed = [np.zeros(6, np.float32)]  # one key held at a time, at speed 1 or 0.25
    allowed += [sign * speed * np.eye(6, dtype=np.float32)[axis] for axis in range(3) for sign in (1, -1)
                for speed in (1.0, 0.25)]  # fmt: skip
    matches = [any(np.array_equal(row, a) for a in allowed) for row in pose]
    assert all(matches), pose[~np.array(matches)]
    assert {round(float(v), 2) for v in pose[:, 0]} >= {1.0, 0.25} and pose[:, 2].min() == -1.0
    gripper = episode.action[:, 6]
    closed = int(np.argmax(gripper == 0.0))
    assert closed > 0 and (gripper[:closed] == 0.08).all() and (gripper[closed:] == 0.0).all()
    # the kept run is a source for generation as it is: its one episode cut into lift's subtasks, a success made
    generated = forge_gpu.recording.generate(out, tmp_path / "generated", episodes=1, num_envs=2, device="cpu",
                                             overrides={"params.render": False})  # fmt: skip
    assert (generated.episodes, generated.sources) == (1, 1)
