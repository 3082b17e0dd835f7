"""The torch datasets of training windows, over :class:`Windows`: :class:`WindowDataset` (iterable) and
:class:`WindowMapDataset` (map-style), and :func:`device_batch`, a batch decoded on a CUDA device. The one module of
the data side that imports torch (forge_gpu.reading loads it when one of its names is first used)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data

from forge_gpu._src.reading.runs import episode_index
from forge_gpu._src.reading.shared_batches import worker_slots
from forge_gpu._src.reading.windows import CHUNK, Windows, WindowSpec, check_reading, count_windows, window_spec


class _WindowSource:
    """What both datasets hold: the directory and the :class:`WindowSpec` of their :class:`Windows`, checked when the
    dataset is made (not in a worker), and picklable (a DataLoader worker under spawn gets a copy and opens its own
    windows)."""

    def _keep(self, directory, spec: WindowSpec) -> list:
        """Keep the directory and the spec, checked; the directory's episode index (:func:`runs.episode_index`)."""
        index = episode_index(directory)
        check_reading(index, spec)  # here, not in a worker: bad input is one line at the call
        self.directory = os.fspath(directory)
        self.spec = spec
        """The :class:`WindowSpec` of the dataset's windows."""
        return index

    def _open_windows(self, **shard: int) -> Windows:
        """The :class:`Windows` of the dataset, of the ``shard`` (``shard_index``, ``num_shards``) where given."""
        return Windows(self.directory, spec=self.spec, **shard)


class WindowDataset(_WindowSource, torch.utils.data.IterableDataset):
    """A ``torch.utils.data.IterableDataset`` over the training windows of a run directory or a dataset root, those
    of a :class:`WindowSpec` (its fields as keywords, or ``spec=``; see :class:`Windows`: ``pad`` adds the windows at
    episode edges with ``*_is_pad`` masks; ``mmap`` leaves uncompressed packed runs in their memory-mapped files
    instead of loading each shard; ``state`` and ``params`` add ``state/<S>`` ``[history, ...]`` and ``params/<P>``
    to each item; ``target`` = a label field, e.g. ``"expert_action"``, makes ``action`` the label of the frames
    t..t+horizon-1 instead of the recorded actions).

    Each item is a dict of torch tensors (``obs/<F>`` ``[history, ...]``, ``action`` ``[horizon, A]``,
    int64 scalars ``env_id``, ``episode_id``, ``t``) plus the ``instruction`` string. Episodes are split
    across DataLoader workers and, when torch.distributed is initialized, across ranks:
    ``shard = rank * num_workers + worker_id`` of ``world_size * num_workers``; over a dataset the shards
    split the episodes of all its runs, so each epoch visits every window exactly once. With ``shuffle``,
    each shard visits all of its windows in one order drawn from ``(seed, epoch, shard)`` (a global
    shuffle within the shard, not episode by episode); call ``set_epoch(epoch)`` before each epoch, as
    with a ``DistributedSampler``.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        spec: WindowSpec | None = None,
        shuffle: bool = False,
        seed: int = 0,
        **window: Any,
    ):
        super().__init__()
        self._keep(directory, window_spec(spec, (), window))
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the shuffled order of the next epoch."""
        self.epoch = epoch

    def __iter__(self):
        worker = torch.utils.data.get_worker_info()
        worker_id, num_workers = (0, 1) if worker is None else (worker.id, worker.num_workers)
        rank, world_size = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        shard = rank * num_workers + worker_id
        windows = self._open_windows(shard_index=shard, num_shards=world_size * num_workers)
        order = np.arange(len(windows))
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch, shard]).permutation(len(windows))
        for start in range(0, len(order), CHUNK):
            batch = _to_torch(windows.batch(order[start : start + CHUNK]))
            for i in range(len(batch["t"])):
                yield {key: value[i] for key, value in batch.items()}


class WindowMapDataset(_WindowSource, torch.utils.data.Dataset):
    """A map-style ``torch.utils.data.Dataset`` of every training window of a :class:`WindowSpec` (its fields as
    keywords, or ``spec=``; see :class:`Windows`, and :class:`WindowDataset` for ``state``, ``params`` and
    ``target``).

    ``dataset[i]`` is one window (tensors as in :class:`WindowDataset`); ``dataset[indices]`` with a list
    of indices is a whole batch in one vectorized call (``obs/<F>`` ``[B, history, ...]``, ...), so
    the fastest loader hands it batches of indices::

        sampler = BatchSampler(RandomSampler(dataset), batch_size=256, drop_last=False)
        loader = DataLoader(dataset, sampler=sampler, batch_size=None)

    A plain ``DataLoader(dataset, batch_size=B)`` gathers each batch in one call too (``__getitems__``), then
    collates its samples (``default_collate`` stacks them: a copy per key).

    Shuffling with a sampler is global over the whole run or dataset. The windows are loaded on first
    access in each process (each DataLoader worker holds its own copy); ``len(dataset)`` alone loads none (it reads
    the runs' indexes), so a loader's main process, whose sampler asks only the length, holds no copy beside its
    workers'. With ``mmap`` (uncompressed packed runs) the windows stay in the files, whose pages the workers share.
    """

    def __init__(self, directory: str | os.PathLike, *, spec: WindowSpec | None = None, **window: Any):
        super().__init__()
        spec = window_spec(spec, (), window)
        self._count = count_windows(self._keep(directory, spec), spec)  # len() where the windows are not loaded
        self._windows: Windows | None = None

    @property
    def windows(self) -> Windows:
        """The dataset's :class:`Windows`, loaded on first use in each process."""
        if self._windows is None:
            self._windows = self._open_windows()
        return self._windows

    def __getstate__(self) -> dict:
        # A copy (a DataLoader worker under spawn) loads its own windows; the ones loaded here stay here.
        return {**self.__dict__, "_windows": None}

    def __len__(self) -> int:
        # a sampler's length in a loader's main process, whose workers load the windows: from the index
        return self._count if self._windows is None else len(self._windows)

    def __getitem__(self, index):
        if isinstance(index, int | np.integer):
            one = self.windows.batch([index])
            return {key: value[0] for key, value in _to_torch(one).items()}
        indices = np.asarray(index, dtype=np.int64)
        if torch.utils.data.get_worker_info() is None:
            return _to_torch(self.windows.batch(indices))
        # A worker: the batch gathered (and decoded) straight into a shared buffer it reuses (shared_batches).
        slots = worker_slots(_new_slot, _tensors)
        allocator = slots.allocator()
        return slots.publish(allocator, self.windows.batch(indices, empty=allocator))

    def __getitems__(self, indices) -> list[dict]:
        """The windows ``dataset[i]`` gives for each of ``indices``, from one gather (``DataLoader`` with a
        ``batch_size`` calls this, then its ``collate_fn``, in place of ``dataset[i]`` per index): each sample's
        tensors are views of the batch's."""
        batch = _to_torch(self.windows.batch(np.asarray(indices, dtype=np.int64)))
        return [{key: value[i] for key, value in batch.items()} for i in range(len(indices))]


