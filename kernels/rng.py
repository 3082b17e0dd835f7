"""Counter-based random streams keyed by ``(seed, env_id, episode_id, step_id, stream)``.

A draw depends on that key alone, so env ``i``'s randomness does not depend on how many envs run
beside it, nor on the order in which threads run. The env and episode keys a world draws with are its draw keys
(``World.draw_env``, ``World.draw_episode``): in a collection its index and its episode id; in an evaluation the
episode's global index and 0, so that episode ``j`` draws alike whichever world runs it.
"""

import warp as wp

STREAM_RESET = wp.constant(1)
"""Reset noise (start states, targets)."""
STREAM_POLICY = wp.constant(2)
"""The built-in random policy."""
STREAM_RANDOMIZE = wp.constant(3)
"""Domain randomization (``kernels/randomize.py``): one draw per value component."""
STREAM_MIX = wp.constant(4)
"""Which episodes execute the expert's actions (``kernels/relabel.py``): one draw per episode."""


@wp.func
def env_rng(seed: int, env_id: int, episode_id: int, step_id: int, stream: int) -> wp.uint32:
    """A Warp RNG state for one (seed, env, episode, step, stream) key."""
    state = wp.rand_init(seed, env_id)
    state = wp.rand_init(wp.randi(state), episode_id * 8 + stream)
    return wp.rand_init(wp.randi(state), step_id)
