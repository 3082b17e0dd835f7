"""``forge-gpu precompile``: Warp's kernel cache built ahead of time, on a machine without a GPU.

Warp compiles a kernel module on its first use on a device and keeps the binary in its kernel cache
(``warp.config.kernel_cache_dir``; the ``WARP_CACHE_PATH`` environment variable sets it, as does assigning
``wp.config.kernel_cache_dir`` before ``wp.init()``), as ``wp_NAME_HASH/wp_NAME_HASH.smARCH.cubin`` (or
``.smARCH.ptx``) for CUDA and ``wp_NAME_HASH.cpuTARGET.o`` for the CPU, beside ``wp_NAME_HASH.meta``. HASH
covers the module's kernels, the functions they call and its options (the launch block size among them, so each
block size is a variant of its own), not the device, so the modules a task loads can be found on the CPU.

Discovery makes each task on the CPU (2 envs), resets it and steps it, noting every module Warp loads and the
block size every launch asks for (the CPU runs at block size 1; CUDA resolves an unnamed one to 256). Each
(module, block size) is then compiled for each CUDA arch with Warp's ahead-of-time path (NVRTC, no GPU), twice:
``.cubin`` at the arch, and ``.ptx`` at Warp's PTX arch (Warp loads PTX where the driver is at least as new as
its CUDA toolkit, CUBIN otherwise). The CPU modules (``cpu``) are copied from the cache discovery loaded them
from. A module whose code or block size differs on CUDA (MuJoCo Warp branches on the device in a few places)
is not found this way: the GPU compiles it on first use, as it would without the cache.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

CPU = "cpu"
"""The arch value that asks for the CPU modules."""
MIN_ARCH = 50
CUDA_DEFAULT_BLOCK_DIM = 256
"""What Warp resolves an unnamed (or non-positive) launch block size to on CUDA."""


def parse_arch(value: str) -> int | str:
    """``cpu`` or a CUDA arch (an integer >= 50, e.g. 90 for H100/H200); ValueError naming the value."""
    text = str(value).strip().lower()
    if text == CPU:
        return CPU
    try:
        arch = int(text)
    except ValueError:
        arch = None
    if arch is None or arch < MIN_ARCH:
        raise ValueError(f"--arch {value}: must be a CUDA arch, an integer >= {MIN_ARCH} (e.g. 90), or {CPU}")
    return arch


@dataclass
class Variant:
    """One module at one block size: its cache folder and the files the requested archs need there."""

    module: object
    block_dim: int
    identifier: str
    files: list[str] = field(default_factory=list)


@dataclass
class Result:
    variants: list[Variant]
    compiled: int
    failed: list[str]
    """``IDENTIFIER arch: error`` of each (variant, arch) Warp could not build here (the GPU compiles those)."""


def discover(tasks: list[str], say=print) -> tuple[dict, dict]:
    """Make, reset and step each task on the CPU; ({Module: CUDA block sizes}, {Module: CPU block sizes}) of
    every module Warp loaded."""
    import warp as wp

    import forge_gpu

    context = wp._src.context
    loaded: dict = {}
    launched: dict = {}
    plain = context.Module.load, context.launch, context.launch_tiled
    tiled = threading.local()

    def note(kernel, block_dim) -> None:
        module = getattr(kernel, "module", None)
        if module is not None:
            launched.setdefault(module, set()).add(block_dim if block_dim and block_dim > 0 else CUDA_DEFAULT_BLOCK_DIM)

    def load(self, device, block_dim=None, *args, **kwargs):
        loaded.setdefault(self, set()).add(block_dim if block_dim is not None else self.options["block_dim"])
        return plain[0](self, device, block_dim, *args, **kwargs)

    def launch(kernel, *args, **kwargs):
        if not getattr(tiled, "inside", False):
            note(kernel, kwargs.get("block_dim", args[11] if len(args) > 11 else None))
        return plain[1](kernel, *args, **kwargs)

    def launch_tiled(*args, **kwargs):
        # the block size asked for: launch_tiled resolves it to 1 on the CPU before it calls launch
        note(args[0] if args else kwargs.get("kernel"), kwargs.get("block_dim"))
        tiled.inside = True
        try:
            return plain[2](*args, **kwargs)
        finally:
            tiled.inside = False

    context.Module.load, context.launch, context.launch_tiled = load, launch, launch_tiled
    wp.launch, wp.launch_tiled = launch, launch_tiled
    try:
        for task in tasks:
            say(f"  {task}: make, reset and step on the CPU")
            env = forge_gpu.sim.make(task, num_envs=2, device=CPU)
            env.reset()
            policy = forge_gpu.sim.make_policy("random", env)
            for _ in range(3):
                env.step(policy(env.observation))
    finally:
        context.Module.load, context.launch, context.launch_tiled = plain
        wp.launch, wp.launch_tiled = plain[1], plain[2]
    cuda = {m: launched.get(m) or {CUDA_DEFAULT_BLOCK_DIM} for m in loaded}
    return cuda, loaded


def ptx_arch(arch: int) -> int:
    """The arch Warp compiles PTX at for a device of ``arch``."""
    import warp as wp

    target = wp.config.ptx_target_arch or wp._src.context.runtime.default_ptx_arch
    return min(arch, target)


def cuda_jobs(modules: dict, archs: list[int]) -> tuple[list[Variant], list[tuple]]:
    """The variants and their (variant, arch, use_ptx, output arch) compiles."""
    variants, jobs = [], []
    for module, dims in modules.items():
        for block_dim in sorted(dims):
            module.get_module_hash(block_dim)
            variant = Variant(module, block_dim, module.get_module_identifier(block_dim))
            variant.files.append(module._get_meta_name(block_dim))
            for arch in archs:
                for use_ptx, output_arch in ((False, arch), (True, ptx_arch(arch))):
                    name = module._get_compile_output_name(None, output_arch, use_ptx=use_ptx, block_dim=block_dim)
                    if name not in variant.files:
                        variant.files.append(name)
                        jobs.append((variant, arch, use_ptx, output_arch))
            variants.append(variant)
    return variants, jobs


def copy_cpu_modules(modules: dict, out: Path) -> list[Variant]:
    """The CPU variants discovery loaded, copied from Warp's current kernel cache into ``out``."""
    import warp as wp

    cpu, source = wp.get_device(CPU), Path(wp.config.kernel_cache_dir)
    variants = []
    for module, dims in modules.items():
        for block_dim in sorted(dims):
            identifier = module.get_module_identifier(block_dim)
            files = [module._get_meta_name(block_dim), module._get_compile_output_name(cpu, block_dim=block_dim)]
            target = out / identifier
            target.mkdir(parents=True, exist_ok=True)
            for name in files:
                if (source / identifier / name).resolve() != (target / name).resolve():
                    shutil.copy2(source / identifier / name, target / name)
            variants.append(Variant(module, block_dim, identifier, files))
    return variants


