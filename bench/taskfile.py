"""Task files against hand-written tasks: env-steps/s of the file-based ant (configs/ant.toml, one generated
observe kernel) and the hand-written ant it replaced (tests/reference_ant.py), same config, same envs, one run,
measured in alternating rounds; and of the new robots (quadruped, humanoid) at 64 and 1024 envs.

python bench/taskfile.py              # ant vs hand-written at 64 and 256 envs; robots at 64 and 1024 (CPU)
python bench/taskfile.py --smoke      # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))  # tests/reference_ant.py, the hand-written ant it compares with
from common import machine, measure_stepping, save, table  # noqa: E402


def register_reference(folder: Path) -> None:
    """The hand-written ant under the id ``ant_handwritten`` with its original config."""
    import forge_gpu
    from tests import reference_ant

    if "ant_handwritten" not in forge_gpu.TASKS:
        (folder / "ant_handwritten.toml").write_text(reference_ant.CONFIG)
        forge_gpu.register_task(reference_ant.AntTask, config=folder / "ant_handwritten.toml")


def main(argv=None) -> int:
    import warp as wp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the ant comparison")
    parser.add_argument("--ant-envs", nargs="+", type=int, default=[64, 256])
    parser.add_argument("--robot-envs", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    if args.smoke:
        args.seconds, args.rounds, args.ant_envs, args.robot_envs = 0.2, 1, [4], [4]
    register_reference(Path(tempfile.mkdtemp(prefix="forge-gpu-bench-")))
    rows, ratios = [], []
    for n in args.ant_envs:
        rates = {"ant_handwritten": [], "ant": []}
        for _ in range(args.rounds):  # alternate, so that a change of load weighs on both alike
            for task in rates:
                row = measure_stepping(task, n, args.device, args.seconds, "random")
                rates[task].append(row["env_steps_per_s"])
        for task, values in rates.items():
            rows.append({"task": task, "num_envs": n, "env_steps_per_s": float(np.median(values))})
        ratios.append(
            {
                "num_envs": n,
                "file_over_handwritten": float(np.median(rates["ant"]) / np.median(rates["ant_handwritten"])),
            }
        )
    for task in ("quadruped", "humanoid"):
        for n in args.robot_envs:
            rows.append({k: v for k, v in measure_stepping(task, n, args.device, args.seconds, "random").items()
                         if k in ("task", "num_envs", "env_steps_per_s")})  # fmt: skip
    md = (
        "## Task files: env-steps/s (random policy)\n\n"
        + table(rows, ["task", "num_envs", "env_steps_per_s"])
        + "\n\n## File-based ant / hand-written ant (median of alternating rounds)\n\n"
        + table(ratios, ["num_envs", "file_over_handwritten"])
    )
    path = save("taskfile", {"machine": machine(), "rows": rows, "ratios": ratios}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
