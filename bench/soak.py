"""Soak: kill collections at random moments and throttle the writers; count what was lost or torn.

    python bench/soak.py                       # 50 kills, then 3 minutes of throttled writers
    python bench/soak.py --kills 10 --minutes 1
    python bench/soak.py --smoke               # seconds-long check that every figure is produced

Each part runs for each layout (--format packed, npz or both). Part 1 starts `forge-gpu collect` in a
subprocess, SIGKILLs it at a random moment (after its first published episode), then checks every
visible episode (a torn or invalid one counts), runs `forge-gpu repair` and checks the run again:
repair must keep every visible episode; on packed runs it also publishes the episodes of blocks written
whole after the last commit line (counted as recovered). Part 2 runs a collection in this process whose
writers are slowed (npz: a sleep before each episode; packed: a sleep per block of its bytes at
--packed-rate), so the recorder's budget fills and backpressure throttles stepping; a sampler thread
records the peak resident memory, which is compared with the budget plus the transport slots.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import machine, save, table


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def count_invalid(run: Path) -> tuple[set, int]:
    """(the visible episodes' ids, torn or invalid ones) of a run; schema 1: each episode checked on its
    own; packed: the run is checked whole (an invalid one counts its episodes as invalid)."""
    from forge_gpu._src.formats.npz.read import load_episode, marked_episodes
    from forge_gpu.formats import read_manifest
    from forge_gpu.reading import EpisodeReadOptions, open_run

    manifest = read_manifest(run)
    if manifest["schema_version"] == 2:
        try:
            opened = open_run(run)
            ids = {(e.env_id, e.episode_id) for e in opened.read(list(range(len(opened))), EpisodeReadOptions())}
            return ids, 0
        except ValueError:
            return set(), 1
    spec = manifest["env_spec"]
    try:
        marked = marked_episodes(str(run))
    except ValueError:
        return set(), 1
    bad = 0
    for path, marker in marked:
        try:
            load_episode(path, marker, spec, EpisodeReadOptions())
        except ValueError:
            bad += 1
    return {(m["env_id"], m["episode_id"]) for _, m in marked}, bad


#: Per layout, the recording options a kill trial draws from.
KILL_OPTIONS = {
    "npz": [["--format", "npz", "--compression", c, "--writers", "3"] for c in ("none", "deflate")],
    "packed": [["--format", "packed", "--compression", c] for c in ("none", "lz4", "zstd")],
}


def kill_trials(kills: int, seed: int, envs: int, format: str) -> dict:
    from forge_gpu.cli import main as cli

    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="forge-soak-"))
    visible = torn = repaired_bad = started = recovered = 0
    try:
        for trial in range(kills):
            out = root / f"run{trial:03d}"
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "forge_gpu",
                    "collect",
                    "cartpole",
                    "--envs",
                    str(envs),
                    "--episodes",
                    "100000000",
                    "--set",
                    "max_steps=10",
                    *rng.choice(KILL_OPTIONS[format]),
                    "--out",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not published(out):
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 2.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if not (out / "run.json").exists():
                continue
            started += 1
            seen, b = count_invalid(out)
            visible, torn = visible + len(seen), torn + b
            cli(["repair", str(out)])
            after, b2 = count_invalid(out)
            repaired_bad += b2 + (not seen <= after) + (format == "npz" and after != seen)
            recovered += len(after - seen)
            shutil.rmtree(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "format": format,
        "kills": kills,
        "runs_checked": started,
        "episodes_visible": visible,
        "torn_or_invalid": torn,
        "bad_after_repair": repaired_bad,
        "recovered_by_repair": recovered,
    }


def published(run: Path) -> bool:
    """Whether a reader sees at least one episode in the live run."""
    from forge_gpu.reading import open_run

    try:
        return len(open_run(run)) > 0
    except (ValueError, OSError):
        return False


def throttled_run(seconds: float, delay: float, rate: float, envs: int, budget: int, slots: int, format: str) -> dict:
    import warp as wp

    import forge_gpu
    import forge_gpu._src.formats.npz.write as recorder_module
    from forge_gpu._src.formats.packed.write import PackedWriter
    from forge_gpu.recording import collect

    wp.config.quiet = True
    env = forge_gpu.sim.make("cartpole", num_envs=envs, device="cpu", max_steps=50)
    policy = forge_gpu.sim.make_policy("random", env)
    env.reset()
    env.step(policy(env.observation))  # compile before measuring the baseline
    owner, name = (recorder_module, "write_episode_file") if format == "npz" else (PackedWriter, "write")
    real = getattr(owner, name)

    def slow_write(*args, **kwargs):
        time.sleep(delay)
        return real(*args, **kwargs)

    def slow_block(writer, columns, episodes):
        time.sleep(sum(a.nbytes for a in columns.values()) / rate)
        return real(writer, columns, episodes)

    setattr(owner, name, slow_write if format == "npz" else slow_block)
    baseline = rss_bytes()
    peak = [baseline]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], rss_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    out = Path(tempfile.mkdtemp(prefix="forge-soak-")) / "run"
    try:
        summary = collect(
            env,
            policy,
            str(out),
            episodes=10**9,
            stop=stop,
            slots=slots,
            options=forge_gpu.recording.RecordingOptions(format=format, max_buffer_bytes=budget),
        )
        done.set()  # the peak is the collection's: reading the run back below maps its files
        sampler.join()
        count = len(list(forge_gpu.reading.read_episodes(out)))
    finally:
        done.set()
        setattr(owner, name, real)
        shutil.rmtree(out.parent, ignore_errors=True)
    transport_bytes = slots * summary_bytes_per_step(env)
    allowed = budget + transport_bytes
    return {
        "format": format,
        "seconds": summary.seconds,
        "writer_delay_s": delay if format == "npz" else None,
        "writer_rate_mb_s": rate / 1e6 if format == "packed" else None,
        "num_envs": envs,
        "budget_bytes": budget,
        "transport_bytes": transport_bytes,
        "baseline_rss_bytes": baseline,
        "peak_rss_bytes": peak[0],
        "peak_over_baseline_bytes": peak[0] - baseline,
        "excess_over_budget_mb": (peak[0] - baseline - allowed) / 1e6,
        "episodes_ended": summary.episodes_ended,
        "episodes_published": count,
        "episodes_lost": summary.episodes_ended - count,
        "stall_percent": 100.0 * summary.stall_fraction,
        "env_steps_per_s": summary.env_steps_per_second,
    }


def summary_bytes_per_step(env) -> int:
    return int(sum(a.capacity for a in env.result.arrays().values()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--minutes", type=float, default=3.0, help="length of the throttled-writer run")
    parser.add_argument("--delay", type=float, default=0.05, help="npz writer sleep per episode [s]")
    parser.add_argument("--packed-rate", type=float, default=1e6, help="packed writer throttle [bytes/s]")
    parser.add_argument("--format", choices=["packed", "npz", "both"], default="both")
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--budget", type=int, default=64 << 20, help="recorder max_buffer_bytes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.kills, args.minutes, args.envs = 1, 0.05, 8
    formats = ["packed", "npz"] if args.format == "both" else [args.format]
    kills = [kill_trials(args.kills, args.seed, 8, f) for f in formats]
    slow = [
        throttled_run(args.minutes * 60, args.delay, args.packed_rate, args.envs, args.budget, 4, f) for f in formats
    ]
    md = "## Kills\n\n" + table(kills, list(kills[0])) + "\n\n## Throttled writers\n\n"
    md += table(
        slow,
        [
            "format",
            "seconds",
            "writer_delay_s",
            "writer_rate_mb_s",
            "num_envs",
            "budget_bytes",
            "peak_over_baseline_bytes",
            "excess_over_budget_mb",
            "episodes_ended",
            "episodes_published",
            "episodes_lost",
            "stall_percent",
        ],
    )
    path = save("soak", {"machine": machine(), "kills": kills, "throttled": slow}, md, args.out)
    print(md)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
