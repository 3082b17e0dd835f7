"""The CUDA kernel cache, compiled here on the CPU before a GPU is lent, so the GPU run loads modules instead of
compiling them (issue 33).

python tools/kernel_cache.py build --cache DIR [--arch 90 ...]   # discover on the CPU, compile for sm_90 (NVRTC)
python tools/kernel_cache.py verify --cache DIR [--arch 90 ...]  # a fresh process: is every module in it?
python tools/kernel_cache.py pack --cache DIR --out FILE.tar.xz  # the .meta and .cubin files and index.json

Warp looks a CUDA module up in its kernel cache (``warp.config.kernel_cache_dir``, ``WARP_CACHE_PATH``) as
``wp_NAME_HASH/wp_NAME_HASH.smARCH.cubin`` beside ``wp_NAME_HASH.meta``. NAME is the Python module's name; HASH
the first 7 hex digits of the module's sha256 over its kernels' source, the functions they call and the
resolved module options (block_dim among them, so each launch block size is a variant with its own HASH; the
device is not in it). The file is ``.cubin`` at the device's own arch when the driver is older than the CUDA
toolkit Warp was built with (Warp 1.19: CUDA 13.4; the H200 image's driver: CUDA 13.0), else ``.ptx`` at
``min(arch, 75)``; the ``kernels`` section of gpu_check.py says which on the device.

Discovery runs gpu_check.py's sections (warm-ups, bandwidth, pipelines, torch, the syncs' delay kernel, the
doctor) at --smoke sizes on the CPU in this process, recording every module Warp loads and the block size every
launch asks for (the CPU runs them at block size 1, ``launch_tiled`` too; CUDA resolves an unnamed one to 256).
Each (module, block size) is then compiled for each --arch with ``Module._compile(None, ..., output_arch=ARCH)``,
Warp's own ahead-of-time path (``warp.compile_aot_module`` does the same for one module at its default block size).
A module whose code or block size differs on CUDA is not found this way: MuJoCo Warp branches on the device in
a few places (e.g. ``solve_LD_sparse_fused`` launches at block size 1 on the CPU, the JTDAJ kernel is generated
with one thread per group there); a variant Warp cannot build here (failed.json: MathDx's tile Cholesky at block
size 1) is left out. gpu_check.py counts the modules the device still compiled.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

INDEX = "index.json"
FAILED = "failed.json"
"""Written by build: the (module, arch) pairs Warp could not compile here (kept out of the cache and the index)."""
CUDA_DEFAULT_BLOCK_DIM = 256
"""What Warp resolves an unnamed launch block size to on CUDA."""
NOT_DISCOVERED = {"machine", "kernels", "tests"}
"""gpu_check.py sections whose kernels are not discovered (machine: none; tests: pytest's own, compiled there)."""


def discover_sections() -> list[str]:
    import gpu_check

    return ["delay", *(name for name in gpu_check.SECTIONS if name not in NOT_DISCOVERED)]


def discover(sections: list[str]) -> dict:
    """Run ``sections`` on the CPU here; {Module: set of CUDA block sizes} of every module they loaded."""
    import warp as wp

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
        loaded.setdefault(self, set())
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
        import gpu_check

        ctx = SimpleNamespace(device="cpu", sizes=gpu_check.SMOKE, smoke=True, timeout=600.0)
        ctx.started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            ctx.record_dir, ctx.logs = tmp, Path(tmp)
            for name in sections:
                print(f"  {name}", flush=True)
                if name == "delay":
                    out = wp.zeros(1, dtype=wp.float32, device="cpu")
                    wp.launch(gpu_check.delay_kernel(), dim=1, inputs=[1, out], device="cpu")
                    continue
                for row in gpu_check.section_function(gpu_check.SECTIONS[name])(ctx):
                    if row.get("ok") is False:
                        raise RuntimeError(f"discovery: section {name} failed on the CPU: {row}")
    finally:
        context.Module.load, context.launch, context.launch_tiled = plain
        wp.launch, wp.launch_tiled = plain[1], plain[2]
    return {m: launched.get(m) or {CUDA_DEFAULT_BLOCK_DIM} for m in loaded}


def expected(modules: dict, archs: list[int]) -> list[dict]:
    """One entry per (module, block size): its cache folder and the files each arch needs there."""
    import warp as wp

    entries = []
    for module, dims in modules.items():
        for block_dim in sorted(dims):
            module.get_module_hash(block_dim)
            identifier = module.get_module_identifier(block_dim)
            files = [module._get_compile_output_name(None, arch, use_ptx=False, block_dim=block_dim) for arch in archs]
            files.append(module._get_meta_name(block_dim))
            entries.append(
                {"module": module.name, "block_dim": block_dim, "identifier": identifier, "files": files, "obj": module}
            )
    entries.sort(key=lambda e: (e["identifier"], e["block_dim"]))
    del wp
    return entries


def unbuildable(cache: Path) -> set[str]:
    """The identifiers build could not compile (failed.json): CPU-only variants, such as a MathDx tile solver at
    the CPU's block size 1; the device compiles whatever it needs of them."""
    path = cache / FAILED
    return {f["identifier"] for f in json.loads(path.read_text())} if path.is_file() else set()


def buildable(cache: Path, entries: list[dict]) -> list[dict]:
    skip = unbuildable(cache)
    return [e for e in entries if e["identifier"] not in skip]


def missing(cache: Path, entries: list[dict]) -> list[str]:
    return [
        f"{e['identifier']}/{f}" for e in entries for f in e["files"] if not (cache / e["identifier"] / f).is_file()
    ]


def build(cache: Path, archs: list[int], sections: list[str], workers: int) -> list[dict]:
    import warp as wp

    print(f"discovering on the CPU ({len(sections)} sections):", flush=True)
    entries = expected(discover(sections), archs)
    todo = [
        (e, arch)
        for e in entries
        for arch in archs
        if not (cache / e["identifier"] / e["files"][archs.index(arch)]).is_file()
    ]
    print(f"{len(entries)} module variants; compiling {len(todo)} (module, arch) pairs into {cache}", flush=True)
    started = time.perf_counter()

    failed = []

    def compile_one(job):
        entry, arch = job
        module, block_dim = entry["obj"], entry["block_dim"]
        options = module.resolve_options(wp.config, block_dim=block_dim)
        t0 = time.perf_counter()
        try:
            module._compile(None, str(cache / entry["identifier"]), output_arch=arch, use_ptx=False, options=options)
        except Exception as exc:
            failed.append({"identifier": entry["identifier"], "arch": arch, "error": str(exc).splitlines()[-1][:300]})
            print(f"  {entry['identifier']} (block {block_dim}) sm_{arch}: FAILED {failed[-1]['error']}", flush=True)
            return
        print(f"  {entry['identifier']} (block {block_dim}) sm_{arch}: {time.perf_counter() - t0:.1f} s", flush=True)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(compile_one, todo))
    print(f"compiled in {time.perf_counter() - started:.0f} s; {len(failed)} could not be built", flush=True)
    (cache / FAILED).write_text(json.dumps(failed, indent=1))
    return entries


