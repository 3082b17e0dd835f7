"""Whole batches handed from torch ``DataLoader`` workers to the main process through shared buffers reused from
batch to batch (issue 30's "a DataLoader with workers keeps its throughput").

torch moves every tensor a worker returns into fresh shared memory: for a batch of camera frames that is a copy of
tens of MB into pages faulted in anew, on the cores the workers decode on. Here a worker gathers (and decodes) each
batch straight into one of a few slots of shared memory it made once, and hands out the slot with the arrays'
places in it; the main process maps the slot once (torch caches a shared storage it still holds) and gives the user
tensors that are views of it. A slot is reused only once the main process has let go of every array of the batch it
carried: the arrays are views of one numpy base whose finalizer clears the slot's busy byte. Where no slot is free (a
user keeping many batches) or shared memory cannot be made, the batch goes as plain tensors, torch's own way.

numpy and the standard library; torch, imported lazily, in the workers and the main process of a DataLoader.
"""

from __future__ import annotations

import collections
import os
import weakref
from typing import Any

import numpy as np

#: Bytes before a slot's arrays; its first is 1 while the main process holds the batch, 0 once it let go of it.
HEADER = 64
#: Batches of at most these bytes go pickled through the worker's pipe, not through a slot.
SMALL = 1 << 20
#: Slots per worker: a worker runs up to ``prefetch_factor`` batches ahead and the user holds one or two.
MAX_SLOTS = 6
_ALIGN = 64


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


class WorkerSlots:
    """One worker's slots (torch uint8 tensors in shared memory) and the size the last batch needed."""

    def __init__(self):
        self.slots: list[Any] = []
        self.need = 0

    def _free(self, size: int, exclude=None):
        """A slot of at least ``size`` bytes (not ``exclude``) that no batch in the main process uses, made if need
        be; None if there is none and no more may be made (or shared memory cannot be had)."""
        for slot in self.slots:
            if slot is not exclude and slot.numpy()[0] == 0 and slot.numel() >= size:
                return slot
        free = [k for k, slot in enumerate(self.slots) if slot is not exclude and slot.numpy()[0] == 0]
        if len(self.slots) >= MAX_SLOTS and not free:
            return None
        import torch  # noqa: PLC0415 - a DataLoader worker has torch loaded

        try:  # made in shared memory (zero-filled by the system), not copied there as share_memory_() does
            empty = torch.empty(0, dtype=torch.uint8)
            slot = empty.new(empty._typed_storage()._new_shared(size, device=empty.device))
        except (RuntimeError, OSError):
            return None
        if len(self.slots) >= MAX_SLOTS:
            self.slots[free[0]] = slot  # a free slot too small for this batch gives its place
        else:
            self.slots.append(slot)
        return slot

    def allocator(self) -> Allocator:
        """Where the next batch's arrays are gathered: a free slot of the last batch's size (none for the first)."""
        return Allocator(self._free(self.need) if self.need else None)

    def publish(self, allocator: Allocator, batch: dict) -> Any:
        """``batch`` (numpy arrays and other picklable values) as what the worker returns: a :class:`SharedBatch`
        over a slot (the arrays gathered into ``allocator``'s slot stay in place, the others are copied in), or, with
        no slot to be had, the batch as torch tensors."""
        arrays = {k: v for k, v in batch.items() if isinstance(v, np.ndarray)}
        others = {k: v for k, v in batch.items() if not isinstance(v, np.ndarray)}
        total = HEADER + sum(_aligned(v.nbytes) for v in arrays.values())
        if total <= SMALL:  # through the pipe, pickled: a slot's file descriptor costs more to pass
            return PickledBatch(arrays, others)
        self.need = max(self.need, total)
        slot, end = allocator.slot, allocator.end
        placed = allocator.places(arrays) if slot is not None else {}
        rest = sum(_aligned(v.nbytes) for k, v in arrays.items() if k not in placed)
        if slot is None or end + rest > len(allocator.base):  # copied whole into a slot large enough
            slot, end, placed = self._free(total, exclude=slot), HEADER, {}
        if slot is None:
            import torch  # noqa: PLC0415

            return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()} | others
        base = slot.numpy()
        entries = []
        for key, values in arrays.items():
            if key not in placed:
                placed[key] = end
                target = base[end : end + values.nbytes].view(values.dtype).reshape(values.shape)
                np.copyto(target, values)
                end = _aligned(end + values.nbytes)
            entries.append((key, placed[key], values.shape, values.dtype.str))
        base[0] = 1
        return SharedBatch(slot, entries, others)


