"""Relabeling kernels: which episodes execute the expert's actions (drawn per episode) and, per world, the action
the step executes. Launched by ``forge_gpu._src.sim.relabel``. World index first: ``worldid = wp.tid()``."""

import warp as wp

from .rng import STREAM_MIX, env_rng


@wp.kernel
def draw_mix_kernel(
    # Model:
    seed: int,
    share: float,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    # Data out:
    expert_executed_out: wp.array[float],
):
    """For each world in the mask: 1 (the next episode executes the expert's actions) with probability ``share``,
    else 0, drawn from the stream keyed by ``(seed, env, next episode)`` (``rng.STREAM_MIX``)."""
    worldid = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = env_rng(seed, draw_env_in[worldid], episode_id_in[worldid] + 1, 0, STREAM_MIX)
    value = float(0.0)
    if wp.randf(state) < share:
        value = 1.0
    expert_executed_out[worldid] = value


@wp.kernel
def restore_mix_kernel(
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    given_in: wp.array[float],
    # Data out:
    expert_executed_out: wp.array[float],
):
    """``expert_executed[w] = given[w]`` for the worlds in the mask (restoring recorded episodes)."""
    worldid = wp.tid()
    if reset_mask_in[worldid]:
        expert_executed_out[worldid] = given_in[worldid]


@wp.kernel
def choose_action_kernel(
    # Data in:
    expert_executed_in: wp.array[float],
    label_in: wp.array2d[float],
    learner_in: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """The action a world's step executes (before clipping): the expert's label of its current frame in an
    episode that executes the expert's actions, else the learner's."""
    worldid, actid = wp.tid()
    value = learner_in[worldid, actid]
    if expert_executed_in[worldid] > 0.5:
        value = label_in[worldid, actid]
    action_out[worldid, actid] = value
