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
from pathlib import Path

HERE = Path(__file__).resolve().parent
from common import MARKER, figure_directory, machine, raw_publish, save, table  # noqa: E402


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
                        seconds = raw_publish(folder, count, payload, MARKER, w, python_us=compute_us)
                        rates[w].append(count / seconds)
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
