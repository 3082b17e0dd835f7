"""The solver's kernels: its overflow bits gathered into the step's (``forge_gpu/_src/sim/solver.py``)."""

import warp as wp


@wp.kernel
def gather_overflow_kernel(
    # Data in:
    first: int,
    solver_overflow_in: wp.array[wp.int32],
    # Data out:
    step_overflow_out: wp.array[wp.int32],
):
    """After each physics substep: OR the solver's per-world overflow bits of that substep into the step's
    (``first``: the step's first substep, which starts them afresh)."""
    worldid = wp.tid()
    bits = solver_overflow_in[worldid]
    if first == 0:
        bits = bits | step_overflow_out[worldid]
    step_overflow_out[worldid] = bits
