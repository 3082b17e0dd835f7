"""HostSnapshotTransport: exact copies, slot order, backpressure, and failure propagation."""

import threading
import time

import numpy as np
import pytest
from helpers.blocking import wait_until_blocked
from helpers.envtools import DEVICES

import forge_gpu
from forge_gpu._src.collect.transport import TransportClosed
from forge_gpu._src.sim.env import PACK_ALIGNMENT
from forge_gpu.recording import HostSnapshotTransport


@pytest.mark.parametrize("device", DEVICES)
def test_batches_arrive_exact_and_in_order(device):
    """Every published step arrives once, in order, equal to the env's result at publish time."""
    env = forge_gpu.sim.make("cartpole", num_envs=5, device=device, max_steps=8)
    policy = forge_gpu.sim.make_policy("random", env)
    transport = HostSnapshotTransport(env, slots=3)
    expected, received = [], []

    def consume():
        while (batch := transport.get(timeout=60)) is not None:
            received.append(batch.result.map(np.copy))
            transport.release(batch)

    thread = threading.Thread(target=consume)
    thread.start()
    expected.append(env.reset().numpy())
    transport.publish(env.result)
    for _ in range(20):
        expected.append(env.step(policy(env.observation)).numpy())
        transport.publish(env.result)
    transport.close()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(received) == len(expected) == transport.steps
    for got, want in zip(received, expected, strict=True):
        for name, value in want.arrays().items():
            np.testing.assert_array_equal(got.arrays()[name], value)
    payload = sum(v.nbytes for v in expected[0].arrays().values())
    fields = len(expected[0].arrays())
    # One copy of the env's packed result per step: every field, each aligned to PACK_ALIGNMENT bytes.
    assert payload <= transport.bytes_per_step < payload + fields * PACK_ALIGNMENT


def test_publish_blocks_when_all_slots_are_held():
    """With K slots held by the consumer, publish waits until one is released (backpressure), and counts as
    stall at least the time the test held it blocked (measured by the test from when publish was waiting)."""
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu")
    transport = HostSnapshotTransport(env, slots=2)
    env.reset()
    transport.publish(env.result)
    transport.publish(env.result)
    held = [transport.get(timeout=5), transport.get(timeout=5)]
    stall_before = transport.stall_seconds
    third = threading.Thread(target=transport.publish, args=(env.result,))
    third.start()
    since = wait_until_blocked("publish", third)
    third.join(timeout=0.3)
    assert third.is_alive(), "publish must wait while every slot is held"
    until = time.perf_counter()
    transport.release(held[0])
    third.join(timeout=10)
    assert not third.is_alive() and transport.steps == 3
    assert transport.stall_seconds - stall_before >= until - since > 0


def test_consumer_failure_wakes_blocked_publisher():
    """fail() from the consumer makes a waiting publisher raise instead of hanging."""
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu")
    transport = HostSnapshotTransport(env, slots=1)
    env.reset()
    transport.publish(env.result)
    errors = []

    def publish():
        try:
            transport.publish(env.result)
        except TransportClosed as e:
            errors.append(e)

    thread = threading.Thread(target=publish)
    thread.start()
    transport.fail(OSError(28, "No space left on device"))
    thread.join(timeout=10)
    assert not thread.is_alive() and len(errors) == 1 and "No space" in str(errors[0])


@pytest.mark.parametrize("slots", [0, -1, 2.5, True])
def test_bad_slot_count(slots):
    """A slot count that is not a positive integer is refused, naming the value."""
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu")
    with pytest.raises(ValueError, match="slots"):
        HostSnapshotTransport(env, slots=slots)


def run_bounded(fn, *args, bound: float = 60.0):
    """``fn(*args)`` in a thread, joined for at most ``bound`` seconds (only to stop a hang): what it returned
    or raised, as ``("ok", value)`` or ``("raised", exception)``."""
    out = []

    def target():
        try:
            out.append(("ok", fn(*args)))
        except BaseException as exc:
            out.append(("raised", exc))

    thread = threading.Thread(target=target, name=f"bounded-{fn.__name__}")
    thread.start()
    thread.join(timeout=bound)
    assert not thread.is_alive(), f"{fn.__name__} still waits after {bound} s"
    return out[0]


