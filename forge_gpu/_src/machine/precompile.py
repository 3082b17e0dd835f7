"""``forge-gpu precompile``: Warp's kernel cache built ahead of time, on a machine without a GPU.

Warp compiles a kernel module on its first use on a device and keeps the binary in its kernel cache: the
folder ``WARP_CACHE_PATH`` names (or ``wp.config.kernel_cache_dir``, set before ``wp.init()``), in a subfolder
named after Warp's version (DIR/1.19.0), as ``wp_NAME_HASH/wp_NAME_HASH.smARCH.cubin`` (or ``.smARCH.ptx``) for
CUDA and ``wp_NAME_HASH.cpuTARGET.o`` for the CPU, beside ``wp_NAME_HASH.meta``. HASH covers the module's
kernels, the functions they call and its options (the launch block size among them, so each block size is a
variant of its own), not the device: the modules a task loads can be found on the CPU.

precompile makes each task on the CPU (2 envs), resets it and steps it; each time Warp loads a module, that
state of it is built at once, at the block size the launch asks for on CUDA (an unnamed one is 256 there; the
CPU runs at 1): for each CUDA arch with Warp's ahead-of-time path (NVRTC, no GPU), ``.cubin`` at the arch and
``.ptx`` at Warp's PTX arch (Warp loads PTX where the driver is at least as new as its CUDA toolkit, CUBIN
otherwise); for ``cpu``, copied from the cache the CPU run loaded it from. A module whose code or block size
differs on CUDA (MuJoCo Warp branches on the device in a few places) is not found this way: the GPU compiles it
on first use, as it would without the cache.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
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
    cache: Path
    """Where the modules are: the --out folder's subfolder named after Warp's version, as Warp looks there."""
    variants: list[Variant]
    compiled: int
    failed: list[str]
    """``FILE: error`` of each CUDA binary Warp could not build here (the GPU compiles those on first use)."""


def ptx_arch(arch: int) -> int:
    """The arch Warp compiles PTX at for a device of ``arch``."""
    import warp as wp

    target = wp.config.ptx_target_arch or wp._src.context.runtime.default_ptx_arch
    return min(arch, target)


class _Builder:
    """Each module variant as it is loaded: its CPU files copied, its CUDA binaries compiled, at once, because a
    module's hash moves on as kernels or overloads join it (a generic kernel gains one per dtype it is launched
    with) and a fresh process loads the same states in the same order."""

    def __init__(self, archs: list, cache: Path, only, say):
        import warp as wp

        self.wp, self.cache, self.only, self.say = wp, cache, tuple(only or ()), say
        self.cpu, self.cuda_archs = CPU in archs, [a for a in archs if a != CPU]
        self.source = Path(wp.config.kernel_cache_dir)
        self.done: set = set()
        self.result = Result(cache, [], 0, [])

    def loaded(self, module, cpu_dim: int, cuda_dim: int) -> None:
        if self.only and not module.name.startswith(self.only):
            return
        if self.cpu:
            self._copy(module, cpu_dim)
        if self.cuda_archs:
            self._compile(module, cuda_dim)

    def _variant(self, module, block_dim: int, kind: str) -> Variant | None:
        identifier = module.get_module_identifier(block_dim)
        if (identifier, kind) in self.done:
            return None
        self.done.add((identifier, kind))
        variant = Variant(module, block_dim, identifier, [module._get_meta_name(block_dim)])
        self.result.variants.append(variant)
        (self.cache / identifier).mkdir(parents=True, exist_ok=True)
        return variant

    def _copy(self, module, block_dim: int) -> None:
        variant = self._variant(module, block_dim, CPU)
        if variant is None:
            return
        variant.files.append(module._get_compile_output_name(self.wp.get_device(CPU), block_dim=block_dim))
        for name in variant.files:
            source, target = self.source / variant.identifier / name, self.cache / variant.identifier / name
            if source.resolve() != target.resolve():
                shutil.copy2(source, target)

    def _compile(self, module, block_dim: int) -> None:
        variant = self._variant(module, block_dim, "cuda")
        if variant is None:
            return
        options = module.resolve_options(self.wp.config, block_dim=block_dim)
        folder = str(self.cache / variant.identifier)
        for arch in self.cuda_archs:
            for use_ptx, output_arch in ((False, arch), (True, ptx_arch(arch))):
                name = module._get_compile_output_name(None, output_arch, use_ptx=use_ptx, block_dim=block_dim)
                if name in variant.files:
                    continue
                variant.files.append(name)
                try:
                    module._compile(None, folder, output_arch=output_arch, use_ptx=use_ptx, options=options)
                    self.result.compiled += 1
                except Exception as exc:  # a variant NVRTC cannot build here; the device compiles it on first use
                    self.result.failed.append(f"{name}: {exc}".splitlines()[0])
        self.say(f"    {variant.identifier} (block size {block_dim})")


def precompile(tasks: list[str], archs: list, out: Path, only=None, say=print) -> Result:
    """Build ``out`` as a Warp kernel cache holding every module ``tasks`` load, for each of ``archs`` (CUDA
    arch integers, and ``cpu``): each task made (2 envs), reset and stepped on the CPU (plainly, then as an
    evaluation steps it), each module built as Warp loads it. ``only``: just the modules whose names start with one
    of these prefixes. Run it in a fresh process (as ``forge-gpu precompile`` does): a module this process loaded
    before is not loaded again, so not built."""
    import warp as wp

    from forge_gpu._src.evaluate.rows import EvaluationRows
    from forge_gpu._src.sim.output import init_warp
    from forge_gpu._src.sim.policies import make_policy
    from forge_gpu._src.tasks.make import make

    init_warp()
    builder = _Builder(archs, out / wp.config.version, only, say)
    context = wp._src.context
    plain = context.Module.load, context.launch, context.launch_tiled
    asked = threading.local()  # the block size the launch under way asks for, as CUDA resolves it

    def load(self, device, block_dim=None, *args, **kwargs):
        loaded = plain[0](self, device, block_dim, *args, **kwargs)
        cpu_dim = block_dim if block_dim is not None else self.options["block_dim"]
        builder.loaded(self, cpu_dim, getattr(asked, "dim", None) or self.options["block_dim"])
        return loaded

    def cuda_dim(block_dim) -> int:
        return block_dim if block_dim and block_dim > 0 else CUDA_DEFAULT_BLOCK_DIM

    def launch(kernel, *args, **kwargs):
        if getattr(asked, "tiled", False):  # launch_tiled's own call, at the CPU's block size 1
            return plain[1](kernel, *args, **kwargs)
        asked.dim = cuda_dim(kwargs.get("block_dim", args[11] if len(args) > 11 else None))
        try:
            return plain[1](kernel, *args, **kwargs)
        finally:
            asked.dim = None

    def launch_tiled(*args, **kwargs):
        asked.dim, asked.tiled = cuda_dim(kwargs.get("block_dim")), True
        try:
            return plain[2](*args, **kwargs)
        finally:
            asked.dim, asked.tiled = None, False

    context.Module.load, context.launch, context.launch_tiled = load, launch, launch_tiled
    wp.launch, wp.launch_tiled = launch, launch_tiled
    try:
        for task in tasks:
            say(f"{task}: made, reset and stepped on the CPU")
            env = make(task, num_envs=2, device=CPU)
            env.reset()
            policy = make_policy("random", env)
            for _ in range(3):
                env.step(policy(env.observation))
            rows = EvaluationRows(env, 1)  # and as forge-gpu evaluate steps it: its kernels too
            env.extend_step(rows.launch, draw_env=rows.draw_env, draw_episode=rows.draw_episode, idle=rows.idle)
            env.reset()
            env.step(policy(env.observation))
            _learner_kernels(env, make, task, policy, say)
    finally:
        context.Module.load, context.launch, context.launch_tiled = plain
        wp.launch, wp.launch_tiled = plain[1], plain[2]
    return builder.result


def _learner_kernels(env, make, task: str, policy, say) -> None:
    """Load what a learner's evaluation and a labelled collection launch: a torch policy's history and both chunk
    executions (where torch is installed), and the expert's labels with a mix (where the task has an expert)."""
    try:
        import torch
    except ImportError:
        say("  torch is not installed: the policy history and chunk kernels are left out")
    else:
        from forge_gpu._src.sim.policies import TorchPolicy

        a = env.action_input.shape[1]

        def fn(observation):
            return torch.zeros((env.num_envs, 2, a), dtype=torch.float32, device=observation["proprio"].device)

        fn.history, fn.chunk = 2, 2
        for execution in ("open_loop", "ensemble"):
            learner = TorchPolicy(env, fn, execution=execution)
            env.reset()
            for _ in range(2):
                env.step(learner())
    if env.task.expert(env.world) is None:
        say(f"  {task} has no expert: the relabel kernels are left out")
        return
    labelled = make(task, num_envs=2, device=CPU, label="expert", expert_mix=0.5)
    labelled.reset()
    for _ in range(2):
        labelled.step(policy(labelled.observation))


def missing_files(result: Result) -> list[str]:
    """``IDENTIFIER/FILE`` of each file a variant needs that the cache lacks."""
    cache = result.cache
    return [f"{v.identifier}/{n}" for v in result.variants for n in v.files if not (cache / v.identifier / n).is_file()]


def check_writable(out: Path) -> None:
    """Create ``out`` if needed and write a file in it; ValueError naming it otherwise."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ValueError(f"--out {out}: not a writable folder ({exc.strerror or exc})") from exc
