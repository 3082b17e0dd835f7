"""The teleoperation page's server (forge_gpu/_src/teleop/server.py) without a simulator: the page and its files
need the token; the socket needs the token and the page's own origin; on loopback another host name is refused;
a page gets the description, each new frame's status and JPEG image, and its held inputs reach the session's
inputs; closing the last page (or asking to close) calls on_close."""

import io
import json
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
from PIL import Image

from forge_gpu._src.teleop.keys import Inputs, load_keymap
from forge_gpu._src.teleop.server import TeleopServer, listen
from forge_gpu._src.teleop.session import Frame

pytest.importorskip("websockets", reason="websockets is the cli extra: pip install 'forge-gpu[cli]'")
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

DESCRIPTION = {"task": "lift", "action": ["dx"], "cameras": ["front", "wrist"], "keys": [], "deadzone": 0.15,
               "inputs": ["KeyW", "Enter"], "directory": "run"}  # fmt: skip


@pytest.fixture
def server():
    closed = threading.Event()
    inputs = Inputs(load_keymap())
    s = TeleopServer(listen("127.0.0.1", 0), DESCRIPTION, inputs, on_close=closed.set, linger=0.2)
    s.closed, s.inputs = closed, inputs
    yield s
    s.close()


def get(url: str, headers: dict | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def socket_url(server, token: str | None = None) -> str:
    return f"ws://127.0.0.1:{server.port}/socket" + (f"?token={token}" if token is not None else "")


def test_the_page_and_its_files_need_the_token(server):
    """With the printed URL's token: the page (its files named with the token) and its script; without it, or with
    another: 403 and one line saying so; an unknown path 404."""
    status, body = get(server.url)
    assert status == 200 and f"teleop.js?token={server.token}" in body
    assert get(f"http://127.0.0.1:{server.port}/teleop.js?token={server.token}")[0] == 200
    for url in (f"http://127.0.0.1:{server.port}/", f"http://127.0.0.1:{server.port}/?token=x",
                f"http://127.0.0.1:{server.port}/teleop.js"):  # fmt: skip
        status, body = get(url)
        assert (status, body) == (403, "forbidden: the token is missing or wrong; open the URL the command printed\n")
    assert get(f"http://127.0.0.1:{server.port}/other?token={server.token}")[0] == 404


def test_another_host_name_is_refused_on_loopback(server):
    """A request naming a host that is not a loopback name (a rebound DNS name) is refused, token or not;
    localhost with any port (an SSH tunnel's) is served."""
    status, body = get(server.url, {"Host": f"evil.example:{server.port}"})
    assert status == 403 and body.startswith("forbidden: host 'evil.example:")
    assert get(server.url, {"Host": "localhost:9999"})[0] == 200


def test_the_socket_needs_the_token_and_the_pages_origin(server):
    """No token, a wrong one, another origin or none: the handshake is refused with 403."""
    origin = f"http://127.0.0.1:{server.port}"
    for url, given in ((socket_url(server), origin), (socket_url(server, "x"), origin),
                       (socket_url(server, server.token), "http://evil.example"),
                       (socket_url(server, server.token), None)):  # fmt: skip
        with pytest.raises(InvalidStatus) as caught:
            connect(url, origin=given, open_timeout=10).close()
        assert caught.value.response.status_code == 403
    assert server.pages_seen == 0


def test_a_page_gets_frames_and_sends_its_inputs(server):
    """The description first; after show(), the status and the chosen camera's JPEG; held inputs reach the inputs
    (unknown ones dropped), a button's command is queued; the camera can be switched; the last page gone calls
    on_close."""
    rgb = np.zeros((1, 16, 16, 3), np.uint8)
    rgb[..., 0] = 200
    wrist = np.zeros((1, 16, 16, 3), np.uint8)
    with connect(socket_url(server, server.token), origin=f"http://127.0.0.1:{server.port}") as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["type"] == "hello" and hello["cameras"] == ["front", "wrist"] and hello["camera"] == "front"
        server.show(Frame(observation={"rgb": rgb, "wrist_rgb": wrist}, status={"step": 3}))
        status = json.loads(ws.recv(timeout=10))
        image = np.asarray(Image.open(io.BytesIO(ws.recv(timeout=10))))
        assert status == {"type": "status", "camera": "front", "step": 3}
        assert image.shape == (16, 16, 3) and abs(int(image[..., 0].mean()) - 200) < 4
        ws.send(json.dumps({"held": {"KeyW": 1, "KeyZ": 1, "Enter": 1}, "command": "keep"}))
        ws.send(json.dumps({"camera": "wrist"}))
        status = json.loads(ws.recv(timeout=10))
        image = np.asarray(Image.open(io.BytesIO(ws.recv(timeout=10))))
        assert status["camera"] == "wrist" and image.max() < 4
        assert server.inputs.held() == {"KeyW": 1.0, "Enter": 1.0} and server.inputs.take() == ["Enter", "keep"]
        assert not server.closed.is_set()
    assert server.closed.wait(5)
    assert server.inputs.held() == {}


def test_a_page_asking_to_close_calls_on_close(server):
    """{"close": true} from a page: on_close at once."""
    with connect(socket_url(server, server.token), origin=f"http://127.0.0.1:{server.port}") as ws:
        ws.recv(timeout=10)
        ws.send(json.dumps({"close": True}))
        assert server.closed.wait(5)


def test_a_taken_port_is_refused_in_one_line():
    """listen on a port already listened on: ValueError naming host and port and what to do."""
    with listen("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=rf"^--host 127.0.0.1 --port {port}: cannot listen there .*--port 0"):
            listen("127.0.0.1", port)
