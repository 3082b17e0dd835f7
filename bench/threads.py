"""Why more writer threads stop helping: the raw publication loop of bench/recorder.py with C microseconds of
Python work added per episode (a busy loop holding the GIL, as laying out a zip does), on W threads.

python bench/threads.py                         # files under the system temporary directory
python bench/threads.py --record-dir /dev/shm   # tmpfs: file operations of ~10 us, the GIL's worst case
python bench/threads.py --smoke

Each cell is episodes published per second (two files, each written to a temporary name and renamed);
the W rows of one C are run in turn, 3 times, and the median is printed. If Python work were free to
overlap file operations, W = 2 would publish about twice what W = 1 does at every C.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine, save, table  # noqa: E402
from recorder import MARKER, figure_directory, new_directory, on_threads, write_file  # noqa: E402


def busy(microseconds: float) -> None:
    """Hold the GIL for ``microseconds`` of Python work."""
    end = time.perf_counter() + microseconds * 1e-6
    while time.perf_counter() < end:
        pass


def publications_per_second(parent: str, count: int, payload: bytes, compute_us: float, threads: int) -> float:
    directory = new_directory(parent, "threads")
    os.mkdir(directory)

    def publish(k: int) -> None:
        busy(compute_us)
        base = os.path.join(directory, f"episode{k:08d}")
        write_file(base + ".npz.tmp", payload)
        os.replace(base + ".npz.tmp", base + ".npz")
        write_file(base + ".json.tmp", MARKER)
        os.replace(base + ".json.tmp", base + ".json")

    os.sync()
    return count / on_threads(threads, count, publish)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record-dir", default=None, help="parent of the temporary directories")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    count, reps = (50, 1) if args.smoke else (3000, 3)
    payload = os.urandom(4447)  # bench/recorder.py's short-episode file size
    rows = []
    with tempfile.TemporaryDirectory(prefix="forge-bench-threads-", dir=args.record_dir) as parent:
        for compute_us in (0, 5, 10, 15):
            with figure_directory(parent) as folder:
                rates = {w: [] for w in (1, 2, 4)}
                for _ in range(reps):
                    for w in rates:
                        rates[w].append(publications_per_second(folder, count, payload, compute_us, w))
            row = {"python_us_per_episode": compute_us}
            row |= {f"w{w}_episodes_per_s": statistics.median(r) for w, r in rates.items()}
            row["w2_over_w1"] = row["w2_episodes_per_s"] / row["w1_episodes_per_s"]
            rows.append(row)
    where = args.record_dir or tempfile.gettempdir()
    md = f"## Publication loop with Python work per episode (files under {where})\n\n" + table(rows, list(rows[0]))
    path = save("threads", {"machine": machine(), "record_dir": where, "count": count, "rows": rows}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
