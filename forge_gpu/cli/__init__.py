"""The ``forge-gpu`` command, its twenty-one subcommands: collect, evaluate, replay, generate, tasks, check-model,
doctor, precompile (simulate); inspect, verify, render, repair, convert, export, stats (read runs); select, merge,
split (write runs of other runs' episodes); report, view (show a run to a person); teleop (a person drives a task;
the episodes kept are a run). tests/cli/test_cli.py checks that this list names every subcommand.

Exit status: 0 on success, 1 on a failed run or invalid data, 2 on bad input (nothing is created),
130 after SIGINT and 143 after SIGTERM (completed episodes are kept and the manifest is closed); 141, quietly,
when the reader of its output stopped early (``forge-gpu inspect RUN | head``), as a shell pipeline expects.

The code is in fourteen modules: ``_common`` (bad input, checks, signals, progress), ``_recording`` (``collect``'s
recording flags, one per ``RecordingOptions`` field); the commands that simulate, one module each: ``_collect``,
``_evaluate``, ``_replay``, ``_generate``, ``_tasks`` (with the task arguments they share), ``_render`` (render: a run
without camera frames is drawn from its state), ``_policy`` (the policy options) and ``_machine`` (doctor,
precompile, the device line); ``_data`` (the commands that read runs: inspect, verify, repair, convert, export,
stats), ``_curate`` (the commands that write runs of other runs' episodes:
select, merge, split), ``_look`` (the commands that show a run to a person: report, view) and ``_teleop`` (teleop).
Only the simulating commands import Warp and Newton, and only when they run.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings

from forge_gpu._src.formats.registry import FORMATS
from forge_gpu._src.sim.output import VERBOSE_ENV, set_verbose

from ._collect import cmd_collect
from ._common import UsageError
from ._curate import add_curate_parsers
from ._data import cmd_convert, cmd_export, cmd_inspect, cmd_repair, cmd_stats, cmd_verify
from ._evaluate import cmd_evaluate
from ._generate import add_generate_parser
from ._look import add_look_commands
from ._machine import cmd_doctor, cmd_precompile
from ._policy import add_policy_options
from ._recording import add_codec_option, add_recording_options, compression_choices
from ._render import cmd_render
from ._replay import cmd_replay
from ._tasks import cmd_check_model, cmd_tasks
from ._teleop import add_teleop_parser

__all__ = ["UsageError", "build_parser", "main"]


POLICY_HELP = (
    "random, expert, MODULE:FACTORY (a torch policy), lerobot:PATH (a LeRobot checkpoint), pt2:PATH (a torch.export "
    "policy file: bench/ppo.py saves one) or torchscript:PATH (a TorchScript policy file)"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="forge-gpu", description="Collect, inspect and render robot-learning runs.")
    # The registered formats (forge_gpu._src.formats.registry), read when the parser is built.
    formats = tuple(FORMATS)
    compressions, compression_help = compression_choices()
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("collect", help="collect episodes of a task into a new run directory")
    c.add_argument("task", help="task id (forge-gpu tasks lists them) or a task file path/to/task.toml")
    c.add_argument("--envs", type=int, default=None, help="number of envs (default: the config's)")
    stop = c.add_mutually_exclusive_group()
    stop.add_argument("--episodes", type=int, default=None, help="episodes to collect (default 2 per env)")
    stop.add_argument("--steps", type=int, default=None, help="or: env.step calls to run")
    c.add_argument("--policy", default="random", help=POLICY_HELP)
    add_policy_options(c)  # --policy-arg, --chunk-exec, --chunk-steps, --ensemble-decay
    c.add_argument("--out", default=None, help="new run directory (default runs/<task>-<time>)")
    c.add_argument("--device", default=None, help="Warp device (default cuda:0 if present, else cpu)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument(
        "--label",
        choices=["expert"],
        default=None,
        help="record every frame's label: expert, the task's expert's action for the frame's state, as the "
        "observation field expert_action (computed inside the step)",
    )
    c.add_argument(
        "--mix",
        type=float,
        default=None,
        metavar="BETA",
        help="with --label expert: the share of episodes (drawn per episode from the seed) that execute the "
        "expert's actions instead of the policy's, recorded as the param expert_executed (0 <= BETA <= 1)",
    )
    add_recording_options(c)
    c.add_argument("--slots", type=int, default=4, help="host snapshot slots K")
    c.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, e.g. max_steps=200")
    c.add_argument("--variant", default=None, metavar="NAME", help="a task file's variant ([variants.NAME]), e.g. play")
    c.add_argument(
        "--workers",
        type=int,
        default=1,
        help="Ray actors, one device each, writing OUT/worker-NNN and OUT/dataset.json (needs forge-gpu[ray])",
    )
    c.add_argument("--ray-address", default=None, help="join this Ray cluster (default: start a local one)")
    c.set_defaults(func=cmd_collect)

    e = sub.add_parser("evaluate", help="score a policy over exactly N episodes, each drawn from its own key")
    e.add_argument("task", help="task id (forge-gpu tasks lists them) or a task file path/to/task.toml")
    e.add_argument("--policy", required=True, help=POLICY_HELP)
    add_policy_options(e)
    e.add_argument("--episodes", type=int, required=True, help="episodes to run to their end (N)")
    e.add_argument("--envs", type=int, default=None, help="number of envs (default: the config's)")
    e.add_argument("--seed", type=int, default=0, help="episode j starts from the draws of (seed, j)")
    e.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, e.g. max_steps=200")
    e.add_argument("--variant", default=None, metavar="NAME", help="a task file's variant ([variants.NAME]), e.g. play")
    e.add_argument("--device", default=None, help="Warp device (default cuda:0 if present, else cpu)")
    e.add_argument("--json", default=None, metavar="FILE", help="write every figure and every episode's row here")
    e.add_argument("--record", default=None, metavar="OUT", help="a new run directory: the N episodes, as collect's")
    add_recording_options(e)  # how --record writes the run, as collect's flags
    e.set_defaults(func=cmd_evaluate)

    i = sub.add_parser("inspect", help="check a run and summarise it")
    i.add_argument("run")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.add_argument("--quick", action="store_true", help="check the manifest and the markers or commit log only")
    i.set_defaults(func=cmd_inspect)

    w = sub.add_parser(
        "verify", help="check every block's checksum and every episode of a run or dataset; exit 1 on any damage"
    )
    w.add_argument("run", help="a run directory or a dataset root")
    w.add_argument("--json", action="store_true", help="machine-readable output")
    w.set_defaults(func=cmd_verify)

    r = sub.add_parser(
        "render",
        help="draw an episode: a GIF of its camera frames, or of the robot drawn from the recorded state (a run "
        "without a camera), or a plot of proprio, actions, reward (--plot)",
    )
    r.add_argument("run")
    r.add_argument("--episode", default=None, metavar="ENV:EPISODE", help="default: the first episode")
    r.add_argument("--out", default=None, help="output file (default next to the run)")
    r.add_argument(
        "--plot",
        action="store_true",
        help="a run without camera frames: plot proprio, action and reward instead of drawing the robot",
    )
    r.add_argument("--size", type=int, default=128, help="a run without camera frames: the image size [px]")
    r.add_argument("--device", default=None, help="Warp device drawing the robot (default cuda:0 if present, else cpu)")
    r.add_argument(
        "--trust-code",
        action="store_true",
        help="import the code the run's task names outside forge_gpu to draw its robot (as replay --trust-code)",
    )
    r.set_defaults(func=cmd_render)

    v = sub.add_parser("convert", help="write a closed run's episodes as a new run in another format")
    v.add_argument("run")
    v.add_argument("out", help="the new run directory")
    v.add_argument("--to", choices=formats, required=True, help=f"the new run's format: {', '.join(formats)}")
    v.add_argument("--compression", choices=compressions, default="none", help=compression_help)
    add_codec_option(v, "the new packed run's image codecs (a field named nowhere keeps the source's)")
    v.set_defaults(func=cmd_convert)

    y = sub.add_parser(
        "replay", help="re-simulate a run's episodes: observe again from its state, or check its actions"
    )
    y.add_argument("run", help="a closed run that records state (packed)")
    y.add_argument("out", help="the new run directory")
    y.add_argument(
        "--from",
        dest="source",
        choices=["state", "actions"],
        default="state",
        help="state: restore every frame and observe again (under --set changes); actions: restore the first frame, "
        "apply the recorded actions and report where the state differs",
    )
    y.add_argument("--set", action="append", metavar="KEY=VALUE", help="config change, e.g. params.image_size=128")
    y.add_argument("--episodes", default=None, metavar="ENV:EPISODE,...", help="only these episodes")
    y.add_argument("--successful", action="store_true", help="only episodes that ended in success")
    y.add_argument("--limit", type=int, default=None, help="at most this many episodes")
    y.add_argument("--batch", type=int, default=1024, help="worlds per batch (episodes replayed at once)")
    y.add_argument("--device", default=None, help="Warp device (default cuda:0 if present, else cpu)")
    y.add_argument("--tolerance", type=float, default=1e-5, help="--from actions: largest state error counted equal")
    y.add_argument(
        "--trust-code",
        action="store_true",
        help="import the code the run's task names outside forge_gpu (its term module, model builder, expert "
        "factory); without it such a run is refused, naming that code",
    )
    y.set_defaults(func=cmd_replay)

    add_generate_parser(sub)  # generate (cli/_generate.py)

    t = sub.add_parser("tasks", help="list the tasks, or describe one: its model, terms and fields")
    t.add_argument("task", nargs="?", default=None, help="a task id or task file (default: list every task)")
    t.add_argument("--variant", default=None, metavar="NAME", help="describe the task file's variant NAME")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, e.g. max_steps=200")
    t.set_defaults(func=cmd_tasks)

    m = sub.add_parser(
        "check-model",
        help="compare a model file (or a task or robot file's model) as forge_gpu builds it with MuJoCo's own load of "
        "it; exit 1 on any difference",
    )
    m.add_argument("file", help="an MJCF or URDF file, or a task or robot file path/to/task.toml")
    m.add_argument("--steps", type=int, default=200, help="steps of the zero-control rollout compared (default 200)")
    m.set_defaults(func=cmd_check_model)

    d = sub.add_parser("doctor", help="check that this machine can collect as designed (GPU, capture, pinned memory)")
    d.set_defaults(func=cmd_doctor)

    k = sub.add_parser(
        "precompile", help="build Warp's kernel cache of the tasks for GPUs of the given archs, here without a GPU"
    )
    k.add_argument("tasks", nargs="*", metavar="TASK", help="task ids or task files (default: every shipped task)")
    k.add_argument(
        "--arch",
        action="append",
        required=True,
        help="a CUDA arch (90: H100/H200, 80: A100, 89: L40S) or cpu; repeatable",
    )
    k.add_argument("--out", required=True, help="the kernel cache folder; then run with WARP_CACHE_PATH=OUT")
    k.set_defaults(func=cmd_precompile)

    p = sub.add_parser("repair", help="close a run whose recording process was killed or whose machine crashed")
    p.add_argument("run")
    p.add_argument(
        "--salvage",
        action="store_true",
        help="keep every episode whose blocks pass their checksums, drop (and list) the others, whatever the run's "
        "status (without it a damaged closed run is refused and a crashed one is cut at its first damaged block)",
    )
    p.set_defaults(func=cmd_repair)

    e = sub.add_parser(
        "export", help="write a closed run (or dataset) as a LeRobot v3.0 dataset, robomimic HDF5 or a Minari dataset"
    )
    e.add_argument("run", help="a closed run directory or a dataset root")
    e.add_argument(
        "out",
        help="lerobot: the new dataset directory; robomimic: the new .hdf5 file; minari: the new dataset directory, "
        "named NAME-vN (its id forge_gpu/NAME-vN)",
    )
    e.add_argument("--to", choices=["lerobot", "robomimic", "minari"], required=True)
    e.add_argument(
        "--codec", choices=["h264", "av1"], default="h264", help="lerobot videos: h264 (fast) or av1 (small)"
    )
    e.add_argument("--crf", type=int, default=None, help="video quality: lower is larger (default h264 23, av1 35)")
    e.add_argument("--workers", type=int, default=1, help="lerobot: encoding processes (default 1)")
    e.add_argument(
        "--environment-state",
        default=None,
        metavar="FIELDS",
        help="lerobot: the observation fields written as observation.environment_state, comma-separated, in order "
        "(default every vector field but proprio and the labels, in the spec's order; an empty string: none)",
    )
    e.add_argument(
        "--target",
        default="action",
        help="what the dataset's action holds: action (the executed actions, the default) or a label field of the "
        "run, e.g. expert_action (collect --label expert)",
    )
    e.set_defaults(func=cmd_export)

    s = sub.add_parser("stats", help="compute a run's normalization statistics (runs recorded without them)")
    s.add_argument("run", help="a closed run directory or a dataset root")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--recompute", action="store_true", help="compute them again even where they are stored")
    s.set_defaults(func=cmd_stats)

    add_curate_parsers(sub)  # select, merge, split (cli/_curate.py)
    add_look_commands(sub)  # report, view (cli/_look.py)
    add_teleop_parser(sub)  # teleop (cli/_teleop.py)

    for command in sub.choices.values():
        command.add_argument(
            "--verbose", action="store_true", help=f"show Warp's own output (also: {VERBOSE_ENV}=1 in the environment)"
        )
    return parser


def _one_line(message, category, filename, lineno, file=None, line=None, shown=warnings.showwarning):
    """forge_gpu's own warnings (a model's elements not simulated, its placement, ...) as ``forge-gpu: warning:
    ...`` lines; any other as Python shows it."""
    if not category.__module__.startswith("forge_gpu"):
        return shown(message, category, filename, lineno, file, line)
    print(f"forge-gpu: warning: {str(message).removeprefix('forge_gpu: ')}", file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.verbose:
            set_verbose(True)
        with warnings.catch_warnings():
            warnings.showwarning = _one_line
            status = args.func(args)
        sys.stdout.flush()  # here, so that a reader gone early (BrokenPipeError) is met below
        return status
    except UsageError as e:
        print(f"forge-gpu: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of stdout is gone (``| head``): say nothing more, and keep the interpreter's final flush
        # of stdout from raising again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE
