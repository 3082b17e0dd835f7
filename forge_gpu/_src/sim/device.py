"""Which Warp device forge_gpu runs on by default, and why, in words."""

from __future__ import annotations

import os
import shutil
import warnings

import warp as wp

from forge_gpu._src.sim.output import init_warp


def default_device() -> str:
    """``cuda:0`` when Warp sees a CUDA device, else ``cpu`` (with a warning when a GPU is present but
    unusable: see :func:`device_choice`)."""
    device, reason = device_choice()
    if device == "cpu" and gpu_present():
        warnings.warn(f"forge_gpu: {reason}", RuntimeWarning, stacklevel=2)
    return device


def device_choice() -> tuple[str, str]:
    """The default device and why it was chosen, in words."""
    init_warp()
    if wp.get_cuda_device_count() > 0:
        cuda = wp.get_device("cuda:0")
        return "cuda:0", f"Warp sees {wp.get_cuda_device_count()} CUDA device(s); using cuda:0 ({cuda.name})"
    if not gpu_present():
        return "cpu", "no NVIDIA GPU on this machine; using Warp's CPU device (every feature works, slower)"
    if wp.get_cuda_toolkit_version() is None:
        why = "this Warp build has no CUDA support (install the CUDA build of warp-lang)"
    elif wp.get_cuda_driver_version() is None:
        why = "Warp could not load or initialize the NVIDIA driver (check `nvidia-smi` and the driver install)"
    else:
        why = f"Warp finds no usable CUDA device (driver {wp.get_cuda_driver_version()})"
    return "cpu", f"a GPU is present but not usable: {why}; falling back to the CPU device"


def gpu_present() -> bool:
    """Whether this machine has an NVIDIA GPU, whatever Warp makes of it (device nodes or nvidia-smi)."""
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None
