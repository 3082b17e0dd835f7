"""Know that a thread is blocked without timing it: its stack (``sys._current_frames``) ends in
``threading.Condition.wait``, under a frame of the named function. A test that holds a thread blocked takes
the time from that moment on, and asserts that the wait the code recorded is at least as long as the test
held it: a relation between two measurements, never a duration, so it holds on any machine."""

import sys
import threading
import time

_WAIT = threading.Condition.wait.__code__


def blocked_in(function: str, thread: threading.Thread | None = None) -> bool:
    """Whether ``thread`` (None: any thread but the caller's) waits on a Condition inside ``function``."""
    frames = sys._current_frames()
    idents = [thread.ident] if thread is not None else [i for i in frames if i != threading.get_ident()]
    for ident in idents:
        frame = frames.get(ident)
        if frame is None or frame.f_code is not _WAIT:
            continue
        while frame is not None:
            if frame.f_code.co_name == function:
                return True
            frame = frame.f_back
    return False


def wait_until_blocked(function: str, thread: threading.Thread | None = None, timeout: float = 60.0) -> float:
    """Poll until a thread is blocked in ``function`` (see :func:`blocked_in`); ``time.perf_counter()`` then.
    ``timeout`` only bounds a hang: past it, AssertionError."""
    deadline = time.monotonic() + timeout
    while not blocked_in(function, thread):
        if time.monotonic() > deadline:
            raise AssertionError(f"no thread was blocked in {function}() within {timeout} s")
        time.sleep(0.001)
    return time.perf_counter()
