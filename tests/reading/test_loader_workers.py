"""Tests of the reader's views and of DataLoader workers handing out whole batches: episodes and
windows are read-only views, and workers give the samples the main process gives, through shared slots reused only
once a batch is let go of."""

import gc

import numpy as np
import pytest
from helpers.synthetic import synthetic_description

import forge_gpu
from forge_gpu._src.reading import shared_batches
from forge_gpu.reading import Windows
from forge_gpu.recording import PackedRecorder


@pytest.fixture(scope="module")
def run(synthetic_run):
    env = synthetic_description(num_envs=4, max_steps=9, images=True)
    return synthetic_run(env, 40, seed=3, end_prob=0.1, recorder=PackedRecorder)[0]


def test_episodes_are_read_only_views_whose_next_frames_are_their_obs_shifted(run):
    """An episode's obs and next share one gather (next is obs one frame on), so neither can be written: writing one
    would change the other; a copy can be."""
    episodes = list(forge_gpu.reading.read_episodes(run))
    assert episodes
    for episode in episodes:
        proprio, after = episode.obs["proprio"], episode.next["proprio"]
        assert np.array_equal(proprio[1:], after[:-1])
        assert episode.steps == 1 or np.shares_memory(proprio, after)
        for values in (proprio, after, episode.action, episode.reward, episode.terminated):
            assert not values.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            proprio[0] = 0
        copy = proprio.copy()
        copy[0] = 0  # a copy is the user's own
        assert copy.flags.writeable


def test_action_windows_are_read_only_and_equal_the_episodes_slices(run):
    """Windows overlap (history 2, horizon 3): each is read-only, equal to the episode's slices."""
    episodes = {(e.env_id, e.episode_id): e for e in forge_gpu.reading.read_episodes(run)}
    windows = list(forge_gpu.reading.action_windows(run, 2, 3))
    expected = sum(max(e.steps - 3 - 2 + 2, 0) for e in episodes.values())
    assert len(windows) == expected > 0
    for window in windows:
        episode, t = episodes[(window["env_id"], window["episode_id"])], window["t"]
        assert np.array_equal(window["obs/rgb"], episode.obs["rgb"][t - 1 : t + 1])
        assert np.array_equal(window["action"], episode.action[t : t + 3])
        assert window["instruction"] == episode.instruction
        assert not window["action"].flags.writeable and not window["obs/rgb"].flags.writeable


def test_a_slot_is_reused_only_once_its_batch_is_let_go_of(run, monkeypatch):
    """A batch gathered into a slot comes back as tensors viewing it; the slot stays busy while any of them lives
    (a second batch gets another slot), and is handed out again once they are gone."""
    torch = pytest.importorskip("torch")
    from forge_gpu._src.reading.torch_data import _new_slot, _tensors

    monkeypatch.setattr(shared_batches, "SMALL", 0)  # these synthetic batches are small: through slots all the same
    windows = Windows(run, 2, 2)
    slots = shared_batches.WorkerSlots(_new_slot, _tensors)
    first = slots.publish(slots.allocator(), windows.batch(np.arange(6)))  # the first batch learns the size
    assert first.rebuild is shared_batches.slot_batch
    batch = first.rebuild(*first.args)
    slot = first.args[1]
    expected = windows.batch(np.arange(6))
    for key, values in expected.items():
        got = batch[key]
        assert (got == values) if key == "instruction" else np.array_equal(got.numpy(), values), key
    assert isinstance(batch["obs/rgb"], torch.Tensor) and slot.numpy()[0] == 1
    allocator = slots.allocator()
    assert allocator.slot is not None and allocator.slot is not slot  # busy: another slot
    second = slots.publish(allocator, windows.batch(np.arange(6, 12)))
    assert second.args[1] is allocator.slot  # gathered in place, not copied elsewhere
    kept = batch["action"][1:]  # a view keeps the slot busy
    del batch
    gc.collect()
    assert slot.numpy()[0] == 1
    del kept
    gc.collect()
    assert slot.numpy()[0] == 0
    again = slots.allocator()
    assert again.slot is slot
    third = slots.publish(again, windows.batch(np.arange(12, 18)))
    assert third.rebuild is shared_batches.known_slot_batch  # named, its buffer received once already
    batch = third.rebuild(*third.args)
    assert np.array_equal(batch["obs/rgb"].numpy(), windows.batch(np.arange(12, 18))["obs/rgb"])
    assert slot.numpy()[0] == 1


def test_small_batches_go_pickled(run):
    """A batch under shared_batches.SMALL bytes is not put in a slot: it is pickled with the worker's reply."""
    pytest.importorskip("torch")
    from forge_gpu._src.reading.torch_data import _new_slot, _tensors

    windows = Windows(run, 1, 1, observation_keys=["proprio"])
    slots = shared_batches.WorkerSlots(_new_slot, _tensors)
    out = slots.publish(slots.allocator(), windows.batch(np.arange(4)))
    assert out.rebuild is shared_batches.pickled_batch and not slots.slots
    batch = out.rebuild(*out.args)
    assert np.array_equal(batch["obs/proprio"].numpy(), windows.batch(np.arange(4))["obs/proprio"])


@pytest.mark.parametrize("small", [shared_batches.SMALL, 0])
def test_dataloader_workers_give_the_batches_of_no_workers(run, monkeypatch, small):
    """WindowMapDataset through a DataLoader with whole batches: 2 workers give exactly the batches 0 workers give,
    pickled (small) or through shared slots (SMALL = 0), even with every batch kept (more than a worker's slots:
    the rest go as plain tensors) so that no slot is reused under a batch still held."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    monkeypatch.setattr(shared_batches, "SMALL", small)  # the forked workers inherit it
    dataset = forge_gpu.reading.WindowMapDataset(run, history=2, horizon=2)
    sampler = BatchSampler(SequentialSampler(dataset), 3, drop_last=False)
    batches = {w: list(DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=w)) for w in (0, 2)}
    assert len(batches[0]) == len(batches[2]) > 2 * shared_batches.MAX_SLOTS
    for alone, worked in zip(batches[0], batches[2], strict=True):
        assert alone.keys() == worked.keys()
        for key, values in alone.items():
            if key == "instruction":
                assert worked[key] == values
            else:
                assert isinstance(worked[key], torch.Tensor) and torch.equal(worked[key], values), key


def test_a_plain_dataloader_gathers_each_batch_once_and_gives_the_same_batches(run):
    """DataLoader(batch_size=B) calls WindowMapDataset.__getitems__ once per batch (one Windows.batch), and its
    batches equal those of the same loader fetching dataset[i] one index at a time, a short last batch included."""
    torch = pytest.importorskip("torch")
    dataset = forge_gpu.reading.WindowMapDataset(run, history=2, horizon=3)

    class OneByOne(torch.utils.data.Dataset):  # the same windows, without __getitems__
        def __len__(self):
            return len(dataset)

        def __getitem__(self, index):
            return dataset[index]

    calls = []
    batch = dataset.windows.batch
    dataset.windows.batch = lambda indices, **kw: calls.append(len(indices)) or batch(indices, **kw)
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0)).tolist()
    size = 8 if len(dataset) % 8 else 7
    fast = list(torch.utils.data.DataLoader(dataset, batch_size=size, sampler=order))
    slow = list(torch.utils.data.DataLoader(OneByOne(), batch_size=size, sampler=order))
    assert calls[: len(fast)] == [len(b["t"]) for b in fast] and len(fast) > 2 and len(fast[-1]["t"]) < size
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == b[key] if key == "instruction" else torch.equal(a[key], b[key]), key
