"""``forge-gpu teleop``: a person drives one world of a task from a browser page; the episodes they keep are a run.
Warp and Newton are imported inside the command, after the checks that need neither."""

from __future__ import annotations

import sys

from ._common import UsageError, check_out, signal_exit, stop_on_signals
from ._machine import device_line
from ._tasks import task_arguments


def add_teleop_parser(sub) -> None:
    t = sub.add_parser(
        "teleop",
        help="drive one world of a task from a browser page (keyboard or gamepad); the episodes kept are a run",
    )
    t.add_argument("task", help="task id or task file; its action must be the end-effector action (kind = ee_delta)")
    t.add_argument("--out", default=None, help="new run directory (default runs/<task>-<time>)")
    t.add_argument("--host", default="127.0.0.1", help="the address the page is served on (default 127.0.0.1)")
    t.add_argument("--port", type=int, default=8765, help="its port (default 8765; 0: a free one)")
    t.add_argument(
        "--camera", default=None, help="the camera shown first (default the task's first; the page switches cameras)"
    )
    t.add_argument("--keys", default=None, metavar="FILE", help="a key map file changing the default's entries")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override, e.g. params.image_size=128")
    t.add_argument("--variant", default=None, metavar="NAME", help="a task file's variant, e.g. ee (the Panda's)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", default=None, help="Warp device (default cuda:0 if present, else cpu)")
    t.add_argument("--fast", action="store_true", help="step as fast as the world steps instead of at the control rate")
    t.set_defaults(func=cmd_teleop, policy="random")


def cmd_teleop(args) -> int:
    import importlib.util

    from forge_gpu._src.teleop.keys import load_keymap
    from forge_gpu._src.teleop.server import listen

    overrides, task_file = task_arguments(args)
    if importlib.util.find_spec("websockets") is None:
        raise UsageError("teleop serves its page with websockets, which is not installed: pip install 'forge-gpu[cli]'")
    try:
        keymap = load_keymap(args.keys)
    except ValueError as e:
        raise UsageError(f"--keys {e}") from e
    if not task_file:
        out = check_out(args.out, args.task)
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: expected a port number 0-65535")

    import forge_gpu
    from forge_gpu._src.tasks.catalog import resolve_task
    from forge_gpu._src.teleop.session import check_end_effector, end_effector_variants

    variant = overrides.pop("variant", "")
    try:
        task_id = resolve_task(args.task)
        if task_file:
            out = check_out(args.out, task_id)
        config = forge_gpu.sim.task_config(args.task, seed=args.seed, variant=variant, **overrides)
        check_end_effector(args.task, config, [] if variant else end_effector_variants(args.task, overrides))
        sock = listen(args.host, args.port)  # before the world is built: a taken port is refused at once
    except ValueError as e:
        raise UsageError(str(e)) from e
    with sock:
        return _serve(args, sock, out, keymap, variant, overrides)


def _serve(args, sock, out, keymap, variant: str, overrides: dict) -> int:
    import forge_gpu
    from forge_gpu._src.core.cameras import cameras
    from forge_gpu._src.core.fields import observation_layout
    from forge_gpu._src.teleop.keys import Inputs
    from forge_gpu._src.teleop.server import TeleopServer
    from forge_gpu._src.teleop.session import TeleopSession

    try:
        env = forge_gpu.sim.make(args.task, num_envs=1, device=args.device, seed=args.seed, variant=variant,
                                 **overrides)  # fmt: skip
    except ValueError as e:
        raise UsageError(str(e)) from e
    print(device_line(args.device, env), flush=True)
    recorded = list(cameras(observation_layout(env.spec)))
    if args.camera is not None and args.camera not in recorded:
        held = ", ".join(recorded) or "none"
        raise UsageError(f"--camera {args.camera}: the task records no such camera; its cameras are {held}")
    try:
        session = TeleopSession(env, out, keymap)
    except ValueError as e:
        raise UsageError(str(e)) from e
    inputs = Inputs(keymap)
    error = None
    with stop_on_signals() as (stop, caught):
        server = TeleopServer(sock, session.describe(), inputs, camera=args.camera or "", on_close=stop.set)
        print(f"teleop {session.env.task.spec.id}: open {server.url}", flush=True)
        if server.loopback:
            print(f"  from another machine: ssh -L {server.port}:localhost:{server.port} THIS_HOST, then open "
                  f"http://localhost:{server.port}/?token={server.token}", flush=True)  # fmt: skip
        print("  closing the page or Ctrl-C closes the run with the episodes kept", flush=True)
        try:
            session.run(inputs, stop, server.show, realtime=not args.fast)
        except Exception as e:
            error = e
        finally:
            server.close()
            session.close(error=error)
    if error is not None:
        print(f"forge-gpu: teleop failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(f"kept {session.kept} episodes, discarded {session.discarded}")
    print(f"run: {out}")
    if caught:
        return signal_exit(caught[0])[1]
    return 0