def precompile(tasks: list[str], archs: list, out: Path, workers: int = 2, only=None, say=print) -> Result:
    """Build ``out`` as a Warp kernel cache holding every module ``tasks`` load, for each of ``archs`` (CUDA
    arch integers, and ``cpu``); ``only``: just the modules whose names start with one of these prefixes."""
    import warp as wp

    from forge_gpu._src.sim.output import init_warp

    init_warp()
    say(f"discovering the modules of {len(tasks)} task(s):")
    cuda_modules, cpu_modules = discover(tasks, say)
    if only:
        cuda_modules = {m: dims for m, dims in cuda_modules.items() if m.name.startswith(tuple(only))}
        cpu_modules = {m: dims for m, dims in cpu_modules.items() if m.name.startswith(tuple(only))}
    variants = copy_cpu_modules(cpu_modules, out) if CPU in archs else []
    cuda_archs = [a for a in archs if a != CPU]
    cuda_variants, jobs = cuda_jobs(cuda_modules, cuda_archs) if cuda_archs else ([], [])
    failed: list[str] = []
    if jobs:
        names = ", ".join(f"sm_{a}" for a in cuda_archs)
        say(f"compiling {len(jobs)} CUDA binaries ({len(cuda_variants)} module variants for {names}, cubin and ptx)")

    def compile_one(job) -> None:
        variant, arch, use_ptx, output_arch = job
        module = variant.module
        options = module.resolve_options(wp.config, block_dim=variant.block_dim)
        folder = str(out / variant.identifier)
        try:
            module._compile(None, folder, output_arch=output_arch, use_ptx=use_ptx, options=options)
        except Exception as exc:  # a variant NVRTC cannot build here; the device compiles it on first use
            failed.append(f"{variant.identifier} sm_{output_arch}{' ptx' if use_ptx else ''}: {exc}".splitlines()[0])

    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(compile_one, jobs))
    return Result(variants + cuda_variants, len(jobs) - len(failed), failed)


def missing_files(out: Path, variants: list[Variant]) -> list[str]:
    """``IDENTIFIER/FILE`` of each file a variant needs that ``out`` lacks."""
    return [f"{v.identifier}/{name}" for v in variants for name in v.files if not (out / v.identifier / name).is_file()]


def check_writable(out: Path) -> None:
    """Create ``out`` if needed and write a file in it; ValueError naming it otherwise."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ValueError(f"--out {out}: not a writable folder ({exc.strerror or exc})") from exc
