"""sim/streams.py: the Warp wrapper of a torch stream (and the torch wrapper of a Warp stream) is made once per
stream, not once per step. CUDA's calls are faked on the CPU: fake streams carry only a device and a handle."""

from types import SimpleNamespace

import numpy as np
import pytest
import warp as wp

import forge_gpu
from forge_gpu._src.sim import streams


@pytest.fixture
def counted(monkeypatch):
    """``wp.stream_from_torch`` and ``wp.stream_to_torch`` replaced by fakes that count what they wrap, with
    empty caches; the caches are emptied again afterwards."""
    made = {"from_torch": [], "to_torch": []}

    def from_torch(torch_stream):
        made["from_torch"].append(torch_stream.cuda_stream)
        return SimpleNamespace(kind="warp", cuda_stream=torch_stream.cuda_stream, device=torch_stream.device)

    def to_torch(warp_stream):
        made["to_torch"].append(warp_stream.cuda_stream)
        return SimpleNamespace(kind="torch", cuda_stream=warp_stream.cuda_stream, device=warp_stream.device)

    monkeypatch.setattr(wp, "stream_from_torch", from_torch)
    monkeypatch.setattr(wp, "stream_to_torch", to_torch)
    for cache in (streams.warp_stream_of, streams.torch_stream_of):
        monkeypatch.setattr(cache, "_cache", type(cache._cache)())
    return made


def torch_stream(handle: int, device: str = "cuda:0"):
    """What ``torch.cuda.current_stream`` returns: a new object at each call for the same CUDA stream."""
    return SimpleNamespace(cuda_stream=handle, device=device)


def test_one_wrapper_per_stream(counted):
    """The same CUDA stream (new Python objects each call, as torch gives) gets one wrapper; another handle or
    device another; past CACHED_STREAMS streams the least recently used is dropped and made again when asked."""
    first = streams.warp_stream_of(torch_stream(0x10))
    assert all(streams.warp_stream_of(torch_stream(0x10)) is first for _ in range(5))
    assert counted["from_torch"] == [0x10]
    other = streams.warp_stream_of(torch_stream(0x10, device="cuda:1"))
    assert other is not first and streams.warp_stream_of(torch_stream(0x20)) is not first
    assert len(counted["from_torch"]) == 3
    for handle in range(0x100, 0x100 + streams.CACHED_STREAMS):
        streams.warp_stream_of(torch_stream(handle))
    made = len(counted["from_torch"])
    again = streams.warp_stream_of(torch_stream(0x10))
    assert again is not first and counted["from_torch"][made:] == [0x10]  # dropped as least recently used
    assert counted["to_torch"] == []


def test_repeated_torch_actions_make_each_stream_wrapper_once(counted, monkeypatch):
    """The CUDA branch of a torch action's staging, five steps over: ``wp.stream_from_torch`` and
    ``wp.stream_to_torch`` run once each; every step the env's stream waits on the same wrapper of torch's stream
    and the action is recorded on the same torch wrapper of the env's stream."""
    torch = pytest.importorskip("torch")
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu")
    waits, recorded = [], []
    env_stream = SimpleNamespace(cuda_stream=0xE5, device="cuda:0", wait_stream=waits.append)
    monkeypatch.setattr(wp, "get_stream", lambda device=None: env_stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: torch_stream(0x7C))
    action = SimpleNamespace(device="cuda:0", record_stream=recorded.append)
    for _ in range(5):
        env._order_after_torch(action)
    assert counted == {"from_torch": [0x7C], "to_torch": [0xE5]}
    assert len(waits) == 5 and all(w is waits[0] for w in waits) and waits[0].cuda_stream == 0x7C
    assert len(recorded) == 5 and all(r is recorded[0] for r in recorded) and recorded[0].cuda_stream == 0xE5


def test_torch_actions_on_the_cpu_wrap_no_stream(counted):
    """On the CPU a torch action needs no stream ordering: no wrapper is made."""
    torch = pytest.importorskip("torch")
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu")
    env.reset()
    for _ in range(3):
        env.step(torch.zeros((2, 1), dtype=torch.float32))
    env.result.to_torch()
    assert counted == {"from_torch": [], "to_torch": []}
    np.testing.assert_array_equal(env.result.info["executed_action"].numpy(), 0.0)
