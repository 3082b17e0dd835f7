"""Domain randomization kernels: per-world, per-episode draws and their writes into Newton's model.

Values are drawn for the worlds in ``reset_mask`` from the counter-based stream keyed by
``(seed, env, next episode, key + component)`` (``rng.STREAM_RANDOMIZE``), so env ``i``'s values do not
depend on how many envs run. Launched by ``forge_gpu._src.sim.randomize``. Replicated worlds are laid out
contiguously, so world ``w``'s ``k``-th body (shape, dof) is entry ``w * per_world + k``.
"""

import warp as wp

from .rng import STREAM_RANDOMIZE, env_rng


@wp.kernel
def draw_kernel(
    # Model:
    seed: int,
    key: int,
    low: wp.array[float],
    high: wp.array[float],
    dist: int,
    choices: wp.array[float],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    episode_id_in: wp.array[wp.int32],
    draw_env_in: wp.array[wp.int32],
    # Data out:
    values_out: wp.array2d[float],
):
    """Component ``k`` of the world's value: ``dist`` 0 uniform in [low[k], high[k]], 1 log-uniform (low > 0),
    2 a whole number uniform among low[k], low[k] + 1, ..., high[k] (a palette index), 3 one of ``choices``, each
    equally likely. ``low`` and ``high`` shorter than the value (one row's, of a value of rows) repeat."""
    worldid, k = wp.tid()
    if not reset_mask_in[worldid]:
        return
    state = env_rng(seed, draw_env_in[worldid], episode_id_in[worldid] + 1, key + k, STREAM_RANDOMIZE)
    u = wp.randf(state)
    lo, hi = low[k % low.shape[0]], high[k % high.shape[0]]
    if dist == 3:
        count = choices.shape[0]
        values_out[worldid, k] = choices[wp.min(wp.int32(u * float(count)), count - 1)]
        return
    if dist == 1:
        value = wp.exp(wp.log(lo) + u * (wp.log(hi) - wp.log(lo)))
    elif dist == 2:
        value = wp.floor(lo + u * (hi - lo + 1.0))
    else:
        value = lo + u * (hi - lo)
    values_out[worldid, k] = wp.clamp(value, lo, hi)


@wp.kernel
def copy_rows_kernel(
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    source_in: wp.array2d[float],
    # Data out:
    target_out: wp.array2d[float],
):
    """``target[w] = source[w]`` for the worlds in the mask (restoring recorded values)."""
    worldid, k = wp.tid()
    if reset_mask_in[worldid]:
        target_out[worldid, k] = source_in[worldid, k]


@wp.func
def set_mass(
    body: int,
    mass: float,
    inertia: wp.mat33,
    body_mass_out: wp.array[float],
    body_inv_mass_out: wp.array[float],
    body_inertia_out: wp.array[wp.mat33],
    body_inv_inertia_out: wp.array[wp.mat33],
):
    """A body's mass and inertia, and their inverses as Newton derives them (zero for a massless body)."""
    body_mass_out[body] = mass
    body_inertia_out[body] = inertia
    if mass > 0.0:
        body_inv_mass_out[body] = 1.0 / mass
        body_inv_inertia_out[body] = wp.inverse(inertia)
    else:
        body_inv_mass_out[body] = 0.0
        body_inv_inertia_out[body] = wp.mat33(0.0)


@wp.kernel
def scale_mass_kernel(
    # Model:
    bodies_per_world: int,
    nominal_mass: wp.array[float],
    nominal_inertia: wp.array[wp.mat33],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    scale_in: wp.array[float],
    # Data out:
    body_mass_out: wp.array[float],
    body_inv_mass_out: wp.array[float],
    body_inertia_out: wp.array[wp.mat33],
    body_inv_inertia_out: wp.array[wp.mat33],
):
    """Every body of the world: mass and inertia = nominal * scale, their inverses as Newton derives them."""
    worldid, k = wp.tid()
    if not reset_mask_in[worldid]:
        return
    body = worldid * bodies_per_world + k
    scale = scale_in[worldid]
    set_mass(body, nominal_mass[body] * scale, nominal_inertia[body] * scale, body_mass_out, body_inv_mass_out,
             body_inertia_out, body_inv_inertia_out)  # fmt: skip


@wp.kernel
def scale_entries_kernel(
    # Model:
    per_world: int,
    nominal: wp.array[float],
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    scale_in: wp.array[float],
    # Data out:
    values_out: wp.array[float],
):
    """Every entry of the world (its dofs' gains or armature): nominal * scale."""
    worldid, k = wp.tid()
    if reset_mask_in[worldid]:
        entry = worldid * per_world + k
        values_out[entry] = nominal[entry] * scale_in[worldid]


@wp.kernel
def set_entries_kernel(
    # Model:
    per_world: int,
    # Data in:
    reset_mask_in: wp.array[wp.bool],
    value_in: wp.array[float],
    # Data out:
    values_out: wp.array[float],
):
    """Every entry of the world (its shapes' friction coefficient): the world's value."""
    worldid, k = wp.tid()
    if reset_mask_in[worldid]:
        values_out[worldid * per_world + k] = value_in[worldid]
