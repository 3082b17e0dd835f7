"""HostSnapshotTransport: a ring of K host slots that each hold one step's batch.

The env packs its whole result into one contiguous buffer at the end of each step
(``VectorEnv.packed_result``), so publishing a step is one copy into one slot, and each field of the
host batch is a view into that slot. On CUDA the slots are page-locked (Warp pinned arrays) and the
copy is issued on the env's stream right after the step, with a completion event per slot: the CPU
never waits for it, the next step is queued behind it, and the consumer waits on the slot's event.
On the CPU the slots are numpy buffers.

With an ``encoder`` (``collect/encode.py``) the image fields it encodes are not copied raw: right after the step
the encoder turns them into payloads where the step ran (nvJPEG on CUDA), and the slot receives the other fields
(a few copies of adjacent byte runs) and each encoded field's payloads, of variable length, in an area of bounded
capacity (overflow: :class:`~forge_gpu._src.collect.encode.PayloadAreas`); the consumer's batch holds an
:class:`~forge_gpu._src.core.codecs.EncodedFrames` for each encoded field.

Taking a slot blocks while all K are held by the consumer or in flight: that wait is where backpressure throttles
the stepping loop, and it is counted as stall time.

No wait is blind: ``publish(timeout=...)`` and ``get(timeout=...)`` raise ``TimeoutError`` naming the step
(and the slots) they waited for, and with or without a timeout a waiting side looks every
``PEER_POLL_SECONDS`` whether the other side is still there: a publish whose consumer threads have all
ended without closing or failing the transport (they will release nothing), or a get whose publisher
threads have all ended without closing it, raises :class:`TransportClosed` instead of waiting forever. A
consumer should still give its error to :meth:`fail` (``collect``'s recorder thread does), so that the
publisher raises at once and says why.

The simulation half of ``forge_gpu.recording`` (``_src/collect``: it drives the env, with Warp); the data half,
``_src/recording``, never imports Warp.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import warp as wp

from forge_gpu._src.collect.encode import FrameEncoder, PayloadAreas, split_layout
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.sim.step_result import StepResult


@dataclass
class HostBatch:
    """One received step: numpy views into slot ``slot``, valid until :meth:`HostSnapshotTransport.release`."""

    slot: int
    observation: dict[str, np.ndarray]
    result: StepResult


class TransportClosed(Exception):
    """Raised to a publisher when the consumer failed or ended or the transport was closed; to a consumer when
    every publisher ended without closing the transport."""


PEER_POLL_SECONDS = 0.05
"""How often a waiting ``publish`` or ``get`` looks whether the threads on the other side still run [s]."""


@runtime_checkable
class Transport(Protocol):
    """How steps travel from the stepping thread to the recorder thread (the seam for a transport).

    ``collect`` publishes each step's result, the recorder thread takes batches with ``get`` and gives each
    back with ``release``; ``close`` ends the stream, ``fail`` stops the publisher (it raises
    :class:`TransportClosed`). ``publish`` and ``get`` take a ``timeout`` [s] past which they raise
    ``TimeoutError``. ``name`` is written to run.json's ``transport``. :class:`HostSnapshotTransport`
    is the implementation; ``collect(transport=...)`` takes a factory ``(env, slots) -> Transport``."""

    name: str
    bytes_per_step: int
    """Bytes copied per published step."""
    stall_seconds: float
    """Time ``publish`` waited for a free slot [s]."""

    def publish(self, result: StepResult | None = None, timeout: float | None = None) -> None: ...

    def get(self, timeout: float | None = None) -> HostBatch | None: ...

    def release(self, batch: HostBatch) -> None: ...

    def close(self) -> None: ...

    def fail(self, error: BaseException) -> None: ...


class HostSnapshotTransport:
    """Copies each step's batch (observation, executed action, reward, flags, active) to host slots.

    Args:
        env: The :class:`VectorEnv` whose ``result`` is published.
        slots: K, the number of host slots (at least 2 lets stepping overlap consumption).
        encoder: the encode stage (``collect/encode.make_encoder``), or None: every field is copied raw.
        capacity: with an encoder, each encoded field's area per slot [bytes] (default: its raw bytes per step).
    """

    name = "host_snapshot"

    def __init__(self, env, slots: int = 4, *, encoder: FrameEncoder | None = None, capacity: int | None = None):
        check_int("slots", slots, minimum=1)
        if capacity is not None:
            check_int("capacity", capacity, minimum=1)
        self.env = env
        self.slots = slots
        self.device = env.device
        self._cuda = self.device.is_cuda
        layout = env.result_layout
        self._runs = None  # with an encoder: the byte runs of the fields copied raw
        self.payloads = None
        """With an encoder: the encoded fields' areas and figures (``PayloadAreas``)."""
        if encoder is not None:
            self.payloads = PayloadAreas(encoder, layout, slots, pinned=self._cuda, capacity=capacity)
            self._runs, layout, fixed = split_layout(layout, {f"obs/{name}" for name in encoder.fields})
        self.bytes_per_step = int(env.packed_result.capacity) if encoder is None else fixed
        """Bytes copied raw per published step (with an encoder, the encoded fields' bytes are ``payloads``')."""
        self._slots: list = []  # per slot: the bytes the copy lands in (pinned Warp array on CUDA, numpy on CPU)
        self._views: list[dict[str, np.ndarray]] = []  # per slot: one typed view per field
        for _ in range(slots):
            if self._cuda:
                pinned = wp.empty(self.bytes_per_step, dtype=wp.uint8, device="cpu", pinned=True)
                self._slots.append(pinned)
                raw = pinned.numpy()
            else:
                raw = np.empty(self.bytes_per_step, np.uint8)
                self._slots.append(raw)
            self._views.append(
                {
                    name: raw[offset : offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize]
                    .view(dtype)
                    .reshape(shape)
                    for name, offset, shape, dtype in layout
                }
            )
        self._packed = None if self._cuda else env.packed_result.numpy()  # a view, made once (CPU)
        if self._cuda:
            self._done = [wp.Event(self.device, enable_timing=True) for _ in range(slots)]
            self._start = [wp.Event(self.device, enable_timing=True) for _ in range(slots)]
        self._cond = threading.Condition()
        self._free = deque(range(slots))
        self._ready: deque[int] = deque()
        self._closed = False
        self._error: BaseException | None = None
        self._publishers: set[threading.Thread] = set()  # threads that published: a waiting get checks them
        self._consumers: set[threading.Thread] = set()  # threads that took batches: a waiting publish checks them
        self._taken = 0  # batches handed out by get: the step the next get waits for
        self.steps = 0
        """Steps published."""
        self.stall_seconds = 0.0
        """Time the publisher waited for a free slot [s]."""
        self.copy_seconds = 0.0
        """Time spent issuing copies (CPU: the copies themselves) [s]."""
        self.device_copy_seconds = 0.0
        """CUDA only: device-to-host copy time measured with events [s]."""

    # -- producer ------------------------------------------------------------------------------

    def publish(self, result: StepResult | None = None, timeout: float | None = None) -> None:
        """Copy the env's current result (``result``, if given, must be ``env.result``) into a free slot;
        block while none is free.

        Raises :class:`TransportClosed` when the transport was closed or failed, or when every thread that took
        batches has ended without closing or failing it (no slot would come free); ``TimeoutError`` when no slot
        came free within ``timeout`` seconds.
        """
        if result is not None and result is not self.env.result:
            raise ValueError("publish takes the env's own result (env.result): the transport copies its packed buffer")
        with self._cond:
            self._publishers.add(threading.current_thread())
            t0 = time.perf_counter()
            try:
                self._wait(lambda: self._free or self._stopped(), timeout, self._consumers, self._publish_waits)
            finally:
                self.stall_seconds += time.perf_counter() - t0
            self._raise_if_stopped()
            slot = self._free.popleft()
        t0 = time.perf_counter()
        try:
            self._copy(slot)
        except BaseException:
            with self._cond:  # the slot comes back; the publisher sees the error
                self._free.append(slot)
                self._cond.notify_all()
            raise
        self.copy_seconds += time.perf_counter() - t0
        with self._cond:
            self._ready.append(slot)
            self.steps += 1
            self._cond.notify_all()

    def _copy(self, slot: int) -> None:
        """Issue the step's copy into ``slot`` (with an encoder: the encode, its payloads and the raw runs)."""
        if self._cuda:  # on the env's stream: ordered after the step, and the next step after the copy
            stream = wp.get_stream(self.device)
            stream.record_event(self._start[slot])
            if self.payloads is not None:
                self.payloads.fill(slot, self.env.observation)
                for source, at, size in self._runs:
                    wp.copy(self._slots[slot], self.env.packed_result, at, source, size, stream=stream)
            else:
                wp.copy(self._slots[slot], self.env.packed_result, stream=stream)
            stream.record_event(self._done[slot])
        elif self.payloads is not None:
            self.payloads.fill(slot, self.env.observation)
            for source, at, size in self._runs:
                self._slots[slot][at : at + size] = self._packed[source : source + size]
        else:
            np.copyto(self._slots[slot], self._packed)

    def _publish_waits(self) -> str:
        held = self.slots - len(self._free) - len(self._ready)
        return (
            f"publish of step {self.steps}, waiting for a free slot (all {self.slots} held: {len(self._ready)} "
            f"published and not yet taken by get, {held} taken and not yet released),"
        )

    # -- consumer ------------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> HostBatch | None:
        """The oldest published step once its copy is complete; ``None`` after :meth:`close` drains.

        Raises ``TimeoutError`` when nothing arrives within ``timeout`` seconds (the step stays to be taken),
        and :class:`TransportClosed` when every thread that published has ended without closing the transport.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._consumers.add(threading.current_thread())
            self._wait(lambda: self._ready or self._closed, timeout, self._publishers, self._get_waits)
            if not self._ready:
                return None
            slot = self._ready.popleft()
            step = self._taken
            self._taken += 1
        if self._cuda:
            self._wait_for_copy(slot, step, deadline)
        host = self._views[slot]
        if self.payloads is not None:
            host = {**host, **{f"obs/{name}": frames for name, frames in self.payloads.frames(slot).items()}}
        result = StepResult.from_arrays(host)
        return HostBatch(slot, result.observation, result)

    def _get_waits(self) -> str:
        return f"get of step {self._taken}, waiting for it to be published ({self.steps} published so far),"

    def _wait_for_copy(self, slot: int, step: int, deadline: float | None) -> None:
        """CUDA: wait until the copy of ``step`` into ``slot`` is complete, and time it. Past ``deadline`` (while
        a graph capture keeps Warp from waiting on the event) the step goes back to be taken again."""
        while self.device.is_capturing:  # Warp refuses to wait on an event during any capture
            if deadline is not None and time.monotonic() >= deadline:
                with self._cond:
                    self._ready.appendleft(slot)
                    self._taken -= 1
                raise TimeoutError(f"get of step {step} (slot {slot}) waited for a capture on {self.device} to end")
            time.sleep(1e-4)
        wp.synchronize_event(self._done[slot])
        self.device_copy_seconds += wp.get_event_elapsed_time(self._start[slot], self._done[slot]) / 1e3

    def release(self, batch: HostBatch) -> None:
        """Give the slot of ``batch`` back to the publisher."""
        if self.payloads is not None:
            self.payloads.release(batch.slot)
        with self._cond:
            self._free.append(batch.slot)
            self._cond.notify_all()

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """No more steps: :meth:`get` returns ``None`` once the published ones are drained."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """Called by the consumer: wake and stop the publisher, which raises ``TransportClosed``."""
        with self._cond:
            self._error = error
            self._closed = True
            self._ready.clear()
            self._cond.notify_all()

    def _wait(self, done: Callable[[], object], timeout: float | None, peers: set, waiting: Callable[[], str]):
        """Wait on the condition (held) until ``done()``, at most ``timeout`` seconds, looking every
        PEER_POLL_SECONDS whether a thread of ``peers`` (the other side; none seen yet: no check) still runs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            if peers and not any(thread.is_alive() for thread in peers):
                side = "took batches" if peers is self._consumers else "published"
                names = ", ".join(sorted(thread.name for thread in peers))
                raise TransportClosed(
                    f"{waiting()} cannot end: every thread that {side} ({names}) has ended without closing or "
                    "failing the transport"
                )
            wait = PEER_POLL_SECONDS if deadline is None else min(deadline - time.monotonic(), PEER_POLL_SECONDS)
            if wait <= 0:
                raise TimeoutError(f"{waiting()} timed out after {timeout:g} s")
            self._cond.wait(wait)

    def _stopped(self) -> bool:
        return self._closed or self._error is not None

    def _raise_if_stopped(self) -> None:
        if self._error is not None:
            raise TransportClosed(f"the consumer failed: {self._error}") from self._error
        if self._closed:
            raise TransportClosed("the transport is closed")
