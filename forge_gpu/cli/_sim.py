"""The commands that simulate: ``collect`` (on one device, or on Ray workers), ``doctor`` and ``precompile``. Warp
and Newton are imported inside them, so the other commands run without the simulator."""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ._common import (
    Progress,
    UsageError,
    check_new,
    check_out,
    parse_set,
    signal_exit,
    stop_on_signals,
)
from ._recording import DEFAULTS, recording_options_of


def _task_arguments(args) -> tuple[dict, bool]:
    """``collect``'s and ``evaluate``'s task, ``--set`` and ``--policy``, checked without Warp: the overrides and
    whether the task is a task file."""
    from forge_gpu._src.sim.names import check_policy_name, shipped_tasks

    overrides = parse_set(args.set or [])
    for reserved in ("num_envs", "seed", "device", "variant"):
        if reserved in overrides:
            raise UsageError(f"--set {reserved}=...: use the --{reserved.replace('num_', '')} option instead")
    task_file = str(args.task).endswith(".toml")  # a task file: read and checked against its model below
    if task_file and not Path(args.task).is_file():
        raise UsageError(f"task file {args.task}: no such file")
    if not task_file and args.task not in shipped_tasks():
        known = ", ".join(shipped_tasks())
        raise UsageError(f"unknown task {args.task!r}; known tasks are {known} (or the path of a task file *.toml)")
    try:
        check_policy_name(args.policy)
    except ValueError as e:
        raise UsageError(str(e)) from e
    if getattr(args, "variant", None):
        overrides["variant"] = args.variant
    return overrides, task_file


def add_policy_options(parser) -> None:
    """``--policy-arg``, ``--chunk-exec``, ``--chunk-steps`` and ``--ensemble-decay``: the factory's arguments and how
    a policy's action chunks are executed (``forge_gpu.sim.load_policy``'s ``args`` and keywords)."""
    from forge_gpu._src.sim.names import EXECUTIONS

    parser.add_argument(
        "--policy-arg",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="an argument of the policy's factory, FACTORY(spec, device, KEY=VALUE); VALUE read as JSON where it "
        'parses (2, 0.5, true, [1,2], "text"), else as a string; repeatable',
    )
    parser.add_argument(
        "--chunk-exec",
        choices=EXECUTIONS,
        default=None,
        help="a policy with action chunks: open_loop (execute K actions of a chunk, then take a new one; default) "
        "or ensemble (ACT's temporal ensembling of the overlapping chunks)",
    )
    parser.add_argument(
        "--chunk-steps", type=int, default=None, metavar="K", help="open_loop: actions run per chunk, 1..H (default H)"
    )
    parser.add_argument(
        "--ensemble-decay",
        type=float,
        default=None,
        metavar="M",
        help="ensemble: weights exp(-M*i), i = 0 for the oldest chunk (default 0.01)",
    )


def parse_policy_args(items: list[str]) -> dict:
    """``--policy-arg KEY=VALUE`` items -> ``{KEY: VALUE}``, VALUE a JSON literal where it parses, else the string;
    UsageError in one line for an item without ``=``, an empty key or a key given twice."""
    import json

    args = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--policy-arg {item!r}: expected KEY=VALUE, e.g. --policy-arg hidden=64")
        if key in args:
            raise UsageError(f"--policy-arg {item!r}: the key {key!r} is given twice")
        try:
            args[key] = json.loads(text)
        except ValueError:
            args[key] = text  # a bare word is a string
    return args


