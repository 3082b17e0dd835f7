"""``forge-gpu generate``: many demonstrations from a few source episodes, by their task's subtasks."""

from __future__ import annotations

import math

from ._common import UsageError, check_new, parse_set, signal_exit, stop_on_signals


def add_generate_parser(sub) -> None:
    """The ``generate`` subcommand's parser."""
    g = sub.add_parser(
        "generate",
        help="generate demonstrations from a few source episodes: their subtask segments moved to where the "
        "objects are (docs/generate.md)",
    )
    g.add_argument("source", help="a closed run of the task that records state: the source demonstrations")
    g.add_argument("--episodes", type=int, required=True, help="successful demonstrations to generate (N)")
    g.add_argument("--out", required=True, help="the new run directory")
    g.add_argument("--task", default=None, help="task id or task file (default: the source run's task)")
    g.add_argument("--envs", type=int, default=None, help="worlds stepped at once (default: the source run's)")
    g.add_argument("--seed", type=int, default=0, help="attempt j draws from the keys (seed, j)")
    g.add_argument("--set", action="append", metavar="KEY=VALUE", help="config change, e.g. max_steps=300")
    g.add_argument("--device", default=None, help="Warp device (default cuda:0 if present, else cpu)")
    g.add_argument(
        "--select",
        choices=["nearest", "random"],
        default="nearest",
        help="each subtask's source segment: the one whose object pose at its start is nearest the object's pose now "
        "(the default), or drawn uniformly per attempt",
    )
    g.add_argument(
        "--interpolation-steps",
        type=int,
        default=5,
        help="steps from the tcp's pose to a segment's transformed first pose (default 5)",
    )
    g.add_argument("--action-noise", type=float, default=0.0, help="uniform noise on each step's tcp move, +- [m]")
    g.add_argument(
        "--follow",
        choices=["command", "pose"],
        default=None,
        help="command (the default where the action is joint targets): each step's joint targets are the measured "
        "joints moved by the source's own commanded lead at the frame and the error to its transformed pose; pose "
        "(the default for an end-effector action): --gain of the error to the next transformed pose a step, added "
        "to the joint targets",
    )
    g.add_argument(
        "--gain",
        type=float,
        default=None,
        help="--follow pose: the share of the pose error to the next transformed pose commanded per step, in (0, 1] "
        "(default 0.5); refused with --follow command",
    )
    g.add_argument(
        "--source-episodes",
        default=None,
        metavar="I,J,...",
        help="use only these episodes of the source run (indices in its reading order, as forge-gpu inspect lists "
        "them); forge-gpu select makes a narrowed source run too",
    )
    g.add_argument(
        "--keep-failures",
        default=None,
        metavar="RUN",
        help="write the failed attempts (those before the last one kept) to this new run",
    )
    g.add_argument("--max-attempts", type=int, default=None, help="give up after this many (default 20 N + envs)")
    g.add_argument(
        "--workers",
        type=int,
        default=None,
        help="K Ray actors, each with its own env, stepping blocks of attempts in index order; merged into one run, "
        "the same whatever K",
    )
    g.add_argument("--chunk", type=int, default=None, help="--workers: attempts per block (default max(16, 4 envs))")
    g.add_argument("--ray-address", default=None, help="--workers: the Ray cluster to join (default: a local one)")
    g.add_argument(
        "--trust-code",
        action="store_true",
        help="import the code the run's task names outside forge_gpu; without it such a run is refused",
    )
    g.set_defaults(func=cmd_generate)


def cmd_generate(args) -> int:
    from forge_gpu._src.generate.follower import Motion
    from forge_gpu._src.generate.run import generate

    overrides = parse_set(args.set or [])
    for name in ("episodes", "envs", "max_attempts", "workers", "chunk"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} {value}: must be >= 1")
    if args.interpolation_steps < 0:
        raise UsageError(f"--interpolation-steps {args.interpolation_steps}: must be >= 0")
    if args.seed < 0:
        raise UsageError(f"--seed {args.seed}: must be >= 0")
    if not math.isfinite(args.action_noise) or args.action_noise < 0:
        raise UsageError(f"--action-noise {args.action_noise}: must be a number >= 0 [m]")
    try:  # the follower the arm resolves to (--follow's default) is checked again once the task is built
        Motion(follow=args.follow, gain=args.gain).check(flags=True)
    except ValueError as error:
        raise UsageError(str(error)) from None
    chosen = None
    if args.source_episodes is not None:
        try:
            chosen = [int(x) for x in args.source_episodes.split(",")]
        except ValueError:
            chosen = []
        if not chosen or min(chosen) < 0:
            raise UsageError(f"--source-episodes {args.source_episodes!r}: expected indices I,J,... (>= 0)")
    check_new(args.out, "--out")
    if args.keep_failures is not None:
        check_new(args.keep_failures, "--keep-failures")

    def show(c: dict) -> None:
        print(
            f"generate {c['successes']}/{c['target']} successes  {c['attempts']} attempts  yield {c['yield']:.1%}  "
            f"{c['env_steps_per_s']:,.0f} env-steps/s  {c['seconds']:.0f} s",
            flush=True,
        )

    with stop_on_signals() as (stop, caught):
        try:
            summary = generate(
                args.source,
                args.out,
                episodes=args.episodes,
                task=args.task,
                overrides=overrides,
                num_envs=args.envs,
                seed=args.seed,
                device=args.device,
                select=args.select,
                interpolation_steps=args.interpolation_steps,
                action_noise=args.action_noise,
                motion=Motion(follow=args.follow, gain=args.gain),
                source_episodes=chosen,
                keep_failures=args.keep_failures,
                max_attempts=args.max_attempts,
                workers=args.workers,
                chunk=args.chunk,
                ray_address=args.ray_address,
                trust_code=args.trust_code,
                stop=stop,
                progress=show,
            )
        except InterruptedError as e:
            name, status = signal_exit(caught[0]) if caught else ("a stop", 130)
            print(f"stopped by {name}: {e}")
            return status
        except (ValueError, FileNotFoundError, FileExistsError, ImportError) as e:
            raise UsageError(str(e)) from e
    for line in summary.lines():
        print(line)
    print(f"run: {summary.directory}")
    if not summary.complete:
        print(f"only {summary.episodes} of {args.episodes} successful attempts in {summary.attempts} attempts")
        return 1
    return 0
