"""push's expert kernel: the scripted push, re-planned every step from the observation (launched by
``forge_gpu.sim:push_expert``, ``forge_gpu/_src/tasks/push.py``). ``proprio`` is ``[q (4), qd (4), tip position
(3)]``, ``cube_pose`` ``[x, y, z, qx, qy, qz, qw]``, ``goal_position`` ``[x, y, 0]``, all in the world frame [m];
the IK is ``kernels/arm.py``'s.
"""

import warp as wp

from .arm import reach_ik

PROPRIO_TIP = wp.constant(8)
"""Offset of the tip position in ``proprio``."""


@wp.kernel
def expert_kernel(
    # Model:
    shoulder_height: float,
    upper_arm: float,
    forearm: float,
    hand: float,
    tip_radius: float,
    lookahead: float,
    push_lookahead: float,
    clearance: float,
    margin: float,
    band: float,
    max_step: float,
    action_low: wp.array[float],
    action_high: wp.array[float],
    action_scale: wp.array[float],
    # Data in:
    proprio_in: wp.array2d[float],
    cube_pose_in: wp.array2d[float],
    goal_position_in: wp.array2d[float],
    # Data out:
    action_out: wp.array2d[float],
):
    """Push the cube along the line from the goal through it, re-planned every step from the observation.

    With ``d`` the unit vector from the cube's centre to the goal on the table plane and the cube's half size
    ``h`` read from its height: when the tip is at the pushing height (the cube's centre), behind the cube
    (along -d) and within ``band`` h of the line, it moves along the line toward the goal (its target on the line,
    push_lookahead ahead within h / 2 of it, less near the goal, and less from h / 2 to band h off the line, none at
    band h: a tip beside the line slides back onto it as it pushes; band 0.5 pushes only within h / 2, at full
    speed, the expert before the steering); below the travel height
    and behind the cube but off the line, it moves to the approach point ``behind`` (the cube's centre - d *
    (sqrt(2) h + tip + margin), clear of its corners) and down to the pushing height (the path stays behind the
    cube); below the travel height anywhere else (beside or in front of the cube: the cube drifted), it rises
    straight up; at the travel height (``clearance`` above the cube's top) it flies to above ``behind`` and
    descends there. The tip's target, at most ``lookahead`` from the measured tip (the drives lag: the tip covers
    about a sixth of the way per step), goes through the arm's IK (hand pointing down), each joint at most
    ``max_step`` [rad] from its measured angle.
    """
    worldid = wp.tid()
    tip = wp.vec3(
        proprio_in[worldid, PROPRIO_TIP], proprio_in[worldid, PROPRIO_TIP + 1], proprio_in[worldid, PROPRIO_TIP + 2]
    )
    cube = wp.vec2(cube_pose_in[worldid, 0], cube_pose_in[worldid, 1])
    h = cube_pose_in[worldid, 2]
    to_goal = wp.vec2(goal_position_in[worldid, 0], goal_position_in[worldid, 1]) - cube
    distance = wp.length(to_goal)
    d = wp.vec2(1.0, 0.0)
    if distance > 1e-6:
        d = to_goal / distance
    rel = wp.vec2(tip[0], tip[1]) - cube
    along = wp.dot(rel, d)
    lateral = rel[0] * d[1] - rel[1] * d[0]
    low_z = wp.max(h, tip_radius + 0.005)
    high_z = 2.0 * h + tip_radius + clearance
    clear = 1.42 * h + tip_radius
    behind = cube - d * (clear + margin)
    at_push_height = tip[2] < low_z + 0.02
    below_travel = tip[2] < high_z - 0.01
    target = wp.vec3(behind[0], behind[1], high_z)  # at the travel height: fly to above the approach point
    if at_push_height and along < -h and wp.abs(lateral) < band * h:
        steer = float(1.0)  # within h / 2 of the line; then down to 0 at band h
        if wp.abs(lateral) > 0.5 * h:
            m = 1.0 / (band - 0.5)
            steer = wp.clamp(band * m - m * wp.abs(lateral) / h, 0.0, 1.0)
        advance = steer * wp.min(push_lookahead, 0.5 * distance + 0.002)
        on_line = cube + d * (along + advance)
        target = wp.vec3(on_line[0], on_line[1], low_z)
    elif below_travel and along < -(clear + 0.3 * margin):
        target = wp.vec3(behind[0], behind[1], low_z)
    elif below_travel:
        target = wp.vec3(tip[0], tip[1], high_z)
    elif wp.length(wp.vec2(tip[0], tip[1]) - behind) < 0.01:
        target = wp.vec3(behind[0], behind[1], low_z)
    move = target - tip
    if wp.length(move) > lookahead:
        move = move * (lookahead / wp.length(move))
    goal = reach_ik(tip + move, shoulder_height, upper_arm, forearm, hand)
    for j in range(4):
        q = proprio_in[worldid, j]
        command = q + wp.clamp(goal[j] - q, -max_step, max_step)
        action_out[worldid, j] = wp.clamp(command / action_scale[j], action_low[j], action_high[j])
