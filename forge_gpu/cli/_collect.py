"""``forge-gpu collect``: on one device, or on Ray workers (``--workers``); its progress and summary. Warp and
Newton are imported inside the commands, so the other commands run without the simulator."""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ._common import (
    Progress,
    UsageError,
    check_out,
    signal_exit,
    stop_on_signals,
)
from ._machine import device_line
from ._policy import load_policy_of, policy_options_of
from ._recording import recording_options_of
from ._tasks import say_model_check, task_arguments


def cmd_collect(args) -> int:
    # First what needs neither Warp nor Newton (loading them takes seconds): a typo is refused at once.
    for name in ("envs", "slots", "episodes", "steps", "workers"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value}: must be >= 1")
    overrides, task_file = task_arguments(args)
    policy_options = policy_options_of(args)
    overrides.update(_label_overrides(args, overrides))
    options = recording_options_of(args)
    if not task_file:
        out = check_out(args.out, args.task)

    import forge_gpu
    from forge_gpu._src.collect.collector import collect
    from forge_gpu._src.sim.solver import SolverOverflowWarning
    from forge_gpu._src.tasks.catalog import resolve_task

    try:
        task_id = resolve_task(args.task)  # an id, or a task file (*.toml) read and checked against its model
        if task_file:
            out = check_out(args.out, task_id)
        config = forge_gpu.sim.task_config(args.task, seed=args.seed, **overrides)
        if args.envs is not None:
            config = forge_gpu.sim.task_config(args.task, seed=args.seed, num_envs=args.envs, **overrides)
    except ValueError as e:
        raise UsageError(str(e)) from e
    if args.workers > 1:  # scale-out: one Ray actor per device, each running what follows
        say_model_check(config)  # once, here: the workers say nothing of it
        return cmd_collect_workers(args, config, overrides, out, options, policy_options)
    try:
        began = time.perf_counter()
        env = forge_gpu.sim.make(args.task, num_envs=config.num_envs, device=args.device, seed=args.seed, **overrides)
        policy = load_policy_of(args, env, policy_options)
        make_seconds = time.perf_counter() - began
    except ValueError as e:
        raise UsageError(str(e)) from e
    say_model_check(config)  # after the build's own notes, before the first step
    print(device_line(args.device, env), flush=True)
    episodes = args.episodes if args.steps is None else None
    if episodes is None and args.steps is None:
        episodes = 2 * config.num_envs

    with stop_on_signals() as (stop, caught):
        display = Progress(task_id, env, out)
        try:
            with warnings.catch_warnings():  # the summary below says what the solver dropped, once
                warnings.simplefilter("ignore", SolverOverflowWarning)
                summary = collect(
                    env,
                    policy,
                    str(out),
                    episodes=episodes,
                    steps=args.steps,
                    slots=args.slots,
                    options=options,
                    stop=stop,
                    progress=display.update,
                )
        except ValueError as e:
            if not out.exists():
                raise UsageError(str(e)) from e
            display.close()
            print(f"forge-gpu: collection failed: {e}", file=sys.stderr)
            _print_failed_run(out)
            return 1
        except Exception as e:
            display.close()
            print(f"forge-gpu: collection failed: {type(e).__name__}: {e}", file=sys.stderr)
            _print_failed_run(out)
            return 1
    display.close()
    _print_summary(summary, env, make_seconds)
    if caught:
        name, status = signal_exit(caught[0])
        print(
            f"stopped by {name}: kept {summary.episodes} completed episodes; "
            f"{len(summary.incomplete_episodes)} incomplete episodes were not published"
        )
        return status
    return 0


def _label_overrides(args, overrides: dict) -> dict:
    """``collect``'s ``--label`` and ``--mix`` as the config values they set (``label``, ``expert_mix``), checked
    without Warp: UsageError (one line) for a mix out of [0, 1], a mix without ``--label expert``, or ``--set`` of
    either key."""
    for key, flag in (("label", "--label"), ("expert_mix", "--mix")):
        if key in overrides:
            raise UsageError(f"--set {key}=...: use the {flag} option instead")
    if args.mix is not None:
        if args.label != "expert":
            raise UsageError(f"--mix {args.mix:g}: needs --label expert (mixed episodes execute the expert's labels)")
        if not 0.0 <= args.mix <= 1.0:
            raise UsageError(f"--mix {args.mix:g}: must be between 0 and 1 (the share of episodes the expert executes)")
    out = {"label": args.label} if args.label is not None else {}
    return out | ({"expert_mix": args.mix} if args.mix is not None else {})


