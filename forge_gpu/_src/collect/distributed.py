"""Scale-out: K Ray actors, each running the single-device pipeline (``make`` + ``collect``) on its own device.

Worker ``k`` records into its own run directory ``OUT/worker-{k:03d}``; when all are done the driver
writes ``OUT/dataset.json`` (atomically), which lists the runs in worker order::

    {"schema_version": 1, "kind": "forge_gpu.dataset",
     "runs": [{"path": "worker-000", "run_id": ..., "worker": 0, "device": "cpu", "status": "closed",
               "episodes": 17, "seed": 0, "error": null}, ...],
     "failed_workers": [{"worker": 3, "error": "..."}]}

``status`` is the worker's collection status (``closed``, ``interrupted`` or ``failed``); a run is listed
as soon as its run directory exists, so the episodes a failed worker published stay in the dataset.
``failed_workers`` lists the workers that failed before creating their run directory. The reader
(``read_episodes``, ``action_windows``, ``WindowDataset``) and ``forge-gpu inspect`` take the root.

Reproducibility: worker ``k`` is the single-device run with seed ``seed + k`` (the counter-based RNG
hashes the env id before it meets the seed, so the workers' streams do not line up); the episode
target ``E`` is split as ``E // K`` per worker plus one for the first ``E % K`` workers; a ``steps``
target applies to each worker.

Devices: when the Ray cluster has GPUs and the device is not ``cpu``, each actor asks Ray for one GPU
(``num_gpus=1``); Ray makes it the actor's only visible device, so the actor runs on ``cuda:0``. Otherwise
each actor takes one CPU. Actors ignore SIGINT (Ray may forward a Ctrl-C to them): the driver stops
them through their ``stop`` method, so each one publishes its completed episodes and closes its manifest.
With a Ray address, ``OUT`` must be a path every node sees (a shared file system).

The simulation half of ``forge_gpu.recording`` (``_src/collect``: it drives the env, with Warp); the data half,
``_src/recording``, never imports Warp.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.dataset import write_dataset_manifest
from forge_gpu._src.core.files import load_json
from forge_gpu._src.core.manifest import RUN_MANIFEST
from forge_gpu._src.formats.registry import RecordingOptions, recording_options
from forge_gpu._src.recording.progress import aggregate
from forge_gpu._src.sim.output import is_verbose
from forge_gpu._src.sim.solver import SolverOverflowWarning, merge_reports, overflow_lines, warn_dropped

RAY_HINT = "pip install 'forge-gpu[ray]'"


def worker_seed(seed: int, worker: int) -> int:
    """The seed of worker ``worker``: ``seed + worker``."""
    return seed + worker


def split_episodes(total: int, workers: int) -> list[int]:
    """Episode targets per worker: ``total // workers`` each, plus one for the first ``total % workers``."""
    return [total // workers + (1 if k < total % workers else 0) for k in range(workers)]


def worker_dir(worker: int) -> str:
    return f"worker-{worker:03d}"


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker collects, and where."""

    worker: int
    task: str
    directory: str
    num_envs: int
    seed: int
    device: str | None
    policy: str = "random"
    policy_args: dict = field(default_factory=dict)
    """The policy factory's keyword arguments, and how its action chunks run: ``load_policy``'s."""
    execution: str = "open_loop"
    steps_per_chunk: int | None = None
    ensemble_decay: float | None = None
    overrides: dict = field(default_factory=dict)
    episodes: int | None = None
    steps: int | None = None
    slots: int = 4
    recording: RecordingOptions = field(default_factory=RecordingOptions)
    verbose: bool = False
    """Let Warp print (module loads, kernel compilation), as the driver's ``--verbose``/FORGE_GPU_VERBOSE asks."""


class _Worker:
    """The body of the Ray actor: ``prepare`` builds the env and policy; ``run`` collects on the actor's
    device (one call, in its own thread of the threaded actor) while ``progress`` and ``stop`` answer
    concurrently. The driver prepares every worker before it runs any, so that they collect together."""

    def __init__(self, spec: WorkerSpec):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver stops us through stop(); see the module doc
        self.spec = spec
        self._stop = threading.Event()
        self._counters: dict | None = None
        self._env = self._policy = self._error = None

    def prepare(self) -> None:
        import warp as wp

        from forge_gpu._src.sim.output import set_verbose

        set_verbose(self.spec.verbose)
        if not self.spec.verbose:
            wp.config.quiet = True
            wp.config.log_level = wp.LOG_WARNING
        from forge_gpu._src.sim.policies import load_policy
        from forge_gpu._src.tasks.make import make

        spec = self.spec
        try:
            env = make(spec.task, num_envs=spec.num_envs, device=spec.device, seed=spec.seed, **spec.overrides)
            policy = load_policy(
                spec.policy,
                env,
                spec.policy_args,
                execution=spec.execution,
                steps_per_chunk=spec.steps_per_chunk,
                ensemble_decay=spec.ensemble_decay,
            )
            self._env, self._policy = env, policy
        except BaseException as e:  # reported by run()
            self._error = f"{type(e).__name__}: {e}"

    def stop(self) -> None:
        self._stop.set()

    def progress(self) -> dict | None:
        return self._counters

    def _on_progress(self, counters: dict) -> None:
        self._counters = counters

    def run(self) -> dict:
        from forge_gpu._src.collect.collector import collect

        spec = self.spec
        result = {
            "path": worker_dir(spec.worker),
            "run_id": None,
            "worker": spec.worker,
            "device": str(self._env.device) if self._env is not None else spec.device,
            "status": "failed",
            "episodes": 0,
            "seed": spec.seed,
            "error": self._error,
            "env_steps": 0,
            "seconds": 0.0,
            "stall_seconds": 0.0,
            "started_at": None,
            "ended_at": None,
            "node": _node_ip(),
            "gpu_ids": _gpu_ids(),
        }
        try:
            if self._env is None:
                raise RuntimeError(self._error or "run() before prepare()")
            result["started_at"] = time.time()
            with warnings.catch_warnings():  # the driver warns once for every worker (collect_distributed)
                warnings.simplefilter("ignore", SolverOverflowWarning)
                summary = collect(
                    self._env,
                    self._policy,
                    spec.directory,
                    episodes=spec.episodes,
                    steps=spec.steps,
                    slots=spec.slots,
                    options=spec.recording,
                    stop=self._stop,
                    progress=self._on_progress,
                )
            result.update(
                status=summary.status,
                env_steps=summary.env_steps,
                seconds=summary.seconds,
                stall_seconds=summary.stall_seconds,
                solver_overflow=summary.solver_overflow,
            )
        except BaseException as e:  # reported to the driver; the other workers go on
            result["error"] = self._error or f"{type(e).__name__}: {e}"
        result["ended_at"] = time.time()
        _add_manifest_facts(result, spec.directory)
        return result


def _add_manifest_facts(result: dict, directory: str) -> None:
    """run_id and published episodes from the worker's run.json, when the run directory was made."""

    path = os.path.join(directory, RUN_MANIFEST)
    if not os.path.isfile(path):
        return
    try:
        manifest = load_json(path)
        result["run_id"] = manifest["run_id"]
        result["episodes"] = int(manifest["completed_episodes"])
    except (ValueError, KeyError, TypeError) as e:
        result["error"] = result["error"] or f"cannot read {path}: {e}"


def _node_ip() -> str | None:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:
        return None


def _gpu_ids() -> list[str]:
    try:
        import ray

        return [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
    except Exception:
        return []


@dataclass
class DatasetSummary:
    """What a distributed collection did."""

    directory: str
    runs: list[dict]
    """One result per worker, in worker order (see the module doc for the keys)."""
    seconds: float
    """Wall time from the first worker's start of collection to the last one's end [s] (warm-ups included)."""

    @property
    def episodes(self) -> int:
        return sum(r["episodes"] for r in self.runs)

    @property
    def env_steps(self) -> int:
        return sum(r["env_steps"] for r in self.runs)

    @property
    def env_steps_per_second(self) -> float:
        """Each worker's env-steps/s over its own collection (after its warm-up, as a single ``collect``'s), summed:
        the progress line's figure. ``seconds``, the wall time, holds the warm-ups."""
        return sum(r["env_steps"] / r["seconds"] for r in self.runs if r["seconds"] > 0)

    @property
    def stall_fraction(self) -> float:
        busy = sum(r["seconds"] for r in self.runs)
        return sum(r["stall_seconds"] for r in self.runs) / busy if busy > 0 else 0.0

    @property
    def solver_overflow(self) -> dict:
        """The workers' solver overflow counts summed (each worker's run.json holds its own); empty without any."""
        return merge_reports([r["solver_overflow"] for r in self.runs if r.get("solver_overflow")])

    @property
    def solver_warnings(self) -> list[str]:
        """What ``solver_overflow`` means, one line per kind that occurred."""
        return overflow_lines(self.solver_overflow)

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.runs if r["status"] == "failed" or r["error"]]


def import_ray():
    """``ray``, or ImportError that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(f"scale-out needs Ray, which is not installed: {RAY_HINT}") from e
    return ray


def start_ray(workers: int, address: str | None) -> bool:
    """Join the Ray cluster at ``address``, or start a local one with a CPU per worker at least.

    Does nothing when this process is already connected. Returns whether it connected (so the caller
    shuts Ray down at the end). A local cluster gets ``max(workers, cpu_count)`` CPUs so that every
    worker is placed even when there are more workers than cores.
    """
    import logging

    ray = import_ray()
    if ray.is_initialized():
        return False
    options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    if address is None:
        options["num_cpus"] = max(workers, os.cpu_count() or 1)
    # Ray notes on every start that token authentication is on: dropped (a cluster without it is still said).
    token_setup = logging.getLogger("ray._private.authentication.authentication_token_setup")

    def note(record) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled")

    token_setup.addFilter(note)
    try:
        ray.init(address=address, **options)
    finally:
        token_setup.removeFilter(note)
    return True


def collect_distributed(
    task: str,
    directory: str | os.PathLike,
    *,
    workers: int,
    num_envs: int,
    episodes: int | None = None,
    steps: int | None = None,
    seed: int = 0,
    device: str | None = None,
    policy: str = "random",
    policy_args: dict | None = None,
    execution: str = "open_loop",
    steps_per_chunk: int | None = None,
    ensemble_decay: float | None = None,
    overrides: dict | None = None,
    ray_address: str | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[dict], None] | None = None,
    poll_interval: float = 0.5,
    slots: int = 4,
    options: RecordingOptions | None = None,
) -> DatasetSummary:
    """Collect ``task`` with ``workers`` Ray actors into the new dataset root ``directory``.

    Args:
        episodes: Total episode target, split across the workers (see the module doc); or
        steps: ``step`` calls per worker. Exactly one of the two is given.
        ray_address: Join this Ray cluster; ``None`` joins the one this process already started, or
            starts a local one (and shuts it down at the end).
        stop: Set it (e.g. from a signal handler) to stop every worker; each closes its run cleanly.
        progress: Called about every ``poll_interval`` seconds with :func:`aggregate`'s dict.
        slots: Transport slots per worker (see :func:`collect`).
        options: How every worker records (:class:`RecordingOptions`; default ``RecordingOptions()``).
        policy_args, execution, steps_per_chunk, ensemble_decay: Each worker's ``load_policy(policy, env,
            policy_args, execution=..., steps_per_chunk=..., ensemble_decay=...)`` (``forge_gpu.sim.load_policy``).

    Raises ImportError without Ray and ValueError for arguments the cluster cannot serve; a worker's
    failure does not raise: it is in the summary (and in ``dataset.json``) with its error.
    """
    if (episodes is None) == (steps is None):
        raise ValueError(f"give exactly one of episodes={episodes!r} and steps={steps!r}")
    check_int("workers", workers, minimum=1)
    if episodes is not None and episodes < workers:
        raise ValueError(f"episodes={episodes} is fewer than workers={workers}; every worker needs at least one")
    options = recording_options(options)
    root = Path(directory).absolute()
    if root.exists():
        raise ValueError(f"{root}: already exists; give a new directory")
    ray = import_ray()
    started = start_ray(workers, ray_address)
    try:
        use_gpus = _use_gpus(ray.cluster_resources(), workers, device)
        targets = split_episodes(episodes, workers) if episodes is not None else [None] * workers
        specs = [
            WorkerSpec(
                worker=k,
                task=task,
                directory=str(root / worker_dir(k)),
                num_envs=num_envs,
                seed=worker_seed(seed, k),
                device="cuda:0" if use_gpus else device,
                policy=policy,
                policy_args=dict(policy_args or {}),
                execution=execution,
                steps_per_chunk=steps_per_chunk,
                ensemble_decay=ensemble_decay,
                overrides=dict(overrides or {}),
                episodes=targets[k],
                steps=steps,
                slots=slots,
                recording=options,
                verbose=is_verbose(),
            )
            for k in range(workers)
        ]
        root.mkdir(parents=True)
        actor_class = ray.remote(_Worker).options(num_cpus=1, num_gpus=1 if use_gpus else 0, max_concurrency=3)
        return _run_workers(ray, root, [actor_class.remote(spec) for spec in specs], stop, progress, poll_interval)
    finally:
        if started:
            ray.shutdown()


def _use_gpus(resources: dict, workers: int, device: str | None) -> bool:
    """Whether each worker takes one of the cluster's GPUs (else one CPU); ValueError when it has too few."""
    use_gpus = resources.get("GPU", 0) >= 1 and device != "cpu"
    if use_gpus and resources["GPU"] < workers:
        raise ValueError(f"the Ray cluster has {resources['GPU']:g} GPUs; {workers} workers need one each")
    if not use_gpus and resources.get("CPU", 0) < workers:
        raise ValueError(f"the Ray cluster has {resources.get('CPU', 0):g} CPUs; {workers} workers need one each")
    if device and device.startswith("cuda") and not use_gpus:
        raise ValueError(f"device {device!r}: the Ray cluster has no GPUs; use --device cpu")
    return use_gpus


