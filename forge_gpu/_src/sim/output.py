"""Warp's own output: quiet by default, all of it on request.

Warp prints a greeting when it starts, one line per kernel module it loads (dozens per task), and, on a
machine without an NVIDIA driver, "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver. GPU
execution will not be available." from its native library, which reads like a failure to a CPU user.
forge_gpu starts Warp through :func:`init_warp`, which keeps that quiet unless verbose output is asked
for: ``FORGE_GPU_VERBOSE=1`` in the environment, or the command line's ``--verbose``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator

#: Set to 1 (or true, yes, on) for Warp's greeting, module-load lines and driver warnings.
VERBOSE_ENV = "FORGE_GPU_VERBOSE"
#: The line Warp's native library prints at start-up when no CUDA driver can be loaded.
_NO_DRIVER = "Could not find or load the NVIDIA CUDA driver"

_verbose: bool | None = None  # set by the command line's --verbose; None: the environment decides
_started = False
_lock = threading.Lock()


def set_verbose(verbose: bool) -> None:
    """Ask for Warp's output (True) or keep it quiet (False), whatever FORGE_GPU_VERBOSE says."""
    global _verbose
    _verbose = verbose


def is_verbose() -> bool:
    """Whether Warp's output is wanted: :func:`set_verbose`, else FORGE_GPU_VERBOSE."""
    if _verbose is not None:
        return _verbose
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def init_warp() -> None:
    """Start Warp's runtime (once per process), quietly unless :func:`is_verbose`.

    Quiet means Warp's log level goes from its default INFO to WARNING (no greeting, no module-load
    lines; a level the caller chose is kept) and the no-driver line above is dropped; anything else
    printed while Warp starts still reaches stderr.
    """
    global _started
    import warp as wp

    with _lock:
        if _started:
            return
        if is_verbose():
            wp.init()
        else:
            if wp.config.log_level == wp.LOG_INFO:
                wp.config.log_level = wp.LOG_WARNING
            held: list[str] = []
            try:
                with _stderr_held(held):
                    wp.init()
            finally:  # also when Warp fails to start: its own words say why
                sys.stderr.writelines(line for line in held if _NO_DRIVER not in line)
                sys.stderr.flush()
        _started = True


@contextlib.contextmanager
def _stderr_held(held: list[str]) -> Iterator[None]:
    """Send file descriptor 2 (where native code prints) to a temporary file for the block, then append
    its lines to ``held``. Where fd 2 cannot be redirected, nothing is held."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            held += sink.read().decode(errors="replace").splitlines(keepends=True)