def _print_failed_run(out: Path) -> None:
    """Where a failed collection's run is (if it got that far) and, when its manifest could not be updated
    (a disk that stayed full), what to run once it can be."""
    import json

    from forge_gpu._src.core.manifest import RUN_MANIFEST

    if not out.is_dir():
        return
    print(f"run directory: {out}", file=sys.stderr)
    try:
        status = json.loads((out / RUN_MANIFEST).read_text())["status"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if status == "recording":
        print(
            f"{RUN_MANIFEST} could not be updated and still says 'recording'; once space is freed (or the write error "
            f"above is fixed), run: forge-gpu repair {out}",
            file=sys.stderr,
        )


def _print_summary(summary, env, make_seconds: float = 0.0) -> None:
    warmup = make_seconds + summary.warmup_seconds
    rows = [
        ("status", summary.status),
        ("episodes published", summary.episodes),
        ("incomplete episodes", len(summary.incomplete_episodes)),
        ("env steps", summary.env_steps),
        ("env-steps/s", f"{summary.env_steps_per_second:,.0f}"),
        ("stall", f"{summary.stall_fraction:.1%}"),
        ("bytes written", f"{summary.bytes_written:,}"),
        ("device", str(env.device)),
        ("step", summary.step_mode),
        ("seconds", f"{summary.seconds:.1f}"),
        ("warm-up seconds", f"{warmup:.1f} (building the env, compiling kernels on first use, capturing the step)"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    for line in summary.solver_warnings:  # once per collection: the solver's overflows, counted
        print(f"warning: {line}")
    print(f"run: {summary.directory}")


def cmd_collect_workers(args, config, overrides: dict, out: Path, options, policy_options: dict) -> int:
    """``forge-gpu collect --workers K`` (Ray workers, :func:`collect_distributed`): the checked arguments of
    ``cmd_collect`` -> exit status."""
    from forge_gpu._src.collect.distributed import collect_distributed, import_ray, start_ray
    from forge_gpu._src.sim.solver import SolverOverflowWarning

    try:
        import_ray()
    except ImportError as e:
        raise UsageError(f"--workers {args.workers}: {e}") from e
    episodes = args.episodes if args.steps is None else None
    if episodes is None and args.steps is None:
        episodes = 2 * config.num_envs * args.workers
    if episodes is not None and episodes < args.workers:
        raise UsageError(f"--episodes {episodes}: fewer than --workers {args.workers}; each worker needs one")
    try:
        started = start_ray(args.workers, args.ray_address)
    except Exception as e:  # a bad address, an unreachable cluster
        print(f"forge-gpu: cannot start or join Ray: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    display = Progress(f"{config.task} ({args.workers} workers)", _Envs(config.num_envs * args.workers), out)
    try:
        # After ray.init, which installs its own SIGTERM handler in the driver; restored before shutdown.
        with stop_on_signals() as (stop, caught), warnings.catch_warnings():
            warnings.simplefilter("ignore", SolverOverflowWarning)  # print_dataset_summary says it, once
            summary = collect_distributed(
                args.task,
                out,
                workers=args.workers,
                num_envs=config.num_envs,
                episodes=episodes,
                steps=args.steps,
                seed=args.seed,
                device=args.device,
                policy=args.policy,
                policy_args=policy_options["args"],
                execution=policy_options["execution"],
                steps_per_chunk=policy_options["steps_per_chunk"],
                ensemble_decay=policy_options["ensemble_decay"],
                overrides=overrides,
                ray_address=args.ray_address,
                stop=stop,
                progress=display.update,
                slots=args.slots,
                options=options,
            )
    except ValueError as e:
        display.close()
        if not out.exists():
            raise UsageError(str(e)) from e
        print(f"forge-gpu: collection failed: {e}\ndataset directory: {out}", file=sys.stderr)
        return 1
    except Exception as e:
        display.close()
        print(f"forge-gpu: collection failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if started:
            import ray

            ray.shutdown()
    display.close()
    print_dataset_summary(summary)
    for r in summary.failed:
        print(f"forge-gpu: worker {r['worker']} failed: {r['error']}", file=sys.stderr)
    if summary.failed:
        return 1
    if caught:
        name, status = signal_exit(caught[0])
        print(f"stopped by {name}: every worker kept its completed episodes and closed its run")
        return status
    return 0


@dataclass(frozen=True)
class _Envs:
    """What ``_Progress`` reads of an env: the number of envs (here over all workers)."""

    num_envs: int


def print_dataset_summary(summary) -> None:
    columns = ("worker", "device", "status", "episodes", "env_steps", "seconds")
    print("  ".join(f"{c:>10}" for c in columns))
    for r in summary.runs:
        row = {**r, "seconds": f"{r['seconds']:.1f}"}
        print("  ".join(f"{row[c]!s:>10}" for c in columns))
    print(f"episodes published  {summary.episodes}")
    print(
        f"env-steps/s         {summary.env_steps_per_second:,.0f} (each worker's over its collection, summed; "
        f"{summary.seconds:.1f} s from the first start to the last end, warm-ups included)"
    )
    print(f"stall               {summary.stall_fraction:.1%}")
    for line in summary.solver_warnings:  # the workers' overflows counted together, once
        print(f"warning: {line}")
    print(f"dataset: {summary.directory}")
