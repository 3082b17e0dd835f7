"""RolloutRecorder: the steps of a loop someone else drives (an RL trainer's rollouts) recorded as a run, through
``collect``'s transport and recorder, with the version of the policy that acted in each episode.

``collect`` owns its stepping loop; a trainer owns its own (rsl_rl's ``OnPolicyRunner`` calls ``env.step``). The
wrappers of ``rl`` (``GymVectorEnv``, ``RslRlVecEnv``) take a ``RolloutRecorder`` and call :meth:`before`
before each ``reset`` and ``step`` of the env and :meth:`after` after it; the recorder publishes the env's result
into a :class:`HostSnapshotTransport` (one copy per step, as ``collect``'s), whose recorder thread appends it to
the run format's recorder. Backpressure is ``collect``'s: slow writers make ``step`` wait for a free slot.

Each episode's ``policy_version`` (float32 ``[]``) is a per-episode param (docs/FORMAT.md "State and params"): the
value of :attr:`RolloutRecorder.policy_version` when the episode's first action was chosen (rsl_rl:
``track_policy_version`` counts the PPO updates). A result is published at the start of the next ``step`` (or at
``reset``/:meth:`close`), when the version that acts on its new episodes' first frames is known. run.json's
``env_spec.param_sources`` marks the param as the trainer's, not a value the env draws: ``replay`` carries it to
the run it writes and restores only the env's own.

The simulation half of ``forge_gpu.recording`` (``_src/collect``: it drives the env, with Warp); the data half,
``_src/recording``, never imports Warp.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque

import numpy as np

from forge_gpu._src.collect.collector import _Consumer, _store_task, make_recorder
from forge_gpu._src.collect.encode import run_encoder
from forge_gpu._src.collect.transport import HostSnapshotTransport, TransportClosed
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.formats.registry import recording_options
from forge_gpu._src.sim.run_description import describe_run
from forge_gpu._src.sim.solver import OverflowTally, warn_dropped

POLICY_VERSION = "policy_version"
"""The per-episode param of a recorded training run: the version of the policy that chose the episode's first
action."""

PARAM_SOURCES_KEY = "param_sources"
"""run.json's ``env_spec`` key marking params that no env draws (name -> source, e.g. ``{"policy_version":
"trainer"}``): ``replay`` keeps them as recorded and restores only the others."""


def param_sources(spec) -> dict[str, str]:
    """The params of ``spec`` (run.json's ``env_spec``) that a trainer gave, not the env: name -> source."""
    marked = spec.get(PARAM_SOURCES_KEY) if isinstance(spec, dict) else None
    return {str(k): str(v) for k, v in marked.items()} if isinstance(marked, dict) else {}


class _VersionedConsumer(_Consumer):
    """collect's recorder thread, adding each episode's ``policy_version`` to the params it appends."""

    def __init__(self, transport, recorder, overflow, num_envs: int):
        super().__init__(transport, recorder, overflow)
        self.tags: deque[int] = deque()
        """Per published batch, in order: the policy version that acts on its new episodes' first frames."""
        self.version = np.zeros(num_envs, np.float32)
        """Each env's current episode's version (set on its reset row, kept on its active rows)."""

    def append(self, batch) -> None:
        result = batch.result
        tag = np.float32(self.tags.popleft())
        np.copyto(self.version, tag, where=~result.info["active"])
        params = {**result.params, POLICY_VERSION: self.version.copy()}
        self.recorder.append(batch.observation, dataclasses.replace(result, params=params))


class RolloutRecorder:
    """Record the steps of ``env`` (a :class:`VectorEnv`) that a wrapper drives, into the new run ``directory``.

    Args:
        env: The env; its wrapper (``GymVectorEnv(env, recorder=...)``, ``RslRlVecEnv(env, recorder=...)``) calls
            :meth:`before` and :meth:`after` around each of its ``reset`` and ``step`` calls.
        directory: The new run directory.
        options: How the run is written (:class:`RecordingOptions`; default a packed run), as ``collect``'s.
        slots: The transport's host slots K (at least 2: one result waits to be published while the next is made).

    Set :attr:`policy_version` (an integer >= 0) whenever the acting policy changes. :meth:`close` (or the
    wrapper's ``close``) publishes the last step, waits for the writers and closes the run; an exception in the
    recorder thread is raised at the next ``step``, the run closed as failed with it.
    """

    def __init__(self, env, directory, *, options=None, slots: int = 4):
        check_int("slots", slots, minimum=2)
        options = recording_options(options)
        params = env.spec.get("params") or {}
        if POLICY_VERSION in params:
            raise ValueError(
                f"RolloutRecorder: the env already has a param named {POLICY_VERSION!r} (env.spec['params']); "
                "rename the task's param"
            )
        self.env = env
        encoder = run_encoder(env, options, recording=True)
        self.transport = functools.partial(HostSnapshotTransport, encoder=encoder)(env, slots=slots)
        run = describe_run(env, transport=self.transport.name)
        spec = {
            **run.spec,
            "params": {**params, POLICY_VERSION: {"shape": [], "dtype": "float32"}},
            PARAM_SOURCES_KEY: {**param_sources(run.spec), POLICY_VERSION: "trainer"},
        }
        self.recorder = make_recorder(directory, dataclasses.replace(run, spec=spec), options)
        _store_task(env, self.recorder)
        limits = env.solver_overflow.limits
        self._tally = OverflowTally(env.num_envs, limits) if limits else None
        self._consumer = _VersionedConsumer(self.transport, self.recorder, self._tally, env.num_envs)
        self._consumer.start()
        self._version = 0
        self._pending = False  # the env's result is a new one, not yet published
        self._started = False  # a reset's result was published: steps may follow
        self._closed = False

    @property
    def directory(self) -> str:
        return self.recorder.directory

    @property
    def policy_version(self) -> int:
        """The version of the policy that chooses the next actions; recorded as each new episode's
        ``policy_version``."""
        return self._version

    @policy_version.setter
    def policy_version(self, value: int) -> None:
        check_int("policy_version", value, minimum=0, maximum=1 << 24)  # a float32 param holds it exactly
        self._version = int(value)

    @property
    def completed_episodes(self) -> int:
        """Episodes published so far."""
        return self.recorder.completed_episodes

    @property
    def stall_seconds(self) -> float:
        """Time ``step`` waited for a free transport slot (the writers' backpressure) [s]."""
        return self.transport.stall_seconds

    def before(self, *, reset: bool) -> None:
        """Before the wrapper's env ``reset`` (``reset=True``) or ``step``: publish the env's pending result, its new
        episodes tagged with the current :attr:`policy_version`. A step before any reset is refused (the run starts
        at a reset's frames)."""
        if self._closed:
            raise ValueError(f"the recording of {self.directory} is closed; make a new RolloutRecorder")
        if not reset and not self._pending and not self._started:
            raise ValueError("RolloutRecorder: the first call must be the wrapper's reset() (a run starts at a reset)")
        if self._pending:
            self._publish()

    def after(self) -> None:
        """After the env's ``reset`` or ``step``: its result is pending, published by the next :meth:`before`."""
        self._pending = True

    def _publish(self) -> None:
        self._consumer.tags.append(self._version)
        try:
            self.transport.publish()
        except TransportClosed as exc:  # the recorder thread failed: close the run with its error, raise that
            error = self._consumer.error or exc
            self.close(error=error)
            raise error from None
        self._pending, self._started = False, True

    def close(self, error: BaseException | None = None) -> None:
        """Publish the pending result (unless ``error``), let the recorder thread drain, close the run (``failed``
        with ``error``: what was published stays published). Raises the recorder thread's or the writers' error.
        Idempotent."""
        if self._closed:
            return
        first = error
        try:
            if self._pending and error is None:
                self._consumer.tags.append(self._version)
                self.transport.publish()
                self._pending = False
        except TransportClosed:
            pass  # the consumer's error follows
        except BaseException as exc:
            first = exc
        finally:
            self._closed = True
            self.transport.close()
            self._consumer.join()
        first = first or self._consumer.error
        if self._tally is not None:
            report = self._tally.report()
            self.recorder.note("solver_overflow", report)
            warn_dropped(report)
        try:
            self.recorder.close(error=first)
        except BaseException as exc:
            first = first or exc
        if first is not None and first is not error:
            raise first

    def __enter__(self) -> RolloutRecorder:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(error=value)
