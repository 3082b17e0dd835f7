"""The targets of a task file (``[targets]``): :func:`target_entries` checks them, :class:`Targets` draws or
places each target's point at every reset (read by the target terms) and moves its marker shape to it."""

from __future__ import annotations

import numpy as np
import warp as wp

from forge_gpu._src.core.checks import number_list
from forge_gpu._src.sim.world import World
from forge_gpu._src.tasks.taskfile.entries import named_entries, number, shown
from forge_gpu._src.tasks.taskfile.model import per_world
from forge_gpu.kernels import taskfile as kernels

TARGET_KEYS = ("yaw", "radius", "height", "marker", "marker_offset", "position")


def target_entries(targets, source: str, shapes: list[str]) -> list[dict]:
    """The checked ``[targets]``: per name, a point drawn at every reset from the reset's stream (after the joints'
    draws), uniform in a sector of a cylinder about the world's z axis: azimuth in +-``yaw`` about +x [rad], the
    horizontal distance in ``radius = [min, max]`` and the height in ``height = [min, max]`` [m]; ``marker`` (a
    shape's name, optional) is moved to it, plus ``marker_offset`` [m] (visual: a static shape)."""
    out = []
    for name, entry in named_entries(targets, "targets", TARGET_KEYS, "a target takes", source):
        where = f"targets.{name}"
        ranges, placed = {}, None
        if "position" in entry:  # placed by the parameter NAME_position, not drawn
            value = entry["position"]
            if set(entry) & {"yaw", "radius", "height"} or not number_list(value, 2, finite=False):
                raise ValueError(f"{source}: {where}.position = {shown(value)}: expected [x, y] in metres (and no "
                                 "yaw, radius, height: a placed target is not drawn)")  # fmt: skip
            placed, entry = [float(v) for v in value], {**entry, "radius": [0.0, 0.0], "height": [0.0, 0.0]}
        yaw = number(entry, "yaw", 0.0, where, source)
        for key in ("radius", "height"):
            value = entry.get(key)
            if not (number_list(value, 2, finite=False) and value[0] <= value[1]):
                raise ValueError(f"{source}: {where}.{key} = {shown(value)}: expected [min, max] in metres")
            ranges[key] = [float(v) for v in value]
        marker = entry.get("marker")
        if marker is not None and marker not in shapes:
            named = ", ".join(sorted({s for s in shapes if s})) or "none"
            raise ValueError(f"{source}: {where}.marker = {shown(marker)}: no such shape; the model's are {named}")
        offset = entry.get("marker_offset", [0.0, 0.0, 0.0])
        if not number_list(offset, 3, finite=False):
            raise ValueError(f"{source}: {where}.marker_offset = {shown(offset)}: expected [x, y, z] in metres")
        out.append({"name": name, "yaw": yaw, **ranges, "marker": marker, "marker_offset": [float(v) for v in offset],
                    "position": placed})  # fmt: skip
    return out


class Targets:
    """The file's ``[targets]``: one point per target and world ([N, K] ``points``, ``Frame.target``), drawn at
    every reset after the joints (``kernels.draw_targets_kernel``), each recorded as state ``NAME_pos`` [N, 3], its
    marker shape moved to it (and back to the restored point after ``restore``)."""

    def __init__(self, world: World, targets: list[dict]):
        n, device, k = world.num_envs, world.device, len(targets)
        self.count, self.placed = k, []
        self.points = wp.zeros((n, k), dtype=wp.vec3, device=device)
        self.state = {
            f"{t['name']}_pos": wp.array(ptr=self.points.ptr + 12 * i, dtype=float, shape=(n, 3),
                                         strides=(12 * k, 4), device=device)
            for i, t in enumerate(targets)
        }  # fmt: skip
        if not k:
            return
        markers = np.full((n, k), -1, np.int32)
        for i, t in enumerate(targets):
            if t["marker"] is not None:
                markers[:, i] = per_world(world.model.shape_label, t["marker"], n, device).numpy()
        self.marker = wp.array(markers, dtype=wp.int32, device=device)
        self.offset = wp.array([t["marker_offset"] for t in targets], dtype=wp.vec3, device=device)
        self.yaw = wp.array([t["yaw"] for t in targets], dtype=float, device=device)
        self.radius = wp.array([t["radius"] for t in targets], dtype=wp.vec2, device=device)
        self.height = wp.array([t["height"] for t in targets], dtype=wp.vec2, device=device)
        self.placed = [(i, f"{t['name']}_position") for i, t in enumerate(targets) if t["position"] is not None]
        """The targets placed by a parameter (``position``): (index, the parameter's name)."""
        flags = [int(t["position"] is not None) for t in targets]
        self.placed_flags = wp.array(flags, dtype=int, device=device)

    def draw(self, world: World, joint_draws: int) -> None:
        if self.count > len(self.placed):
            wp.launch(
                kernels.draw_targets_kernel,
                dim=world.num_envs,
                inputs=[world.seed, joint_draws, self.yaw, self.radius, self.height, self.marker, self.offset]
                + [self.placed_flags, world.reset_mask, world.draw_episode, world.draw_env],
                outputs=[self.points, world.model.shape_transform],
                device=world.device,
            )
        for k, name in self.placed:
            wp.launch(
                kernels.place_target_kernel,
                dim=world.num_envs,
                inputs=[k, self.marker, self.offset, world.reset_mask, world.params[name]],
                outputs=[self.points, world.model.shape_transform],
                device=world.device,
            )

    def place(self, world: World) -> None:
        if self.count:
            wp.launch(
                kernels.place_markers_kernel,
                dim=self.points.shape,
                inputs=[self.marker, self.offset, world.reset_mask, self.points],
                outputs=[world.model.shape_transform],
                device=world.device,
            )
