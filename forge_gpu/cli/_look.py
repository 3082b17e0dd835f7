"""The commands that show a run to a person: ``report`` (one self-contained HTML file) and ``view`` (Rerun). Like
``_data``'s, they read runs and never import Warp, Newton or torch."""

from __future__ import annotations

import sys
from pathlib import Path

from ._common import UsageError, check_run, check_writable, parse_episode


def add_look_commands(sub) -> None:
    """The ``report`` and ``view`` subparsers."""
    r = sub.add_parser("report", help="write one self-contained HTML report of a run or dataset (opens from disk)")
    r.add_argument("run", help="a run directory or a dataset root")
    r.add_argument("--out", default=None, help="the HTML file (default RUN-report.html beside the run; replaced)")
    r.add_argument("--gallery", type=int, default=2, help="episodes of each kind in the gallery (best, worst, ...)")
    r.add_argument("--seed", type=int, default=0, help="the gallery's random choices")
    r.add_argument(
        "--side", type=int, default=None, help="the gallery frames' longest side in pixels, 8 to 512 (default 64)"
    )
    r.set_defaults(func=cmd_report)

    v = sub.add_parser("view", help="show a run's episodes in Rerun, or save them as an .rrd file (needs [view])")
    v.add_argument("run")
    v.add_argument("--episode", action="append", metavar="ENV:EPISODE", help="this episode (repeatable)")
    v.add_argument("--limit", type=int, default=16, help="without --episode: the first N episodes (default 16)")
    v.add_argument("--save", default=None, metavar="FILE.rrd", help="write an .rrd file instead of opening a viewer")
    v.set_defaults(func=cmd_view)


def cmd_report(args) -> int:
    from forge_gpu._src.reading.report import report

    check_run(args.run, dataset=True)
    if not 0 <= args.gallery <= 16:
        raise UsageError(f"--gallery {args.gallery}: must be in [0, 16]")
    if args.side is not None and not 8 <= args.side <= 512:
        raise UsageError(f"--side {args.side}: must be in [8, 512] (pixels, the gallery frames' longest side)")
    where = Path(args.run).resolve()
    out = Path(args.out) if args.out else where.parent / f"{where.name}-report.html"
    if out.is_dir():
        raise UsageError(f"--out {out}: is a directory; give a file name")
    check_writable(out, "--out ")
    sized = {} if args.side is None else {"side": args.side}
    result = _reading(lambda: report(args.run, out, gallery=args.gallery, seed=args.seed, **sized))
    if isinstance(result, int):
        return result
    if result["no_frames"]:
        print(f"{args.run}: no frames in the gallery: {result['no_frames']}; it plots proprio, action and reward")
    print(
        f"wrote {result['out']}: {result['bytes']:,} bytes, {result['episodes']:,} episodes, "
        f"{result['gallery']} in the gallery, {result['seconds']:.2f} s"
    )
    return 0


def cmd_view(args) -> int:
    from forge_gpu._src.reading.view import view_run

    episodes = [parse_episode(e) for e in args.episode] if args.episode else None
    if args.limit < 1:
        raise UsageError(f"--limit {args.limit}: must be >= 1")
    if args.save is not None and Path(args.save).is_dir():
        raise UsageError(f"--save {args.save}: is a directory; give a file name, e.g. run.rrd")
    if args.save is not None:
        check_writable(args.save, "--save ")
    check_run(args.run)
    result = _reading(lambda: view_run(args.run, episodes=episodes, save=args.save, limit=args.limit))
    if isinstance(result, int):
        return result
    where = f"wrote {result['save']}" if result["save"] else "sent to the Rerun viewer"
    print(f"{where}: {result['episodes']} episodes, {result['frames']:,} frames")
    return 0


def _reading(call):
    """``call()``'s result; an episode the run does not hold is bad input (UsageError), a missing optional package or
    a damaged run is said in one line and returned as exit status 1."""
    try:
        return call()
    except LookupError as e:
        raise UsageError(str(e)) from e
    except (ImportError, ConnectionError) as e:
        print(f"forge-gpu: {e}", file=sys.stderr)
    except ValueError as e:
        print(f"forge-gpu: invalid run: {e}", file=sys.stderr)
    return 1