def _policy_options(args) -> dict:
    """``--policy-arg`` and the chunk flags, checked without Warp where they can be: ``load_policy``'s ``args`` and
    keywords. What depends on the policy itself (its chunk, its factory's parameters) is checked when it loads."""
    from forge_gpu._src.sim.names import BUILTIN_POLICIES

    policy_args = parse_policy_args(args.policy_arg or [])
    given = [
        flag
        for flag, value in (
            ("--policy-arg", args.policy_arg),
            ("--chunk-exec", args.chunk_exec),
            ("--chunk-steps", args.chunk_steps),
            ("--ensemble-decay", args.ensemble_decay),
        )
        if value is not None
    ]
    if args.policy in BUILTIN_POLICIES and given:
        what = "takes no arguments" if given[0] == "--policy-arg" else "returns no action chunks"
        raise UsageError(f"{given[0]}: the built-in policy {args.policy!r} {what}")
    if args.chunk_steps is not None:
        if args.chunk_steps < 1:
            raise UsageError(f"--chunk-steps {args.chunk_steps}: must be >= 1 (and at most the policy's chunk)")
        if args.chunk_exec == "ensemble":
            raise UsageError(f"--chunk-steps {args.chunk_steps}: applies to --chunk-exec open_loop only")
    if args.ensemble_decay is not None:
        decay = args.ensemble_decay
        if not decay >= 0 or decay == float("inf"):
            raise UsageError(f"--ensemble-decay {decay}: must be a finite number >= 0")
        if args.chunk_exec != "ensemble":
            raise UsageError(f"--ensemble-decay {decay}: applies to --chunk-exec ensemble only")
    return {
        "args": policy_args,
        "execution": args.chunk_exec or "open_loop",
        "steps_per_chunk": args.chunk_steps,
        "ensemble_decay": args.ensemble_decay,
    }


def _load_policy(args, env, options: dict):
    """``load_policy`` with the checked options; ``--chunk-exec`` refused for a policy without chunks."""
    from forge_gpu._src.sim.policies import load_policy

    policy = load_policy(args.policy, env, **options)
    if args.chunk_exec is not None and getattr(policy, "chunk", None) is None:
        raise ValueError(f"--chunk-exec {args.chunk_exec}: policy {args.policy!r} returns no action chunks")
    return policy


def cmd_collect(args) -> int:
    # First what needs neither Warp nor Newton (loading them takes seconds): a typo is refused at once.
    for name in ("envs", "slots", "episodes", "steps", "workers"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value}: must be >= 1")
    overrides, task_file = _task_arguments(args)
    policy_options = _policy_options(args)
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
        return cmd_collect_workers(args, config, overrides, out, options, policy_options)
    try:
        began = time.perf_counter()
        env = forge_gpu.sim.make(args.task, num_envs=config.num_envs, device=args.device, seed=args.seed, **overrides)
        policy = _load_policy(args, env, policy_options)
        make_seconds = time.perf_counter() - began
    except ValueError as e:
        raise UsageError(str(e)) from e
    print(_device_line(args.device, env), flush=True)
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


def cmd_evaluate(args) -> int:
    """``forge-gpu evaluate TASK --policy POLICY --episodes N``: the policy scored over exactly N keyed episodes
    (``forge_gpu.recording.evaluate``); a summary table, with ``--json FILE`` every figure and episode, with
    ``--record OUT`` the N episodes as a run."""
    for name in ("envs", "episodes"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value}: must be >= 1")
    overrides, _ = _task_arguments(args)
    policy_options = _policy_options(args)
    if args.json is not None:
        check_new(args.json, "--json ", kind="file")
    options = recording_options_of(args)
    if args.record is not None:
        check_new(args.record, "--record ")
    elif options != DEFAULTS:
        raise UsageError("the recording flags (--format, --compression, --codec, ...) apply with --record OUT only")

    import forge_gpu
    from forge_gpu._src.evaluate.run import evaluate
    from forge_gpu._src.tasks.catalog import resolve_task

    try:
        task_id = resolve_task(args.task)
        if args.envs is not None:
            overrides["num_envs"] = args.envs
        forge_gpu.sim.task_config(args.task, seed=args.seed, **overrides)  # a bad --set refused before building
        began = time.perf_counter()
        env = forge_gpu.sim.make(args.task, device=args.device, seed=args.seed, **overrides)
        policy = _load_policy(args, env, policy_options)
        make_seconds = time.perf_counter() - began
    except ValueError as e:
        raise UsageError(str(e)) from e
    print(_device_line(args.device, env), flush=True)
    with stop_on_signals() as (stop, caught):
        display = Progress(task_id, env, None)
        try:
            result = evaluate(
                env,
                policy,
                episodes=args.episodes,
                stop=stop,
                progress=display.update,
                record=args.record,
                options=options,
            )
        except (ValueError, InterruptedError) as e:
            display.close()
            print(f"forge-gpu: evaluation {'stopped' if caught else 'failed'}: {e}", file=sys.stderr)
            return signal_exit(caught[0])[1] if caught else 1
        display.close()
    metrics = result.metrics()
    _print_evaluation(metrics, result, make_seconds)
    if args.json is not None:
        from forge_gpu._src.core.files import write_json_atomic

        policy = {"policy": args.policy, **({"policy_args": policy_options["args"]} if policy_options["args"] else {})}
        write_json_atomic(args.json, {**metrics, **policy, "per_episode": result.episode_rows()})
        print(f"json: {args.json}")
    if result.run is not None:
        print(f"run: {result.run} (episode j is env_id:episode_id world[j]:episode_id[j] of --json's per_episode)")
    return 0


