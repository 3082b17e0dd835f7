"""Getting one step's batch to the host: bytes, time per step, GB/s and overlap with stepping, per method.

python bench/transport.py                # CPU: cartpole 256..4096 envs, reach RGB-D 64x64 and 128x128 fewer
python bench/transport.py --smoke        # seconds-long check that every figure is produced

Methods (each copies every array of ``env.result``: observation fields, reward, flags, active, action):
  none           stepping only: the baseline of ``overlap``
  sync           a fresh host copy per field after each step (CPU ``np.array(a.numpy())``; CUDA ``a.numpy()``,
                 which synchronizes)
  host_snapshot  forge_gpu's HostSnapshotTransport (K slots) and a consumer thread that gets and releases slots
  torch_pinned   ``dst.copy_(src, non_blocking=True)`` from ``wp.to_torch`` views into a ring of K torch tensor
                 sets (pinned on CUDA, copied on the env's stream); a consumer thread waits on each slot's
                 ``torch.cuda.Event`` (CPU: plain copies, nothing to wait for) and frees the slot

Two measurements per (layout, num_envs, method):
  stepped    S steps of the env with the transport. step_median_ms / step_p95_ms: one loop iteration (step,
             policy, transport issue; the consumer runs beside it). overlap: the loop's wall time, drained and
             synchronized, divided by the same S steps with ``none`` (1.0: the transport is fully hidden).
  copy only  no stepping: the same ``env.result`` published again and again, so the time is the transport's
             alone. copy_median_ms / copy_p95_ms: one publish, in steady state (the ring full, so on CUDA
             the publisher is paced by the copies). gb_per_s = bytes_per_step / copy_median_ms.
             vs_reference = gb_per_s / reference_gb_per_s, the reference measured in the same run: CPU
             ``np.copyto`` of one buffer of bytes_per_step bytes; CUDA the page-locked device-to-host peak
             (one 256 MiB ``wp.copy`` from the device into a pinned Warp array).
"""

from __future__ import annotations

import argparse
import dataclasses
import queue
import sys
import threading
import time

import numpy as np
from common import machine, plot, save, summary_ms, table, timed

METHODS = ("none", "sync", "host_snapshot", "torch_pinned")
# layout -> (task, image side in pixels or None for proprio only)
LAYOUTS = {"cartpole": ("cartpole", None), "reach_rgbd64": ("reach", 64), "reach_rgbd128": ("reach", 128)}
CPU_ENVS = {"cartpole": [256, 1024, 4096], "reach_rgbd64": [256, 1024], "reach_rgbd128": [256]}
CUDA_ENVS = [256, 1024, 4096, 16384]
SMOKE_ENVS = {"cartpole": [8], "reach_rgbd64": [4], "reach_rgbd128": [4]}
CUDA_PEAK_BYTES = 256 << 20


def image_overrides(task: str, side: int | None) -> dict:
    """Config overrides that set the task's camera image to ``side`` x ``side`` pixels."""
    if side is None:
        return {}
    import forge_gpu

    config = forge_gpu.sim.task_config(task).params
    params = {f.name for f in dataclasses.fields(config)} | set(getattr(config, "values", {}))  # a task file's [params]
    for width, height in (("image_width", "image_height"), ("camera_width", "camera_height"), ("width", "height")):
        if width in params and height in params:
            return {f"params.{width}": side, f"params.{height}": side}
    if "image_size" in params:
        return {"params.image_size": side}
    raise ValueError(f"task {task!r} has no image size parameter among {sorted(params)}")


# -- methods: start on construction, push(result) per step, finish() drains -------------------------


class Sync:
    """A fresh host copy of every field after each step."""

    def __init__(self, env, slots: int):
        self.cuda = env.device.is_cuda
        self.bytes_per_step = sum(a.capacity for a in env.result.arrays().values())

    def push(self, result) -> None:
        for a in result.arrays().values():
            a.numpy() if self.cuda else np.array(a.numpy())  # CUDA: .numpy() is a new host copy already

    def finish(self) -> None:
        pass


class HostSnapshot:
    """HostSnapshotTransport with a consumer thread that only gets and releases slots."""

    def __init__(self, env, slots: int):
        from forge_gpu.recording import HostSnapshotTransport

        self.transport = HostSnapshotTransport(env, slots=slots)
        self.bytes_per_step = self.transport.bytes_per_step
        self.thread = threading.Thread(target=self._consume, daemon=True)
        self.thread.start()

    def _consume(self) -> None:
        while (batch := self.transport.get()) is not None:
            self.transport.release(batch)

    def push(self, result) -> None:
        self.transport.publish(result)

    def finish(self) -> None:
        self.transport.close()
        self.thread.join()


