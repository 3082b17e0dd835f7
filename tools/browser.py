"""A real browser for the report's tests (test_report.py) and for its screenshot (bench/report.py), and for the
teleoperation page's tests (tests/teleop/test_browser.py): Debian's ``chromium``, headless, driven over the DevTools
protocol on a pipe (no driver, no extra package). :func:`load` opens a page from disk, waits until the page's own
check has run (``forge_gpu/_src/reading/report.py``), and reads back from the rendered DOM what it wrote there (the
errors it caught, each image's decoding), every console message and uncaught exception the browser reports, and, on
request, a screenshot. :class:`LivePage` opens a served page and drives it: JavaScript evaluated in it, keys pressed
and released as a person's keyboard would."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

#: The user the browser runs as when the tests run as root (CI): a browser run as root gives its threads a realtime
#: scheduling class (seen: two cores at 188%, in the kernel, after its renderer died, starving every other test and
#: deaf to SIGKILL until moved back to SCHED_OTHER); as nobody it gets none and cannot raise its nice 19.
NOBODY = 65534

#: Chromium's names on Debian and elsewhere.
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str | None:
    """The browser's path, or None where none is installed (.ci/run installs Debian's ``chromium``)."""
    return next((path for path in map(shutil.which, NAMES) if path), None)


@dataclass
class Page:
    """What the rendered page holds."""

    dom: str
    checked: bool
    """The page's check ran to its end (body ``data-checked="yes"``)."""
    errors: list[str]
    """What the page caught: script errors, console.error calls, images that failed to decode."""
    images: dict[str, str] = field(default_factory=dict)
    """Each image's alt text -> its ``data-decoded`` mark (``yes`` once decoded with pixels)."""
    sections: list[str] = field(default_factory=list)
    """The ids of the page's ``<section>`` elements, in order."""
    console: list[str] = field(default_factory=list)
    """Every console message and uncaught exception the browser reported for the page (independent of the page's
    own check)."""


class _Reader(HTMLParser):
    def __init__(self):
        super().__init__()
        self.body, self.images, self.sections, self.errors_text, self._in_errors = {}, {}, [], "", False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body":
            self.body = attrs
        elif tag == "img":
            self.images[attrs.get("alt", f"image {len(self.images)}")] = attrs.get("data-decoded", "")
        elif tag == "section":
            self.sections.append(attrs.get("id", ""))
        self._in_errors = tag == "pre" and attrs.get("id") == "page-errors"

    def handle_data(self, data):
        if self._in_errors:
            self.errors_text += data

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_errors = False


class _DevTools:
    """Chromium over the DevTools protocol on a pipe (``--remote-debugging-pipe``: commands in on fd 3, replies and
    events out on fd 4, each a JSON message ended by a NUL byte), one page attached."""

    def __init__(self, timeout: float):
        self.profile = tempfile.TemporaryDirectory(prefix="forge-chromium-")
        if os.geteuid() == 0:  # the browser runs as nobody (below): its profile is its own
            os.chown(self.profile.name, NOBODY, NOBODY)
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        # Above 4, so that putting them on 3 and 4 in the child cannot overwrite one with the other.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_read, from_browser_write)]
        os.close(to_browser_read)
        os.close(from_browser_write)
        to_browser_read, from_browser_write = high
        # --no-zygote: renderers are started directly (a zygote was seen spinning on a core after its renderer died,
        # on a loaded 2-core machine, for minutes); the whole session is killed at close, whatever is left of it.
        command = [chromium(), "--headless", "--no-sandbox", "--no-zygote", "--disable-gpu", "--hide-scrollbars"]
        command += ["--no-first-run", "--disable-dev-shm-usage"]
        command += ["--disable-extensions", "--mute-audio", f"--user-data-dir={self.profile.name}"]
        command += ["--remote-debugging-pipe", "about:blank"]

        def fds():  # the browser's fd 3 and 4; the lowest priority, and no root (which could raise it again)
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)
            # A realtime class is inherited across fork (a test process was seen in SCHED_FIFO): back to the normal one.
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            os.nice(19)
            resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))
            if os.geteuid() == 0:
                os.setgid(NOBODY)
                os.setuid(NOBODY)

        self.process = subprocess.Popen(
            command,
            pass_fds=(3, 4),  # kept open after preexec_fn has put the pipes there
            preexec_fn=fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, HOME=self.profile.name),
            start_new_session=True,  # its own process group: close() kills every process it started
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self.timeout = timeout  # for each answer
        self._buffer, self._next, self.events = b"", 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)  # (a stream of events must not hold the deadline off either)
            if reply.get("id") != self._next and time.monotonic() > deadline:
                raise TimeoutError(f"chromium did not answer {method} in time")
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"chromium: {method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, **params) -> dict:
        return self.call(method, self.session, **params)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], 0.5)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed its pipe")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the browser, if still there, and all it started
        except ProcessLookupError:
            pass
        self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self.profile.cleanup()


