"""Warp and torch wrappers of each other's CUDA streams, made once per stream.

``wp.stream_from_torch`` makes a new ``wp.Stream`` on every call (and that stream a new event at its first
``wait_stream``), and ``wp.stream_to_torch`` a new ``torch.cuda.ExternalStream``: ordering each step after
torch would make both every step. :func:`warp_stream_of` and :func:`torch_stream_of` keep the last
``CACHED_STREAMS`` wrappers, keyed by the stream's device and CUDA handle. A wrapper holds its source
stream (Warp keeps that reference), so a cached handle cannot be freed and reused by another stream while
it is cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import warp as wp

CACHED_STREAMS = 8
"""Wrappers kept per direction (least recently used dropped first)."""


class _Wrappers:
    """``make(stream)`` once per ``(device, handle)`` of ``stream``, for the last CACHED_STREAMS streams."""

    def __init__(self, make: Callable):
        self._make = make
        self._cache: OrderedDict[tuple[str, int], object] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, stream):
        key = (str(stream.device), int(stream.cuda_stream))
        with self._lock:
            wrapper = self._cache.get(key)
            if wrapper is None:
                wrapper = self._cache[key] = self._make(stream)
                while len(self._cache) > CACHED_STREAMS:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(key)
            return wrapper


warp_stream_of = _Wrappers(lambda torch_stream: wp.stream_from_torch(torch_stream))
"""``wp.Stream`` of a ``torch.cuda.Stream`` (``wp.stream_from_torch``, once per stream)."""

torch_stream_of = _Wrappers(lambda warp_stream: wp.stream_to_torch(warp_stream))
"""``torch.cuda.ExternalStream`` of a ``wp.Stream`` (``wp.stream_to_torch``, once per stream)."""
