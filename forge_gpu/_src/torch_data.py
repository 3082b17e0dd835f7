"""A torch IterableDataset of training windows. torch is imported on first use, not with this module."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from forge_gpu._src.reader import action_windows


def WindowDataset(  # noqa: N802 - a class to its callers; built lazily so that torch loads on first use
    run_dir: str | os.PathLike,
    *,
    history: int,
    horizon: int,
    fields: Sequence[str] | None = None,
) -> Any:
    """A ``torch.utils.data.IterableDataset`` over the training windows of a run directory or a dataset root
    (see `action_windows`).

    Each item is a dict of torch tensors (``obs/<F>`` ``[history, ...]``, ``action`` ``[horizon, A]``,
    int64 scalars ``env_id``, ``episode_id``, ``t``) plus the ``instruction`` string. Episodes are split
    across DataLoader workers and, when torch.distributed is initialized, across ranks:
    ``shard = rank * num_workers + worker_id`` of ``world_size * num_workers``; over a dataset the shards
    split the episodes of all its runs, so each epoch visits every episode exactly once.
    """
    if not isinstance(history, int) or isinstance(history, bool) or history < 1:
        raise ValueError(f"history must be an integer >= 1, got {history!r}")
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise ValueError(f"horizon must be an integer >= 1, got {horizon!r}")
    return _window_dataset_class()(run_dir, history=history, horizon=horizon, fields=fields)


def _rebuild(run_dir, history, horizon, fields):
    return WindowDataset(run_dir, history=history, horizon=horizon, fields=fields)


@functools.cache
def _window_dataset_class() -> type:
    import torch  # noqa: PLC0415 - torch is optional and heavy

    class _WindowDataset(torch.utils.data.IterableDataset):
        def __init__(self, run_dir, *, history, horizon, fields):
            super().__init__()
            self.run_dir = os.fspath(run_dir)
            self.history = history
            self.horizon = horizon
            self.fields = None if fields is None else list(fields)

        def __reduce__(self):
            # The class is made inside a function, so pickle (DataLoader workers under spawn) rebuilds it.
            return _rebuild, (self.run_dir, self.history, self.horizon, self.fields)

        def __iter__(self):
            worker = torch.utils.data.get_worker_info()
            worker_id, num_workers = (0, 1) if worker is None else (worker.id, worker.num_workers)
            rank, world_size = 0, 1
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
            windows = action_windows(
                self.run_dir,
                history=self.history,
                horizon=self.horizon,
                fields=self.fields,
                shard=rank * num_workers + worker_id,
                num_shards=world_size * num_workers,
            )
            for window in windows:
                yield {key: _to_torch(value) for key, value in window.items()}

    def _to_torch(value):
        if isinstance(value, str):
            return value
        if isinstance(value, int):
            return torch.tensor(value, dtype=torch.int64)
        return torch.from_numpy(value)

    _WindowDataset.__name__ = _WindowDataset.__qualname__ = "WindowDataset"
    return _WindowDataset
