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
    """``joints`` (patterns), ``body``, ``other`` (a body), ``relative_to`` (a body), ``axis``, ``command``
    (columns of the command), or a number's name (its ``tf`` column in order, from ``TF_ARGS``)."""
    width: str | int = 0
    """An observation's width: a number, ``joints`` (one per coordinate), ``action`` or ``command``."""
    root: bool = False
    """Reads the free root joint."""
    doc: str = ""
    reads: str = ""
    """``action``: reads the executed action; ``previous``: the one before it too (the task then records them)."""


OBSERVATIONS = {
    "root_height": TermInfo(k.obs_root_height, width=1, root=True, doc="root z [m]"),
    "root_quat": TermInfo(k.obs_root_quat, width=4, root=True, doc="root orientation, quaternion xyzw"),
    "root_lin_vel": TermInfo(k.obs_root_lin_vel, width=3, root=True, doc="root linear velocity, world [m/s]"),
    "root_ang_vel": TermInfo(k.obs_root_ang_vel, width=3, root=True, doc="root angular velocity, world [rad/s]"),
    "root_lin_vel_base": TermInfo(k.obs_root_lin_vel_base, width=3, root=True, doc="root linear velocity, root frame"),
    "root_ang_vel_base": TermInfo(k.obs_root_ang_vel_base, width=3, root=True, doc="root angular velocity, root frame"),
    "root_lin_vel_heading": TermInfo(
        k.obs_root_lin_vel_heading, width=2, root=True, doc="root planar velocity in the heading (yaw) frame [m/s]"
    ),
    "projected_gravity": TermInfo(k.obs_projected_gravity, width=3, root=True, doc="gravity's direction, root frame"),
    "joint_pos": TermInfo(k.obs_joint_pos, ("joints",), "joints", doc="joint positions"),
    "joint_pos_rel": TermInfo(k.obs_joint_pos_rel, ("joints",), "joints", doc="joint positions - default pose"),
    "joint_vel": TermInfo(k.obs_joint_vel, ("joints",), "joints", doc="joint velocities"),
    "body_pos": TermInfo(k.obs_body_pos, ("body", "relative_to"), 3, doc="body position (world or relative_to)"),
    "body_quat": TermInfo(k.obs_body_quat, ("body", "relative_to"), 4, doc="body orientation xyzw"),
    "body_lin_vel": TermInfo(k.obs_body_lin_vel, ("body", "relative_to"), 3, doc="body linear velocity"),
    "body_ang_vel": TermInfo(k.obs_body_ang_vel, ("body", "relative_to"), 3, doc="body angular velocity"),
    "last_action": TermInfo(
        k.obs_last_action, width="action", doc="the executed action of the transition", reads="action"
    ),
    "command": TermInfo(k.obs_command, width="command", doc="the episode's command"),
}
REWARDS = {
    "alive": TermInfo(k.rew_alive, doc="1 per step"),
    "root_lin_vel": TermInfo(k.rew_root_lin_vel, ("axis",), root=True, doc="root velocity along axis [m/s]"),
    "track_lin_vel": TermInfo(
        k.rew_track_lin_vel, ("sigma", "command"), root=True, doc="exp(-|v_xy - command|^2 / sigma)"
    ),
    "track_lin_vel_heading": TermInfo(
        k.rew_track_lin_vel_heading,
        ("sigma", "command"),
        root=True,
        doc="exp(-|v_xy in the heading frame - command|^2 / sigma)",
    ),
    "root_lin_vel_z_l2": TermInfo(k.rew_root_lin_vel_z_l2, root=True, doc="v_z^2 (bouncing)"),
    "root_ang_vel_xy_l2": TermInfo(k.rew_root_ang_vel_xy_l2, root=True, doc="w_x^2 + w_y^2 (rocking)"),
    "track_yaw_rate": TermInfo(
        k.rew_track_yaw_rate, ("sigma", "command"), root=True, doc="exp(-(w_z - command)^2 / sigma)"
    ),
    "track_height": TermInfo(k.rew_track_height, ("sigma", "height"), root=True, doc="exp(-(z - height)^2 / sigma)"),
    "upright": TermInfo(k.rew_upright, root=True, doc="z of the root's up axis (1 upright)"),
    "joint_pos_l2": TermInfo(k.rew_joint_pos_l2, ("joints",), doc="sum (q - default)^2"),
    "joint_vel_l2": TermInfo(k.rew_joint_vel_l2, ("joints",), doc="sum qd^2"),
    "joint_limit": TermInfo(k.rew_joint_limit, ("joints",), doc="sum of the distances beyond the limits"),
    "action_l2": TermInfo(k.rew_action_l2, doc="sum a^2 of the executed action", reads="action"),
    "action_rate_l2": TermInfo(k.rew_action_rate_l2, doc="sum (a - previous a)^2", reads="previous"),
    "energy": TermInfo(k.rew_energy, doc="sum |a * scale * qd| over the actuated joints", reads="action"),
    "body_distance": TermInfo(k.rew_body_distance, ("body", "other"), doc="distance between two bodies [m]"),
    "body_to_command": TermInfo(k.rew_body_to_command, ("body", "command"), doc="body distance to a commanded point"),
    "body_height": TermInfo(k.rew_body_height, ("body",), doc="body z [m]"),
}
CONDITIONS = {
    "root_below": TermInfo(k.done_root_below, ("height",), root=True, doc="root z < height"),
    "tilt": TermInfo(k.done_tilt, ("min_up",), root=True, doc="z of the root's up axis < min_up (cos of the angle)"),
    "body_below": TermInfo(k.done_body_below, ("body", "height"), doc="body z < height"),
    "body_distance_below": TermInfo(
        k.done_body_distance_below, ("body", "other", "distance"), doc="two bodies closer than distance"
    ),
    "body_to_command_below": TermInfo(
        k.done_body_to_command_below, ("body", "command", "distance"), doc="body closer than distance to the command"
    ),
    "joint_pos_beyond": TermInfo(k.done_joint_pos_beyond, ("joints", "limit"), doc="|q| > limit for any joint"),
}
"""Terminations (``[[terminations]]``) and success conditions (``[[success]]``) share this library."""
