"""Whole batches handed from torch ``DataLoader`` workers to the main process through shared buffers reused from
batch to batch, so that a DataLoader with workers keeps its throughput.

torch moves every tensor a worker returns into fresh shared memory: for a batch of camera frames that is a copy of
tens of MB into pages faulted in anew, on the cores the workers decode on. Here a worker gathers (and decodes) each
batch straight into one of a few slots of shared memory it made once, and hands out the slot with the arrays'
places in it; the main process maps the slot once (torch caches a shared storage it still holds) and gives the user
tensors that are views of it. A slot is reused only once the main process has let go of every array of the batch it
carried: the arrays are views of one numpy base whose finalizer clears the slot's busy byte. Where no slot is free (a
user keeping many batches) or shared memory cannot be made, the batch goes as plain tensors, torch's own way.

numpy and the standard library: the caller (``torch_data``) gives the functions that make a slot (a torch uint8
tensor in shared memory) and turn numpy arrays into tensors, so that torch stays its module's alone.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
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
    """One worker's slots and the size the last batch needed. ``new_slot(size)``: a torch uint8 tensor of ``size``
    bytes in shared memory, its first byte 0 (None where none can be made); ``convert(arrays)``: numpy arrays as tensors
    over them, in the process that receives the batch."""

    def __init__(self, new_slot: Callable[[int], Any], convert: Callable[[dict], dict]):
        self.new_slot, self.convert = new_slot, convert
        self.slots: list[Any] = []
        self.keys: list[tuple[int, int]] = []  # each slot's (process id, serial number): its name in the main process
        self.sent: set[tuple[int, int]] = set()  # the slots the main process has received (and keeps mapped)
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
        slot = self.new_slot(size)
        if slot is None:
            return None
        key = (os.getpid(), len(self.sent) + len(self.slots))
        if len(self.slots) >= MAX_SLOTS:  # a free slot too small for this batch gives its place
            self.slots[free[0]], self.keys[free[0]] = slot, key
        else:
            self.slots.append(slot)
            self.keys.append(key)
        return slot

    def allocator(self) -> Allocator:
        """Where the next batch's arrays are gathered: a free slot of the last batch's size (none for the first)."""
        return Allocator(self._free(self.need) if self.need else None)

    def publish(self, allocator: Allocator, batch: dict) -> Reply:
        """``batch`` (numpy arrays and other picklable values) as what the worker returns: over a slot (the arrays
        gathered into ``allocator``'s slot stay in place, the others are copied in), or pickled whole where it is
        small or no slot is to be had."""
        arrays = {k: v for k, v in batch.items() if isinstance(v, np.ndarray)}
        others = {k: v for k, v in batch.items() if not isinstance(v, np.ndarray)}
        total = HEADER + sum(_aligned(v.nbytes) for v in arrays.values())
        if total <= SMALL:  # through the pipe, pickled: a slot's file descriptor costs more to pass
            return Reply(pickled_batch, self.convert, arrays, others)
        self.need = max(self.need, total)
        slot, end = allocator.slot, allocator.end
        placed = allocator.places(arrays) if slot is not None else {}
        rest = sum(_aligned(v.nbytes) for k, v in arrays.items() if k not in placed)
        if slot is None or end + rest > len(allocator.base):  # copied whole into a slot large enough
            slot, end, placed = self._free(total, exclude=slot), HEADER, {}
        if slot is None:
            return Reply(pickled_batch, self.convert, arrays, others)
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
        key = self.keys[next(k for k, s in enumerate(self.slots) if s is slot)]
        if key in self.sent:  # mapped there already: named, not passed again (a file descriptor per batch costs ms)
            return Reply(known_slot_batch, self.convert, key, entries, others)
        self.sent.add(key)
        return Reply(slot_batch, self.convert, slot, key, entries, others)


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


class Reply:
    """What a worker returns for a batch: pickled, the function that rebuilds it in the receiving process and its
    arguments (a slot goes once as torch shares it, by file descriptor; its later batches name it)."""

    def __init__(self, rebuild: Callable, *args):
        self.rebuild, self.args = rebuild, args

    def __reduce__(self):
        return self.rebuild, self.args


def pickled_batch(convert: Callable[[dict], dict], arrays: dict, others: dict) -> dict:
    """A batch that came pickled: its arrays as tensors (over the unpickled arrays), and the other values."""
    return convert(arrays) | others


def slot_batch(convert: Callable[[dict], dict], slot, key: tuple[int, int], entries: list, others: dict) -> dict:
    """A batch in a slot the main process receives for the first time: the slot kept (mapped) under its ``key``,
    then the batch as :func:`known_slot_batch` gives it."""
    stale = [k for k in _RECEIVED if k[0] != key[0] and not _alive(k[0])]
    for k in stale:  # the slots of workers that are gone (a loader's workers of an epoch before)
        del _RECEIVED[k]
    _RECEIVED[key] = slot
    return known_slot_batch(convert, key, entries, others)


def known_slot_batch(convert: Callable[[dict], dict], key: tuple[int, int], entries: list, others: dict) -> dict:
    """A batch in the slot ``key``: tensors over views of one base array of the slot, whose finalizer (run once every
    tensor and view of the batch is gone) marks the slot free for its worker; and the other values."""
    slot = _RECEIVED.get(key)
    if slot is None:
        raise RuntimeError(f"a DataLoader worker's batch names its shared buffer {key}, which this process never got")
    base = slot.numpy()
    weakref.finalize(base, _release, slot.numpy()[:1])  # a view of its own: the finalizer keeps no batch alive
    arrays = {}
    for name, offset, shape, dtype in entries:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        arrays[name] = base[offset : offset + nbytes].view(dtype).reshape(shape)
    return convert(arrays) | others


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _release(busy: np.ndarray) -> None:
    busy[0] = 0


#: The slots this (main) process received from its loaders' workers, by (process id, serial number): kept mapped.
_RECEIVED: dict[tuple[int, int], Any] = {}
_SLOTS: tuple[int, WorkerSlots] | None = None  # (the process id that made them, the slots)


def worker_slots(new_slot: Callable[[int], Any], convert: Callable[[dict], dict]) -> WorkerSlots:
    """This worker process's slots (made on first use, of :class:`WorkerSlots`' arguments; a forked process makes
    its own)."""
    global _SLOTS  # one set per worker process
    if _SLOTS is None or _SLOTS[0] != os.getpid():
        _SLOTS = (os.getpid(), WorkerSlots(new_slot, convert))
    return _SLOTS[1]
