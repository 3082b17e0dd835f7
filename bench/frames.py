"""Camera frames: bytes, error, encode and decode rates of every image codec, LeRobot's video beside them,
pipeline efficiency with compression, and shuffled training windows with images against LeRobot's loading.

python bench/frames.py              # reach 128x128 RGB-D, 16 envs, 32 episodes of at most 60 steps (the issue's run)
python bench/frames.py --smoke      # 32x32, seconds: checks that every figure is produced
python bench/frames.py --lerobot-python /work/venvs/lerobot/bin/python   # where LeRobot is installed (default)

One run is recorded (packed, raw, expert policy) and every figure is taken on its published episodes:

  codecs      per field (rgb uint8 [S, S, 3], depth float32 [S, S] [m]) and codec (core/codecs.py's, at their default
              parameters, and jpeg at 75): bytes per published frame (each frame's payload: what a packed run of that
              codec stores per row, before Arrow's few bytes per row), raw / bytes, the error of the decoded frames
              (max abs; PSNR [dB] for rgb: min and mean over frames, inf where exact), encode and decode frames/s on
              one core (one thread, every frame). ``default`` marks the codec a new run gives the field.
  disk        bytes on disk per published frame: the run collected raw and the same episodes collected at the
              default options (a new user's run: the default codecs; both hold the rows of episodes never
              published), and convert_run of the raw run to the encoded runs of RUNS (published episodes only).
  lerobot     forge_gpu's LeRobot v3.0 export of the same episodes (data/export/lerobot.py: h264 CRF 23 and AV1 CRF
              35, GOP 2): the videos' bytes per LeRobot frame (one per transition; depth left out), the error of
              the frames decoded with PyAV.
  pipeline    collect's env-steps/s recording raw and recording at the default options (the default codecs,
              encoded by the recorder's writer pool), each / stepping with the transport and no recorder, same
              steps (target >= 0.9 with compression). Random policy, one env for every row.
  windows     shuffled training windows with images (history 2 frames of rgb and depth, horizon 4 actions), batch
              256, windows/s over several batches after one warm-up: forge_gpu's Windows over the raw run and over
              each encoded run (each distinct frame of a batch decoded once, over the reader's thread pool);
              LeRobot's own LeRobotDataset with delta_timestamps over its h264 and AV1 video (bench/lerobot_load.py,
              run by the LeRobot interpreter; rgb only, as forge_gpu's export leaves depth out). forge_gpu's rows:
              rgb-d loaded (decoded once at open: open_s), rgb-d mapped and rgb mapped (decoded per batch). The
              line above the tables: mapped rgb-d at the default codecs, LeRobot's fastest, and their ratio.
  targets     collected raw / collected default bytes per published frame (target >= 10); each lossy rgb codec's
              bytes per frame / h264's (target <= 5); windows/s / LeRobot's fastest (target >= 20): each encoded
              run mapped with rgb-d (what training over a larger-than-memory dataset reads: every frame decoded per
              batch), mapped with rgb only (what LeRobot loads), and loaded with rgb-d.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
from common import lerobot_video_frames, machine, psnr, save, table, tree_bytes  # noqa: E402

import forge_gpu  # noqa: E402
from forge_gpu._src.core.codec_specs import default_codec  # noqa: E402
from forge_gpu._src.core.codecs import CODECS, CodecSpec, decode_frames, encode_frames  # noqa: E402

FULL = {"num_envs": 16, "episodes": 32, "max_steps": 60, "image_size": 128, "batches": 4, "pipeline_steps": 120}
SMOKE = {"num_envs": 4, "episodes": 6, "max_steps": 10, "image_size": 32, "batches": 2, "pipeline_steps": 12}
BATCH, HISTORY, HORIZON = 256, 2, 4
RAW = {"*": "none"}
"""RecordingOptions.codecs of a raw run (every image field stored as is)."""
RUNS = {
    "default codecs": {},
    "rgb jpeg:90, depth default": {"rgb": "jpeg:90"},
    "lossless: rgb png, depth zstd": {"rgb": "png", "depth": "zstd"},
}
"""The encoded runs the windows and the bytes on disk are measured on: convert_run of the raw run with these codecs
over the defaults a new run gets (``default_codec`` of each field)."""
LEROBOT_PYTHON = "/work/venvs/lerobot/bin/python"


def field_codecs(shape: tuple, dtype: np.dtype) -> list[CodecSpec]:
    """Every codec that takes the field, at its default parameters, and jpeg at 75 too."""
    specs = []
    for name in CODECS:
        spec = CodecSpec(name)
        try:
            spec.check(shape, dtype, field="bench")
        except ValueError:
            continue
        if not spec.raw:
            specs.append(spec)
        if name == "jpeg":
            specs.append(CodecSpec("jpeg", (("quality", 75),)))
    return specs


def mean_psnr(quality: np.ndarray) -> float:
    """The mean PSNR of the frames that are not exact (inf when every one is)."""
    finite = quality[np.isfinite(quality)]
    return float(finite.mean()) if finite.size else float("inf")


def codec_rows(frames: dict[str, np.ndarray]) -> list[dict]:
    """The codecs table."""
    rows = []
    for name, values in frames.items():
        raw = values[0].nbytes
        default = default_codec(values.shape[1:], values.dtype)
        for spec in field_codecs(values.shape[1:], values.dtype):
            start = time.perf_counter()
            encoded = encode_frames(spec, values)
            encode_s = time.perf_counter() - start
            start = time.perf_counter()
            decoded = decode_frames(spec, encoded, values.shape[1:], values.dtype)
            decode_s = time.perf_counter() - start
            error = np.abs(decoded.astype(np.float64) - values.astype(np.float64))
            row = {
                "field": name,
                "codec": str(spec) + (" (default)" if spec == default else ""),
                "bytes_per_frame": encoded.nbytes / len(values),
                "vs_raw": raw * len(values) / encoded.nbytes,
                "max_abs": float(error.max()),
                "encode_fps_1core": len(values) / encode_s,
                "decode_fps_1core": len(values) / decode_s,
            }
            if values.dtype == np.uint8:
                quality = psnr(decoded, values)
                row["psnr_min"], row["psnr_mean"] = float(quality.min()), mean_psnr(quality)
            rows.append(row)
            print(table([row], list(row)), flush=True)
    return rows


def lerobot_rows(run: str, parent: str, episodes: list) -> tuple[list[dict], dict]:
    rows, roots = [], {}
    steps = [e.steps for e in episodes]
    reference = np.concatenate([e.obs["rgb"] for e in episodes])
    for codec in ("h264", "av1"):
        root = os.path.join(parent, f"lerobot-{codec}")
        report = forge_gpu.export.export_lerobot(run, root, codec=codec)
        videos = tree_bytes(os.path.join(root, "videos"))
        decoded = np.concatenate(lerobot_video_frames(root, steps))
        quality = psnr(decoded, reference)
        rows.append(
            {
                "export": f"lerobot {codec}",
                "frames": report["frames"],
                "video_bytes_per_frame": videos / report["frames"],
                "dataset_bytes": tree_bytes(root),
                "max_abs": float(np.abs(decoded.astype(np.int16) - reference).max()),
                "psnr_min": float(quality.min()),
                "psnr_mean": mean_psnr(quality),
                "export_fps": report["frames_per_s"],
            }
        )
        roots[codec] = root
        print(table([rows[-1]], list(rows[-1])), flush=True)
    return rows, roots


def pipeline_rows(sizes: dict, parent: str) -> list[dict]:
    """collect recording raw, and with the default codecs where the recorder takes them, against stepping."""
    import dataclasses

    env = make_env(sizes)
    policy = forge_gpu.sim.make_policy("random", env)
    steps = sizes["pipeline_steps"]
    forge_gpu.recording.collect(env, policy, None, steps=3)
    bare = forge_gpu.recording.collect(env, policy, None, steps=steps).env_steps_per_second
    has_codecs = "codecs" in {f.name for f in dataclasses.fields(forge_gpu.recording.RecordingOptions)}
    modes = {"raw": {"codecs": RAW} if has_codecs else {}, "default codecs": {"codecs": {}}}
    rows = []
    for mode, extra in modes.items():
        if mode != "raw" and not has_codecs:
            rows.append({"recording": mode, "efficiency": "not measured: RecordingOptions takes no codecs here"})
            continue
        options = forge_gpu.recording.RecordingOptions(**extra)
        out = os.path.join(parent, f"pipeline-{mode.replace(' ', '-')}")
        recorded = forge_gpu.recording.collect(env, policy, out, steps=steps, options=options)
        rows.append(
            {
                "recording": mode,
                "env_steps_per_s": recorded.env_steps_per_second,
                "stepping_env_steps_per_s": bare,
                "efficiency": recorded.env_steps_per_second / bare,
                "stall_pct": 100 * recorded.stall_fraction,
                "mb_on_disk": tree_bytes(out) / 1e6,
            }
        )
        shutil.rmtree(out)
        print(table([rows[-1]], list(rows[-1])), flush=True)
    return rows


def forge_windows(runs: dict[str, str], batches: int) -> list[dict]:
    """Windows/s of forge_gpu's Windows over each run: loaded (its frames decoded once, as the table is made: the
    open time) and mapped (``mmap=True``: each batch's frames read and decoded as it is gathered)."""
    rows = []
    views = [(False, ["proprio", "rgb", "depth"]), (True, ["proprio", "rgb", "depth"]), (True, ["proprio", "rgb"])]
    for label, run in runs.items():
        for mmap, keys in views:
            start = time.perf_counter()
            windows = forge_gpu.reading.Windows(run, history=HISTORY, horizon=HORIZON, observation_keys=keys, mmap=mmap)
            opened = time.perf_counter() - start
            rng = np.random.default_rng(0)
            windows.batch(rng.integers(0, len(windows), BATCH))
            start = time.perf_counter()
            for _ in range(batches):
                batch = windows.batch(rng.integers(0, len(windows), BATCH))
            seconds = time.perf_counter() - start
            assert batch["obs/rgb"].shape[:2] == (BATCH, HISTORY)
            how = "mapped, decoded per batch" if mmap else "loaded, decoded at open"
            what = "rgb" if "depth" not in keys else "rgb-d"
            rows.append(
                {
                    "loader": f"forge_gpu Windows {what} ({how}), {label}",
                    "windows_per_s": batches * BATCH / seconds,
                    "open_s": opened,
                }
            )
            print(table([rows[-1]], list(rows[-1])), flush=True)
    return rows


def lerobot_windows(roots: dict, python: str, batches: int) -> list[dict]:
    rows = []
    for codec, root in roots.items():
        args = [python, str(HERE / "lerobot_load.py"), root, "--history", str(HISTORY), "--horizon", str(HORIZON)]
        args += ["--batch", str(BATCH), "--batches", str(max(1, batches // 2))]
        done = subprocess.run(args, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
            rows.append({"loader": f"LeRobotDataset, {codec}", "windows_per_s": f"failed: {tail[0]}"})
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        label = f"LeRobotDataset {result['lerobot']} delta_timestamps, {codec} ({result['video_backend']})"
        rows.append({"loader": label, "windows_per_s": result["windows_per_s"]})
        print(table([rows[-1]], list(rows[-1])), flush=True)
    return rows


def make_env(sizes: dict):
    return forge_gpu.sim.make(
        "reach",
        num_envs=sizes["num_envs"],
        device="cpu",
        seed=0,
        max_steps=sizes["max_steps"],
        **{"params.image_size": sizes["image_size"]},
    )


def disk_rows(raw: str, collected: str, runs: dict[str, str], published: int) -> list[dict]:
    """Bytes on disk per published frame: the collected runs (raw and at the default options: what a new user's
    run takes, with the rows of episodes never published) and the runs convert_run wrote (published episodes only)."""
    rows = [
        {"run": "collected, raw", "bytes_per_frame": tree_bytes(raw) / published},
        {"run": "collected, default codecs", "bytes_per_frame": tree_bytes(collected) / published},
    ]
    rows += [
        {"run": f"converted, {label}", "bytes_per_frame": tree_bytes(path) / published}
        for label, path in runs.items()
        if path != raw
    ]
    for row in rows:
        row["vs_collected_raw"] = rows[0]["bytes_per_frame"] / row["bytes_per_frame"]
    print(table(rows, list(rows[0])), flush=True)
    return rows


def targets(codecs: list[dict], disk: list[dict], lerobot: list[dict], windows: list[dict]) -> list[dict]:
    on_disk = {r["run"]: r["bytes_per_frame"] for r in disk}
    h264 = next(r for r in lerobot if r["export"] == "lerobot h264")["video_bytes_per_frame"]
    rows = [
        {
            "target": "bytes per published frame on disk, collected raw / collected at the default options",
            "value": on_disk["collected, raw"] / on_disk["collected, default codecs"],
            "goal": ">= 10",
        }
    ]
    for row in codecs:
        if row["field"] == "rgb" and not CODECS[row["codec"].split(":")[0]].lossless:
            target = f"{row['codec']} rgb bytes per frame / LeRobot h264's"
            rows.append({"target": target, "value": row["bytes_per_frame"] / h264, "goal": "<= 5"})
    rates = {r["loader"]: r["windows_per_s"] for r in windows if isinstance(r["windows_per_s"], float)}
    theirs = {k: v for k, v in rates.items() if k.startswith("LeRobotDataset")}
    encoded = {k: v for k, v in rates.items() if "mapped" in k and not k.endswith(", raw")}
    ours = {k: v for k, v in encoded.items() if k.startswith("forge_gpu Windows rgb-d (")}  # what training reads
    ours |= {k: v for k, v in encoded.items() if k.startswith("forge_gpu Windows rgb (")}  # what LeRobot loads
    ours |= {k: v for k, v in rates.items() if "loaded" in k and k.startswith("forge_gpu Windows rgb-d")}
    for label, rate in ours.items():
        what = label.removeprefix("forge_gpu Windows ")
        if not theirs:
            rows.append(
                {"target": f"windows/s, {what} / LeRobot's", "value": "not measured: no LeRobot", "goal": ">= 20"}
            )
            break
        fastest = max(theirs, key=theirs.get)
        rows.append(
            {
                "target": f"windows/s, {what} / LeRobot's fastest ({fastest.split(', ')[-1]})",
                "value": rate / theirs[fastest],
                "goal": ">= 20",
            }
        )
    return rows


def summary(windows: list[dict]) -> str:
    """One line: mapped rgb-d windows/s at the default codecs, LeRobot's fastest loading in the same run, the ratio."""
    rates = {r["loader"]: r["windows_per_s"] for r in windows if isinstance(r["windows_per_s"], float)}
    ours = rates.get("forge_gpu Windows rgb-d (mapped, decoded per batch), default codecs")
    theirs = {k: v for k, v in rates.items() if k.startswith("LeRobotDataset")}
    if ours is None or not theirs:
        return "mapped rgb-d at the default codecs against LeRobot: not measured"
    fastest = max(theirs, key=theirs.get)
    return (
        f"mapped rgb-d windows/s at the default codecs: {ours:,.0f}; {fastest}: {theirs[fastest]:,.1f}; "
        f"ratio {ours / theirs[fastest]:.1f} (target >= 20)"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that every figure is produced")
    parser.add_argument("--lerobot-python", default=LEROBOT_PYTHON, help="an interpreter with LeRobot installed")
    parser.add_argument("--record-dir", default=str(HERE / "results" / "tmp"), help="where runs are written")
    parser.add_argument("--out", default=None, help="output folder (default bench/results)")
    args = parser.parse_args(argv)
    import warp as wp

    wp.config.quiet = True
    sizes = SMOKE if args.smoke else FULL
    os.makedirs(args.record_dir, exist_ok=True)
    parent = tempfile.mkdtemp(prefix="frames-", dir=args.record_dir)
    began = time.perf_counter()
    try:
        run = os.path.join(parent, "run")
        env = make_env(sizes)
        options = forge_gpu.recording.RecordingOptions(codecs=RAW)
        forge_gpu.recording.collect(
            env, forge_gpu.sim.make_policy("expert", env), run, episodes=sizes["episodes"], options=options
        )
        collected = os.path.join(parent, "collected-default")  # the same episodes, as a new user's run records them
        env = make_env(sizes)
        forge_gpu.recording.collect(
            env, forge_gpu.sim.make_policy("expert", env), collected, episodes=sizes["episodes"]
        )
        episodes = list(forge_gpu.reading.read_episodes(run))
        frames = {
            name: np.concatenate([part for e in episodes for part in (e.obs[name], e.next[name][-1:])])
            for name in ("rgb", "depth")
        }
        published = len(frames["rgb"])
        run_bytes = tree_bytes(run)
        print(f"{len(episodes)} episodes, {published:,} published frames, run {run_bytes:,} bytes", flush=True)
        codecs = codec_rows(frames)
        runs = {"raw": run}
        for label, asked in RUNS.items():
            runs[label] = os.path.join(parent, label.replace(" ", "_").replace(":", "").replace(",", ""))
            defaults = {name: str(default_codec(v.shape[1:], v.dtype)) for name, v in frames.items()}
            forge_gpu.curation.convert_run(run, runs[label], to="packed", codecs={**defaults, **asked})
        disk = disk_rows(run, collected, runs, published)
        lerobot, roots = lerobot_rows(run, parent, episodes)
        pipeline = pipeline_rows(sizes, parent)
        lerobot_ok = os.path.exists(args.lerobot_python)
        windows = forge_windows(runs, sizes["batches"])
        if lerobot_ok:
            windows += lerobot_windows(roots, args.lerobot_python, sizes["batches"])
        else:
            windows.append({"loader": "LeRobotDataset", "windows_per_s": f"not measured: no {args.lerobot_python}"})
        goals = targets(codecs, disk, lerobot, windows)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    heading = (
        f"reach {sizes['image_size']}x{sizes['image_size']} RGB-D, {len(episodes)} episodes, {published:,} published "
        f"frames (raw run {run_bytes / published:,.0f} bytes per frame on disk); load {os.getloadavg()[0]:.2f}; "
        f"{time.perf_counter() - began:.0f} s"
    )
    sections = [codecs, disk, lerobot, pipeline, windows, goals]
    heading += "\n\n" + summary(windows)
    markdown = heading + "\n\n" + "\n\n".join(table(rows, list({k: 0 for r in rows for k in r})) for rows in sections)
    payload = {
        "machine": machine(),
        "smoke": args.smoke,
        "sizes": sizes,
        "published_frames": published,
        "codecs": codecs,
        "disk": disk,
        "lerobot": lerobot,
        "pipeline": pipeline,
        "windows": windows,
        "targets": goals,
    }
    save("frames", payload, markdown, Path(args.out) if args.out else None)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
