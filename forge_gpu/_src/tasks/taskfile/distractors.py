"""A task file's distractors (``[distractors]``): small boxes on the table that a camera sees and nothing touches,
placed and coloured per world and per episode, so that a policy learning from pixels meets clutter it must ignore.

Newton's cameras share their lights and field of view across worlds; what can differ per world is the shapes'
colours and places (and the camera's pose). The count is the model's (``count``: changing it builds another
model); their places and colours are the randomizable parameters ``distractor_position`` (shape (D, 2): x, y on
the table top [m]) and ``distractor_color`` (shape (D,): palette indices), recorded per episode. A ``[randomize]``
range of one row (``distractor_position = { low = [x, y], high = [x, y] }``) draws every distractor's row from
it (a range of every row's values draws each row from its own, and a place drawn again comes from the first
row's). At every reset a drawn place closer than ``clearance`` to a point the section keeps clear (``away_from``: the
cube's start, the goal) or overlapping an earlier distractor is drawn again (up to :data:`TRIES` times; one that
finds no room is put out of view under the table), and a colour equal to a colour it must differ from
(``differs_from``: the cube's, the goal's) moves to the next colour its draw allows; the settled values are
written back into the parameters, so the episode records what the camera saw (``kernels.place_distractors_kernel``).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from forge_gpu._src.core.checks import is_int, plain_number
from forge_gpu._src.sim.randomize import Parameter, stream_key
from forge_gpu._src.tasks.taskfile.entries import check_keys, shown
from forge_gpu.kernels import taskfile as kernels

KEYS = ("count", "size", "color", "clearance", "away_from", "differs_from")
MAX_COUNT = 8
"""At most this many distractors: their two coordinates each take one of a parameter's 16 draw streams."""
TRIES = 32
"""Draws of a place before a distractor is put out of view."""
POSITION, COLOR = "distractor_position", "distractor_color"
LABEL = "distractor_{}"
"""Each distractor's shape label in the model."""
HIDDEN_Z = -1.0
"""Where a distractor without room waits: under the table top (z = 0) [m]."""


def distractor_entry(section: dict, palette: dict, source: str) -> dict | None:
    """The checked ``[distractors]`` (references resolved): ``count`` (0 .. :data:`MAX_COUNT`), the boxes' edge
    ``size`` [m], their nominal ``color`` (a palette name), ``clearance`` [m] from the ``away_from`` points
    (parameters [x, y]), and ``differs_from`` (palette entries of ``[shape_colors]``); None without distractors."""
    if not section:
        return None
    where = "distractors"
    if not isinstance(section, dict):
        raise ValueError(f"{source}: [distractors] must be a table of {', '.join(KEYS)}")
    check_keys(section, KEYS, where, "allowed keys are", source)
    count = section.get("count", 0)
    if not is_int(count) or not 0 <= count <= MAX_COUNT:
        raise ValueError(f"{source}: {where}.count = {shown(count)}: expected a whole number in 0 .. {MAX_COUNT}")
    if count == 0:
        return None
    numbers = {}
    for key, default in (("size", 0.03), ("clearance", 0.08)):
        value = section.get(key, default)
        if not plain_number(value) or not value > (0.0 if key == "size" else -1e-12):
            low = "> 0" if key == "size" else ">= 0"
            raise ValueError(f"{source}: {where}.{key} = {shown(value)}: expected a number {low} (metres)")
        numbers[key] = float(value)
    color = section.get("color")
    if color not in palette:
        held = ", ".join(palette) or "none: add a [palette]"
        raise ValueError(f"{source}: {where}.color = {shown(color)}: not a [palette] colour ({held})")
    lists = {}
    for key in ("away_from", "differs_from"):
        value = section.get(key, [])
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ValueError(f"{source}: {where}.{key} = {shown(value)}: expected a list of parameter names")
        lists[key] = list(value)
    return {"count": int(count), **numbers, "color": list(palette).index(color), **lists}


def offered(entry: dict | None, palette: dict) -> dict[str, Parameter]:
    """The randomizable parameters of the distractors (none without them)."""
    if entry is None:
        return {}
    d = entry["count"]
    return {
        POSITION: Parameter((d, 2), (0.0,) * (2 * d), "the distractors' places x, y on the table top [m]", rows=True),
        COLOR: Parameter((d,), (float(entry["color"]),) * d, "the distractors' colours (indices into [palette])",
                         names=tuple(palette), rows=True),
    }  # fmt: skip


