"""The window arguments as one object: ``WindowSpec`` checks them once, and ``Windows``, ``action_windows`` and the
torch datasets give the same windows for a spec as for its fields given as keywords."""

import dataclasses
import pickle

import numpy as np
import pytest
from helpers.synthetic import synthetic_description

from forge_gpu.reading import EpisodeReadOptions, Windows, WindowSpec, action_windows
from forge_gpu.recording import PackedRecorder


@pytest.fixture(scope="module")
def run(synthetic_run):
    env = synthetic_description(num_envs=3, max_steps=8, params=True)
    return synthetic_run(env, 30, seed=5, end_prob=0.2, recorder=PackedRecorder)[0]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("history", 0),
        ("horizon", 1.5),
        ("pad", "yes"),
        ("mmap", 1),
        ("params", None),
        ("verify", "no"),
        ("observation_keys", "proprio"),
        ("state", "joint_q"),
        ("target", 3),
    ],
)
def test_a_bad_field_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=field):
        WindowSpec(**{field: value})


def test_a_spec_is_frozen_hashable_and_picklable_with_its_sequences_as_tuples():
    spec = WindowSpec(2, 8, observation_keys=["proprio"], state=["joint_q"], pad=True)
    assert (spec.observation_keys, spec.state) == (("proprio",), ("joint_q",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.history = 3
    assert pickle.loads(pickle.dumps(spec)) == spec and hash(spec) == hash(WindowSpec(2, 8, **_rest(spec)))
    with pytest.raises(TypeError):
        WindowSpec(2, 8, ["proprio"])  # only history and horizon are positional


def _rest(spec):
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name not in ("history", "horizon")}


def _same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))


def test_windows_take_the_spec_or_its_fields_as_keywords(run):
    spec = WindowSpec(2, 3, pad=True, params=True)
    by_keywords = Windows(run, 2, 3, pad=True, params=True)
    by_spec = Windows(run, spec=spec)
    assert by_spec.spec == by_keywords.spec == spec and len(by_spec) == len(by_keywords)
    everything = np.arange(len(by_spec))
    _same(by_spec.batch(everything), by_keywords.batch(everything))
    # A keyword beside the spec replaces that field; positional arguments beside it are refused.
    assert Windows(run, spec=spec, pad=False).spec == WindowSpec(2, 3, params=True)
    with pytest.raises(TypeError, match="positionally"):
        Windows(run, 2, spec=spec)
    with pytest.raises(TypeError, match="bogus"):
        Windows(run, bogus=1)


def test_action_windows_are_the_windows_of_the_same_spec(run):
    spec = WindowSpec(2, 2, pad=True, observation_keys=["proprio"])
    windows = Windows(run, spec=spec)
    batch = windows.batch(np.arange(len(windows)))
    listed = list(action_windows(run, spec=spec))
    assert len(listed) == len(windows)
    for key in ("obs/proprio", "action", "action_is_pad", "t"):
        np.testing.assert_array_equal(np.stack([np.asarray(w[key]) for w in listed]), batch[key])


def test_action_windows_read_what_options_read_unless_the_spec_says_otherwise(run):
    options = EpisodeReadOptions(observation_keys=["proprio"], shard_index=1, num_shards=2)
    first = next(action_windows(run, 2, 2, options=options))
    assert {k for k in first if k.startswith("obs/")} == {"obs/proprio"}
    expected = Windows(run, 2, 2, observation_keys=["proprio"], shard_index=1, num_shards=2)[0]
    _same(first, expected)
    same = next(action_windows(run, spec=WindowSpec(2, 2, observation_keys=["proprio"]), options=options))
    _same(same, first)
    with pytest.raises(ValueError, match="observation_keys"):
        action_windows(run, 2, 2, observation_keys=["time"], options=options)
    # options that leave a field at its default leave the spec's: a shard of the spec's fields
    shard = EpisodeReadOptions(shard_index=1, num_shards=2)
    _same(next(action_windows(run, 2, 2, observation_keys=["proprio"], options=shard)), first)


def test_the_torch_datasets_take_the_spec_or_its_fields_as_keywords(run):
    torch = pytest.importorskip("torch")
    from forge_gpu.reading import WindowDataset, WindowMapDataset

    spec = WindowSpec(history=2, horizon=2, pad=True)
    mapped = WindowMapDataset(run, spec=spec)
    keywords = WindowMapDataset(run, history=2, horizon=2, pad=True)
    assert mapped.spec == keywords.spec == spec and len(mapped) == len(keywords)
    everything = list(range(len(mapped)))
    assert torch.equal(mapped[everything]["action"], keywords[everything]["action"])
    stream = WindowDataset(run, spec=spec, shuffle=True, seed=1)
    assert stream.spec == spec and sum(1 for _ in stream) == len(mapped)
    assert WindowMapDataset(run, spec=spec, mmap=True).spec == dataclasses.replace(spec, mmap=True)
    with pytest.raises(ValueError, match="history"):
        WindowDataset(run, history=0)


@pytest.fixture(scope="module")
def state_run(synthetic_run):
    env = synthetic_description(num_envs=3, max_steps=8, state=True, params=True)
    return synthetic_run(env, 30, seed=7, end_prob=0.2, recorder=PackedRecorder, block_bytes=800)[0]


@pytest.mark.parametrize(
    "spec",
    [
        WindowSpec(2, 3, state=True, params=True),  # one block in memory: each episode's windows strided views
        WindowSpec(1, 1),
        WindowSpec(3, 2, pad=True, params=True),  # padded: batches split
        WindowSpec(2, 3, mmap=True, state=True, params=True),  # the mapped blocks: batches split
        WindowSpec(2, 2, observation_keys=["proprio"]),
    ],
    ids=["views", "one-by-one", "pad", "mmap", "one-field"],
)
def test_iterating_windows_gives_each_window_in_order_read_only(state_run, spec):
    """Iterating a Windows (what action_windows does) gives windows[i] for every i in order, its keys in the same
    order and equal values of the same types, the arrays read-only; and action_windows gives the same windows."""
    windows = Windows(state_run, spec=spec)
    assert len(windows) > 20
    listed = list(windows)
    assert len(listed) == len(windows)
    for i, window in enumerate(listed):
        expected = windows[i]
        assert list(window) == list(expected)
        for key, value in window.items():
            assert type(value) is type(expected[key]), key
            np.testing.assert_array_equal(np.asarray(value), np.asarray(expected[key]))
            if isinstance(value, np.ndarray):
                assert not value.flags.writeable, key
    for mine, theirs in zip(action_windows(state_run, spec=spec), listed, strict=True):
        _same(mine, theirs)
