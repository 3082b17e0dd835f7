"""The curation commands: ``select``, ``merge`` and ``split`` (forge_gpu._src.curation.curate), each writing new
closed packed runs from the episodes of others. Like ``_data``'s, they import neither Warp, Newton nor torch."""

from __future__ import annotations

import os
import sys

from ._common import UsageError, check_compression, check_new, check_run

_COMPRESSION_HELP = "the new run's packed compression: none, lz4 or zstd (default: the source's where packed takes it)"


def add_curate_parsers(sub) -> None:
    """The subparsers of ``select``, ``merge`` and ``split``."""
    s = sub.add_parser("select", help="write the episodes of a run that an expression keeps as a new run")
    s.add_argument("run", help="a closed run directory or a dataset root")
    s.add_argument("out", help="the new run directory")
    s.add_argument(
        "--where",
        required=True,
        metavar="EXPR",
        help="over per-episode values: success, return, length, env, episode, instruction and each randomized "
        'param (NAME[i] for a vector), e.g. "success and length < 80"; and or not, < <= > >= == !=, in (a, b), '
        "+ - * / // %% **, abs(x)",
    )
    s.add_argument("--compression", default=None, help=_COMPRESSION_HELP)
    s.set_defaults(func=cmd_select)

    m = sub.add_parser("merge", help="write the episodes of runs of one task and env_spec as one new run")
    m.add_argument("runs", nargs="+", metavar="RUN", help="closed run directories or dataset roots, in order")
    m.add_argument("out", help="the new run directory")
    m.add_argument("--compression", default=None, help=_COMPRESSION_HELP)
    m.set_defaults(func=cmd_merge)

    p = sub.add_parser("split", help="split a run's episodes into OUT/train and OUT/val, deterministically")
    p.add_argument("run", help="a closed run directory or a dataset root")
    p.add_argument("out", help="the new directory that will hold the runs train and val")
    p.add_argument("--val", type=float, required=True, help="the fraction of episodes in val, in (0, 1), e.g. 0.1")
    p.add_argument("--seed", type=int, default=0, help="which split (default 0); the same seed, the same split")
    p.add_argument("--compression", default=None, help=_COMPRESSION_HELP)
    p.set_defaults(func=cmd_split)


def _check(runs: list[str], out: str, compression: str | None) -> None:
    for run in runs:
        check_run(run, dataset=True)
    check_new(out)
    if compression is not None:
        check_compression("packed", compression)


def _failed(what: str, error: Exception) -> int:
    print(f"forge-gpu: cannot {what}: {error}", file=sys.stderr)
    return 1


def cmd_select(args) -> int:
    from forge_gpu._src.curation.curate import select_run
    from forge_gpu._src.curation.where import ExpressionError

    _check([args.run], args.out, args.compression)
    try:
        report = select_run(args.run, args.out, args.where, compression=args.compression)
    except ExpressionError as e:
        raise UsageError(f"--{e}") from e
    except ValueError as e:
        return _failed("select", e)
    print(f"wrote {report['episodes']} of {report['of']} episodes to {report['out']} (packed; statistics recomputed)")
    return 0


def cmd_merge(args) -> int:
    from forge_gpu._src.curation.curate import merge_runs

    _check(args.runs, args.out, args.compression)
    try:
        report = merge_runs(args.runs, args.out, compression=args.compression)
    except ValueError as e:
        return _failed("merge", e)
    print(
        f"wrote {report['episodes']} episodes of {len(args.runs)} run(s) to {report['out']} "
        "(packed; statistics recomputed; sources and env offsets in run.json's curated)"
    )
    return 0


def cmd_split(args) -> int:
    from forge_gpu._src.curation.curate import split_run

    _check([args.run], args.out, args.compression)
    if not 0 < args.val < 1:
        raise UsageError(f"--val {args.val}: expected a fraction in (0, 1), e.g. 0.1")
    if args.seed < 0:
        raise UsageError(f"--seed {args.seed}: expected an integer >= 0")
    try:
        report = split_run(args.run, args.out, val=args.val, seed=args.seed, compression=args.compression)
    except ValueError as e:
        return _failed("split", e)
    out = report["out"]
    print(
        f"wrote {report['train']} episodes to {os.path.join(out, 'train')} and {report['val']} to "
        f"{os.path.join(out, 'val')} (packed; statistics recomputed; seed {args.seed})"
    )
    return 0