class TorchPinned:
    """``copy_(non_blocking=True)`` into a ring of ``slots`` sets of (CUDA: pinned) torch tensors.

    The sources are ``wp.to_torch`` views of ``env.result``, so ``push`` copies whatever the env holds now.
    On CUDA the copies go on the env's Warp stream, ordered after the step that wrote the result and before
    the next one overwrites it; each slot records an event that the consumer thread waits on.
    """

    def __init__(self, env, slots: int):
        import torch
        import warp as wp

        self.torch = torch
        self.cuda = env.device.is_cuda
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError(f"torch_pinned on {env.device} needs a CUDA build of torch; this torch has no CUDA")
        self.src = {k: wp.to_torch(a) for k, a in env.result.arrays().items()}
        self.bytes_per_step = sum(t.numel() * t.element_size() for t in self.src.values())
        self.dst = [
            {k: torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=self.cuda) for k, t in self.src.items()}
            for _ in range(slots)
        ]
        self.stream = wp.stream_to_torch(wp.get_stream(env.device)) if self.cuda else None
        self.events = [torch.cuda.Event() if self.cuda else None for _ in range(slots)]
        self.free: queue.Queue = queue.Queue()
        for slot in range(slots):
            self.free.put(slot)
        self.ready: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._consume, daemon=True)
        self.thread.start()

    def _consume(self) -> None:
        while (slot := self.ready.get()) is not None:
            if self.cuda:
                self.events[slot].synchronize()
            self.free.put(slot)

    def push(self, result) -> None:
        slot = self.free.get()
        dst = self.dst[slot]
        if self.cuda:
            with self.torch.cuda.stream(self.stream):
                for k, t in self.src.items():
                    dst[k].copy_(t, non_blocking=True)
                self.events[slot].record(self.stream)
        else:
            for k, t in self.src.items():
                dst[k].copy_(t)
        self.ready.put(slot)

    def finish(self) -> None:
        self.ready.put(None)
        self.thread.join()


MAKERS = {"sync": Sync, "host_snapshot": HostSnapshot, "torch_pinned": TorchPinned}


# -- measurements ------------------------------------------------------------------------------------


def run_loop(env, policy, method, steps: int, warmup: int, step_env: bool) -> tuple[np.ndarray, float]:
    """Per-iteration times [s] of ``steps`` timed iterations after ``warmup``, and the drained wall time [s]."""
    import warp as wp

    marks = []
    for i in range(warmup + steps):
        if i == warmup:
            marks.append(time.perf_counter())
        if step_env:
            env.step(policy(env.observation))
        if method is not None:
            method.push(env.result)
        if i >= warmup:
            marks.append(time.perf_counter())
    if method is not None:
        method.finish()
    wp.synchronize_device(env.device)
    return np.diff(marks), time.perf_counter() - marks[0]


def reference_gb_per_s(nbytes: int, device, seconds: float) -> tuple[str, float]:
    """CPU: np.copyto of ``nbytes``; CUDA: the page-locked device-to-host peak. Name and GB/s."""
    import warp as wp

    if device.is_cuda:
        src = wp.zeros(CUDA_PEAK_BYTES, dtype=wp.uint8, device=device)
        dst = wp.empty(CUDA_PEAK_BYTES, dtype=wp.uint8, device="cpu", pinned=True)

        def copy():
            wp.copy(dst, src)
            wp.synchronize_device(device)

        copy()
        return "pinned_d2h_peak", CUDA_PEAK_BYTES / np.median(timed(copy, min_seconds=seconds)) / 1e9
    src = np.ones(max(nbytes, 1), np.uint8)
    dst = np.zeros_like(src)  # touched, so no page faults are timed
    return "memcpy", src.nbytes / np.median(timed(lambda: np.copyto(dst, src), min_seconds=seconds)) / 1e9


