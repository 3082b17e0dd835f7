"""The ``forge-gpu`` command: collect, inspect and render runs.

Exit status: 0 on success, 1 on a failed run or invalid data, 2 on bad input (nothing is created),
130 after SIGINT and 143 after SIGTERM (completed episodes are kept and the manifest is closed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from forge_gpu._src.episode_format import COMPRESSIONS as NPZ_COMPRESSIONS
from forge_gpu._src.packed import COMPRESSIONS as PACKED_COMPRESSIONS
from forge_gpu._src.packed import FORMATS
from forge_gpu._src.warp_output import VERBOSE_ENV, set_verbose


class UsageError(Exception):
    """Bad command-line input: reported in one line with exit status 2."""


def _parse_set(items: list[str]) -> dict:
    import tomllib

    overrides = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected KEY=VALUE, e.g. --set solver.name=featherstone")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text  # a bare word is a string
        overrides[key.strip()] = value
    return overrides


def _check_out(out: str | None, task: str) -> Path:
    path = Path(out) if out else Path("runs") / f"{task}-{time.strftime('%Y%m%d-%H%M%S')}"
    if os.path.lexists(path):
        raise UsageError(f"--out {path}: already exists; give a new directory")
    parent = path.parent
    while not os.path.lexists(parent):
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"--out {path}: cannot write in {parent}: not a directory; choose a writable place")
    try:  # the sure test (os.access misjudges read-only mounts for some users): make a directory, remove it
        os.rmdir(tempfile.mkdtemp(prefix=".forge-gpu-", dir=parent))
    except OSError as e:
        raise UsageError(f"--out {path}: cannot write in {parent} ({e.strerror}); choose a writable place") from e
    return path


def _check_run(path: str, *, dataset: bool = False) -> None:
    """Refuse a path that holds no run (with ``dataset``: nor a dataset root) as bad input; a run whose files
    are damaged is the command's to report (exit 1)."""
    from forge_gpu._src.episode_format import RUN_MANIFEST
    from forge_gpu._src.reader import DATASET_MANIFEST

    what = "a run directory or dataset root" if dataset else "a run directory"
    manifests = (RUN_MANIFEST, DATASET_MANIFEST) if dataset else (RUN_MANIFEST,)
    if not Path(path).is_dir():
        raise UsageError(f"{path}: not {what} ({'not a directory' if os.path.lexists(path) else 'no such directory'})")
    if not any((Path(path) / name).is_file() for name in manifests):
        raise UsageError(f"{path}: not {what}: it holds no {' or '.join(manifests)}")


def _check_compression(format: str, compression: str) -> None:
    allowed = PACKED_COMPRESSIONS if format == "packed" else NPZ_COMPRESSIONS
    if compression not in allowed:
        raise UsageError(f"--compression {compression}: the {format} format takes {', '.join(allowed)}")