class Allocator:
    """``allocator(shape, dtype)``: an array carved from a slot (the next aligned bytes) while it has room, else a new
    one; ``places`` finds back where the carved arrays lie."""

    def __init__(self, slot):
        self.slot = slot
        self.base = slot.numpy() if slot is not None else np.zeros(0, np.uint8)
        self.end = HEADER

    def __call__(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if self.slot is None or self.end + nbytes > len(self.base):
            return np.empty(shape, dtype)
        out = self.base[self.end : self.end + nbytes].view(dtype).reshape(shape)
        self.end = _aligned(self.end + nbytes)
        return out

    def places(self, arrays: dict) -> dict[str, int]:
        """key -> offset in the slot of the ``arrays`` that are C-contiguous views of it."""
        start = self.base.__array_interface__["data"][0]
        out = {}
        for key, values in arrays.items():
            at = values.__array_interface__["data"][0] - start
            if values.flags.c_contiguous and HEADER <= at and at + values.nbytes <= self.end:
                out[key] = at
        return out


class SharedBatch:
    """A batch in a slot, as a worker returns it: pickled, it carries the slot (torch shares it by file descriptor,
    mapped once by the main process) and the arrays' places; unpickled, it is the batch as a dict of tensors, views
    of the slot, and the other values."""

    def __init__(self, slot, entries: list, others: dict):
        self.slot, self.entries, self.others = slot, entries, others

    def __reduce__(self):
        return rebuild_batch, (self.slot, self.entries, self.others)


class PickledBatch:
    """A small batch as a worker returns it: numpy arrays pickled with it (not moved into shared memory, as torch
    moves tensors), tensors over them once unpickled."""

    def __init__(self, arrays: dict, others: dict):
        self.arrays, self.others = arrays, others

    def __reduce__(self):
        return rebuild_pickled, (self.arrays, self.others)


def rebuild_pickled(arrays: dict, others: dict) -> dict:
    import torch  # noqa: PLC0415

    return {key: torch.from_numpy(values) for key, values in arrays.items()} | others


def rebuild_batch(slot, entries: list, others: dict) -> dict:
    """The batch of a :class:`SharedBatch`: tensors over views of one base array of the slot, whose finalizer (run
    once every tensor and view of the batch is gone) marks the slot free for its worker."""
    import torch  # noqa: PLC0415

    base = slot.numpy()
    weakref.finalize(base, _release, slot)
    _MAPPED.append(slot)  # kept mapped: the slot's next batch finds its storage in torch's cache, its pages in place
    out = {}
    for key, offset, shape, dtype in entries:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        out[key] = torch.from_numpy(base[offset : offset + nbytes].view(dtype).reshape(shape))
    return out | others


def _release(slot) -> None:
    slot[0] = 0


#: The slots the main process received last (their mappings kept, not their batches' busy bytes).
_MAPPED: collections.deque = collections.deque(maxlen=16)
_SLOTS: tuple[int, WorkerSlots] | None = None  # (the process id that made them, the slots)


def worker_slots() -> WorkerSlots:
    """This worker process's slots (made on first use; a forked process makes its own)."""
    global _SLOTS  # noqa: PLW0603 - one set per worker process
    if _SLOTS is None or _SLOTS[0] != os.getpid():
        _SLOTS = (os.getpid(), WorkerSlots())
    return _SLOTS[1]
