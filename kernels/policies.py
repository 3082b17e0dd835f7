"""Task-independent built-in policies. Task experts live in the task's kernel module."""

from typing import Any

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


# -- what a torch policy sees and executes (forge_gpu._src.sim.policies.TorchPolicy) ---------------------------------
# Every kernel below takes ``restart_all`` (1 on the wrapper's first call: every env starts afresh) and the env's
# ``step_id``: an env whose frame has ``step_id == 0`` is at its episode's first frame, and its history, chunk and
# ensemble start again there.


@wp.kernel
def history_kernel(
    # Model:
    restart_all: int,
    per_thread: int,
    # Data in:
    step_id_in: wp.array[wp.int32],
    frame_in: wp.array2d[Any],
    previous_in: wp.array3d[Any],
    # Data out:
    history_out: wp.array3d[Any],
):
    """One observation field's last ``h`` frames, oldest first, as units ``[N, h, W]`` (4-byte words, or bytes
    where a frame is not a whole number of words: an overload per unit): the previous history shifted by one and
    the current frame last; at an episode's first frame every slot is that frame (the padding of
    ``Windows(pad=True)``). ``previous_in`` and ``history_out`` are different buffers. Thread ``(env, slot, part)``
    copies units ``part * per_thread ..`` (1 on CUDA; a whole frame on the CPU, where a thread costs more than a
    unit)."""
    worldid, slot, part = wp.tid()
    units = history_out.shape[2]
    begin = part * per_thread
    end = wp.min(begin + per_thread, units)
    if restart_all != 0 or step_id_in[worldid] == 0 or slot == history_out.shape[1] - 1:
        for unit in range(begin, end):
            history_out[worldid, slot, unit] = frame_in[worldid, unit]
    else:
        for unit in range(begin, end):
            history_out[worldid, slot, unit] = previous_in[worldid, slot + 1, unit]


@wp.kernel
def open_loop_kernel(
    # Model:
    restart_all: int,
    steps_per_chunk: int,
    # Data in:
    step_id_in: wp.array[wp.int32],
    predicted_in: wp.array3d[float],
    # Data:
    chunk: wp.array3d[float],
    offset: wp.array[wp.int32],
    # Data out:
    action_out: wp.array2d[float],
):
    """Open-loop chunks: an env takes the policy's chunk ``predicted_in[env]`` ``[H, A]`` at its episode's first
    frame and after executing ``steps_per_chunk`` actions of the chunk it holds (``chunk``; ``offset``: the next
    action's index in it), and executes the chunk's actions in order."""
    worldid = wp.tid()
    k = offset[worldid]
    if restart_all != 0 or step_id_in[worldid] == 0 or k >= steps_per_chunk:
        for i in range(steps_per_chunk):
            for actid in range(chunk.shape[2]):
                chunk[worldid, i, actid] = predicted_in[worldid, i, actid]
        k = 0
    for actid in range(chunk.shape[2]):
        action_out[worldid, actid] = chunk[worldid, k, actid]
    offset[worldid] = k + 1


@wp.kernel
def ensemble_kernel(
    # Model:
    restart_all: int,
    decay: float,
    # Data in:
    step_id_in: wp.array[wp.int32],
    predicted_in: wp.array3d[float],
    # Data:
    sums: wp.array3d[float],
    age: wp.array[wp.int32],
    # Data out:
    action_out: wp.array2d[float],
):
    """Temporal ensembling (ACT's): the action at step ``t`` of an episode is the weighted mean of the actions for
    ``t`` of the chunks predicted at steps ``t-H+1 .. t`` of the episode (fewer at its start), weight
    ``exp(-decay * i)`` with ``i = 0`` for the oldest prediction.

    ``sums[env, tau % H]`` accumulates, for each step ``tau`` of the next ``H``, each prediction's weighted action
    for ``tau`` as the prediction arrives: its weight is known then (``i`` = its step minus that of the oldest
    prediction of ``tau``'s window), so ``[N, H, A]`` hold what a ring of every chunk ``[N, H, H, A]`` would.
    ``age``: the step ``t`` of the env's episode at its last call."""
    worldid = wp.tid()
    horizon = predicted_in.shape[1]
    t = age[worldid] + 1
    if restart_all != 0 or step_id_in[worldid] == 0:
        t = 0
        for i in range(horizon):
            for actid in range(sums.shape[2]):
                sums[worldid, i, actid] = 0.0
    for i in range(horizon):
        tau = t + i
        oldest = wp.max(tau - horizon + 1, 0)
        weight = wp.exp(-decay * float(t - oldest))
        row = tau % horizon
        for actid in range(sums.shape[2]):
            sums[worldid, row, actid] = sums[worldid, row, actid] + weight * predicted_in[worldid, i, actid]
    total = float(0.0)
    for i in range(wp.min(t + 1, horizon)):
        total += wp.exp(-decay * float(i))
    row = t % horizon
    for actid in range(sums.shape[2]):
        action_out[worldid, actid] = sums[worldid, row, actid] / total
        sums[worldid, row, actid] = 0.0
    age[worldid] = t
