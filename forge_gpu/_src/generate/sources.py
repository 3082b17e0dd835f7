"""The source demonstrations of a generation, cut into their subtasks' segments.

A source episode is restored frame by frame from its recorded state in the env that generates (one world per
episode, all of a batch at once: one ``VectorEnv.restore`` per frame); the task's observe kernel evaluates each
subtask's conditions on the device (``FileTask.subtask_flags``) and subtask ``s`` ends at the first frame, at or
after the previous one's end, where its conditions hold (the last one's without conditions: where the task's
success holds). An episode that does not cut into every subtask is named and skipped.

What generation needs of a kept episode is laid out here once, whole-array numpy: its tcp poses and gripper column
per frame, each segment's first and last frame, its object's pose at its first frame and, for a subtask that carries a
body (``held``), where that body sits in the tcp's frame there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from forge_gpu._src.core.episode import Episode, EpisodeReadOptions
from forge_gpu._src.tasks.taskfile.subtasks import BODY, TARGET

IDENTITY = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], np.float32)
"""A pose [x, y, z, qx, qy, qz, qw] (Warp's transform layout) that moves nothing."""


@dataclass
class Skipped:
    """A source episode that does not cut into every subtask."""

    index: int
    """Its index in the source run's reading order."""
    env_id: int
    episode_id: int
    subtask: str
    """The first subtask whose conditions never held (after the previous one's end)."""

    def line(self, run: str) -> str:
        return (f"{run}: episode {self.index} (env {self.env_id} episode {self.episode_id}) skipped: subtask "
                f"{self.subtask!r} never ends in it")  # fmt: skip


@dataclass
class Sources:
    """The kept source episodes, laid end to end (E episodes, S subtasks, F frames in all)."""

    run: str
    indices: list[int]
    """Each kept episode's index in the source run's reading order."""
    ids: np.ndarray
    """int64 [E, 2]: each kept episode's (env_id, episode_id)."""
    cuts: np.ndarray
    """int64 [E, S + 1]: frame 0 and the frame each subtask ends at, in the episode's own frames."""
    starts: np.ndarray
    """int64 [E]: each episode's first frame in ``poses``."""
    poses: np.ndarray
    """float32 [F, 7]: the tcp's world pose at every frame [m, unit quaternion xyzw]."""
    grip: np.ndarray
    """float32 [F]: the gripper column of the action taken at each frame (the last frame repeats the last)."""
    objects: np.ndarray
    """float32 [E, S, 7]: each subtask's object pose at its segment's first frame (the identity for none)."""
    held: np.ndarray
    """float32 [E, S, 3]: each subtask's held body's position in the tcp's frame at its segment's first frame [m]
    (zeros for a subtask that carries none)."""
    lead: np.ndarray
    """float32 [F, 6]: the tcp's commanded lead at every frame: the pose change (linear [m], then a rotation vector
    [rad], world frame) the source's joint targets asked of its measured joints, to first order (the Jacobian at
    the frame times target minus position); zeros where the action is not joint targets; an episode's last frame
    (no action) repeats the one before, so its pose is held as it was reached."""
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def first(self) -> np.ndarray:
        """int32 [E, S]: each segment's first frame in ``poses``."""
        return (self.starts[:, None] + self.cuts[:, :-1]).astype(np.int32)

    @property
    def last(self) -> np.ndarray:
        """int32 [E, S]: each segment's last frame in ``poses``."""
        return (self.starts[:, None] + self.cuts[:, 1:]).astype(np.int32)


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton products of quaternions ``[..., 4]`` (x, y, z, w)."""
    ax, ay, az, aw = np.moveaxis(a, -1, 0)
    bx, by, bz, bw = np.moveaxis(b, -1, 0)
    return np.stack([aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz], -1)  # fmt: skip


def rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectors ``[..., 3]`` rotated by quaternions ``[..., 4]`` (x, y, z, w)."""
    u, w = q[..., :3], q[..., 3:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def compose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Poses ``a * b`` (``[..., 7]``: position then quaternion xyzw)."""
    return np.concatenate([a[..., :3] + rotate(a[..., 3:], b[..., :3]), quat_multiply(a[..., 3:], b[..., 3:])], -1)


def inverse(a: np.ndarray) -> np.ndarray:
    """The inverse poses of ``a`` (``[..., 7]``)."""
    q = a[..., 3:] * np.array([-1.0, -1.0, -1.0, 1.0], a.dtype)
    return np.concatenate([-rotate(q, a[..., :3]), q], -1)


def in_tcp_frame(tcp: np.ndarray, point: np.ndarray) -> np.ndarray:
    """World points ``[..., 3]`` in the frame of the tcp poses ``[..., 7]``."""
    return rotate(inverse(tcp)[..., 3:], point - tcp[..., :3])


def joint_lead(body_q, joint_q, action, tcp, chain: dict) -> np.ndarray:
    """float32 [T, 6]: per frame, the Jacobian of the tcp (positions ``tcp`` [T, 3]) times each chain joint's target
    minus its measured position (``chain``: the joints' ``coords`` in ``joint_q``, action ``columns``, ``origin``
    and ``scale`` of the action's joint targets, and the Jacobian tables ``child``, ``xc``, ``axis``, ``slide``), as
    ``kernels/ik.py``'s ``joint_column`` builds a column."""
    lead = np.zeros((len(tcp), 6), np.float32)
    for k, coord in enumerate(chain["coords"]):
        column = chain["columns"][k]
        target = chain["origin"][coord] + action[:, column] * chain["scale"][column]
        gap = (target - joint_q[:, coord])[:, None]
        frame = compose(body_q[:, chain["child"][k]], np.asarray(chain["xc"][k], np.float32))
        axis = rotate(frame[:, 3:], np.asarray(chain["axis"][k], np.float32))
        if chain["slide"][k]:
            lead[:, :3] += axis * gap
        else:
            lead[:, :3] += np.cross(axis, tcp - frame[:, :3]) * gap
            lead[:, 3:] += axis * gap
    return lead


def cut_sources(env, reader, run: str, selected: list[int], gripper_column: int, point: tuple,
                chain: dict | None = None) -> Sources:  # fmt: skip
    """The episodes ``selected`` (reading-order indices) of the source run's ``reader``, cut into the subtasks of
    ``env``'s task (a file task with ``[[subtasks]]``), ``num_envs`` episodes at a time. ``point``: the tcp's
    body and its offset pose [7] in that body's frame. ValueError (one line) where no episode cuts into every
    subtask."""
    task = env.task
    subtasks = task.plan.subtasks
    names = [t["name"] for t in task.plan.targets]
    n = env.num_envs
    options = EpisodeReadOptions(observation_keys=[], state=True)
    episodes: list[tuple[int, Episode]] = list(zip(selected, reader.read(selected, options), strict=True))
    kept, skipped = [], []
    for at in range(0, len(episodes), n):
        batch = episodes[at : at + n]
        cuts = _cut_batch(env, [e for _, e in batch], len(subtasks))
        for (index, episode), cut in zip(batch, cuts, strict=True):
            missing = np.flatnonzero(cut < 0)
            if missing.size:
                skipped.append(Skipped(index, episode.env_id, episode.episode_id, subtasks[missing[0] - 1].name))
            else:
                kept.append((index, episode, cut))
    if not kept:
        reasons = "; ".join(s.line(run) for s in skipped[:3])
        raise ValueError(f"{run}: no source episode cuts into every subtask ({reasons})")
    body, offset = point
    poses, grips, objects, held, starts, all_cuts, leads = [], [], [], [], [], [], []
    frames = 0
    for _, episode, cut in kept:
        body_q = np.asarray(episode.state["body_q"], np.float32)
        tcp = compose(body_q[:, body], np.broadcast_to(offset, body_q[:, body].shape)).astype(np.float32)
        poses.append(tcp)
        column = np.asarray(episode.action[:, gripper_column], np.float32)
        grips.append(np.concatenate([column, column[-1:]]))
        lead = np.zeros((len(tcp), 6), np.float32)
        if chain is not None:
            joint_q = np.asarray(episode.state["joint_q"], np.float32)
            lead[:-1] = joint_lead(body_q[:-1], joint_q[:-1], np.asarray(episode.action, np.float32), tcp[:-1, :3],
                                   chain)  # fmt: skip
            lead[-1] = lead[-2]  # the last frame has no action: its pose is held with the lead that reached it
        leads.append(lead)
        at_start = []
        for s, subtask in enumerate(subtasks):
            f = cut[s]
            if subtask.kind == BODY:
                at_start.append(body_q[f, subtask.index])
            elif subtask.kind == TARGET:
                at_start.append(np.concatenate([episode.state[f"{names[subtask.index]}_pos"][f], IDENTITY[3:]]))
            else:
                at_start.append(IDENTITY)
        objects.append(np.stack(at_start).astype(np.float32))
        in_hand = np.zeros((len(subtasks), 3), np.float32)
        for s, subtask in enumerate(subtasks):
            if subtask.held_index >= 0:
                f = cut[s]
                in_hand[s] = in_tcp_frame(tcp[f], body_q[f, subtask.held_index, :3])
        held.append(in_hand)
        starts.append(frames)
        all_cuts.append(cut)
        frames += episode.steps + 1
    return Sources(
        run=run,
        indices=[index for index, _, _ in kept],
        ids=np.array([[e.env_id, e.episode_id] for _, e, _ in kept], np.int64),
        cuts=np.stack(all_cuts).astype(np.int64),
        starts=np.array(starts, np.int64),
        poses=np.concatenate(poses),
        grip=np.concatenate(grips),
        objects=np.stack(objects),
        held=np.stack(held),
        lead=np.concatenate(leads),
        skipped=skipped,
    )


def _cut_batch(env, batch: list[Episode], count: int) -> np.ndarray:
    """int64 [len(batch), count + 1]: frame 0 and each subtask's end frame of each episode (-1 where a subtask
    never ends), from the flags of every restored frame."""
    n = env.num_envs
    index = np.minimum(np.arange(n), len(batch) - 1)  # worlds past the batch repeat its last episode
    lengths = np.array([e.steps + 1 for e in batch])
    longest = int(lengths.max())
    own = env.spec.get("params") or {}
    params = {name: np.stack([np.asarray(batch[i].params[name], np.float32) for i in index]) for name in own}
    # Each state entry as [episode, frame, ...], an episode's last frame repeated past its end.
    frames = np.minimum(np.arange(longest)[None, :], lengths[:, None] - 1)
    states = {name: np.stack([e.state[name][f] for e, f in zip(batch, frames, strict=True)])
              for name in env.state_fields}  # fmt: skip
    flags = np.zeros((longest, n, count), bool)
    env.task.subtask_hold.zero_()
    for f in range(longest):
        env.restore({name: array[index, f] for name, array in states.items()}, params if f == 0 else None)
        flags[f] = env.task.subtask_flags.numpy()[:, :count]
    cuts = np.full((len(batch), count + 1), -1, np.int64)
    cuts[:, 0] = 0
    for b in range(len(batch)):
        end = 0
        for s in range(count):
            after = np.flatnonzero(flags[end : lengths[b], b, s])
            if after.size == 0:
                break
            end = end + int(after[0])
            cuts[b, s + 1] = end
    return cuts