def published_transport(slots: int, steps: int, device: str = "cpu"):
    env = forge_gpu.sim.make("cartpole", num_envs=2, device=device)
    transport = HostSnapshotTransport(env, slots=slots)
    env.reset()
    for _ in range(steps):
        transport.publish(env.result)
    return env, transport


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the consumer's own error
@pytest.mark.parametrize("device", DEVICES)
def test_a_consumer_that_dies_without_failing_the_transport_stops_a_waiting_publish(device):
    """A consumer thread that raises holding its slots, never calling fail(): the publisher waiting for a slot
    raises TransportClosed naming that thread instead of waiting forever."""
    env, transport = published_transport(slots=2, steps=0, device=device)

    def consumer():
        transport.get(timeout=60), transport.get(timeout=60)
        raise RuntimeError("the consumer broke")  # no fail(), no release

    thread = threading.Thread(target=consumer, name="broken-consumer")
    thread.start()
    transport.publish(env.result), transport.publish(env.result)
    outcome, error = run_bounded(transport.publish, env.result)
    thread.join(timeout=60)
    assert outcome == "raised" and isinstance(error, TransportClosed), (outcome, error)
    assert "publish of step 2" in str(error) and "broken-consumer" in str(error) and "ended" in str(error)


def test_a_collect_consumer_that_raises_fails_the_transport_at_once():
    """collect's recorder thread reports its failure to the transport: a publisher waiting for a slot raises
    TransportClosed with the recorder's error as the cause."""
    from forge_gpu._src.collect.collector import _Consumer

    class BrokenRecorder:
        def append(self, observation, result):
            raise OSError(28, "No space left on device")

    env, transport = published_transport(slots=1, steps=1)
    consumer = _Consumer(transport, BrokenRecorder())
    consumer.start()
    outcome, error = run_bounded(transport.publish, env.result)
    consumer.join(timeout=60)
    assert outcome == "raised" and isinstance(error, TransportClosed), (outcome, error)
    assert "No space" in str(error) and error.__cause__ is consumer.error and isinstance(consumer.error, OSError)


@pytest.mark.parametrize("device", DEVICES)
def test_get_and_publish_with_a_timeout_and_no_peer_name_what_they_waited_for(device):
    """get(timeout) with nothing published and publish(timeout) with every slot taken raise TimeoutError naming
    the step (and the slots); the transport still works after either."""
    env, transport = published_transport(slots=2, steps=0, device=device)
    with pytest.raises(TimeoutError, match=r"get of step 0, waiting for it to be published \(0 published"):
        transport.get(timeout=0.05)
    transport.publish(env.result), transport.publish(env.result)
    with pytest.raises(TimeoutError, match=r"publish of step 2, waiting for a free slot \(all 2 held: 2 published"):
        transport.publish(env.result, timeout=0.05)
    batches = [transport.get(timeout=60), transport.get(timeout=60)]
    with pytest.raises(TimeoutError, match=r"publish of step 2, .* 0 published and not yet taken by get, 2 taken"):
        transport.publish(env.result, timeout=0.05)
    with pytest.raises(TimeoutError, match=r"get of step 2, waiting .* \(2 published so far\)"):
        transport.get(timeout=0.05)
    transport.release(batches[0])
    transport.publish(env.result, timeout=60)
    assert transport.get(timeout=60).slot == batches[0].slot and transport.steps == 3


def test_a_get_whose_publishers_all_ended_without_close_raises():
    """The thread that published ended without close(): get takes what was published, then raises
    TransportClosed naming that thread instead of waiting forever."""
    env, transport = published_transport(slots=2, steps=0)
    publisher = threading.Thread(target=transport.publish, args=(env.result,), name="gone-publisher")
    publisher.start()
    publisher.join(timeout=60)
    outcome, batch = run_bounded(transport.get)
    assert outcome == "ok" and batch.slot == 0
    outcome, error = run_bounded(transport.get)
    assert outcome == "raised" and isinstance(error, TransportClosed), (outcome, error)
    assert "get of step 1" in str(error) and "gone-publisher" in str(error)


def test_get_on_cuda_gives_the_step_back_when_a_capture_outlasts_its_timeout():
    """CUDA's get waits for the slot's copy event, which Warp cannot do during a graph capture; past the timeout
    it raises naming the step and slot, and the step is taken by the next get (CUDA branch, faked on the CPU)."""
    from types import SimpleNamespace

    env, transport = published_transport(slots=2, steps=1)
    real_device = transport.device
    transport._cuda, transport.device = True, SimpleNamespace(is_capturing=True)
    with pytest.raises(TimeoutError, match=r"get of step 0 \(slot 0\) waited for a capture"):
        transport.get(timeout=0.05)
    transport._cuda, transport.device = False, real_device
    batch = transport.get(timeout=60)
    assert batch.slot == 0 and transport._taken == 1
