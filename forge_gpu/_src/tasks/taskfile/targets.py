"""The targets of a task file (``[targets]``): points drawn or placed at every reset, read by the target terms,
each with its marker shape moved to it."""

from __future__ import annotations

import numpy as np
import warp as wp

from forge_gpu._src.sim.world import World
from forge_gpu._src.tasks.taskfile.model import per_world
from forge_gpu.kernels import taskfile as kernels


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
