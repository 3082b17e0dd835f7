"""The contact timers of a file task: each body's time in the air and on the ground, and whether named pairs of
bodies touch, read from MuJoCo Warp's contacts before every observe (the contact terms of ``kernels/terms.py``
read them)."""

from __future__ import annotations

import warp as wp

from forge_gpu._src.sim.world import World
from forge_gpu._src.tasks.taskfile.plan import Plan
from forge_gpu.kernels import terms


class ContactTimers:
    """Each body's air and contact timers (``kernels/terms.py``, ``Frame.contact``), advanced before every
    observe from the solver's contacts with the ground (MuJoCo Warp's ``contact`` list): two launches per step,
    whatever the number of contacts or terms; and, where ``bodies_touch`` terms name pairs of bodies, each pair's
    flag (``Frame.touch``: a clear and one launch). The task records them (state ``contact_timers``,
    ``contact_pairs``), so a restored frame observes as recorded."""

    def __init__(self, world: World, plan: Plan, bodies: int):
        solver = getattr(world, "solver", None)
        data = getattr(solver, "mjw_data", None)
        if data is None:
            name = world.config.solver.name
            raise ValueError(
                f"{world.config.params.file}: a contact term reads MuJoCo Warp's contacts; [solver] name = {name!r} "
                "has none: use name = 'mujoco'"
            )
        n, device = world.num_envs, world.device
        self.timers = wp.zeros((n, bodies, 3), dtype=float, device=device)
        """[N, B, 3]: time in the air, time on the ground, the last flight's length [s]."""
        self.touching = wp.zeros((n, bodies), dtype=int, device=device)
        self.restored = False
        c = data.contact
        self.inputs = [data.nacon, c.dist, c.includemargin, c.geom, c.worldid, solver.mjc_geom_to_newton_shape]
        self.inputs += [world.model.shape_body, bodies]
        self.size = data.naconmax
        self.touch = wp.zeros((n, max(len(plan.pairs), 1)), dtype=float, device=device)
        """[N, P]: 1 while the pair's two bodies touch (``plan.pairs``)."""
        self.pairs = wp.array(plan.pairs, dtype=wp.vec2i, device=device) if plan.pairs else None

    def update(self, world: World) -> None:
        kernel = terms.contact_flags_kernel
        wp.launch(kernel, dim=self.size, inputs=self.inputs, outputs=[self.touching], device=world.device)
        restored, self.restored = int(self.restored), False
        if self.pairs is not None and not restored:  # a restored frame keeps the recorded flags
            self.touch.zero_()
            wp.launch(
                terms.contact_pairs_kernel,
                dim=self.size,
                inputs=[*self.inputs, self.pairs, world.reset_mask],
                outputs=[self.touch],
                device=world.device,
            )
        wp.launch(
            terms.contact_timers_kernel,
            dim=self.touching.shape,
            inputs=[float(world.config.control_dt), restored, world.reset_mask],
            outputs=[self.touching, self.timers],
            device=world.device,
        )
