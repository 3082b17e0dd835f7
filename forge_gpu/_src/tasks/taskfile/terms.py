"""The term library's index: each TOML term name, its Warp function (``forge_gpu.kernels.terms``), the keys
its entry takes and its width. ``forge-gpu tasks`` and the README's task table list them."""

from __future__ import annotations

from dataclasses import dataclass

from forge_gpu.kernels import terms as k


@dataclass(frozen=True)
class TermInfo:
    """A library term: its function and the TOML keys its entry takes (beyond ``term``, ``weight``, ``noise``)."""

    func: object
    keys: tuple[str, ...] = ()
    """``joints`` (patterns), ``body``, ``other`` (a body; each also takes a ``site`` or an ``offset``, as
    ``site``/``offset`` and ``other_site``/``other_offset``), ``relative_to`` (a body), ``bodies`` (body name
    patterns), ``axis``, ``command`` (columns of the command), ``target`` (a name of the file's ``[targets]``),
    or a number's name (its ``tf`` column in order,
    from ``TF_ARGS``; ``max_angle`` is degrees, stored in radians)."""
    width: str | int = 0
    """An observation's width: a number, ``joints`` (one per coordinate), ``bodies``, ``action`` or ``command``."""
    root: bool = False
    """Reads the root: the free root joint (``func``) or, on a root of slide and hinge joints, the root body
    (``partial``)."""
    partial: object = None
    """The function on a root of slide and hinge joints (the root body's pose and velocity); None: refused there."""
    instead: str = ""
    """What to use on a root of slide and hinge joints where ``partial`` is None."""
    contact: bool = False
    """Reads the bodies' contact timers (the solver's contacts with the ground)."""
    pair: bool = False
    """Reads whether ``body`` and ``other`` touch each other (``Frame.touch``: the solver's contacts between them)."""
    doc: str = ""
    reads: str = ""
    """``action``: reads the executed action; ``previous``: the one before it too (the task then records them)."""


_NO_YAW = "a root of slide and hinge joints has no heading: use root_lin_vel or track_lin_vel (world frame)"
_BODY = ("body", "relative_to")