def measure(layout: str, num_envs: int, device: str, seconds: float, min_steps: int, args, peak) -> list[dict]:
    import warp as wp

    import forge_gpu

    task, side = LAYOUTS[layout]
    env = forge_gpu.sim.make(task, num_envs=num_envs, device=device, **image_overrides(task, side))
    policy = forge_gpu.sim.make_policy(args.policy, env)
    slots = args.slots
    env.reset()
    warm, _ = run_loop(env, policy, None, 3, 1, True)  # compiles and, on CUDA, captures the graph
    steps = int(np.clip(seconds / np.median(warm), min_steps, 200))
    warmup = slots  # the ring is full from here on
    times, none_loop = run_loop(env, policy, None, steps, warmup, True)
    base = {"layout": layout, "task": task, "device": str(env.device), "num_envs": num_envs, "steps": steps}
    rows = [
        {
            **base,
            "method": "none",
            "bytes_per_step": 0,
            "mb_per_step": 0.0,
            **_prefixed("step_", summary_ms(times)),
            "loop_s": none_loop,
            "overlap": 1.0,
            "copy_steps": 0,
            "copy_median_ms": 0.0,
            "copy_p95_ms": 0.0,
            "gb_per_s": 0.0,
        }
    ]
    for name in args.methods:
        make = MAKERS[name]
        times, loop = run_loop(env, policy, make(env, slots), steps, warmup, True)
        row = {**base, "method": name, **_prefixed("step_", summary_ms(times)), "loop_s": loop}
        row["overlap"] = loop / none_loop
        probe = make(env, slots)
        quick, _ = run_loop(env, policy, probe, 3, warmup, False)
        row["copy_steps"] = int(np.clip(seconds / max(np.median(quick), 1e-6), 20, 2000))
        method = make(env, slots)
        copies, _ = run_loop(env, policy, method, row["copy_steps"], warmup, False)
        copy = summary_ms(copies)
        row.update(bytes_per_step=int(method.bytes_per_step), mb_per_step=method.bytes_per_step / 1e6)
        row.update(copy_median_ms=copy["median_ms"], copy_p95_ms=copy["p95_ms"])
        row["gb_per_s"] = method.bytes_per_step / (copy["median_ms"] / 1e3) / 1e9
        rows.append(row)
    ref_name, ref = peak if peak is not None else reference_gb_per_s(rows[1]["bytes_per_step"], env.device, 0.2)
    for row in rows:
        row.update(reference=ref_name, reference_gb_per_s=ref, vs_reference=row["gb_per_s"] / ref)
    wp.synchronize_device(env.device)
    return rows


def _prefixed(prefix: str, figures: dict) -> dict:
    return {prefix + k: v for k, v in figures.items()}


def measure_all(args, device: str, cuda: bool, seconds: float, min_steps: int, peak) -> list[dict]:
    import forge_gpu

    rows = []
    for layout in args.layouts:
        task = LAYOUTS[layout][0]
        if task not in forge_gpu.sim.TASKS:
            print(f"note: skipping layout {layout}: task {task!r} is not registered")
            continue
        envs = args.envs or (SMOKE_ENVS[layout] if args.smoke else CUDA_ENVS if cuda else CPU_ENVS[layout])
        for n in envs:
            rows += measure(layout, n, device, seconds, min_steps, args, peak)
    return rows


def main(argv=None) -> int:
    import warp as wp

    import forge_gpu

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--device", default=None)
    parser.add_argument("--envs", nargs="+", type=int, default=None, help="env counts for every layout")
    parser.add_argument("--seconds", type=float, default=1.0, help="target time per stepped measurement")
    parser.add_argument("--slots", type=int, default=4, help="ring slots K of host_snapshot and torch_pinned")
    parser.add_argument("--policy", default="random", choices=["random", "expert"])
    parser.add_argument("--methods", nargs="+", default=list(MAKERS), choices=list(MAKERS), help="besides none")
    parser.add_argument(
        "--torch-threads", type=int, default=1, help="torch intra-op threads while measuring (CPU copies)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", default=None, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    device = args.device or forge_gpu.sim.default_device()
    cuda = wp.get_device(device).is_cuda
    seconds, min_steps = (0.05, 3) if args.smoke else (args.seconds, 8)
    peak = reference_gb_per_s(CUDA_PEAK_BYTES, wp.get_device(device), 1.0) if cuda else None
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(args.torch_threads)
    try:
        rows = measure_all(args, device, cuda, seconds, min_steps, peak)
    finally:
        torch.set_num_threads(threads)
    columns = ["layout", "num_envs", "method", "mb_per_step", "step_median_ms", "step_p95_ms", "overlap"]
    columns += ["copy_median_ms", "copy_p95_ms", "gb_per_s", "vs_reference"]
    md = f"## Host transport ({device}, K={args.slots}, reference: {rows[0]['reference'] if rows else '-'})\n\n"
    md += table(rows, columns)
    payload = {"machine": machine(), "device": device, "slots": args.slots, "policy": args.policy}
    payload.update(torch_threads=args.torch_threads, rows=rows)
    path = save("transport", payload, md, args.out)
    lines = [r for r in rows if r["method"] != "none"]
    references = {(r["layout"], r["num_envs"]): r for r in lines}
    lines += [{**r, "method": r["reference"], "gb_per_s": r["reference_gb_per_s"]} for r in references.values()]
    plot(
        lines,
        x="num_envs",
        y="gb_per_s",
        series="method",
        panels="layout",
        path=path.with_suffix(".png"),
        ylabel="GB/s (copy only)",
        title=f"Host transport bandwidth, {device}",
    )
    print(md)
    print(f"\nwrote {path} and {path.with_suffix('.png').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
