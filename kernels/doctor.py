"""Tiny kernels for ``forge-gpu doctor``'s capture checks (launched by ``forge_gpu._src.machine.doctor``): one
increment replayed, and a countdown loop shaped like MuJoCo Warp's solver (an allocation, then a
``wp.capture_while`` whose body counts its condition down)."""

import warp as wp


@wp.kernel
def increment_kernel(
    # Data out:
    values_out: wp.array[float],
):
    i = wp.tid()
    values_out[i] = values_out[i] + 1.0


@wp.kernel
def start_countdown_kernel(
    # In:
    iterations: int,
    # Data out:
    counter_out: wp.array[wp.int32],
    scratch_out: wp.array[float],
):
    """Set the loop's condition to ``iterations`` and clear the scratch (allocated inside the graph)."""
    i = wp.tid()
    scratch_out[i] = 0.0
    if i == 0:
        counter_out[0] = iterations


@wp.kernel
def countdown_iteration_kernel(
    # Data in/out:
    counter: wp.array[wp.int32],
    scratch: wp.array[float],
):
    """One iteration: add one to the scratch; thread 0 counts the condition down (no thread reads it here)."""
    i = wp.tid()
    scratch[i] = scratch[i] + 1.0
    if i == 0:
        counter[0] = counter[0] - 1


@wp.kernel
def accumulate_kernel(
    # Data in:
    scratch_in: wp.array[float],
    # Data out:
    values_out: wp.array[float],
):
    i = wp.tid()
    values_out[i] = values_out[i] + scratch_in[i]
