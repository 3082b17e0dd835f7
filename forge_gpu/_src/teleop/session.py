"""A teleoperation session: one world of a task on its end-effector action, stepped with the action a person's held
inputs give (``keys.KeyMap``), each episode held on the host until the person keeps it (appended to the run's
recorder, marked ``teleoperated``) or discards it.

The machinery is ``collect``'s: the env's step, its :class:`HostSnapshotTransport` (one host copy a step), the run
format's recorder (``make_recorder``) and the task's stored files; the run is an ordinary run of the task, its state
recorded as the task says. An episode is the reset frame and the steps after it, until the task ends it (success, a
termination, the time limit): only then can it be kept. Its frames wait in host memory (a 400-step lift episode at
128 px with two RGB-D cameras: about 90 MB) and reach the recorder only when kept, so a discarded episode leaves
nothing in the run. The kept episodes' ids count them (0, 1, 2, ...) whatever was discarded between them, and each
carries the per-episode param ``teleoperated`` (1.0), marked in run.json's ``env_spec.param_sources`` as the
operator's: ``replay`` carries it and restores only what the env draws."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque

import numpy as np

from forge_gpu._src.collect.collector import _store_task, make_recorder
from forge_gpu._src.collect.rollouts import PARAM_SOURCES_KEY, param_sources
from forge_gpu._src.collect.transport import HostSnapshotTransport
from forge_gpu._src.core.cameras import cameras
from forge_gpu._src.core.fields import observation_layout
from forge_gpu._src.core.instructions import TEMPLATE_KEY, episode_instructions
from forge_gpu._src.sim.run_description import describe_run
from forge_gpu._src.teleop.keys import MOVES, KeyMap

TELEOPERATED = "teleoperated"
"""The per-episode param of a teleoperated run: 1.0 on every kept episode."""
KIND = "ee_delta"
"""The action kind teleoperation drives (docs/tasks.md "The end-effector action")."""
PHASES = ("ready", "running", "ended")
"""A session's phases: a start frame shown (``start`` runs it), the episode stepped, the episode ended by the task
(``keep`` or ``discard`` it)."""


def action_kind(config) -> str | None:
    """The ``[action] kind`` of a task file's config, None for a task of its own code."""
    action = getattr(config.params, "action", None)
    return action.get("kind") if isinstance(action, dict) else None


def check_end_effector(task: str, config, offers: list[str]) -> None:
    """ValueError (one line) unless ``config`` (the task ``task`` as chosen) has the end-effector action;
    ``offers``: the task's variants that have one, named in the message."""
    kind = action_kind(config)
    if kind == KIND:
        return
    has = f"its action is kind = {kind!r}" if kind else "it is code, not a task file"
    hint = f"; its variant {offers[0]!r} has one: add --variant {offers[0]}" if offers else (
        f'; give a task file whose [action] has kind = "{KIND}" (docs/tasks.md "The end-effector action")')  # fmt: skip
    raise ValueError(f'task {task!r}: teleop drives the end-effector action ([action] kind = "{KIND}"), and {has}'
                     f"{hint}")  # fmt: skip


def end_effector_variants(task: str, overrides: dict) -> list[str]:
    """The variants of the task ``task`` (an id or a task file) whose action is the end-effector action."""
    from forge_gpu._src.tasks.make import task_class, task_config
    from forge_gpu._src.tasks.taskfile.compose import compose

    path = getattr(task_class(task), "path", None)
    if path is None:
        return []
    found = []
    for name in compose(path).variants:
        try:
            if action_kind(task_config(task, variant=name, **overrides)) == KIND:
                found.append(name)
        except ValueError:
            continue
    return found


@dataclasses.dataclass
class Frame:
    """What the page shows of the latest step: its observation (host arrays of one world) and the status."""

    observation: dict
    status: dict


