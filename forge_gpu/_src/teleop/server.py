"""The teleoperation page's server: the page (``page/``: HTML, CSS, JavaScript, read from the package) over plain
HTTP and its socket (a WebSocket: the status and camera frames out, the held inputs in), on one port, with
``websockets`` (its threaded server; its ``process_request`` hook answers the plain HTTP requests).

Safe by default: it listens on 127.0.0.1 unless told another host, and every request (the page, its files, its
socket) must carry the random token of the printed URL (``?token=...``), compared in constant time. The socket is
refused to a page of another origin (its ``Origin`` must be the ``Host`` it asked, as a page served here has), and
on a loopback address every request must name a loopback host (``localhost``, ``127.0.0.1``, ``[::1]``, any port:
an SSH tunnel's too), so a web page that points a name of its own at 127.0.0.1 (DNS rebinding) is refused too. A
refusal is a 403 with one line saying why; nothing else is served.

Each page gets the task's description once (JSON), then per new frame its status (JSON) and the chosen camera's
image (JPEG, binary), sent by a thread of its own from the latest frame: a slow page skips frames, the stepping
never waits for it. When the last page has been gone for ``linger`` seconds (closed, not reloaded), or a page asks
to close, ``on_close`` is called."""

from __future__ import annotations

import hmac
import io
import ipaddress
import json
import secrets
import socket
import threading
import urllib.parse
from pathlib import Path

from forge_gpu._src.core.cameras import camera_fields

PAGE_DIR = Path(__file__).with_name("page")
"""The page's files, shipped with the package."""
FILES = {"/": ("index.html", "text/html"), "/teleop.js": ("teleop.js", "text/javascript"),
         "/teleop.css": ("teleop.css", "text/css")}  # fmt: skip
