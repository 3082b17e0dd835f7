"""A real browser for the report's tests and for its screenshot (bench/report.py): Debian's ``chromium``, headless,
driven from the command line (no driver, no extra package). :func:`load` opens a page from disk, lets its scripts
run (``--virtual-time-budget``), and reads back from the rendered DOM what the page's own check wrote there (see
``forge_gpu/_src/data/tools/report_page.py``): whether it ran, the errors it caught, each image's decoding; and, on
request, a screenshot."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

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
    """Every console message Chromium itself logged for the page (independent of the page's own check; uncaught
    errors are among them)."""


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


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="forge-chromium-") as profile:
        command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
        command += ["--disable-extensions", "--mute-audio", f"--user-data-dir={profile}", "--virtual-time-budget=10000"]
        command += ["--enable-logging=stderr", "--v=0", *args]
        env = dict(os.environ, HOME=profile)
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


#: Chromium's own log line for each console message of the page (whatever its level, which the line does not keep):
#: ``[...:INFO:CONSOLE:1] "message", source: file:///... (1)``.
_CONSOLE = re.compile(r":CONSOLE[^\]]*\] \"(.*)\", source: ")


def load(path: str | os.PathLike, *, screenshot: str | os.PathLike | None = None, size=(1200, 2400), timeout=90):
    """Open ``path`` (an HTML file) headless; with ``screenshot``, also save a PNG of the first ``size`` pixels."""
    if chromium() is None:
        raise FileNotFoundError(f"no browser: install one of {', '.join(NAMES)} (apt-get install chromium)")
    url = Path(path).resolve().as_uri()
    done = _run(["--dump-dom", url], timeout)
    if done.returncode != 0:
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    reader = _Reader()
    reader.feed(done.stdout)
    console = [m.group(1) for m in _CONSOLE.finditer(done.stderr)]
    page = Page(
        dom=done.stdout,
        checked=reader.body.get("data-checked") == "yes",
        errors=json.loads(reader.errors_text) if reader.errors_text.strip() else [],
        images=reader.images,
        sections=reader.sections,
        console=console,
    )
    if screenshot is not None:
        shot = _run([f"--window-size={size[0]},{size[1]}", f"--screenshot={Path(screenshot).resolve()}", url], timeout)
        if shot.returncode != 0 or not Path(screenshot).is_file():
            raise RuntimeError(f"chromium made no screenshot ({shot.returncode}): {shot.stderr[-2000:]}")
    return page
