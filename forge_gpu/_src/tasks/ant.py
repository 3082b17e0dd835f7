"""ant's scripted trot (``configs/ant.toml`` names it as its ``[expert]``): the one piece of ``ant`` that is code.

The task itself is a task file (Newton's ``nv_ant.xml`` and library terms); a gait is not a term (it is a policy
with its own phase and PD law), so it stays a kernel (``kernels/ant.py``).
"""

from __future__ import annotations

import warp as wp

from forge_gpu.kernels import ant as kernels

GAIT_KEYS = ("frequency", "hip_amplitude", "ankle_amplitude", "stiffness", "damping")


def ant_trot(task, world, settings: dict):
    """The ``[expert]`` factory: PD torques tracking a trot (``kernels.ant.expert_kernel``); ``settings`` holds
    the gait's ``frequency`` [Hz], ``hip_amplitude`` and ``ankle_amplitude`` [rad], ``stiffness`` [N m / rad]
    and ``damping`` [N m s / rad]."""
    missing = [k for k in GAIT_KEYS if not isinstance(settings.get(k), int | float)]
    if missing or set(settings) - set(GAIT_KEYS):
        raise ValueError(f"{task.config.params.file}: [expert] of ant.trot takes numbers {', '.join(GAIT_KEYS)}")
    if task.spec.proprio_dim != 27 or task.spec.action_dim != 8:
        raise ValueError("ant.trot needs ant's proprio layout (27: z, quat, velocities, 8 hinge angles and rates)")
    gait = [float(settings[k]) for k in GAIT_KEYS]
    action = wp.zeros((world.num_envs, task.spec.action_dim), dtype=float, device=world.device)

    def act(observation: dict) -> wp.array:
        wp.launch(
            kernels.expert_kernel,
            dim=(world.num_envs, 4),
            inputs=[
                world.config.control_dt,
                *gait,
                task.default_q,
                world.action_scale,
                world.action_low,
                world.action_high,
                observation["step_id"],
                observation["proprio"],
            ],
            outputs=[action],
            device=world.device,
        )
        return action

    return act
