"""Task-independent built-in policies. Task experts live in the task's kernel module."""

import warp as wp

from .rng import STREAM_POLICY, env_rng


@wp.kernel
def random_policy_kernel(
    # Model:
    seed: int,
    action_low: wp.array[float],
    action_high: wp.array[float],
    # Data in:
    episode_id_in: wp.array[wp.int32],
    step_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    # Data out:
    action_out: wp.array2d[float],
):
    """Uniform actions within the bounds, keyed by (seed, the world's draw key, step)."""
    worldid = wp.tid()
    state = env_rng(seed, draw_env_in[worldid], episode_id_in[worldid], step_id_in[worldid], STREAM_POLICY)
    for actid in range(action_out.shape[1]):
        lo = action_low[actid]
        action_out[worldid, actid] = lo + (action_high[actid] - lo) * wp.randf(state)
