"""The commands that read or rewrite runs on disk: ``inspect``, ``verify``, ``repair``, ``convert``, ``export``,
``stats``. None of them imports Warp, Newton or torch (a test checks it), so they run on a machine that only trains
(``render`` is ``_render``'s: it simulates to draw a run without camera frames)."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from forge_gpu._src.formats.registry import OptionError, check_codecs

from ._common import (
    UsageError,
    check_compression,
    check_new,
    check_run,
)
from ._recording import codec_options


def cmd_inspect(args) -> int:
    import json

    from forge_gpu._src.reading.inspection import inspect_run

    check_run(args.run, dataset=True)
    try:
        report = inspect_run(args.run, quick=args.quick)
    except ValueError as e:
        print(f"forge-gpu: invalid run: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        from forge_gpu._src.reading.inspection import format_report

        print(format_report(report))
    return 0


def cmd_verify(args) -> int:
    import json

    from forge_gpu._src.reading.verify import format_verify, verify_run

    check_run(args.run, dataset=True)
    try:
        report = verify_run(args.run)
    except ValueError as e:  # a dataset.json that does not read
        print(f"forge-gpu: invalid dataset: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else "\n".join(format_verify(report)))
    return 0 if report["ok"] else 1


def cmd_repair(args) -> int:
    from forge_gpu._src.curation.repair import repair_run

    check_run(args.run)
    try:
        report = repair_run(args.run, salvage=args.salvage)
    except ValueError as e:
        print(f"forge-gpu: cannot repair: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. a disk still full: nothing published was touched, and repair can run again
        print(f"forge-gpu: cannot repair {args.run}: {e}; free space or fix the error, then run again", file=sys.stderr)
        return 1
    cut = report["cut"]
    what = (
        f"{'emptied' if args.salvage else 'cut off'} {cut['blocks']} damaged block(s), {cut['rows']} rows: "
        if cut["blocks"]
        else "dropped damaged episodes: "  # a format of one file per episode (npz) drops the files that fail
    )
    lost = (
        f"; {what}{cut['episodes']} episode(s) lost: {' '.join(report['lost_episodes']) or '-'}"
        if cut["blocks"] or cut["episodes"]
        else ""
    )
    if report["status_before"] != "recording":
        done = [f"removed {len(report['removed'])} stale files"] if report["removed"] else []
        done += [f"repaired: {'; '.join(report['actions'])}"] if report["actions"] else []
        print(f"{args.run}: status is {report['status_before']!r}; " + ("; ".join(done) or "nothing to repair") + lost)
        return 0
    recovered = report["recovered_episodes"]
    recovered = f", {recovered} of them recovered by the repair" if recovered else ""
    repairs = f"; {len(report['actions'])} repairs" if report["actions"] else ""
    print(
        f"{args.run}: closed; {report['episodes']} published episodes kept{recovered}; "
        f"{len(report['removed'])} stale temporary or unpublished files removed{repairs}{lost}"
    )
    return 0


def cmd_convert(args) -> int:
    from forge_gpu._src.curation.convert import convert_run

    check_run(args.run)
    check_new(args.out)
    check_compression(args.to, args.compression)
    codecs = codec_options(args)
    try:
        check_codecs(codecs, args.to)
    except OptionError as e:
        raise UsageError(f"--codec: {e.allowed}") from e
    try:
        report = convert_run(args.run, args.out, to=args.to, compression=args.compression, codecs=codecs)
    except ValueError as e:
        print(f"forge-gpu: cannot convert: {e}", file=sys.stderr)
        return 1
    print(f"wrote {report['episodes']} episodes to {report['out']} ({args.to})")
    return 0


def _check_export_target(source: str, target: str) -> None:
    """``--target``: ``action`` or a label field of every run of ``source`` (their run.json's ``env_spec.labels``);
    UsageError (one line, naming the run and its fields) otherwise. A run.json that cannot be read is the export's
    to report."""
    from forge_gpu._src.core.dataset import run_directories
    from forge_gpu._src.core.labels import ACTION_TARGET, target_column
    from forge_gpu._src.core.manifest import RUN_MANIFEST
    from forge_gpu._src.formats.registry import read_manifest

    if target == ACTION_TARGET:
        return
    try:
        manifests = [(d, read_manifest(d)) for d in run_directories(source)]
    except (OSError, ValueError):
        return
    for directory, manifest in manifests:
        try:
            target_column(manifest["env_spec"], target, name=str(Path(directory) / RUN_MANIFEST))
        except ValueError as e:
            raise UsageError(f"--target {target}: {e}") from e


def cmd_export(args) -> int:
    from forge_gpu._src.export.lerobot import check_video, export_lerobot
    from forge_gpu._src.export.minari import export_minari
    from forge_gpu._src.export.robomimic import export_robomimic

    check_run(args.run, dataset=True)
    check_new(args.out, kind="file" if args.to == "robomimic" else "directory")
    if args.workers < 1:
        raise UsageError(f"--workers {args.workers}: expected an integer >= 1")
    lerobot_only = (args.codec != "h264", args.workers != 1, args.crf is not None, args.environment_state is not None)
    if args.to != "lerobot" and any(lerobot_only):
        raise UsageError("--codec, --crf, --workers and --environment-state apply to --to lerobot only")
    if args.to == "minari" and args.target != "action":
        raise UsageError(f"--target {args.target}: --to minari writes the executed actions only")
    environment = args.environment_state
    environment = None if environment is None else [f.strip() for f in environment.split(",") if f.strip()]
    try:
        check_video(args.codec, args.crf)
    except ValueError as e:
        raise UsageError(f"--{e}") from e
    _check_export_target(args.run, args.target)
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if sys.stderr.isatty() and (now - last[0] >= 0.5 or done == total):
            last[0] = now
            print(f"\rexport {args.to}: {done:,}/{total:,} frames", end="", file=sys.stderr, flush=True)

    try:
        if args.to == "lerobot":
            report = export_lerobot(
                args.run,
                args.out,
                codec=args.codec,
                crf=args.crf,
                workers=args.workers,
                progress=progress,
                environment_state=environment,
                target=args.target,
            )
        elif args.to == "minari":
            report = export_minari(args.run, args.out, progress=progress)
        else:
            report = export_robomimic(args.run, args.out, progress=progress, target=args.target)
    except ImportError as e:
        print(f"\nforge-gpu: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"\nforge-gpu: cannot export: {e}", file=sys.stderr)
        return 1
    if sys.stderr.isatty():
        print(file=sys.stderr)
    rate = f"{report['frames_per_s']:,.0f} frames/s"
    extra = f", {report['codec']}, {report['workers']} process(es)" if args.to == "lerobot" else ""
    extra += f", id {report['dataset_id']}" if args.to == "minari" else ""
    print(
        f"wrote {report['episodes']} episodes, {report['frames']:,} frames, {report['bytes']:,} bytes to "
        f"{report['out']} ({args.to}{extra}; {rate}; statistics {report['statistics']})"
    )
    if report.get("environment_state"):
        print(f"observation.environment_state: {', '.join(report['environment_state'])}")
    for field in report.get("left_out", []):
        print(f"left out: {field} (LeRobot v3.0 depth video is not written; --to robomimic keeps it)")
    return 0


def cmd_stats(args) -> int:
    import json

    from forge_gpu._src.curation.curate import compute_statistics
    from forge_gpu._src.reading.inspection import format_statistics
    from forge_gpu._src.recording.stats import load_statistics

    check_run(args.run, dataset=True)
    try:
        stats, what = None, "stored with"
        if not args.recompute:
            with contextlib.suppress(LookupError):
                stats = load_statistics(args.run)
        if stats is None:
            stats, what = compute_statistics(args.run, write=True), "computed and written to stats.json in"
    except ValueError as e:
        print(f"forge-gpu: cannot compute statistics: {e}", file=sys.stderr)
        return 1
    if args.json:
        summary = {k: {f: v if f == "count" else v.tolist() for f, v in s.items()} for k, s in stats.summary().items()}
        print(json.dumps(summary, indent=2))
        return 0
    print(f"statistics {what} {args.run}")
    print("\n".join(format_statistics(stats.summary())))
    return 0
