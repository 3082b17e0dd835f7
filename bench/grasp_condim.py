"""The finger pads' contact dimension (MJCF ``condim``) against lift's stepping rate: lift with its expert at 16 envs
(CPU), the shipped Panda (condim 3 on the pads: normal and two sliding frictions) against copies whose pads have
condim 4 (and torsional friction) and 6 (and rolling friction). A contact takes the larger condim of its two shapes,
so the pads' condim is that of every pad-object contact. All variants are built side by side and stepped in
alternation (a step of each in turn, the same expert actions' kind from each one's own state), so that a shared
machine's load falls on all alike; each rate is from its median step time. ratio = variant / condim 3.

python bench/grasp_condim.py              # 16 envs, 60 s in all (CPU)
python bench/grasp_condim.py --smoke      # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
from common import machine, save, step_in_alternation, table  # noqa: E402

CONFIGS = ROOT.parent / "configs"
CONDIMS = (3, 4, 6)


def variant(condim: int, folder: Path) -> Path:
    """lift's task file (its id ``lift_condimN``) beside a copy of the Panda's robot file whose pads have
    ``condim`` (the task file finds ``robots/panda.toml`` in its own folder first)."""
    (folder / "robots" / "panda").mkdir(parents=True)
    task = (CONFIGS / "lift.toml").read_text().replace('task = "lift"', f'task = "lift_condim{condim}"', 1)
    (folder / "lift.toml").write_text(task)
    shutil.copy(CONFIGS / "robots" / "panda.toml", folder / "robots" / "panda.toml")
    xml = (CONFIGS / "robots" / "panda" / "panda.xml").read_text()
    xml, count = re.subn(r'(<geom name="(?:left|right)_pad" class="finger")', rf'\1 condim="{condim}"', xml)
    if count != 2:
        raise RuntimeError("panda.xml: the two pad geoms were not found")
    (folder / "robots" / "panda" / "panda.xml").write_text(xml)
    return folder / "lift.toml"


def interleaved(paths: dict, num_envs: int, device: str, seconds: float) -> dict:
    """The variants built side by side and stepped in alternation with the expert for at least ``seconds`` in all
    (after 3 warm-up steps each); the median step time of each, and each one's pad condim as the solver has it."""
    import forge_gpu

    envs = {k: forge_gpu.sim.make(str(p), num_envs=num_envs, device=device, seed=0, **{"params.render": False})
            for k, p in paths.items()}  # fmt: skip
    # The largest condim of the solver's geoms: the pads' (every other geom has 3).
    solved = {key: int(env.world.solver.mjw_model.geom_condim.numpy().max()) for key, env in envs.items()}
    policies = {k: forge_gpu.sim.make_policy("expert", env) for k, env in envs.items()}
    for env in envs.values():
        env.reset()
    return step_in_alternation(envs, policies, seconds) | {"solver_condim": solved}


def main(argv=None) -> int:
    import warp as wp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=60.0, help="stepping time, all variants together")
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    if args.smoke:
        args.seconds, args.envs = 0.2, 2
    with tempfile.TemporaryDirectory(prefix="forge-bench-condim-") as parent:
        paths = {c: variant(c, Path(parent) / f"condim{c}") for c in CONDIMS}
        figures = interleaved(paths, args.envs, args.device, args.seconds)
    base = args.envs / figures["median"][CONDIMS[0]]
    rows = []
    for c in CONDIMS:
        rate = args.envs / figures["median"][c]
        rows.append({"pad_condim": c, "solver_condim": figures["solver_condim"][c], "num_envs": args.envs,
                     "steps": figures["steps"], "env_steps_per_s": rate, "ratio": rate / base})  # fmt: skip
        print(rows[-1], flush=True)
    md = "## lift's expert: the pads' condim against env-steps/s (stepped in alternation)\n\n" + table(
        rows, ["pad_condim", "solver_condim", "num_envs", "steps", "env_steps_per_s", "ratio"]
    )
    path = save("grasp_condim", {"machine": machine(), "device": args.device, "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