def _print_evaluation(metrics: dict, result, make_seconds: float) -> None:
    """The summary table: the figures with their 95% intervals, then each breakdown, one row per group."""

    def interval(figure: dict, scale: float = 1.0, unit: str = "") -> str:
        value = figure["rate"] if "rate" in figure else figure["mean"]
        return f"{value * scale:.1f}{unit}  [{figure['low'] * scale:.1f}, {figure['high'] * scale:.1f}]"

    def figures(entry: dict) -> str:
        parts = []
        if "success_at_end" in entry:
            parts.append(f"success {interval(entry['success_at_end'], 100.0, '%')}")
        parts.append(f"return {interval(entry['return'])}")
        parts.append(f"length {interval(entry['length'])}")
        return "  ".join(parts)

    rows = [("episodes", str(metrics["n_episodes"]))]
    if result.has_success:
        rows.append(("success once", interval(metrics["success_once"], 100.0, "%")))
        rows.append(("success at end", interval(metrics["success_at_end"], 100.0, "%")))
    rows += [
        ("return", interval(metrics["return"])),
        ("max reward", f"{metrics['avg_max_reward']:.3f}"),
        ("length", interval(metrics["length"])),
        ("env steps", str(result.env_steps)),
        ("env-steps/s", f"{result.env_steps_per_second:,.0f}"),
        ("step", result.step_mode),
        ("seconds", f"{result.seconds:.1f}"),
        ("warm-up seconds", f"{make_seconds + result.warmup_seconds:.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{key:<{width}}  {value}" for key, value in rows))
    print("(95% intervals: Wilson for the rates, normal for the means)")
    for text, entry in metrics["by_instruction"].items():
        print(f"instruction {text!r} ({entry['episodes']}): {figures(entry)}")
    for name, bins in metrics["by_param"].items():
        for b in bins:
            print(f"{name} in [{b['low']:.4g}, {b['high']:.4g}] ({b['episodes']}): {figures(b)}")


def cmd_tasks(args) -> int:
    """``forge-gpu tasks``: the tasks (id, kind, instruction); ``forge-gpu tasks ID``: one task's model, terms
    and fields."""
    from forge_gpu._src.tasks.describe import describe_task, task_lines

    try:
        lines = task_lines() if args.task is None else describe_task(args.task, variant=args.variant or "")
    except ValueError as e:
        raise UsageError(str(e)) from e
    print("\n".join(lines))
    return 0


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


def _device_line(requested: str | None, env) -> str:
    """Which device the collection runs on, and why, in one line."""
    if requested:
        return f"device: {env.device} (--device {requested})"
    from forge_gpu._src.sim.device import device_choice

    return f"device: {device_choice()[1]}"


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


def cmd_doctor(args) -> int:
    from forge_gpu._src.machine.doctor import report, run_checks

    checks = run_checks()
    print(report(checks))
    bad = [c.name for c in checks if not c.ok]
    if bad:
        print(f"forge-gpu: collection would not run as designed here ({', '.join(bad)})", file=sys.stderr)
        return 1
    from forge_gpu._src.sim.device import device_choice

    print(f"collection runs as designed here, on {device_choice()[0]} by default")
    return 0


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


