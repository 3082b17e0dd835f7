"""``forge-gpu replay``: a run's episodes stepped again from their recorded actions or states."""

from __future__ import annotations

from ._common import (
    UsageError,
    check_new,
    parse_set,
    signal_exit,
    stop_on_signals,
)


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
