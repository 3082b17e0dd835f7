"""The GPU frame encoder's check (issue 30, point 2): camera frames encoded where the step ran, before the host copy.

python bench/gpu_frames.py --out DIR          # on a GPU: rgb as JPEG by nvJPEG (torchvision) before the copy
python bench/gpu_frames.py --smoke --out DIR  # the same code on the CPU: the producer-side CPU codec (Pillow)

Also a section of tools/gpu_check.py (``gpu_frames``). reach with RGB-D (full: 512 envs at 128x128, 20 steps;
smoke: 4 envs at 32x32, 4 steps), random policy; each step is stepped and published into a HostSnapshotTransport
of 4 slots whose consumer thread takes and releases every batch. Twice: raw (every field copied as is), and
encoded (``collect/encode.make_encoder``: ``rgb`` as JPEG quality 90, on CUDA by nvJPEG; ``depth`` raw through
the copy, left to the CPU writer pool's lossless codec). Rows:

  bytes moved per step, raw        the packed result's bytes (what the raw copy moves), and its rgb share
  bytes moved per step, encoded    the raw fields' bytes plus the mean JPEG payload per step; ratio raw / encoded
  encode time per step             the encode stage as the stepping thread saw it (on CUDA: nvJPEG, torchvision's
                                   wait for its lengths, the payload's join), ms per step, and frames/s
  env-steps/s, raw vs encoded      stepping + publishing with the consumer releasing; ratio encoded / raw
  overflows                        steps whose payloads did not fit the slot's area (spilled; 0 expected)
  decodes on the CPU               the last batch's payloads decoded by the CPU codec (Pillow): PSNR [dB] against
                                   the frames the env rendered (min over frames); ok when every frame is at
                                   least the codec's stated bound
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
from common import machine, psnr, save, table  # noqa: E402

SIZES = {
    "full": {"num_envs": 512, "image_size": 128, "steps": 20},
    "smoke": {"num_envs": 4, "image_size": 32, "steps": 4},
}


def _publish(env, policy, transport, steps: int) -> tuple[float, dict]:
    """Step and publish ``steps`` times with a consumer releasing every batch; the wall time and the last batch's
    encoded fields (copied)."""
    from forge_gpu._src.core.codecs import EncodedFrames

    last: dict = {}

    def consume():
        while (batch := transport.get(timeout=120)) is not None:
            for name, frames in batch.observation.items():
                if isinstance(frames, EncodedFrames):
                    last[name] = EncodedFrames(frames.spec, frames.payload.copy(), frames.offsets.copy())
            transport.release(batch)

    consumer = threading.Thread(target=consume)
    consumer.start()
    start = time.perf_counter()
    try:
        for _ in range(steps):
            env.step(policy(env.observation))
            transport.publish(timeout=120)
    finally:
        transport.close()
        consumer.join(timeout=120)
    return time.perf_counter() - start, last


def frames_rows(device: str | None, smoke: bool, say=print):
    """The section's rows (see the module doc)."""
    import warp as wp

    import forge_gpu
    from forge_gpu._src.collect.encode import make_encoder
    from forge_gpu._src.core.codecs import CodecSpec, decode_frames
    from forge_gpu.recording import HostSnapshotTransport

    size = SIZES["smoke" if smoke else "full"]
    device = wp.get_device(device or forge_gpu.sim.default_device())
    n, s, steps = size["num_envs"], size["image_size"], size["steps"]
    say(f"make reach x{n} at {s}x{s} on {device}")
    env = forge_gpu.sim.make("reach", num_envs=n, device=str(device), max_steps=200, **{"params.image_size": s})
    policy = forge_gpu.sim.make_policy("random", env)
    env.reset()
    env.step(policy(env.observation))  # compile and capture outside the timed runs
    spec = CodecSpec("jpeg")
    encoder = make_encoder(env, {"rgb": spec}, where="device" if device.is_cuda else "host")
    where = f"{encoder.name} on {device}"
    raw = HostSnapshotTransport(env, slots=4)
    say("raw")
    raw_seconds, _ = _publish(env, policy, raw, steps)
    encoded = HostSnapshotTransport(env, slots=4, encoder=encoder)
    say(f"encoded ({where})")
    encoded_seconds, last = _publish(env, policy, encoded, steps)
    rendered = env.observation["rgb"].numpy()  # the frames of the last published step
    payloads = encoded.payloads
    moved_raw = raw.bytes_per_step
    moved_encoded = encoded.bytes_per_step + payloads.payload_bytes / steps
    rgb = payloads.raw_bytes["rgb"]
    name = f"reach {s}x{s} RGB-D x{n}"
    yield {"figure": f"bytes moved per step, raw ({name})", "value": f"{moved_raw:,} B (rgb {rgb:,} B)"}
    yield {
        "figure": f"bytes moved per step, rgb as {spec} ({where})",
        "value": f"{moved_encoded:,.0f} B (rgb payload {payloads.payload_bytes / steps:,.0f} B, "
        f"{payloads.payload_bytes / steps / n:,.0f} B per frame)",
        "ratio": moved_raw / moved_encoded,
    }
    per_step = payloads.encode_seconds / steps
    yield {
        "figure": f"encode time per step ({where})",
        "value": f"{per_step * 1e3:.2f} ms, {n / per_step:,.0f} frames/s",
    }
    raw_rate, encoded_rate = n * steps / raw_seconds, n * steps / encoded_seconds
    yield {
        "figure": "env-steps/s stepping + publishing, raw vs encoded",
        "value": f"{raw_rate:,.0f} vs {encoded_rate:,.0f}",
        "ratio": encoded_rate / raw_rate,
    }
    yield {"figure": "overflows (payloads spilled past the slot's area)", "value": str(payloads.overflows)}
    decoded = decode_frames(spec, last["rgb"], (s, s, 3), np.uint8)
    quality = psnr(decoded, rendered)
    bound = spec.codec.min_psnr
    yield {
        "figure": "the last batch decodes with the CPU codec (Pillow)",
        "value": f"min PSNR {quality.min():.1f} dB over {len(quality)} frames (bound {bound:g} dB)",
        "ok": bool(len(decoded) == n and (quality >= bound).all()),
    }


def section(ctx):
    """tools/gpu_check.py's ``gpu_frames`` section."""
    yield from frames_rows(ctx.device, ctx.smoke, say=lambda message: print(message, flush=True))



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU codec")
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = list(frames_rows(args.device, args.smoke))
    markdown = table(rows, ["figure", "value", "ratio", "ok"])
    print(markdown)
    save("gpu_frames", {"machine": machine(), "smoke": args.smoke, "rows": rows}, markdown, args.out)
    return 0 if all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