def cmd_collect(args) -> int:
    import forge_gpu
    from forge_gpu._src.collector import collect
    from forge_gpu._src.policies import check_policy_name, load_policy

    if args.task not in forge_gpu.TASKS:
        raise UsageError(f"unknown task {args.task!r}; known tasks are {', '.join(sorted(forge_gpu.TASKS))}")
    overrides = _parse_set(args.set or [])
    for reserved in ("num_envs", "seed", "device"):
        if reserved in overrides:
            raise UsageError(f"--set {reserved}=...: use the --{reserved.replace('num_', '')} option instead")
    try:
        config = forge_gpu.task_config(args.task, seed=args.seed, **overrides)
        if args.envs is not None:
            config = forge_gpu.task_config(args.task, seed=args.seed, num_envs=args.envs, **overrides)
        check_policy_name(args.policy)
    except ValueError as e:
        raise UsageError(str(e)) from e
    for name in ("writers", "slots", "max_buffer_bytes", "episodes", "steps", "workers"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} {value}: must be >= 1")
    if not 0 <= args.compression_level <= 9:
        raise UsageError(f"--compression-level {args.compression_level}: must be in [0, 9] (npz deflate)")
    _check_compression(args.format, args.compression)
    out = _check_out(args.out, args.task)
    if args.workers > 1:  # scale-out: one Ray actor per device, each running what follows
        from forge_gpu._src.distributed import cmd_collect_workers

        return cmd_collect_workers(args, config, overrides, out)
    try:
        began = time.perf_counter()
        env = forge_gpu.make(args.task, num_envs=config.num_envs, device=args.device, seed=args.seed, **overrides)
        policy = load_policy(args.policy, env)
        make_seconds = time.perf_counter() - began
    except ValueError as e:
        raise UsageError(str(e)) from e
    print(_device_line(args.device, env), flush=True)
    episodes = args.episodes if args.steps is None else None
    if episodes is None and args.steps is None:
        episodes = 2 * config.num_envs

    with stop_on_signals() as (stop, caught):
        display = _Progress(args.task, env, out)
        try:
            summary = collect(
                env,
                policy,
                str(out),
                episodes=episodes,
                steps=args.steps,
                slots=args.slots,
                format=args.format,
                max_buffer_bytes=args.max_buffer_bytes,
                writers=args.writers,
                compression=args.compression,
                compression_level=args.compression_level,
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


def _print_failed_run(out: Path) -> None:
    """Where a failed collection's run is (if it got that far) and, when its manifest could not be updated
    (a disk that stayed full), what to run once it can be."""
    import json

    if not out.is_dir():
        return
    print(f"run directory: {out}", file=sys.stderr)
    try:
        status = json.loads((out / "run.json").read_text())["status"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if status == "recording":
        print(
            f"run.json could not be updated and still says 'recording'; once space is freed (or the write error "
            f"above is fixed), run: forge-gpu repair {out}",
            file=sys.stderr,
        )


def _device_line(requested: str | None, env) -> str:
    """Which device the collection runs on, and why, in one line."""
    if requested:
        return f"device: {env.device} (--device {requested})"
    from forge_gpu._src.env import device_choice

    return f"device: {device_choice()[1]}"


@contextlib.contextmanager
def stop_on_signals():
    """For the block, SIGINT and SIGTERM set the yielded ``stop`` event and are appended to the yielded
    ``caught`` list instead of interrupting; the previous handlers come back after. Signals reach the main
    thread only, so elsewhere nothing is installed."""
    stop = threading.Event()
    caught: list[int] = []

    def on_signal(signum, frame):
        caught.append(signum)
        stop.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop, caught
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def signal_exit(signum: int) -> tuple[str, int]:
    """The name of a stopping signal and the exit status it gives (128 + its number, as shells do)."""
    return ("SIGINT", 130) if signum == signal.SIGINT else ("SIGTERM", 143)


class _Progress:
    """A live progress bar on a terminal (rich, when installed); otherwise (a CI log, a pipe, a file) a plain
    line every PLAIN_EVERY seconds and one at the end, never cut to a terminal's width."""

    PLAIN_EVERY = 10.0

    def __init__(self, task, env, out):
        self._bar = None
        self._last = 0.0
        self._label = f"{task} x{env.num_envs}"
        self._unprinted = ""  # the latest plain line, when it came too soon after the previous one
        if not sys.stdout.isatty():
            return
        try:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn(f"[bold]{task}[/] x{env.num_envs}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} {task.fields[unit]}"),
                TextColumn("{task.fields[rate]:,.0f} env-steps/s"),
                TextColumn("stall {task.fields[stall]:.0%}"),
                TextColumn("backlog {task.fields[backlog]}"),
                TextColumn("{task.fields[mb]:.1f} MB"),
                TimeRemainingColumn(),
            )
            self._bar.start()
            self._task = None
        except ImportError:
            pass

    def update(self, c: dict) -> None:
        done = c["episodes_ended"] if c["unit"] == "episodes" else c["steps"]
        fields = dict(
            unit=c["unit"],
            rate=c["env_steps_per_s"],
            stall=c["stall_fraction"],
            backlog=c["backlog"],
            mb=c["bytes_written"] / 1e6,
        )
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task("collect", total=c["target"], **fields)
            self._bar.update(self._task, completed=min(done, c["target"]), **fields)
            return
        self._unprinted = (
            f"{self._label}  {min(done, c['target'])}/{c['target']} {c['unit']}  {c['env_steps_per_s']:,.0f} "
            f"env-steps/s  stall {c['stall_fraction']:.0%}  backlog {c['backlog']}  "
            f"{c['bytes_written'] / 1e6:.1f} MB  {c['seconds']:.0f} s"
        )
        if time.monotonic() - self._last >= self.PLAIN_EVERY:
            self._print_plain()

    def _print_plain(self) -> None:
        self._last = time.monotonic()
        print(self._unprinted, flush=True)
        self._unprinted = ""

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self._unprinted:
            self._print_plain()


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
    print(f"run: {summary.directory}")


def cmd_inspect(args) -> int:
    import json

    from forge_gpu._src.inspect import inspect_run

    _check_run(args.run, dataset=True)
    try:
        report = inspect_run(args.run, quick=args.quick)
    except ValueError as e:
        print(f"forge-gpu: invalid run: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        from forge_gpu._src.inspect import format_report

        print(format_report(report))
    return 0


def cmd_render(args) -> int:
    from forge_gpu._src.inspect import render_episode

    episode = None
    if args.episode:
        env_id, sep, ep = args.episode.partition(":")
        if not sep or not env_id.isdigit() or not ep.isdigit():
            raise UsageError(f"--episode {args.episode!r}: expected ENV:EPISODE, e.g. 0:3")
        episode = (int(env_id), int(ep))
    _check_run(args.run)
    try:
        path = render_episode(args.run, episode=episode, out=args.out)
    except LookupError as e:
        raise UsageError(str(e)) from e
    except ValueError as e:
        print(f"forge-gpu: invalid run: {e}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def cmd_repair(args) -> int:
    from forge_gpu._src.repair import repair_run

    _check_run(args.run)
    try:
        report = repair_run(args.run)
    except ValueError as e:
        print(f"forge-gpu: cannot repair: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. a disk still full: nothing published was touched, and repair can run again
        print(f"forge-gpu: cannot repair {args.run}: {e}; free space or fix the error, then run again", file=sys.stderr)
        return 1
    if report["status_before"] != "recording":
        done = [f"removed {len(report['removed'])} stale files"] if report["removed"] else []
        done += [f"made the segments whole ({'; '.join(report['actions'])})"] if report.get("actions") else []
        print(f"{args.run}: status is {report['status_before']!r}; " + ("; ".join(done) or "nothing to repair"))
        return 0
    if "recovered_episodes" in report:  # packed
        print(
            f"{args.run}: closed; {report['episodes']} published episodes, {report['recovered_episodes']} of them "
            f"recovered from whole blocks written after the last commit; {len(report['actions'])} repairs"
        )
        return 0
    print(
        f"{args.run}: closed; {report['episodes']} published episodes kept, "
        f"{len(report['removed'])} stale temporary or unmarked files removed"
    )
    return 0


def cmd_convert(args) -> int:
    from forge_gpu._src.convert import convert_run

    _check_run(args.run)
    if Path(args.out).exists():
        raise UsageError(f"{args.out}: already exists; give a new directory")
    _check_compression(args.to, args.compression)
    try:
        report = convert_run(args.run, args.out, to=args.to, compression=args.compression)
    except ValueError as e:
        print(f"forge-gpu: cannot convert: {e}", file=sys.stderr)
        return 1
    print(f"wrote {report['episodes']} episodes to {report['out']} ({args.to})")
    return 0


def cmd_export(args) -> int:
    from forge_gpu._src.export_lerobot import export_lerobot
    from forge_gpu._src.export_robomimic import export_robomimic

    _check_run(args.run, dataset=True)
    if os.path.lexists(args.out):
        raise UsageError(f"{args.out}: already exists; give a new {'directory' if args.to == 'lerobot' else 'file'}")
    if args.workers < 1:
        raise UsageError(f"--workers {args.workers}: expected an integer >= 1")
    if args.to == "robomimic" and (args.codec != "h264" or args.workers != 1 or args.crf is not None):
        raise UsageError("--codec, --crf and --workers apply to --to lerobot only")
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if sys.stderr.isatty() and (now - last[0] >= 0.5 or done == total):
            last[0] = now
            print(f"\rexport {args.to}: {done:,}/{total:,} frames", end="", file=sys.stderr, flush=True)

    try:
        if args.to == "lerobot":
            report = export_lerobot(
                args.run, args.out, codec=args.codec, crf=args.crf, workers=args.workers, progress=progress
            )
        else:
            report = export_robomimic(args.run, args.out, progress=progress)
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
    print(
        f"wrote {report['episodes']} episodes, {report['frames']:,} frames, {report['bytes']:,} bytes to "
        f"{report['out']} ({args.to}{extra}; {rate}; statistics {report['statistics']})"
    )
    for field in report.get("left_out", []):
        print(f"left out: {field} (LeRobot v3.0 depth video is not written; --to robomimic keeps it)")
    return 0


def cmd_stats(args) -> int:
    import json

    from forge_gpu._src.stats import compute_statistics, format_statistics, load_statistics

    _check_run(args.run, dataset=True)
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


def cmd_doctor(args) -> int:
    from forge_gpu._src.doctor import report, run_checks

    checks = run_checks()
    print(report(checks))
    bad = [c.name for c in checks if not c.ok]
    if bad:
        print(f"forge-gpu: collection would not run as designed here ({', '.join(bad)})", file=sys.stderr)
        return 1
    from forge_gpu._src.env import device_choice

    print(f"collection runs as designed here, on {device_choice()[0]} by default")
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="forge-gpu", description="Collect, inspect and render robot-learning runs.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("collect", help="collect episodes of a task into a new run directory")
    c.add_argument("task", help="task id (a configs/<task>.toml)")
    c.add_argument("--envs", type=int, default=None, help="number of envs (default: the config's)")
    stop = c.add_mutually_exclusive_group()
    stop.add_argument("--episodes", type=int, default=None, help="episodes to collect (default 2 per env)")
    stop.add_argument("--steps", type=int, default=None, help="or: env.step calls to run")
    c.add_argument("--policy", default="random", help="random, expert or MODULE:FACTORY (a torch policy)")
    c.add_argument("--out", default=None, help="new run directory (default runs/<task>-<time>)")
    c.add_argument("--device", default=None, help="Warp device (default cuda:0 if present, else cpu)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument(
        "--format",
        choices=FORMATS,
        default="packed",
        help="packed: many episodes per file (schema 2, the default); npz: one file per episode (schema 1)",
    )
    c.add_argument(
        "--compression",
        choices=sorted({"none", *PACKED_COMPRESSIONS, *NPZ_COMPRESSIONS}),
        default="none",
        help="packed: none, lz4 or zstd; npz: none or deflate",
    )
    c.add_argument("--compression-level", type=int, default=1, help="npz deflate level 0-9")
    c.add_argument("--writers", type=int, default=2, help="npz writer threads")
    c.add_argument("--slots", type=int, default=4, help="host snapshot slots K")
    c.add_argument(
        "--max-buffer-bytes",
        type=int,
        default=None,
        help="recorder memory budget (default: packed 256 MiB of buffered batches, npz 1 GiB of episode buffers)",
    )
    c.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, e.g. max_steps=200")
    c.add_argument(
        "--workers",
        type=int,
        default=1,
        help="Ray actors, one device each, writing OUT/worker-NNN and OUT/dataset.json (needs forge-gpu[ray])",
    )
    c.add_argument("--ray-address", default=None, help="join this Ray cluster (default: start a local one)")
    c.set_defaults(func=cmd_collect)

    i = sub.add_parser("inspect", help="check a run and summarise it")
    i.add_argument("run")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.add_argument("--quick", action="store_true", help="check the manifest and the markers or commit log only")
    i.set_defaults(func=cmd_inspect)

    r = sub.add_parser("render", help="draw an episode: a GIF of its frames, or a plot of proprio, actions, reward")
    r.add_argument("run")
    r.add_argument("--episode", default=None, metavar="ENV:EPISODE", help="default: the first episode")
    r.add_argument("--out", default=None, help="output file (default next to the run)")
    r.set_defaults(func=cmd_render)

    v = sub.add_parser("convert", help="write a closed run's episodes as a new run in the other format")
    v.add_argument("run")
    v.add_argument("out", help="the new run directory")
    v.add_argument("--to", choices=FORMATS, required=True, help="packed (schema 2) or npz (schema 1)")
    v.add_argument(
        "--compression",
        choices=sorted({"none", *PACKED_COMPRESSIONS, *NPZ_COMPRESSIONS}),
        default="none",
        help="packed: none, lz4 or zstd; npz: none or deflate",
    )
    v.set_defaults(func=cmd_convert)

    d = sub.add_parser("doctor", help="check that this machine can collect as designed (GPU, capture, pinned memory)")
    d.set_defaults(func=cmd_doctor)

    p = sub.add_parser("repair", help="close a run whose recording process was killed")
    p.add_argument("run")
    p.set_defaults(func=cmd_repair)

    e = sub.add_parser("export", help="write a closed run (or dataset) as a LeRobot v3.0 dataset or robomimic HDF5")
    e.add_argument("run", help="a closed run directory or a dataset root")
    e.add_argument("out", help="lerobot: the new dataset directory; robomimic: the new .hdf5 file")
    e.add_argument("--to", choices=["lerobot", "robomimic"], required=True)
    e.add_argument(
        "--codec", choices=["h264", "av1"], default="h264", help="lerobot videos: h264 (fast) or av1 (small)"
    )
    e.add_argument("--crf", type=int, default=None, help="video quality: lower is larger (default h264 23, av1 35)")
    e.add_argument("--workers", type=int, default=1, help="lerobot: encoding processes (default 1)")
    e.set_defaults(func=cmd_export)

    s = sub.add_parser("stats", help="compute a run's normalization statistics (runs recorded without them)")
    s.add_argument("run", help="a closed run directory or a dataset root")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--recompute", action="store_true", help="compute them again even where they are stored")
    s.set_defaults(func=cmd_stats)

    for command in sub.choices.values():
        command.add_argument(
            "--verbose", action="store_true", help=f"show Warp's own output (also: {VERBOSE_ENV}=1 in the environment)"
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.verbose:
            set_verbose(True)
        return args.func(args)
    except UsageError as e:
        print(f"forge-gpu: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
