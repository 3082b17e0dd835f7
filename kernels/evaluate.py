"""Evaluation kernels: each world's episode takes the next global episode index, and each episode's figures go to
that index's row. Launched by ``forge_gpu._src.evaluate.rows`` at the end of every step (inside the captured
step). World index first: ``worldid = wp.tid()``.
"""

import warp as wp

NEXT = wp.constant(0)
"""``counter[NEXT]``: the next global episode index to hand out."""
ENDED = wp.constant(1)
"""``counter[ENDED]``: episodes with an index below the count that have ended."""
NONFINITE = wp.constant(2)
"""``counter[NONFINITE]``: world-steps whose action held a NaN or inf (flagged by the step on CUDA)."""


@wp.kernel
def start_params_kernel(
    # Model:
    episodes: int,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    draw_env_in: wp.array[wp.int32],
    values_in: wp.array2d[float],
    # Data out:
    rows_out: wp.array2d[float],
):
    """A world that started episode ``j < episodes`` this step: its drawn values (one parameter, flattened) to row
    ``j``."""
    worldid, k = wp.tid()
    j = draw_env_in[worldid]
    if reset_mask_in[worldid] and j < episodes:
        rows_out[j, k] = values_in[worldid, k]


@wp.kernel
def evaluate_step_kernel(
    # Model:
    episodes: int,
    has_success: int,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    active_in: wp.array[wp.bool],
    reward_in: wp.array[float],
    terminated_in: wp.array[wp.bool],
    truncated_in: wp.array[wp.bool],
    success_in: wp.array[wp.bool],
    step_id_in: wp.array[wp.int32],
    episode_id_in: wp.array[wp.int32],
    action_nonfinite_in: wp.array[wp.bool],
    # Data in/out:
    counter: wp.array[wp.int32],
    draw_env: wp.array[wp.int32],
    draw_episode: wp.array[wp.int32],
    episode_return: wp.array[float],
    episode_max: wp.array[float],
    episode_success: wp.array[wp.int32],
    idle_out: wp.array[wp.bool],
    # Data out:
    return_out: wp.array[float],
    max_reward_out: wp.array[float],
    length_out: wp.array[wp.int32],
    success_once_out: wp.array[wp.int32],
    success_at_end_out: wp.array[wp.int32],
    world_out: wp.array[wp.int32],
    episode_id_out: wp.array[wp.int32],
):
    """The world's episode is global episode ``j = draw_env[world]``, drawn from the keys ``(j, 0)``.

    A world that reset this step starts counting (its episode key becomes 0: the policy's draws of episode ``j``).
    A world whose transition ended its episode writes row ``j`` (when ``j < episodes``) and takes the next index
    for the episode it starts next step (its episode key -1: a reset draws from key + 1). The index taken depends
    on which worlds end first; what episode ``j`` draws does not. A world whose next index is ``episodes`` or more
    goes idle: it resets at every step from then on (``begin_step_kernel``), so none of its episodes ends.

    ``success_in`` is the task's success flag of the frame (``Task.success_flags``): success once is any transition's
    frame a success, success at the end the last one's."""
    worldid = wp.tid()
    if action_nonfinite_in[worldid]:
        wp.atomic_add(counter, NONFINITE, 1)
    if reset_mask_in[worldid]:
        draw_episode[worldid] = 0
        episode_return[worldid] = 0.0
        episode_max[worldid] = -3.0e38
        episode_success[worldid] = 0
        return
    if not active_in[worldid]:
        return
    reward = reward_in[worldid]
    total = episode_return[worldid] + reward
    episode_return[worldid] = total
    best = wp.max(episode_max[worldid], reward)
    episode_max[worldid] = best
    at_end = 0
    if has_success != 0 and success_in[worldid]:
        at_end = 1
    once = wp.max(episode_success[worldid], at_end)
    episode_success[worldid] = once
    if not (terminated_in[worldid] or truncated_in[worldid]):
        return
    j = draw_env[worldid]
    if j < episodes:
        return_out[j] = total
        max_reward_out[j] = best
        length_out[j] = step_id_in[worldid]
        success_once_out[j] = once
        success_at_end_out[j] = at_end
        world_out[j] = worldid
        episode_id_out[j] = episode_id_in[worldid]
        wp.atomic_add(counter, ENDED, 1)
    next_j = wp.atomic_add(counter, NEXT, 1)
    draw_env[worldid] = next_j
    draw_episode[worldid] = -1
    idle_out[worldid] = next_j >= episodes