def check(entry: dict | None, ranges, catalog: dict[str, Parameter], colors: dict, source: str) -> None:
    """ValueError (one line) where the distractors' places are not drawn (``[randomize]`` must name
    ``distractor_position``: the region they are drawn in), or ``away_from`` / ``differs_from`` name what the
    task lacks (``colors``: the ``[shape_colors]`` palette entries)."""
    if entry is None:
        return
    drawn = {r.name for r in ranges}
    if POSITION not in drawn:
        raise ValueError(f"{source}: distractors.count = {entry['count']}: their places are drawn per episode: "
                         f"[randomize] needs {POSITION} = {{ low = [x, y], high = [x, y] }} (table top)")  # fmt: skip
    for name in entry["away_from"]:
        if name not in catalog or catalog[name].shape != (2,):
            points = ", ".join(n for n, p in catalog.items() if p.shape == (2,)) or "none"
            raise ValueError(
                f"{source}: distractors.away_from: {name!r} is not a place [x, y]; the task's are {points}"
            )
    for name in entry["differs_from"]:
        if name not in colors:
            held = ", ".join(colors) or "none"
            raise ValueError(f"{source}: distractors.differs_from: {name!r} is not a [shape_colors] palette entry "
                             f"({held})")  # fmt: skip


def add_distractors(builder, entry: dict | None, palette: dict) -> None:
    """The distractors' boxes in one world's builder: static, out of view until placed, touching nothing."""
    if entry is None:
        return
    import newton

    half = 0.5 * entry["size"]
    color = tuple(float(v) for v in list(palette.values())[entry["color"]])
    for d in range(entry["count"]):
        shape = builder.add_shape_box(
            -1,
            xform=wp.transform((0.0, 0.0, HIDDEN_Z), wp.quat_identity()),
            hx=half,
            hy=half,
            hz=half,
            cfg=newton.ModelBuilder.ShapeConfig(density=0.0, collision_group=0),
            color=color,
            label=LABEL.format(d),
        )
        builder.shape_flags[shape] &= ~newton.ShapeFlags.COLLIDE_SHAPES


class Distractors:
    """The distractors of every world: their shapes [N, D], the points and colours they keep away from (gathered
    per reset into [N, K, 2] and [N, C]), and the one launch that settles and shows them."""

    def __init__(self, world, entry: dict, ranges, palette_colors: wp.array):
        from forge_gpu._src.tasks.taskfile.model import per_world

        n, device, d = world.num_envs, world.device, entry["count"]
        self.entry, self.palette = entry, palette_colors
        shapes = [per_world(world.model.shape_label, LABEL.format(k), n, device).numpy() for k in range(d)]
        self.shapes = wp.array(np.stack(shapes, axis=1), dtype=wp.int32, device=device)
        region = {r.name: r for r in ranges}[POSITION]
        self.low, self.high = wp.vec2(*region.low[:2]), wp.vec2(*region.high[:2])
        color = {r.name: r for r in ranges}.get(COLOR)
        count = palette_colors.shape[0]
        allowed = np.zeros(count, np.int32)
        allowed[color.allowed(count) if color is not None else slice(None)] = 1
        self.allowed = wp.array(allowed, dtype=wp.int32, device=device)
        self.away = wp.zeros((n, max(len(entry["away_from"]), 1), 2), dtype=float, device=device)
        self.avoid = wp.full((n, max(len(entry["differs_from"]), 1)), -1.0, dtype=float, device=device)
        self.key = stream_key("distractor_place")

    def apply(self, world) -> None:
        """Settle and show the distractors of the worlds that reset (after the colours they differ from)."""
        n = world.num_envs
        for out, names in ((self.away, self.entry["away_from"]), (self.avoid, self.entry["differs_from"])):
            flat = out.reshape((n, -1))
            for k, name in enumerate(names):
                source = world.params[name].reshape((n, -1))
                wp.launch(
                    kernels.gather_columns_kernel,
                    dim=source.shape,
                    inputs=[k * source.shape[1], world.reset_mask, source],
                    outputs=[flat],
                    device=world.device,
                )
        d = self.entry["count"]
        wp.launch(
            kernels.place_distractors_kernel,
            dim=n,
            inputs=[world.seed, self.key, self.low, self.high, len(self.entry["away_from"]), self.entry["clearance"]]
            + [0.5 * self.entry["size"], TRIES, self.shapes, self.palette, self.allowed]
            + [len(self.entry["differs_from"]), self.away, self.avoid, world.reset_mask, world.draw_episode]
            + [world.draw_env],
            outputs=[world.params[POSITION].reshape((n, 2 * d)), world.params[COLOR].reshape((n, d))]
            + [world.model.shape_transform, world.model.shape_color],
            device=world.device,
        )