class TeleopSession:
    """One world of ``env`` (a :class:`VectorEnv` of one env on the end-effector action) driven through ``keymap``,
    its kept episodes recorded into the new run ``directory`` (``options``: how, as ``collect``'s).

    :meth:`press` takes what an input or a page button asks (``start``, ``keep``, ``discard``, ``gripper``, a
    speed); :meth:`step` takes one control step with the held inputs; :meth:`run` does both at the control rate
    until stopped; :meth:`close` closes the run with the kept episodes. ValueError on a wrong env, before anything
    is created."""

    def __init__(self, env, directory, keymap: KeyMap, *, options=None):
        if env.num_envs != 1:
            raise ValueError(f"teleop steps one world; the env has num_envs = {env.num_envs}")
        if action_kind(env.config) != KIND:
            raise ValueError(f'teleop drives the end-effector action ([action] kind = "{KIND}"); the env\'s task '
                             f"{env.task.spec.id!r} has kind = {action_kind(env.config)!r}")  # fmt: skip
        if TELEOPERATED in (env.spec.get("params") or {}):
            raise ValueError(f"the task already has a param named {TELEOPERATED!r}; rename it")
        self.env, self.keymap = env, keymap
        self.low = np.asarray(env.config.action.low, np.float32)
        self.high = np.asarray(env.config.action.high, np.float32)
        self.cameras = list(cameras(observation_layout(env.spec)))
        """The task's cameras, each recorded (``rgb`` or ``NAME_rgb``)."""
        self.transport = HostSnapshotTransport(env, slots=2)
        run = describe_run(env, transport=self.transport.name)
        spec = {
            **run.spec,
            "params": {**(run.spec.get("params") or {}), TELEOPERATED: {"shape": [], "dtype": "float32"}},
            PARAM_SOURCES_KEY: {**param_sources(run.spec), TELEOPERATED: "operator"},
        }
        self.recorder = make_recorder(str(directory), dataclasses.replace(run, spec=spec), options)
        _store_task(env, self.recorder)
        self.phase = "ready"
        self.speed = keymap.speed
        self.gripper_closed = False
        self.kept = 0
        self.discarded = 0
        self.steps = 0
        """Control steps taken, over every episode."""
        self.outcome = ""
        """How the last episode ended: ``success``, ``terminated`` or ``time limit``; empty while it runs."""
        self.note = ""
        """What the last press could not do, for the page."""
        self.action = np.zeros(len(self.low), np.float32)
        """The last step's action."""
        self._episode: list[tuple[dict, object]] = []  # the episode's host batches: its reset frame, then each step
        self._times: deque[float] = deque()  # the last second's step times: the rate shown
        self._point = _point(env)
        self._closed = False
        self._reset()

    # -- what a person does ---------------------------------------------------------------------

    def press(self, name: str) -> None:
        """Do what the input ``name`` (a key map's input) or the command ``name`` (``start``, ``keep``,
        ``discard``, ``gripper``) asks; what the phase does not allow leaves a :attr:`note`."""
        if name in self.keymap.speeds:
            self.speed = self.keymap.speeds[name]
            return
        command = self.keymap.commands.get(name, name)
        self.note = ""
        if command == "gripper":
            self.gripper_closed = not self.gripper_closed
        elif command == "start":
            if self.phase == "ready":
                self.phase = "running"
            elif self.phase == "ended":
                self.note = "the episode has ended: keep or discard it first"
        elif command == "keep":
            if self.phase == "ended":
                self._keep()
                self._reset()
            else:
                self.note = "keep: the episode has not ended (success, a termination or the time limit ends it)"
        elif command == "discard":
            self.discarded += self.phase != "ready"
            self._reset()

    def step(self, held: dict[str, float]) -> bool:
        """One control step with the ``held`` inputs (input -> magnitude) while the episode runs; whether it
        stepped."""
        if self.phase != "running":
            return False
        self.action = self.keymap.action(held, self.speed, self.low, self.high, self.gripper_closed)
        self.env.step(self.action[None])
        observation, result = self._take()
        self._episode.append((observation, result))
        self.steps += 1
        now = time.perf_counter()
        self._times.append(now)
        while self._times and now - self._times[0] > 1.0:
            self._times.popleft()
        if result.terminated[0] or result.truncated[0]:
            self.phase = "ended"
            success = observation.get("success")
            self.outcome = "time limit" if result.truncated[0] else (
                "success" if success is not None and success[0] else "terminated")  # fmt: skip
        return True

    def run(self, inputs, stop: threading.Event, show=None, realtime: bool = True) -> None:
        """Until ``stop`` is set: take ``inputs``' presses (:class:`keys.Inputs`), step at the control rate
        (``realtime``; else as fast as the world steps) with its held inputs, and give each new frame to
        ``show(Frame)``."""
        period, due = self.env.config.control_dt, time.perf_counter()
        if show is not None:
            show(self.frame())
        while not stop.is_set():
            pressed = inputs.take()
            for name in pressed:
                self.press(name)
            stepped = self.step(inputs.held())
            if (stepped or pressed) and show is not None:
                show(self.frame())
            if not stepped:
                inputs.wait(0.05)
                due = time.perf_counter()
                continue
            due += period if realtime else 0.0
            wait = due - time.perf_counter()
            if wait > 0:
                stop.wait(wait)
            elif wait < -period:  # behind: as fast as it steps, without catching up
                due = time.perf_counter()

    def close(self, error: BaseException | None = None) -> None:
        """Close the run with the kept episodes (``failed`` with ``error``); the episode held is not kept.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.transport.close()
        self.recorder.close(error=error)

    # -- what the page shows --------------------------------------------------------------------

    @property
    def rate(self) -> float:
        """Steps per second over the last second of stepping."""
        times = self._times
        if len(times) < 2 or time.perf_counter() - times[-1] > 0.5:
            return 0.0
        return (len(times) - 1) / max(times[-1] - times[0], 1e-9)

    def frame(self) -> Frame:
        observation, result = self._episode[-1]
        success = observation.get("success")
        params = {k: v[:1] for k, v in result.params.items()}
        template = self.env.spec.get(TEMPLATE_KEY)
        instruction = episode_instructions(template, params, count=1)[0] if template else self.env.config.instruction
        status = {
            "phase": self.phase,
            "step": int(observation["step_id"][0]),
            "max_steps": int(self.env.config.max_steps),
            "time": float(observation["time"][0]),
            "instruction": instruction,
            "success": None if success is None else bool(success[0]),
            "reward": float(result.reward[0]),
            "outcome": self.outcome,
            "kept": self.kept,
            "discarded": self.discarded,
            "rate": round(self.rate, 1),
            "control_rate": round(1.0 / self.env.config.control_dt, 1),
            "speed": self.speed,
            "gripper": "closed" if self.gripper_closed else "open",
            "action": [round(float(v), 4) for v in self.action],
            "point": self._point_position(result),
            "note": self.note,
            "steps": self.steps,
        }
        return Frame(observation=observation, status=status)

    def describe(self) -> dict:
        """What the page is told once: the task, the action's columns, the cameras, the key table."""
        names = list(MOVES) + [f"gripper{i}" if i else "gripper" for i in range(len(self.low) - len(MOVES))]
        return {
            "task": self.env.task.spec.id,
            "action": names,
            "cameras": self.cameras,
            "keys": self.keymap.rows(),
            "inputs": sorted({*self.keymap.moves, *self.keymap.speeds, *self.keymap.commands}),
            "deadzone": self.keymap.deadzone,
            "directory": self.recorder.directory,
        }

    # -- inside -----------------------------------------------------------------------------------

    def _take(self) -> tuple[dict, object]:
        """The env's result, through the transport, as host copies kept for the episode."""
        self.transport.publish()
        batch = self.transport.get()
        try:
            result = batch.result.map(np.array)
        finally:
            self.transport.release(batch)
        return result.observation, result

    def _reset(self) -> None:
        """A new episode's start frame (a reset draws it), shown until ``start``."""
        self.env.reset()
        self._episode = [self._take()]
        self.phase, self.outcome, self.gripper_closed = "ready", "", False
        self.action = np.zeros_like(self.action)

    def _keep(self) -> None:
        """Append the held episode to the recorder, its id the count of kept episodes, marked teleoperated."""
        mark = np.ones(1, np.float32)
        for observation, result in self._episode:
            observation["episode_id"][:] = self.kept
            result.params[TELEOPERATED] = mark
            self.recorder.append(observation, result)
        self.kept += 1

    def _point_position(self, result) -> list[float] | None:
        """The end-effector point's position [m] in the world (from the recorded ``body_q``), or None."""
        body_q = result.state.get("body_q")
        if self._point is None or body_q is None:
            return None
        body, offset = self._point
        p, q = body_q[0, body, :3].astype(np.float64), body_q[0, body, 3:7].astype(np.float64)
        u, w = q[:3], q[3]  # rotate the offset by the body's quaternion (x, y, z, w)
        v = np.asarray(offset, np.float64)
        rotated = v + 2.0 * np.cross(u, np.cross(u, v) + w * v)
        return [round(float(x), 4) for x in p + rotated]


def _point(env) -> tuple[int, list[float]] | None:
    """The end-effector action's point: its body (index within the world) and offset in the body's frame."""
    ik = getattr(getattr(env.task, "plan", None), "ik", None)
    if not isinstance(ik, dict):
        return None
    return int(ik["point_body"]), [float(v) for v in ik["point_offset"][:3]]
