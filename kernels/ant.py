"""Ant's scripted gait (the task itself is ``configs/ant.toml``, a task file with no kernels of its own).

Per-world layout (Newton's ``nv_ant.xml``): joint coordinates ``[torso x, y, z (m), torso quaternion
qx, qy, qz, qw, then 8 hinge angles (rad)]`` (15), joint velocities ``[torso COM linear velocity (m/s),
angular velocity (rad/s), both in the world frame, then 8 hinge rates (rad/s)]`` (14). The hinges are
``hip_1, ankle_1, hip_2, ankle_2, hip_3, ankle_3, hip_4, ankle_4``: one hip (about the torso's z)
and one ankle per leg; ``proprio`` is ``[z, quat, lin vel, ang vel, 8 hinge angles, 8 hinge rates]``. Launched
by ``forge_gpu._src.tasks.ant``.
"""

import warp as wp

FREE_COORDS = wp.constant(7)
"""Coordinates of the torso's free joint: position (3) and quaternion xyzw (4)."""


@wp.kernel
def expert_kernel(
    # Model:
    control_dt: float,
    frequency: float,
    hip_amplitude: float,
    ankle_amplitude: float,
    stiffness: float,
    damping: float,
    default_q: wp.array2d[float],
    action_scale: wp.array[float],
    action_low: wp.array[float],
    action_high: wp.array[float],
    # Data in:
    step_id_in: wp.array[wp.int32],
    proprio_in: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """A trot: PD torques tracking phase-shifted sinusoids per leg, phase from ``step_id * control_dt``.

    Diagonal legs (1, 3) and (2, 4) move together, half a period apart. Each hip swings the foot
    backward (-x) while its ankle presses down and forward while the ankle lifts, so the stance legs
    push the torso along +x.
    """
    worldid, legid = wp.tid()
    phase = 2.0 * wp.pi * frequency * float(step_id_in[worldid]) * control_dt
    if legid == 1 or legid == 3:
        phase += wp.pi
    # A positive hip angle moves the feet of legs 1 and 2 backward, those of legs 3 and 4 forward;
    # a positive ankle angle presses the feet of legs 1 and 4 down, those of legs 2 and 3 up.
    hip_sign = 1.0
    if legid >= 2:
        hip_sign = -1.0
    down_sign = 1.0
    if legid == 1 or legid == 2:
        down_sign = -1.0
    hip = 2 * legid
    ankle = hip + 1
    hip_ref = default_q[worldid, FREE_COORDS + hip] - hip_sign * hip_amplitude * wp.cos(phase)
    ankle_ref = default_q[worldid, FREE_COORDS + ankle] + down_sign * ankle_amplitude * wp.sin(phase)
    for j in range(hip, ankle + 1):
        ref = hip_ref
        if j == ankle:
            ref = ankle_ref
        torque = stiffness * (ref - proprio_in[worldid, 11 + j]) - damping * proprio_in[worldid, 19 + j]
        action_out[worldid, j] = wp.clamp(torque / action_scale[j], action_low[j], action_high[j])
