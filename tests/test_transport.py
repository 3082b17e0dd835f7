"""HostSnapshotTransport: exact copies, slot order, backpressure, and failure propagation."""

import threading
import time

import numpy as np
import pytest
from blocking import wait_until_blocked
from envtools import DEVICES

import forge_gpu
from forge_gpu import HostSnapshotTransport
from forge_gpu._src.collect.transport import TransportClosed
from forge_gpu._src.sim.env import PACK_ALIGNMENT


@pytest.mark.parametrize("device", DEVICES)
def test_batches_arrive_exact_and_in_order(device):
    """Every published step arrives once, in order, equal to the env's result at publish time."""
    env = forge_gpu.make("cartpole", num_envs=5, device=device, max_steps=8)
    policy = forge_gpu.make_policy("random", env)
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
    env = forge_gpu.make("cartpole", num_envs=2, device="cpu")
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
    env = forge_gpu.make("cartpole", num_envs=2, device="cpu")
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
    env = forge_gpu.make("cartpole", num_envs=2, device="cpu")
    with pytest.raises(ValueError, match="slots"):
        HostSnapshotTransport(env, slots=slots)
