"""What domain randomization costs per step: stepping with every physics parameter a task offers randomized
(and, for reach, the visual ones) against the same env without, in one run.

python bench/randomize.py            # cartpole and ant at 256 and 1024 envs, reach at 64, on the CPU
python bench/randomize.py --smoke    # seconds-long check that every figure is produced

Rows, per task and env count (bench/common.py's measure_stepping: median step of a random policy):
  none      no [randomize] table: no draw, no write, no solver notification
  physics   every physics parameter of the task: one draw and one write launch per parameter at each step
            (for the worlds that reset) and SolverMuJoCo.notify_model_changed once per step, in the graph
  visual    reach only: colours and camera pose (no notification)
  vs_none   env_steps_per_s / the none row's
"""

from __future__ import annotations

import argparse
import sys

from common import machine, measure_stepping, save, table

PHYSICS = {
    "cartpole": {"mass_scale": [0.5, 2.0], "actuator_gain_scale": [0.8, 1.2]},
    "ant": {"mass_scale": [0.8, 1.2], "friction": [0.5, 1.5], "joint_armature_scale": [0.5, 1.5]}
    | {"actuator_gain_scale": [0.8, 1.2]},
    "reach": {"mass_scale": [0.8, 1.2], "joint_stiffness_scale": [0.5, 2.0], "joint_damping_scale": [0.5, 2.0]}
    | {"joint_armature_scale": [0.5, 1.5]},
}
VISUAL = {
    "reach": {
        "target_color": {"low": [0.5, 0.0, 0.0], "high": [1.0, 0.4, 0.4]},
        "table_color": {"low": [0.5, 0.5, 0.5], "high": [0.9, 0.9, 0.9]},
        "camera_position_offset": {"low": [-0.05] * 3, "high": [0.05] * 3},
        "camera_look_at_offset": {"low": [-0.05] * 3, "high": [0.05] * 3},
    }
}


def main(argv=None) -> int:
    import forge_gpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    device = forge_gpu.sim.default_device()
    sizes = {"cartpole": [256, 1024], "ant": [256, 1024], "reach": [64]}
    if args.smoke:
        sizes, args.seconds = {"cartpole": [4], "reach": [4]}, 0.2
    rows = []
    for task, envs in sizes.items():
        # Short episodes, so that worlds reset (and draw) every few dozen steps, as at scale.
        base = {"max_steps": 50} | ({"params.image_size": 32} if args.smoke and task == "reach" else {})
        variants = {"none": {}, "physics": PHYSICS[task]} | ({"visual": VISUAL[task]} if task in VISUAL else {})
        for n in envs:
            first = None
            for name, ranges in variants.items():
                overrides = base | {f"randomize.{k}": v for k, v in ranges.items()}
                row = measure_stepping(task, n, device, args.seconds, "random", overrides) | {"randomize": name}
                first = first or row
                row["vs_none"] = row["env_steps_per_s"] / first["env_steps_per_s"]
                rows.append(row)
    columns = ["task", "num_envs", "randomize", "median_step_ms", "env_steps_per_s", "vs_none"]
    md = "## Domain randomization per step\n\n" + table(rows, columns)
    path = save("randomize", {"machine": machine(), "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
