"""Task-independent kernels of the step: action checks and clipping, counters, flags.

Launched by ``forge_gpu._src.sim.env.VectorEnv``. World index first: ``worldid = wp.tid()``.
"""

import warp as wp


@wp.kernel
def count_nonfinite_kernel(
    # Data in:
    action_in: wp.array2d[float],
    # Data out:
    count_out: wp.array[wp.int32],
):
    worldid, actid = wp.tid()
    if not wp.isfinite(action_in[worldid, actid]):
        wp.atomic_add(count_out, 0, 1)


@wp.kernel
def begin_step_kernel(
    # Model:
    action_low: wp.array[float],
    action_high: wp.array[float],
    # Data in:
    action_in: wp.array2d[float],
    ended_in: wp.array[wp.bool],
    idle_in: wp.array[wp.bool],
    # Data out:
    executed_action_out: wp.array2d[float],
    reset_mask_out: wp.array[wp.bool],
    action_nonfinite_out: wp.array[wp.bool],
):
    """Decide which worlds reset this step (those whose last transition ended, and idle worlds: an evaluation's
    once its N episodes have started, which so never run a transition) and clip the action of the others.

    A world whose action holds a NaN or inf is flagged in ``action_nonfinite_out`` (the flag travels to
    the host with the step's batch, so the step never waits on the device to check) and executes zeros.
    """
    worldid = wp.tid()
    reset = ended_in[worldid] or idle_in[worldid]
    reset_mask_out[worldid] = reset
    nonfinite = bool(False)
    for actid in range(action_in.shape[1]):
        if not wp.isfinite(action_in[worldid, actid]):
            nonfinite = True
    action_nonfinite_out[worldid] = nonfinite and not reset
    for actid in range(action_in.shape[1]):
        value = float(0.0)
        if not reset and not nonfinite:
            value = wp.clamp(action_in[worldid, actid], action_low[actid], action_high[actid])
        executed_action_out[worldid, actid] = value


@wp.kernel
def mark_all_kernel(
    # Data out:
    reset_mask_out: wp.array[wp.bool],
    executed_action_out: wp.array2d[float],
    action_nonfinite_out: wp.array[wp.bool],
):
    """Select every world for reset (``VectorEnv.reset``)."""
    worldid, actid = wp.tid()
    if actid == 0:
        reset_mask_out[worldid] = True
        action_nonfinite_out[worldid] = False
    executed_action_out[worldid, actid] = 0.0


@wp.kernel
def world_to_articulation_mask_kernel(
    # Model:
    articulation_world: wp.array[wp.int32],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    # Data out:
    articulation_mask_out: wp.array[wp.bool],
):
    artid = wp.tid()
    worldid = articulation_world[artid]
    articulation_mask_out[artid] = worldid >= 0 and reset_mask_in[worldid]


@wp.kernel
def finish_step_kernel(
    # Model:
    max_steps: int,
    control_dt: float,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    task_reward_in: wp.array[float],
    task_terminated_in: wp.array[wp.bool],
    # Data in/out:
    episode_id: wp.array[wp.int32],
    step_id: wp.array[wp.int32],
    ended: wp.array[wp.bool],
    # Data out:
    time_out: wp.array[float],
    reward_out: wp.array[float],
    terminated_out: wp.array[wp.bool],
    truncated_out: wp.array[wp.bool],
    active_out: wp.array[wp.bool],
):
    """Advance the counters and write the step result (next-step auto-reset semantics)."""
    worldid = wp.tid()
    if reset_mask_in[worldid]:
        episode_id[worldid] = episode_id[worldid] + 1
        step_id[worldid] = 0
        time_out[worldid] = 0.0
        reward_out[worldid] = 0.0
        terminated_out[worldid] = False
        truncated_out[worldid] = False
        active_out[worldid] = False
        ended[worldid] = False
        return
    step = step_id[worldid] + 1
    terminated = task_terminated_in[worldid]
    # A transition is never both terminated and truncated: termination wins.
    truncated = step >= max_steps and not terminated
    step_id[worldid] = step
    time_out[worldid] = float(step) * control_dt
    reward_out[worldid] = task_reward_in[worldid]
    terminated_out[worldid] = terminated
    truncated_out[worldid] = truncated
    active_out[worldid] = True
    ended[worldid] = terminated or truncated
