"""The image codecs' trade-off on real rendered frames: bytes per frame, error, encode and decode rates.

python bench/codecs.py                  # reach and push at 128 x 128, 4 envs, 10 frames each of an expert rollout
python bench/codecs.py --size 64 --tasks reach
python bench/codecs.py --smoke          # seconds-long check that every figure is produced

For each task's rgb (uint8 [H, W, 3]) and depth (float32 [H, W]) and each codec that takes them (core/codecs.py):
  bytes_per_frame   mean payload size; ratio: raw bytes / that
  max_abs_error     largest |decoded - original| over every value (0: bit-exact); psnr_min_db the worst frame's PSNR
                    (rgb, peak 255)
  encode_fps / decode_fps  frames per second on one thread (one core), best of 3 passes
  encode_x2 / decode_x2    the same work over a pool of 2 threads, as a speedup over one thread: near 2 where the
                    library lets go of the GIL and a second core is free (a loaded machine shows less)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import time

import numpy as np
from common import machine, save, table

#: codec text -> the fields it is measured on
CANDIDATES = {
    "png": ("rgb",),
    "zstd": ("rgb", "depth"),
    "lz4": ("rgb", "depth"),
    "jpeg:75": ("rgb",),
    "jpeg:90": ("rgb",),
    "webp:75": ("rgb",),
    "webp:90": ("rgb",),
    "quantized:step_um=1": ("depth",),
    "quantized": ("depth",),
    "quantized:step_um=100": ("depth",),
    "quantized:step_um=1000": ("depth",),
}


def rendered(task: str, size: int, frames: int, envs: int) -> dict[str, np.ndarray]:
    """rgb and depth of ``frames`` expert steps of ``envs`` envs of ``task`` at ``size`` px."""
    import forge_gpu

    env = forge_gpu.sim.make(task, num_envs=envs, device="cpu", seed=3, **{"params.image_size": size})
    policy = forge_gpu.sim.make_policy("expert", env)
    env.reset()
    out: dict[str, list] = {"rgb": [], "depth": []}
    for _ in range(frames):
        for _ in range(3):  # frames a few steps apart
            env.step(policy(env.observation))
        for name in out:
            out[name].append(np.array(env.observation[name]))
    return {name: np.concatenate(parts) for name, parts in out.items()}


def best(fn, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(task: str, field: str, frames: np.ndarray, text: str) -> dict:
    from forge_gpu._src.core.codecs import CodecSpec, decode_frames, encode_frames

    spec = CodecSpec.parse(text)
    shape, dtype = frames.shape[1:], frames.dtype
    encoded = encode_frames(spec, frames)
    back = decode_frames(spec, encoded, shape, dtype)
    error = np.abs(back.astype(np.float64) - frames).reshape(len(frames), -1)
    row = {"task": task, "field": field, "codec": str(spec), "bytes_per_frame": encoded.nbytes / len(frames)}
    row["ratio"] = frames[0].nbytes / row["bytes_per_frame"]
    row["max_abs_error"] = float(error.max())
    if field == "rgb":
        mse = (error**2).mean(axis=1)
        row["psnr_min_db"] = float("inf") if not mse.max() else float(10 * np.log10(255.0**2 / mse.max()))
    encode = best(lambda: encode_frames(spec, frames))
    decode = best(lambda: decode_frames(spec, encoded, shape, dtype))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        row["encode_x2"] = encode / best(lambda: encode_frames(spec, frames, pool=pool))
        row["decode_x2"] = decode / best(lambda: decode_frames(spec, encoded, shape, dtype, pool=pool))
    row["encode_fps"], row["decode_fps"] = len(frames) / encode, len(frames) / decode
    return row


def main(argv=None) -> int:
    import warp as wp

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["reach", "push"])
    parser.add_argument("--size", type=int, default=128, help="image size (32, 64, 128, 256)")
    parser.add_argument("--frames", type=int, default=10, help="frames per env")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    if args.smoke:
        args.size, args.frames, args.envs, args.tasks = 32, 2, 1, args.tasks[:1]
    rows = []
    for task in args.tasks:
        frames = rendered(task, args.size, args.frames, args.envs)
        for text, fields in CANDIDATES.items():
            rows += [measure(task, field, frames[field], text) for field in fields]
    columns = ["task", "field", "codec", "bytes_per_frame", "ratio", "max_abs_error", "psnr_min_db"]
    columns += ["encode_fps", "decode_fps", "encode_x2", "decode_x2"]
    for row in rows:
        row.setdefault("psnr_min_db", "")
    md = f"## Image codecs ({args.size} px, {args.envs} envs x {args.frames} frames per task, CPU)\n\n" + table(
        rows, columns
    )
    save("codecs", {"machine": machine(gpu=False), "size": args.size, "rows": rows}, md, args.out)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