def index_of(entries: list[dict], archs: list[int]) -> dict:
    import warp as wp

    rows = [{k: e[k] for k in ("module", "block_dim", "identifier", "files")} for e in entries]
    return {"warp": wp.config.version, "archs": archs, "entries": rows}


def pack(cache: Path, out: Path, archs: list[int], entries: list[dict]) -> tuple[int, int]:
    """The files the entries need, and index.json, as one .tar.xz; (bytes, modules)."""
    gone = missing(cache, entries)
    if gone:
        raise SystemExit(f"kernel_cache.py pack: {len(gone)} files missing from {cache}, first {gone[0]}; run build")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w:xz") as tar:
        for e in entries:
            for f in e["files"]:
                tar.add(cache / e["identifier"] / f, arcname=f"{e['identifier']}/{f}")
        index = json.dumps(index_of(entries, archs), indent=1).encode()
        info = tarfile.TarInfo(INDEX)
        info.size = len(index)
        import io

        tar.addfile(info, io.BytesIO(index))
    os.replace(tmp, out)
    return out.stat().st_size, len({e["identifier"] for e in entries})


# -- on the device: the gpu_check section ------------------------------------------------------------------------


def section(ctx):
    """gpu_check.py's ``kernels`` section: the file Warp will look for on this device, and how many entries of
    the carried cache's index.json are there under that name."""
    import warp as wp

    import forge_gpu

    device = wp.get_device(ctx.device or forge_gpu.sim.default_device())
    cache = Path(wp.config.kernel_cache_dir)
    index_path = cache / INDEX
    index = json.loads(index_path.read_text()) if index_path.is_file() else None
    if not device.is_cuda:
        found = f"{len(index['entries'])} entries for sm_{index['archs']}" if index else "no index.json"
        yield {"figure": f"kernel cache {cache}", "value": f"{found}; {device} compiles its own (CPU) modules"}
        return
    output, arch = device.get_cuda_output_format(), device.get_cuda_compile_arch()
    suffix = f".sm{arch}{device._get_cuda_arch_suffix(arch)}.{output}"
    yield {
        "figure": f"what Warp looks for on {device}",
        "value": f"wp_NAME_HASH{suffix} (driver {wp._src.context.runtime.driver_version}, "
        f"toolkit {wp._src.context.runtime.toolkit_version}, device sm_{device.arch})",
    }
    if index is None:
        yield {"figure": f"kernel cache {cache}", "value": "no index.json: nothing was carried", "ok": False}
        return
    entries = index["entries"]
    there = sum((cache / e["identifier"] / f"{e['identifier']}{suffix}").is_file() for e in entries)
    yield {
        "figure": f"kernel cache {cache} (Warp {index['warp']}, here {wp.config.version})",
        "value": f"{there} of {len(entries)} module variants have {suffix}",
        "ok": there == len(entries) and index["warp"] == wp.config.version,
    }


