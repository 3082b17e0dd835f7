"""A torch IterableDataset of training windows. torch is imported on first use, not with this module."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from forge_gpu._src.reader import EpisodeReadOptions, _episode_index, check_window, episode_windows


def WindowDataset(  # noqa: N802 - a class to its callers; built lazily so that torch loads on first use
    directory: str | os.PathLike,
    *,
    history: int = 1,
    horizon: int = 1,
    observation_keys: Sequence[str] | None = None,
    shuffle: bool = False,
    seed: int = 0,
) -> Any:
    """A ``torch.utils.data.IterableDataset`` over the training windows of a run directory or a dataset root
    (see `action_windows`).

    Each item is a dict of torch tensors (``obs/<F>`` ``[history, ...]``, ``action`` ``[horizon, A]``,
    int64 scalars ``env_id``, ``episode_id``, ``t``) plus the ``instruction`` string. Episodes are split
    across DataLoader workers and, when torch.distributed is initialized, across ranks:
    ``shard = rank * num_workers + worker_id`` of ``world_size * num_workers``; over a dataset the shards
    split the episodes of all its runs, so each epoch visits every window exactly once. With ``shuffle``,
    each shard visits its episodes, and each episode its windows, in an order drawn from
    ``(seed, epoch)``; call ``set_epoch(epoch)`` before each epoch, as with a ``DistributedSampler``.
    """
    check_window(history, horizon)
    EpisodeReadOptions(observation_keys=observation_keys)  # checks the keys now, not in a worker
    return _window_dataset_class()(directory, history, horizon, observation_keys, shuffle, seed)


def _rebuild(*args):
    return _window_dataset_class()(*args)


@functools.cache
def _window_dataset_class() -> type:
    import torch  # noqa: PLC0415 - torch is optional and heavy

    class _WindowDataset(torch.utils.data.IterableDataset):
        def __init__(self, directory, history, horizon, observation_keys, shuffle, seed, epoch=0):
            super().__init__()
            self.directory = os.fspath(directory)
            self.history, self.horizon = history, horizon
            self.observation_keys = None if observation_keys is None else list(observation_keys)
            self.shuffle, self.seed, self.epoch = shuffle, seed, epoch

        def set_epoch(self, epoch: int) -> None:
            """Choose the shuffled order of the next epoch."""
            self.epoch = epoch

        def __reduce__(self):
            # The class is made inside a function, so pickle (DataLoader workers under spawn) rebuilds it.
            args = (self.directory, self.history, self.horizon, self.observation_keys, self.shuffle, self.seed)
            return _rebuild, (*args, self.epoch)

        def __iter__(self):
            worker = torch.utils.data.get_worker_info()
            worker_id, num_workers = (0, 1) if worker is None else (worker.id, worker.num_workers)
            rank, world_size = 0, 1
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
            options = EpisodeReadOptions(
                observation_keys=self.observation_keys,
                shard_index=rank * num_workers + worker_id,
                num_shards=world_size * num_workers,
            )
            index = _episode_index(self.directory)[options.shard_index :: options.num_shards]
            order = None
            if self.shuffle:
                rng = np.random.default_rng([self.seed, self.epoch, options.shard_index])
                index = [index[i] for i in rng.permutation(len(index))]
                order = rng.permutation
            for window in episode_windows(index, options, self.history, self.horizon, order):
                yield {key: _to_torch(value) for key, value in window.items()}

    def _to_torch(value):
        if isinstance(value, str):
            return value
        if isinstance(value, int):
            return torch.tensor(value, dtype=torch.int64)
        return torch.from_numpy(value)

    _WindowDataset.__name__ = _WindowDataset.__qualname__ = "WindowDataset"
    return _WindowDataset
