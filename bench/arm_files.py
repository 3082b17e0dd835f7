"""The arm tasks as task files against the code tasks they replaced: env-steps/s of the file-based ``reach`` and
``push`` and of the frozen code tasks (tests/helpers/reference_reach.py and reference_push.py, the equivalence tests'
references, loaded by path: the one figure that needs them) at 64 and 1024 envs, random policy, rendering off and
on (32 px), interleaved in one run; the ratio file / code per row (target >= 0.9).

python bench/arm_files.py            # 64 and 1024 envs (CPU)
python bench/arm_files.py --smoke    # seconds-long check that every figure is produced
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
from common import machine, measure_stepping, save, table  # noqa: E402


def register_reference(task: str) -> str:
    """Register the frozen code task ``task`` (``TASK_handwritten``) and return its id. Its config goes into a folder
    that lives as long as the process (the registration does, and its config is read at each ``make``)."""
    tests = ROOT.parent / "tests"
    if str(tests) not in sys.path:  # the references import their shared part as ``helpers.reference_arm``
        sys.path.insert(0, str(tests))
    helpers = tests / "helpers" / f"reference_{task}.py"
    spec = importlib.util.spec_from_file_location(f"reference_{task}", helpers)
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"reference_{task}"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    folder = tempfile.mkdtemp(prefix="arm_files_")
    atexit.register(shutil.rmtree, folder, True)
    getattr(module, f"register_handwritten_{task}")(folder)
    return f"{task}_handwritten"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes, seconds, rounds = ([4], 0.2, 1) if args.smoke else ([64, 1024], args.seconds, 3)
    rows = []
    for task, render in [(t, r) for t in ("reach", "push") for r in (False, True)]:
        reference = register_reference(task)
        overrides = {"max_steps": 50, "params.render": render} | ({"params.image_size": 32} if render else {})
        for n in sizes:
            if render and n > 64 and not args.smoke:
                continue  # 1024 renders per step on two CPU cores: minutes per figure
            best = {}
            for _ in range(rounds):  # interleaved: the machine's load falls on both alike
                for name in (reference, task):
                    rate = measure_stepping(name, n, "cpu", seconds, "random", overrides)["env_steps_per_s"]
                    best[name] = max(best.get(name, 0.0), rate)
            rows.append({"task": task, "num_envs": n, "render": render, "code_steps_per_s": best[reference],
                         "file_steps_per_s": best[task], "ratio": best[task] / best[reference]})  # fmt: skip
    columns = ["task", "num_envs", "render", "code_steps_per_s", "file_steps_per_s", "ratio"]
    text = "reach, push: the task files against the frozen code tasks (env-steps/s, best of rounds, CPU)\n\n"
    text += table(rows, columns)
    print(text)
    path = save("arm_files", {"rows": rows, "machine": machine(gpu=False), "smoke": args.smoke}, text, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