def _run_workers(
    ray,
    root: Path,
    actors: list,
    stop: threading.Event | None,
    progress: Callable[[dict], None] | None,
    poll_interval: float,
) -> DatasetSummary:
    """Prepare every actor, run them together, stop them on ``stop``, report progress; write ``dataset.json``."""
    stop = stop or threading.Event()
    workers = len(actors)
    results: list[dict | None] = [None] * workers
    counters: list[dict | None] = [None] * workers
    stop_sent = False

    def poll_progress() -> None:
        refs = {actor.progress.remote(): k for k, actor in enumerate(actors)}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=poll_interval)
        for ref in ready:
            try:
                counters[refs[ref]] = ray.get(ref) or counters[refs[ref]]
            except Exception:
                pass  # a dead actor: its run() reports why
        if progress is not None and (snapshot := aggregate(counters)) is not None:
            progress(snapshot)

    try:
        preparing = [actor.prepare.remote() for actor in actors]
        while preparing:  # imports, env construction, kernel loads; a failure here is reported by run()
            _, preparing = ray.wait(preparing, num_returns=len(preparing), timeout=poll_interval)
        pending = {actor.run.remote(): k for k, actor in enumerate(actors)}
        while pending:
            if stop.is_set() and not stop_sent:
                for k, actor in enumerate(actors):
                    if results[k] is None:
                        actor.stop.remote()
                stop_sent = True
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=poll_interval)
            for ref in done:
                k = pending.pop(ref)
                results[k] = _result_of(ray, ref, k, root)
            poll_progress()
        poll_progress()  # the workers' final counters
    finally:
        for actor in actors:
            ray.kill(actor)
    starts = [r["started_at"] for r in results if r["started_at"]]
    ends = [r["ended_at"] for r in results if r["started_at"]]
    seconds = max(ends) - min(starts) if starts else 0.0
    write_dataset_manifest(root, results)
    summary = DatasetSummary(directory=str(root), runs=results, seconds=seconds)
    warn_dropped(summary.solver_overflow)  # once for every worker: theirs were held back
    return summary


def _result_of(ray, ref, worker: int, root: Path) -> dict:
    """A worker's result, or a failed one when its actor died (a crash, the OOM killer, a lost node)."""
    try:
        return ray.get(ref)
    except Exception as e:
        result = {
            "path": worker_dir(worker), "run_id": None, "worker": worker, "device": None, "status": "failed",
            "episodes": 0, "seed": None, "error": f"worker process died: {type(e).__name__}: {e}", "env_steps": 0,
            "seconds": 0.0, "stall_seconds": 0.0, "started_at": None, "ended_at": None, "node": None, "gpu_ids": [],
        }  # fmt: skip
        _add_manifest_facts(result, str(root / worker_dir(worker)))
        return result
