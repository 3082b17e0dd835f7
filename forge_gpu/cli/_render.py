"""``forge-gpu render``: an episode's camera frames as a GIF; for a run without camera frames, the robot drawn from
the recorded state by a camera on it (which builds the run's task: Warp and Newton are imported then only), or
with ``--plot`` a plot of proprio, action and reward."""

from __future__ import annotations

import sys
from pathlib import Path

from ._common import UsageError, check_run, check_writable, parse_episode

OUT_SUFFIXES = (".gif", ".png")
"""What ``--out`` may end in: frames are saved as an animated GIF or PNG, a plot as a PNG."""


def cmd_render(args) -> int:
    from forge_gpu._src.reading.inspection import render_episode

    episode = parse_episode(args.episode) if args.episode else None
    check_run(args.run)
    if args.out is not None:
        if Path(args.out).is_dir():
            raise UsageError(f"--out {args.out}: is a directory; give a file name, e.g. episode.png")
        if Path(args.out).suffix.lower() not in OUT_SUFFIXES:
            raise UsageError(f"--out {args.out}: expected a file name ending in {' or '.join(OUT_SUFFIXES)} (frames "
                             "are written as an animation, a plot as an image)")  # fmt: skip
        check_writable(args.out, "--out ")
    if not 8 <= args.size <= 2048:
        raise UsageError(f"--size {args.size}: expected a number of pixels in [8, 2048]")
    used = []

    def draw(ids: tuple[int, int]):
        """The episode drawn from its state (``collect/state_render.py``); bad input as a one-line UsageError."""
        from forge_gpu._src.collect.state_render import draw_from_state
        from forge_gpu._src.sim.output import init_warp

        init_warp()
        try:
            frames, camera = draw_from_state(
                args.run, ids, size=args.size, device=args.device, trust_code=args.trust_code
            )
        except (ValueError, LookupError) as e:
            raise UsageError(str(e)) from e
        used.append(camera)
        return frames

    try:
        path, drawn = render_episode(args.run, episode=episode, out=args.out, draw=None if args.plot else draw)
    except LookupError as e:
        raise UsageError(str(e)) from e
    except ValueError as e:
        print(f"forge-gpu: invalid run: {e}", file=sys.stderr)
        return 1
    if drawn == "drawn":
        c = used[0]
        where, at = ", ".join(f"{v:.3g}" for v in c.position), ", ".join(f"{v:.3g}" for v in c.look_at)
        print(f"{args.run}: no camera frames: drew the robot from the recorded state (a {c.size} px camera at "
              f"[{where}] looking at [{at}])")  # fmt: skip
    elif drawn != "frames":
        print(f"{args.run}: no frames to draw: {drawn}; plotted proprio, action and reward instead")
    print(f"wrote {path}")
    return 0