def cmd_replay(args) -> int:
    from forge_gpu._src.collect.replay import replay

    overrides = parse_set(args.set or [])
    episodes = None
    if args.episodes:
        try:
            episodes = [tuple(int(x) for x in item.split(":")) for item in args.episodes.split(",")]
        except ValueError:
            episodes = None
        if not episodes or any(len(pair) != 2 for pair in episodes):
            raise UsageError(f"--episodes {args.episodes!r}: expected ENV:EPISODE[,ENV:EPISODE...], e.g. 3:0,5:2")
    for name in ("limit", "batch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value}: must be >= 1")
    check_new(args.out)

    def show(c: dict) -> None:
        print(
            f"replay {args.source}: {c['episodes']}/{c['total']} episodes  {c['frames']:,} frames  "
            f"{c['frames_per_second']:,.0f} frames/s  {c['seconds']:.0f} s",
            flush=True,
        )

    with stop_on_signals() as (stop, caught):
        try:
            report = replay(
                args.run,
                args.out,
                from_=args.source,
                overrides=overrides,
                episodes=episodes,
                successful=args.successful,
                limit=args.limit,
                batch=args.batch,
                device=args.device,
                tolerance=args.tolerance,
                trust_code=args.trust_code,
                stop=stop,
                progress=show,
            )
        except (ValueError, FileNotFoundError, FileExistsError) as e:
            raise UsageError(str(e)) from e
    print(f"wrote {report['episodes']} episodes to {args.out} ({report['frames_per_second']:,.0f} frames/s)")
    if args.source == "actions":
        diverged = [d for d in report["divergence"] if d["first_step"] is not None]
        largest = max((d["max_error"] for d in report["divergence"]), default=0.0)
        print(
            f"divergence: {len(diverged)} of {len(report['divergence'])} episodes beyond {args.tolerance:g}; "
            f"largest state error {largest:.3g}"
        )
        for d in diverged[:20]:
            print(
                f"  env {d['env_id']} episode {d['episode_id']}: first at step {d['first_step']}, "
                f"max error {d['max_error']:.3g}"
            )
    if caught:
        name, status = signal_exit(caught[0])
        print(f"stopped by {name}: the output holds the {report['episodes']} episodes replayed")
        return status
    return 1 if args.source == "actions" and report.get("diverged") else 0


def cmd_precompile(args) -> int:
    """``forge-gpu precompile``: Warp's kernel cache of the tasks' modules, for each --arch, in --out."""
    from forge_gpu._src.machine.precompile import CPU, check_writable, missing_files, parse_arch, precompile
    from forge_gpu._src.sim.names import shipped_tasks

    try:
        archs = list(dict.fromkeys(parse_arch(a) for a in args.arch))
    except ValueError as e:
        raise UsageError(str(e)) from e
    for task in args.tasks:
        if str(task).endswith(".toml"):
            if not Path(task).is_file():
                raise UsageError(f"task file {task}: no such file")
        elif task not in shipped_tasks():
            known = ", ".join(shipped_tasks())
            raise UsageError(f"unknown task {task!r}; known tasks are {known} (or the path of a task file *.toml)")
    out = Path(args.out).absolute()
    try:
        check_writable(out)
    except ValueError as e:
        raise UsageError(str(e)) from e
    tasks = args.tasks or shipped_tasks()
    try:
        result = precompile(tasks, archs, out, say=lambda line: print(line, flush=True))
    except ValueError as e:  # a task file that does not bind to its model
        raise UsageError(str(e)) from e
    missing = missing_files(result)
    for line in result.failed:
        print(f"not built here (the GPU compiles it on first use): {line}")
    names = ", ".join(str(a) if a == CPU else f"sm_{a}" for a in archs)
    built = f"{len(result.variants)} module variants for {names}, {result.compiled} CUDA binaries built"
    print(f"kernel cache {out}: {built}")
    print(f"use it: export WARP_CACHE_PATH={out}")
    if missing and len(missing) > len(result.failed):
        print(f"forge-gpu: {len(missing)} files missing from {result.cache}, first {missing[0]}", file=sys.stderr)
        return 1
    return 0