OBSERVATIONS = {
    "root_height": TermInfo(k.obs_root_height, width=1, root=True, partial=k.obs_root_height_rb, doc="root z [m]"),
    "root_pos": TermInfo(k.obs_root_pos, width=3, doc="root body's origin x, y, z, world [m] (any root)"),
    "root_pitch": TermInfo(k.obs_root_pitch, width=1, doc="root body's rotation about world y [rad] (any root)"),
    "root_quat": TermInfo(
        k.obs_root_quat, width=4, root=True, partial=k.obs_root_quat_rb, doc="root orientation, quaternion xyzw"
    ),
    "root_lin_vel": TermInfo(
        k.obs_root_lin_vel, width=3, root=True, partial=k.obs_root_lin_vel_rb, doc="root linear velocity, world [m/s]"
    ),
    "root_ang_vel": TermInfo(
        k.obs_root_ang_vel,
        width=3,
        root=True,
        partial=k.obs_root_ang_vel_rb,
        doc="root angular velocity, world [rad/s]",
    ),
    "root_lin_vel_base": TermInfo(
        k.obs_root_lin_vel_base,
        width=3,
        root=True,
        partial=k.obs_root_lin_vel_base_rb,
        doc="root linear velocity, root frame",
    ),
    "root_ang_vel_base": TermInfo(
        k.obs_root_ang_vel_base,
        width=3,
        root=True,
        partial=k.obs_root_ang_vel_base_rb,
        doc="root angular velocity, root frame",
    ),
    "root_lin_vel_heading": TermInfo(
        k.obs_root_lin_vel_heading,
        width=2,
        root=True,
        instead=_NO_YAW,
        doc="root planar velocity in the heading (yaw) frame [m/s]",
    ),
    "projected_gravity": TermInfo(
        k.obs_projected_gravity,
        width=3,
        root=True,
        partial=k.obs_projected_gravity_rb,
        doc="gravity's direction, root frame",
    ),
    "joint_pos": TermInfo(k.obs_joint_pos, ("joints",), "joints", doc="joint positions"),
    "joint_pos_rel": TermInfo(k.obs_joint_pos_rel, ("joints",), "joints", doc="joint positions - default pose"),
    "joint_vel": TermInfo(k.obs_joint_vel, ("joints",), "joints", doc="joint velocities"),
    "body_pos": TermInfo(k.obs_body_pos, _BODY, 3, doc="a body point's position (world or relative_to) [m]"),
    "body_quat": TermInfo(k.obs_body_quat, _BODY, 4, doc="a body's (or site's) orientation xyzw"),
    "body_lin_vel": TermInfo(k.obs_body_lin_vel, _BODY, 3, doc="a body point's linear velocity [m/s]"),
    "body_ang_vel": TermInfo(k.obs_body_ang_vel, _BODY, 3, doc="a body's angular velocity [rad/s]"),
    "body_pose": TermInfo(k.obs_body_pose, _BODY, 7, doc="an object's state: body_pos then body_quat"),
    "body_velocity": TermInfo(k.obs_body_velocity, _BODY, 6, doc="an object's velocity: body_lin_vel, body_ang_vel"),
    "target_pos": TermInfo(k.obs_target_pos, ("target",), 3, doc="a target's position, world [m] ([targets])"),
    "body_contact": TermInfo(
        k.obs_body_contact, ("bodies",), "bodies", contact=True, doc="1 per body touching the ground, else 0"
    ),
    "bodies_touch": TermInfo(
        k.obs_bodies_touch, ("body", "other"), 1, contact=True, pair=True, doc="1 while body touches other, else 0"
    ),
    "air_time": TermInfo(
        k.obs_air_time, ("bodies",), "bodies", contact=True, doc="per body, time since it left the ground [s]"
    ),
    "last_action": TermInfo(
        k.obs_last_action, width="action", doc="the executed action of the transition", reads="action"
    ),
    "command": TermInfo(k.obs_command, width="command", doc="the episode's command"),
}
REWARDS = {
    "alive": TermInfo(k.rew_alive, doc="1 per step"),
    "root_lin_vel": TermInfo(
        k.rew_root_lin_vel, ("axis",), root=True, partial=k.rew_root_lin_vel_rb, doc="root velocity along axis [m/s]"
    ),
    "track_lin_vel": TermInfo(
        k.rew_track_lin_vel,
        ("sigma", "command"),
        root=True,
        partial=k.rew_track_lin_vel_rb,
        doc="exp(-|v_xy - command|^2 / sigma)",
    ),
    "track_lin_vel_heading": TermInfo(
        k.rew_track_lin_vel_heading,
        ("sigma", "command"),
        root=True,
        instead=_NO_YAW,
        doc="exp(-|v_xy in the heading frame - command|^2 / sigma)",
    ),
    "root_lin_vel_z_l2": TermInfo(
        k.rew_root_lin_vel_z_l2, root=True, partial=k.rew_root_lin_vel_z_l2_rb, doc="v_z^2 (bouncing)"
    ),
    "root_ang_vel_xy_l2": TermInfo(
        k.rew_root_ang_vel_xy_l2, root=True, partial=k.rew_root_ang_vel_xy_l2_rb, doc="w_x^2 + w_y^2 (rocking)"
    ),
    "track_yaw_rate": TermInfo(
        k.rew_track_yaw_rate,
        ("sigma", "command"),
        root=True,
        instead="a root of slide and hinge joints has no yaw rate: use root_ang_vel or body_ang_vel",
        doc="exp(-(w_z - command)^2 / sigma)",
    ),
    "track_height": TermInfo(
        k.rew_track_height,
        ("sigma", "height"),
        root=True,
        partial=k.rew_track_height_rb,
        doc="exp(-(z - height)^2 / sigma)",
    ),
    "upright": TermInfo(k.rew_upright, root=True, partial=k.rew_upright_rb, doc="z of the root's up axis (1 upright)"),
    "root_pitch_l2": TermInfo(k.rew_root_pitch_l2, doc="pitch^2, the root body's rotation about world y [rad^2]"),
    "joint_pos_l2": TermInfo(k.rew_joint_pos_l2, ("joints",), doc="sum (q - default)^2"),
    "joint_vel_l2": TermInfo(k.rew_joint_vel_l2, ("joints",), doc="sum qd^2"),
    "joint_limit": TermInfo(k.rew_joint_limit, ("joints",), doc="sum of the distances beyond the limits"),
    "action_l2": TermInfo(k.rew_action_l2, doc="sum a^2 of the executed action", reads="action"),
    "action_rate_l2": TermInfo(k.rew_action_rate_l2, doc="sum (a - previous a)^2", reads="previous"),
    "energy": TermInfo(k.rew_energy, doc="sum |a * scale * qd| over the actuated joints", reads="action"),
    "body_distance": TermInfo(k.rew_body_distance, ("body", "other"), doc="distance between two bodies [m]"),
    "body_to_command": TermInfo(k.rew_body_to_command, ("body", "command"), doc="body distance to a commanded point"),
    "body_to_target": TermInfo(k.rew_body_to_target, ("body", "target"), doc="body point's distance to a target [m]"),
    "body_to_target_xy": TermInfo(
        k.rew_body_to_target_xy, ("body", "target"), doc="the same on the horizontal plane (x, y) [m]"
    ),
    "body_at_target": TermInfo(
        k.rew_body_at_target, ("body", "target", "distance"), doc="1 where body_to_target <= distance, else 0"
    ),
    "body_at_target_xy": TermInfo(
        k.rew_body_at_target_xy, ("body", "target", "distance"), doc="1 where body_to_target_xy <= distance, else 0"
    ),
    "body_height": TermInfo(k.rew_body_height, ("body",), doc="a body point's z [m]"),
    "body_lin_vel": TermInfo(
        k.rew_body_lin_vel, ("body", "axis", "relative_to"), doc="a body point's velocity along axis [m/s]"
    ),
    "body_ang_vel": TermInfo(
        k.rew_body_ang_vel, ("body", "axis", "relative_to"), doc="a body's angular velocity about axis [rad/s]"
    ),
    "body_contact": TermInfo(k.rew_body_contact, ("bodies",), contact=True, doc="the bodies touching the ground"),
    "bodies_touch": TermInfo(
        k.rew_bodies_touch, ("body", "other"), contact=True, pair=True, doc="1 while body touches other, else 0"
    ),
    "feet_air_time": TermInfo(
        k.rew_feet_air_time,
        ("bodies", "threshold"),
        contact=True,
        doc="per body touching down this step: its flight's length - threshold [s], summed",
    ),
}
CONDITIONS = {
    "root_below": TermInfo(
        k.done_root_below, ("height",), root=True, partial=k.done_root_below_rb, doc="root z < height"
    ),
    "tilt": TermInfo(
        k.done_tilt,
        ("min_up",),
        root=True,
        partial=k.done_tilt_rb,
        doc="z of the root's up axis < min_up (cos of the angle)",
    ),
    "root_pitch_beyond": TermInfo(
        k.done_root_pitch_beyond, ("max_angle",), doc="|the root body's rotation about world y| > max_angle [deg]"
    ),
    "body_below": TermInfo(k.done_body_below, ("body", "height"), doc="body z < height"),
    "body_above": TermInfo(k.done_body_above, ("body", "height"), doc="body z > height"),
    "body_distance_below": TermInfo(
        k.done_body_distance_below, ("body", "other", "distance"), doc="two bodies closer than distance"
    ),
    "body_to_command_below": TermInfo(
        k.done_body_to_command_below, ("body", "command", "distance"), doc="body closer than distance to the command"
    ),
    "body_at_target": TermInfo(
        k.done_body_at_target, ("body", "target", "distance"), doc="body point within distance of a target"
    ),
    "body_at_target_xy": TermInfo(
        k.done_body_at_target_xy, ("body", "target", "distance"), doc="the same on the horizontal plane (x, y)"
    ),
    "joint_pos_beyond": TermInfo(k.done_joint_pos_beyond, ("joints", "limit"), doc="|q| > limit for any joint"),
    "body_contact": TermInfo(
        k.done_body_contact, ("bodies",), contact=True, doc="any of the bodies touches the ground"
    ),
    "bodies_touch": TermInfo(
        k.done_bodies_touch, ("body", "other"), contact=True, pair=True, doc="body touches other (a contact)"
    ),
}
"""Terminations (``[[terminations]]``) and success conditions (``[[success]]``) share this library."""
