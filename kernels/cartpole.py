"""cartpole's LQR expert (the task itself is ``configs/cartpole.toml``, a task file with no kernels of its own).

Per-world layout: joint coordinates ``[cart position (m), pole angle (rad)]``, joint velocities
``[cart velocity (m/s), pole angular velocity (rad/s)]``; ``proprio`` is ``[x, x_dot, theta, theta_dot]``.
Launched by ``forge_gpu._src.tasks.cartpole``.
"""

import warp as wp


@wp.kernel
def expert_kernel(
    # Model:
    gain: wp.array[float],
    action_low: wp.array[float],
    action_high: wp.array[float],
    # Data in:
    proprio_in: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """Linear state feedback u = -K x (LQR gains in action units), clipped to the bounds."""
    worldid = wp.tid()
    u = float(0.0)
    for i in range(4):
        u -= gain[i] * proprio_in[worldid, i]
    action_out[worldid, 0] = wp.clamp(u, action_low[0], action_high[0])