SOCKET_PATH = "/socket"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
}


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port); ValueError in one line where it cannot be."""
    try:
        return socket.create_server((host, port), family=_family(host), reuse_port=False)
    except OSError as e:
        raise ValueError(f"--host {host} --port {port}: cannot listen there ({e.strerror or e}); choose another "
                         "port (--port 0 picks a free one)") from e  # fmt: skip
    except (ValueError, OverflowError) as e:
        raise ValueError(f"--port {port}: expected a port number 0-65535") from e


def _family(host: str) -> int:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a name: its first address's family
        try:
            return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
        except OSError as e:
            raise ValueError(f"--host {host}: not an address of this machine ({e.strerror or e})") from e


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class TeleopServer:
    """Serve the page and its socket on ``sock`` (:func:`listen`) for ``description`` (the session's
    :meth:`describe`), its pages' inputs into ``inputs`` (:class:`keys.Inputs`), the camera ``camera`` shown first.

    :meth:`show` takes each new frame; :attr:`url` is the page's address with its token; :meth:`close` stops."""

    def __init__(self, sock: socket.socket, description: dict, inputs, *, camera: str = "", on_close=None,
                 linger: float = 3.0, token: str | None = None):  # fmt: skip
        from websockets.sync.server import serve

        self.description, self.inputs, self.on_close, self.linger = description, inputs, on_close, linger
        self.camera = camera or (description["cameras"][0] if description["cameras"] else "")
        self.token = token or secrets.token_urlsafe(24)
        host, port = sock.getsockname()[:2]
        self.port = port
        self.loopback = is_loopback(host)
        if ipaddress.ip_address(host).is_unspecified:  # every address: the machine's name reaches it
            host = socket.gethostname()
        shown = f"[{host}]" if ":" in host else host
        self.host = host
        self.url = f"http://{shown}:{port}/?token={self.token}"
        """The page's address, with the token it needs."""
        self.pages = 0
        """Pages connected now."""
        self.pages_seen = 0
        """Pages that connected since the start."""
        self._frame = None
        self._version = 0
        self._cond = threading.Condition()
        self._closing = threading.Event()
        self._gone: threading.Timer | None = None
        self._server = serve(self._handle, sock=sock, process_request=self._process_request, compression=None,
                             max_size=1 << 16, server_header=None)  # fmt: skip
        self._thread = threading.Thread(target=self._server.serve_forever, name="forge-teleop-server", daemon=True)
        self._thread.start()

    def show(self, frame) -> None:
        """The latest frame (``session.Frame``): each page's sender sends it when it can."""
        with self._cond:
            self._frame, self._version = frame, self._version + 1
            self._cond.notify_all()

    def close(self) -> None:
        """Stop serving: the pages are told the run is closed and disconnected."""
        self._closing.set()
        with self._cond:
            self._cond.notify_all()
        if self._gone is not None:
            self._gone.cancel()
        self._server.shutdown()
        self._thread.join(timeout=10)

    # -- requests -------------------------------------------------------------------------------

    def _process_request(self, connection, request):
        """Refuse what lacks the token, comes from another origin or names another host; serve the page's files;
        let the socket's handshake go on (None)."""
        url = urllib.parse.urlsplit(request.path)
        token = urllib.parse.parse_qs(url.query).get("token", [""])[0]
        host = request.headers.get("Host", "")
        if self.loopback and _host_name(host) not in LOOPBACK_NAMES:
            return _refuse(connection, f"forbidden: host {host!r} is not this machine's loopback name; open the URL "
                           "the command printed (or localhost through an SSH tunnel)")  # fmt: skip
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            return _refuse(connection, "forbidden: the token is missing or wrong; open the URL the command printed")
        if url.path == SOCKET_PATH:
            origin = request.headers.get("Origin")
            if origin != f"http://{host}":
                return _refuse(connection, f"forbidden: origin {origin!r} is not this page's (http://{host})")
            return None
        if url.path not in FILES:
            return _respond(connection, 404, "not found", "text/plain")
        name, kind = FILES[url.path]
        body = (PAGE_DIR / name).read_text()
        if name == "index.html":
            body = body.replace("{{token}}", self.token)
        return _respond(connection, 200, body, kind)

    # -- a page's socket -----------------------------------------------------------------------------

    def _handle(self, connection) -> None:
        from websockets.exceptions import ConnectionClosed

        page = object()
        with self._cond:
            self.pages += 1
            self.pages_seen += 1
            if self._gone is not None:
                self._gone.cancel()
                self._gone = None
        state = {"camera": self.camera}
        sender = threading.Thread(target=self._send, args=(connection, state), name="forge-teleop-page", daemon=True)
        try:
            connection.send(json.dumps({"type": "hello", **self.description, "camera": self.camera}))
            sender.start()
            for message in connection:
                self._receive(page, message, state)
        except ConnectionClosed:
            pass
        finally:
            self.inputs.drop(page)
            with self._cond:
                self.pages -= 1
                self._cond.notify_all()
                if self.pages == 0 and not self._closing.is_set():
                    self._gone = threading.Timer(self.linger, self._last_page_gone)
                    self._gone.daemon = True
                    self._gone.start()
            if sender.is_alive():
                sender.join(timeout=5)

    def _receive(self, page, message, state: dict) -> None:
        """One message of a page: ``{"held": {input: magnitude}}``, ``{"command": name}``, ``{"camera": name}`` or
        ``{"close": true}``; anything else is ignored."""
        try:
            data = json.loads(message)
        except (TypeError, ValueError):
            return
        if not isinstance(data, dict):
            return
        held = data.get("held")
        if isinstance(held, dict):
            known = set(self.description["inputs"])
            self.inputs.update(page, {k: _magnitude(v) for k, v in held.items() if k in known})
        if data.get("command") in ("start", "keep", "discard", "gripper"):
            self.inputs.command(data["command"])
        if data.get("camera") in self.description["cameras"]:
            state["camera"] = data["camera"]
            with self._cond:
                self._cond.notify_all()
        if data.get("close") is True and self.on_close is not None:
            self.on_close()

    def _send(self, connection, state: dict) -> None:
        """The page's sender: the latest frame's status and image, whenever there is a newer one."""
        from websockets.exceptions import ConnectionClosed

        sent, camera = 0, None

        def waiting(sent=0, camera=None) -> bool:  # nothing new to send, and the page still there
            fresh = self._frame is not None and (self._version != sent or state["camera"] != camera)
            return not (self._closing.is_set() or connection.state.name != "OPEN" or fresh)

        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda s=sent, c=camera: not waiting(s, c), timeout=1.0)
                    if self._closing.is_set() or connection.state.name != "OPEN":
                        break
                    if waiting(sent, camera):
                        continue
                    frame, sent, camera = self._frame, self._version, state["camera"]
                connection.send(json.dumps({"type": "status", "camera": camera, **frame.status}))
                if camera:
                    connection.send(_jpeg(frame.observation, camera))
            if self._closing.is_set():
                connection.send(json.dumps({"type": "closed"}))
        except (ConnectionClosed, OSError, RuntimeError):
            pass

    def _last_page_gone(self) -> None:
        with self._cond:
            if self.pages or self._closing.is_set():
                return
        if self.on_close is not None:
            self.on_close()


def _host_name(host: str) -> str:
    """The name of a ``Host`` header without its port (``[::1]:8765`` -> ``::1``)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _magnitude(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return max(-1.0, min(1.0, number)) if number == number else 0.0


def _respond(connection, status: int, body: str, kind: str):
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    reason = {200: "OK", 403: "Forbidden", 404: "Not Found"}[status]
    payload = body.encode()
    headers = Headers({**HEADERS, "Content-Type": f"{kind}; charset=utf-8", "Content-Length": str(len(payload)),
                       "Connection": "close"})  # fmt: skip
    return Response(status, reason, headers, payload)


def _refuse(connection, why: str):
    return _respond(connection, 403, why + "\n", "text/plain")


def _jpeg(observation: dict, camera: str) -> bytes:
    """The camera's RGB image of the frame as JPEG bytes."""
    from PIL import Image

    field = camera_fields(camera)[0]
    out = io.BytesIO()
    Image.fromarray(observation[field][0]).save(out, format="JPEG", quality=90)
    return out.getvalue()