def load(path: str | os.PathLike, *, screenshot: str | os.PathLike | None = None, size=(1200, 2400), timeout=90):
    """Open ``path`` (an HTML file) headless, wait (up to ``timeout`` s, real time) until the page's own check has run
    and read the rendered page back; with ``screenshot``, also save a PNG of the first ``size`` pixels."""
    if chromium() is None:
        raise FileNotFoundError(f"no browser: install one of {', '.join(NAMES)} (apt-get install chromium)")
    try:
        return _load(path, screenshot, size, timeout)
    except (TimeoutError, RuntimeError):  # a browser that died or hung on a loaded machine: once more, afresh
        return _load(path, screenshot, size, timeout)


def _load(path, screenshot, size, timeout) -> Page:
    browser = _DevTools(min(timeout, 30))
    deadline = time.monotonic() + timeout
    page_copy = Path(browser.profile.name) / "page.html"  # readable by the browser's user
    shutil.copyfile(path, page_copy)
    os.chmod(page_copy, 0o644)
    try:
        browser.page("Runtime.enable")
        browser.page("Page.enable")
        browser.page(
            "Emulation.setDeviceMetricsOverride", width=size[0], height=size[1], deviceScaleFactor=1, mobile=False
        )
        browser.page("Page.navigate", url=page_copy.as_uri())
        checked = False
        while not checked and time.monotonic() < deadline:
            found = browser.page(
                "Runtime.evaluate",
                expression="document.body && document.body.getAttribute('data-checked')",
                returnByValue=True,
            )
            checked = found.get("result", {}).get("value") == "yes"
            if not checked:
                time.sleep(0.1)
        dom = browser.page("Runtime.evaluate", expression="document.documentElement.outerHTML", returnByValue=True)
        if screenshot is not None:
            shot = browser.page("Page.captureScreenshot", format="png")
            Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
        console = []
        for event in browser.events:
            params = event.get("params", {})
            if event.get("method") == "Runtime.consoleAPICalled":
                console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif event.get("method") == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                console.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
    finally:
        browser.close()
    reader = _Reader()
    reader.feed(dom["result"]["value"])
    return Page(
        dom=dom["result"]["value"],
        checked=reader.body.get("data-checked") == "yes",
        errors=json.loads(reader.errors_text) if reader.errors_text.strip() else [],
        images=reader.images,
        sections=reader.sections,
        console=console,
    )


#: What Chromium needs to type a key, by its ``KeyboardEvent.code``: the ``key`` it produces and its Windows virtual
#: key code.
_KEYS = {
    **{f"Key{c}": (c.lower(), ord(c)) for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"},
    **{f"Digit{d}": (str(d), 48 + d) for d in range(10)},
    "Space": (" ", 32), "Enter": ("Enter", 13), "Escape": ("Escape", 27),
    "ArrowLeft": ("ArrowLeft", 37), "ArrowUp": ("ArrowUp", 38), "ArrowRight": ("ArrowRight", 39),
    "ArrowDown": ("ArrowDown", 40),
}  # fmt: skip


class LivePage:
    """A page served over HTTP (``url``), open in headless Chromium until :meth:`close` (or the ``with`` block's
    end). :meth:`evaluate` runs JavaScript in it and returns the value; :meth:`key` presses or releases a key;
    :meth:`text` is the page's text; :meth:`console` what the browser reported (console messages, uncaught
    exceptions)."""

    def __init__(self, url: str, *, size=(1200, 900), timeout: float = 30):
        if chromium() is None:
            raise FileNotFoundError(f"no browser: install one of {', '.join(NAMES)} (apt-get install chromium)")
        self.browser = _DevTools(timeout)
        try:
            for method in ("Runtime.enable", "Page.enable"):
                self.browser.page(method)
            self.browser.page("Emulation.setDeviceMetricsOverride", width=size[0], height=size[1],
                              deviceScaleFactor=1, mobile=False)  # fmt: skip
            self.browser.page("Emulation.setFocusEmulationEnabled", enabled=True)  # keys reach the page headless
            self.navigate(url)
        except BaseException:
            self.browser.close()
            raise

    def navigate(self, url: str, timeout: float = 30) -> None:
        """Open ``url`` and wait until its document has loaded."""
        self.browser.page("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load in {timeout:g} s")
            time.sleep(0.05)

    def evaluate(self, expression: str):
        found = self.browser.page("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in found:
            raise RuntimeError(f"{expression}: {found['exceptionDetails'].get('text', 'an exception')}")
        return found.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 30, every: float = 0.02):
        """Evaluate ``expression`` until it is truthy; its value. TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not (value := self.evaluate(expression)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression!r} stayed false for {timeout:g} s")
            time.sleep(every)
        return value

    def key(self, code: str, down: bool = True) -> None:
        """Press (``down``) or release the key ``code`` (a ``KeyboardEvent.code``: KeyW, Digit1, Space, ...)."""
        key, vk = _KEYS[code]
        self.browser.page("Input.dispatchKeyEvent", type="keyDown" if down else "keyUp", code=code, key=key,
                          windowsVirtualKeyCode=vk, nativeVirtualKeyCode=vk)  # fmt: skip

    def tap(self, code: str) -> None:
        self.key(code, True)
        self.key(code, False)

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def console(self) -> list[str]:
        out = []
        for event in self.browser.events:
            params = event.get("params", {})
            if event.get("method") == "Runtime.consoleAPICalled":
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif event.get("method") == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                out.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        return out

    def close(self) -> None:
        self.browser.close()

    def __enter__(self) -> LivePage:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