# -- command line -------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("build", "verify", "pack"):
        p = sub.add_parser(name)
        p.add_argument("--cache", required=True, help="the kernel cache folder (built into, verified, packed)")
        p.add_argument("--arch", type=int, action="append", help="CUDA arch (90: H100/H200); repeatable; default 90")
        p.add_argument("--sections", nargs="+", help="discover only these (gpu_check.py sections, or 'delay')")
        if name == "build":
            p.add_argument("--workers", type=int, default=2, help="compiles at once (2)")
        if name == "pack":
            p.add_argument("--out", required=True, help="the .tar.xz to write")
    args = parser.parse_args(argv)
    archs = args.arch or [90]
    sections = args.sections or discover_sections()
    unknown = sorted(set(sections) - set(discover_sections()))
    if unknown:
        parser.error(f"--sections {' '.join(unknown)}: unknown; choose from {', '.join(discover_sections())}")
    cache = Path(args.cache).absolute()
    cache.mkdir(parents=True, exist_ok=True)
    import warp as wp

    wp.config.quiet = True
    started = time.perf_counter()
    if args.command == "build":
        entries = build(cache, archs, sections, args.workers)
    else:
        print(f"discovering on the CPU ({len(sections)} sections):", flush=True)
        entries = expected(discover(sections), archs)
    found = len(entries)
    entries = buildable(cache, entries)
    if found > len(entries):
        print(f"{found - len(entries)} module variants could not be built here ({cache / FAILED}): left out")
    gone = missing(cache, entries)
    size = sum(f.stat().st_size for e in entries for f in (cache / e["identifier"]).glob("*") if f.name in e["files"])
    print(
        f"kernel cache {cache}: {len(entries)} module variants of {len({e['module'] for e in entries})} modules, "
        f"sm_{', sm_'.join(map(str, archs))}: {size / 2**20:.1f} MiB; missing {len(gone)} files"
        f" ({time.perf_counter() - started:.0f} s)"
    )
    for name in gone[:20]:
        print(f"  missing {name}")
    if args.command == "pack" and not gone:
        nbytes, count = pack(cache, Path(args.out), archs, entries)
        print(f"packed {count} modules into {args.out}: {nbytes / 2**20:.1f} MiB")
    if args.command == "build":
        (cache / INDEX).write_text(json.dumps(index_of(entries, archs), indent=1))
    return 1 if gone else 0


if __name__ == "__main__":
    sys.exit(main())
