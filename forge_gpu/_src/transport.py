"""HostSnapshotTransport: a ring of K host slots that each hold one step's batch.

On CUDA the slots are page-locked (Warp pinned arrays). Publishing a step copies the result into a
device staging buffer of the slot on the env's stream (device-to-device, fast), then issues the
device-to-host copy on a stream of its own after an event, with a completion event per slot; the
next step starts while the copy runs. On the CPU the slots are numpy buffers filled with
whole-array copies. Taking a slot blocks while all K are held by the consumer or in flight: that
wait is where backpressure throttles the stepping loop, and it is counted as stall time.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import warp as wp

from .batch import StepResult


@dataclass
class HostBatch:
    """One received step: numpy views into slot ``slot``, valid until :meth:`HostSnapshotTransport.release`."""

    slot: int
    observation: dict[str, np.ndarray]
    result: StepResult


class TransportClosed(Exception):
    """Raised to a publisher when the consumer failed or the transport was closed."""


class HostSnapshotTransport:
    """Copies each step's batch (observation, executed action, reward, flags, active) to host slots.

    Args:
        env: The :class:`VectorEnv` whose ``result`` is published.
        slots: K, the number of host slots (at least 2 lets stepping overlap consumption).
    """

    def __init__(self, env, slots: int = 4):
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            raise ValueError(f"slots={slots!r}: expected an integer >= 1")
        self.env = env
        self.slots = slots
        self.device = env.device
        self._names = list(env.result.arrays())
        arrays = env.result.arrays()
        self.bytes_per_step = int(sum(a.capacity for a in arrays.values()))
        """Bytes copied per published step."""
        self._cuda = self.device.is_cuda
        self._host: list[dict[str, np.ndarray]] = []
        self._pinned: list[dict[str, wp.array]] = []
        self._staging: list[dict[str, wp.array]] = []
        for _ in range(slots):
            if self._cuda:
                pinned = {k: wp.empty(a.shape, dtype=a.dtype, device="cpu", pinned=True) for k, a in arrays.items()}
                self._pinned.append(pinned)
                self._staging.append({k: wp.empty_like(a) for k, a in arrays.items()})
                self._host.append({k: a.numpy() for k, a in pinned.items()})
            else:
                self._host.append({k: np.empty(a.shape, dtype=wp.dtype_to_numpy(a.dtype)) for k, a in arrays.items()})
        # The env's result buffers persist across steps, so their host views are made once (CPU).
        self._env_views = None if self._cuda else {k: a.numpy() for k, a in arrays.items()}
        if self._cuda:
            self._copy_stream = wp.Stream(self.device)
            self._staged = [wp.Event(self.device) for _ in range(slots)]
            self._done = [wp.Event(self.device, enable_timing=True) for _ in range(slots)]
            self._start = [wp.Event(self.device, enable_timing=True) for _ in range(slots)]
        self._cond = threading.Condition()
        self._free = deque(range(slots))
        self._ready: deque[int] = deque()
        self._closed = False
        self._error: BaseException | None = None
        self.steps = 0
        """Steps published."""
        self.stall_seconds = 0.0
        """Time the publisher waited for a free slot [s]."""
        self.copy_seconds = 0.0
        """Time spent issuing copies (CPU: the copies themselves) [s]."""
        self.device_copy_seconds = 0.0
        """CUDA only: device-to-host copy time measured with events [s]."""

    # -- producer ------------------------------------------------------------------------------

    def publish(self, result: StepResult) -> None:
        """Copy ``result`` (the env's current device result) into a free slot; block while none is free."""
        with self._cond:
            t0 = time.perf_counter()
            while not self._free and not self._closed and self._error is None:
                self._cond.wait()
            self.stall_seconds += time.perf_counter() - t0
            self._raise_if_stopped()
            slot = self._free.popleft()
        t0 = time.perf_counter()
        src = result.arrays()
        if self._cuda:
            staging, pinned = self._staging[slot], self._pinned[slot]
            for name in self._names:
                wp.copy(staging[name], src[name])  # on the env's stream, ordered after the step
            wp.get_stream(self.device).record_event(self._staged[slot])
            self._copy_stream.wait_event(self._staged[slot])
            self._copy_stream.record_event(self._start[slot])
            for name in self._names:
                wp.copy(pinned[name], staging[name], stream=self._copy_stream)
            self._copy_stream.record_event(self._done[slot])
        else:
            host = self._host[slot]
            views = self._env_views if result is self.env.result else {k: a.numpy() for k, a in src.items()}
            for name in self._names:
                np.copyto(host[name], views[name])
        self.copy_seconds += time.perf_counter() - t0
        with self._cond:
            self._ready.append(slot)
            self.steps += 1
            self._cond.notify_all()

    # -- consumer ------------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> HostBatch | None:
        """The oldest published step once its copy is complete; ``None`` after :meth:`close` drains.

        Raises ``TimeoutError`` when nothing arrives within ``timeout`` seconds.
        """
        with self._cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._ready and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("no step was published in time")
                self._cond.wait(remaining)
            if not self._ready:
                return None
            slot = self._ready.popleft()
        if self._cuda:
            wp.synchronize_event(self._done[slot])
            self.device_copy_seconds += wp.get_event_elapsed_time(self._start[slot], self._done[slot]) / 1e3
        host = self._host[slot]
        observation = {k[4:]: v for k, v in host.items() if k.startswith("obs/")}
        info = {k[5:]: v for k, v in host.items() if k.startswith("info/")}
        result = StepResult(observation, host["reward"], host["terminated"], host["truncated"], info)
        return HostBatch(slot, observation, result)

    def release(self, batch: HostBatch) -> None:
        """Give the slot of ``batch`` back to the publisher."""
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

    def _raise_if_stopped(self) -> None:
        if self._error is not None:
            raise TransportClosed(f"the consumer failed: {self._error}") from self._error
        if self._closed:
            raise TransportClosed("the transport is closed")

    def stats(self) -> dict:
        """Counters for progress displays and manifests."""
        return {
            "steps": self.steps,
            "slots": self.slots,
            "bytes_per_step": self.bytes_per_step,
            "stall_seconds": self.stall_seconds,
            "copy_seconds": self.copy_seconds,
            "device_copy_seconds": self.device_copy_seconds,
        }
