"""``forge-gpu evaluate``: its arguments; the evaluation and its figures are ``forge_gpu._src.evaluate``'s."""

from __future__ import annotations

import sys
import time

from ._common import (
    Progress,
    UsageError,
    check_new,
    signal_exit,
    stop_on_signals,
)
from ._machine import device_line
from ._policy import load_policy_of, policy_options_of
from ._recording import DEFAULTS, recording_options_of
from ._tasks import task_arguments


def cmd_evaluate(args) -> int:
    """``forge-gpu evaluate TASK --policy POLICY --episodes N``: the policy scored over exactly N keyed episodes
    (``forge_gpu.recording.evaluate``); a summary table, with ``--json FILE`` every figure and episode, with
    ``--record OUT`` the N episodes as a run."""
    for name in ("envs", "episodes"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} {value}: must be >= 1")
    overrides, _ = task_arguments(args)
    policy_options = policy_options_of(args)
    if args.json is not None:
        check_new(args.json, "--json ", kind="file")
    options = recording_options_of(args)
    if args.record is not None:
        check_new(args.record, "--record ")
    elif options != DEFAULTS:
        raise UsageError("the recording flags (--format, --compression, --codec, ...) apply with --record OUT only")

    import forge_gpu
    from forge_gpu._src.evaluate.figures import summary_lines
    from forge_gpu._src.evaluate.run import evaluate
    from forge_gpu._src.tasks.catalog import resolve_task

    try:
        task_id = resolve_task(args.task)
        if args.envs is not None:
            overrides["num_envs"] = args.envs
        forge_gpu.sim.task_config(args.task, seed=args.seed, **overrides)  # a bad --set refused before building
        began = time.perf_counter()
        env = forge_gpu.sim.make(args.task, device=args.device, seed=args.seed, **overrides)
        policy = load_policy_of(args, env, policy_options)
        make_seconds = time.perf_counter() - began
    except ValueError as e:
        raise UsageError(str(e)) from e
    print(device_line(args.device, env), flush=True)
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
    print("\n".join(summary_lines(metrics, result, make_seconds)))
    if args.json is not None:
        from forge_gpu._src.core.files import write_json_atomic

        policy = {"policy": args.policy, **({"policy_args": policy_options["args"]} if policy_options["args"] else {})}
        write_json_atomic(args.json, {**metrics, **policy, "per_episode": result.episode_rows()})
        print(f"json: {args.json}")
    if result.run is not None:
        print(f"run: {result.run} (episode j is env_id:episode_id world[j]:episode_id[j] of --json's per_episode)")
    return 0
