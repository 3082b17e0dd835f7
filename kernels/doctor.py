"""A tiny kernel for ``forge-gpu doctor``'s capture-and-replay check (launched by ``forge_gpu._src.sim.doctor``)."""

import warp as wp


@wp.kernel
def increment_kernel(
    # Data out:
    values_out: wp.array[float],
):
    i = wp.tid()
    values_out[i] = values_out[i] + 1.0