def _to_torch(batch: dict) -> dict:
    return {
        key: value if key == "instruction" else torch.from_numpy(np.ascontiguousarray(value))
        for key, value in batch.items()
    }


def _tensors(arrays: dict) -> dict:
    """numpy arrays as torch tensors over them (a worker's batch, where the main process receives it)."""
    return {key: torch.from_numpy(values) for key, values in arrays.items()}


def _new_slot(size: int) -> torch.Tensor | None:
    """A torch uint8 tensor of ``size`` bytes in shared memory, its first byte (the busy flag) 0; None where shared
    memory cannot be had. ``share_memory_()`` is torch's public way there: it moves the new tensor's storage into
    shared memory (a copy of its ``size`` bytes, made once per slot, which is reused from batch to batch)."""
    try:
        slot = torch.empty(size, dtype=torch.uint8).share_memory_()
    except (RuntimeError, OSError):
        return None
    slot[0] = 0
    return slot


def check_decode_device(device: Any) -> Any:
    """``device`` as a CUDA ``torch.device``; ValueError (one line) for a device that is not CUDA or a machine where
    torch sees none."""
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"decode_device={device!r}: not a torch device ({exc})") from exc
    if target.type != "cuda":
        raise ValueError(
            f"decode_device={device!r}: expected a CUDA device ('cuda' or 'cuda:N'); leave it unset for the CPU"
        )
    if not torch.cuda.is_available():
        raise ValueError(
            f"decode_device={device!r}: torch sees no CUDA device on this machine "
            "(torch.cuda.is_available() is False); leave it unset to decode on the CPU"
        )
    return target


def device_batch(windows: Windows, indices: Sequence[int] | np.ndarray, device: Any = "cuda") -> dict[str, Any]:
    """``windows.batch(indices)`` with its encoded image fields decoded on the CUDA ``device`` (torch tensors
    ``[B, history, ...]`` there, JPEG by one batched nvJPEG call per field: :func:`decode_on_device`); the other
    entries as ``batch`` gives them. ValueError (one line) where torch sees no CUDA device. Unverified on CUDA."""
    target = check_decode_device(device)
    out = windows.batch(indices, encoded=True)
    for name, (shape, dtype) in windows.encoded_fields.items():
        frames = decode_on_device(out[name], shape, dtype, target)
        out[name] = frames.reshape(-1, windows.history, *shape)
    return out


def decode_on_device(frames, shape: Sequence[int], dtype: Any, device: Any = "cuda") -> Any:
    """The frames of ``frames`` (an :class:`~forge_gpu._src.core.codecs.EncodedFrames`) as one torch tensor
    ``[n, *shape]`` on the CUDA ``device``: a codec nvJPEG decodes (``Codec.nvjpeg``: JPEG) decoded there, every frame
    in one batched nvJPEG call (``torchvision.io.decode_jpeg(..., device=device)``); any other codec decoded on the
    CPU (``core/codecs``) and copied over from page-locked memory. ValueError (one line) for a device that is not
    CUDA or a machine where torch sees none. Unverified on CUDA."""
    from forge_gpu._src.core.codecs import decode_frames

    target = check_decode_device(device)
    shape, n = tuple(int(s) for s in shape), len(frames)
    if not frames.spec.codec.nvjpeg or n == 0:
        decoded = torch.from_numpy(decode_frames(frames.spec, frames, shape, dtype))
        return decoded.pin_memory().to(target, non_blocking=True)
    import torchvision.io

    # torchvision takes a list of encoded tensors, one per frame (views of the one payload, no copy): the only
    # per-frame Python of the decode, which nvJPEG then runs as one batch.
    payload = torch.from_numpy(frames.payload)
    starts, sizes = frames.offsets[:-1].tolist(), np.diff(frames.offsets).tolist()
    images = torchvision.io.decode_jpeg(
        [payload.narrow(0, a, b) for a, b in zip(starts, sizes, strict=True)], device=target
    )
    return torch.stack(images).permute(0, 2, 3, 1).reshape(n, *shape)
