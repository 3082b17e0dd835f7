"""The GPU run as it will be made: the device calls, what each carries and how long it may take, and a dress
rehearsal of them on this CPU (issue 33).

python tools/gpu_plan.py show --wheels wheels             # the calls, their carry (checked < 60 MiB), the budget
python tools/gpu_plan.py rehearse --wheels wheels --smoke  # the same calls here, as the device would run them

The lent machine: one H200, 15 minutes of device time in all (start-up, every call, the waits between them),
600 s per command, 64 MiB carried per call, a few files back from $OUT, warm 30 s between calls, no registry.
The wheels and the kernel cache (tools/offline.py prepare) travel in parts, one callN/ folder a call; the
machine keeps what earlier calls carried while it is warm, so the calls follow each other at once. The last
call installs everything, unpacks the kernel cache and runs tools/gpu_check.py under a deadline that ends it
inside the command's limit; gpu_check.py rewrites $OUT/gpu_check.tgz after every section, so a cut call still
returns what was done.

rehearse makes a fresh folder holding only what a call copies (the repository's tracked and untracked files
that git does not ignore, and the carried paths, kept from call to call), a bare Python (a venv without
site-packages; what the image has is symlinked in from this Python: prepare's --have list, KINDS.md's by
default), runs each call's command there with $OUT set, under the call's time limit, and checks what $OUT
holds against what comes back. Standard library only.
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
from importlib import metadata
from pathlib import Path

import offline  # tools/offline.py: this script's folder is first on the path

REPO = Path(__file__).resolve().parent.parent

MIB = 1 << 20
BUDGET_S = 900.0
"""Device time of a session, start-up included."""
SLACK = 0.4
"""The share of BUDGET_S the plan leaves for a rerun of a failed section."""
CARRY_LIMIT = 60 * MIB
"""Each call's carry stays below this (the tool's limit is 64 MiB)."""
COMMAND_S = 600
"""The tool's limit on one command."""
START_S = 90.0
"""A fresh machine's start, counted as device time ("a minute or more")."""
TRANSFER_S = 15.0
"""Copying one call's tree and carry there, and $OUT back (not measured: a guess)."""
STASH_S = 5.0
"""A call that only brings its part."""
INSTALL_S = 45.0
"""offline.py install of the wheels and the kernel cache on the device (28 s measured here for the wheels)."""
KCACHE = "/tmp/kcache"
"""Warp's kernel cache on the device: the carried one is unpacked here."""
OUT_FILES, OUT_FILE_BYTES, OUT_DEPTH = 8, 16 * MIB, 2
"""What comes back from $OUT: at most 8 files, 16 MiB each, no more than 2 folders down."""


def tree_bytes() -> int:
    return offline.tree_bytes(REPO / "wheels-none")


def calls(wheels: Path, gpu_check_args: str = "") -> list[dict]:
    """The device calls for the folder prepare wrote: carry, command, timeout and expected seconds of each."""
    import gpu_check

    manifest = offline.read_manifest(wheels)
    rel = wheels.resolve().relative_to(REPO.resolve()) if wheels.resolve().is_relative_to(REPO.resolve()) else wheels
    parts: dict[int, int] = {}
    for entry in [*manifest["wheels"], *manifest["files"]]:
        for p in entry["parts"]:
            parts[p.get("call", 1)] = parts.get(p.get("call", 1), 0) + p["size"]
    kernels = f"--kernels {KCACHE}" if any(f["name"] == offline.KERNELS for f in manifest["files"]) else ""
    words = gpu_check_args.split()
    smoke = "--smoke" in words
    only = tuple(words[i + 1] for i, w in enumerate(words[:-1]) if w == "--only")
    names = [n for n in gpu_check.SECTIONS if n == "machine" or not only or n.startswith(only)]
    sections = sum(gpu_check.estimate_for(name, smoke) for name in names)
    deadline = COMMAND_S - INSTALL_S - 30
    out = []
    for k in sorted(parts):
        carry = [f"{rel}/{offline.MANIFEST}", f"{rel}/call{k}"]
        last = k == max(parts)
        if last:
            command = (
                "set -o pipefail; export PYTHONUNBUFFERED=1; "
                f"python3 tools/offline.py install --wheels {rel} --target /tmp/site {kernels} "
                "&& export PYTHONPATH=/tmp/site" + (f" WARP_CACHE_PATH={KCACHE}" if kernels else "") + " && "
                f"python3 tools/gpu_check.py --out /tmp/gpu_check --tar $OUT/gpu_check.tgz --deadline-s {deadline} "
                f"{gpu_check_args} 2>&1 | tee $OUT/call{k}.log"
            ).replace("  ", " ")
            estimate = INSTALL_S + sections
        else:
            command = f"ls -l {rel}/call{k} && sha256sum {rel}/call{k}/* | tee $OUT/call{k}.log"
            estimate = STASH_S
        out.append(
            {
                "call": k,
                "carry": carry,
                "carry_bytes": tree_bytes() + (wheels / offline.MANIFEST).stat().st_size + parts[k],
                "command": command,
                "timeout_s": COMMAND_S if last else 60,
                "estimate_s": estimate,
            }
        )
    return out


def budget(plan: list[dict]) -> dict:
    used = START_S + sum(TRANSFER_S + c["estimate_s"] for c in plan)
    return {"used_s": used, "left_s": BUDGET_S - used, "left_share": (BUDGET_S - used) / BUDGET_S}


def problems(plan: list[dict]) -> list[str]:
    found = []
    if len(plan) > 3:
        found.append(f"{len(plan)} calls: at most 3 (prepare with a larger --call-mib or fewer wheels)")
    for c in plan:
        if c["carry_bytes"] >= CARRY_LIMIT:
            found.append(f"call {c['call']} carries {c['carry_bytes'] / MIB:.1f} MiB: must stay below 60 MiB")
    b = budget(plan)
    if b["left_share"] < SLACK:
        found.append(f"the plan leaves {b['left_share']:.0%} of {BUDGET_S:.0f} s: at least {SLACK:.0%} must stay")
    return found


def show(plan: list[dict]) -> None:
    for c in plan:
        print(
            f"call {c['call']}: carry {' '.join(c['carry'])} ({c['carry_bytes'] / MIB:.1f} MiB with the repository), "
            f"timeout_s {c['timeout_s']}, about {c['estimate_s']:.0f} s\n  {c['command']}"
        )
    b = budget(plan)
    print(
        f"device time: {START_S:.0f} s start + {len(plan)} x {TRANSFER_S:.0f} s transfers + the commands = about "
        f"{b['used_s']:.0f} s of {BUDGET_S:.0f}; {b['left_s']:.0f} s ({b['left_share']:.0%}) left for a rerun"
    )


# -- the rehearsal ----------------------------------------------------------------------------------------------------


def copy_tree(dest: Path) -> None:
    """What a call copies: tracked and untracked-not-ignored files."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True
    )
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def bare_python(folder: Path, have: set[str]) -> Path:
    """A venv without site-packages, with the distributions of ``have`` installed here symlinked in (the
    image's packages); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)  # pip: the image's
    python = folder / "bin" / "python3"
    site = Path(
        subprocess.run(
            [python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    image = folder / "image"
    image.mkdir()
    linked = 0
    for dist in metadata.distributions():
        if offline.normalize(dist.metadata["Name"] or "") not in have:
            continue
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            src = Path(dist.locate_file(top))
            if src.exists() and not (image / top).exists() and top != "__pycache__":
                (image / top).symlink_to(src)
        linked += 1
    (site / "image.pth").write_text(str(image) + "\n")
    print(f"  bare Python {python}: {linked} distributions the image has, linked from {sys.prefix}")
    return python


def out_problems(out: Path) -> list[str]:
    found = []
    files = [p for p in out.rglob("*") if p.is_file()]
    if len(files) > OUT_FILES:
        found.append(f"$OUT holds {len(files)} files: {OUT_FILES} come back")
    for p in files:
        rel = p.relative_to(out)
        if p.stat().st_size > OUT_FILE_BYTES:
            found.append(f"$OUT/{rel} is {p.stat().st_size / MIB:.1f} MiB: files over 16 MiB do not come back")
        if len(rel.parts) - 1 > OUT_DEPTH:
            found.append(f"$OUT/{rel} is more than {OUT_DEPTH} folders down: it does not come back")
    return found


def seed_cpu_modules(cache: Path) -> int:
    """This machine's compiled CPU modules (Warp's kernel cache here) into ``cache``, where the device finds the
    carried CUDA modules: on the CPU the rehearsal loads CPU modules, and a cold compile of them (minutes on 2
    cores) is no part of what the device does. The number of module folders copied."""
    import warp as wp

    wp.config.quiet = True
    wp.init()
    here = Path(wp.config.kernel_cache_dir)
    copied = 0
    for folder in here.glob("wp_*"):
        if folder.is_dir() and any(f.suffix == ".o" for f in folder.iterdir()):
            shutil.copytree(folder, cache / folder.name, dirs_exist_ok=True)
            copied += 1
    return copied


def rehearse(wheels: Path, gpu_check_args: str, have: set[str], keep: Path | None, cpu_modules: bool) -> int:
    plan = calls(wheels, gpu_check_args)
    show(plan)
    work = Path(keep or tempfile.mkdtemp(prefix="gpu-rehearsal-"))
    device, outs = work / "repo", work / "out"
    started = time.perf_counter()
    if cpu_modules:
        count = seed_cpu_modules(Path(KCACHE))
        print(f"[{time.perf_counter() - started:6.1f} s] {count} compiled CPU modules of this machine into {KCACHE}")
    copy_tree(device)
    print(f"[{time.perf_counter() - started:6.1f} s] the tree a call copies, in {device}")
    python = bare_python(work / "python", have)
    print(f"[{time.perf_counter() - started:6.1f} s] the bare Python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "WARP_CACHE_PATH")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_NO_INDEX"] = "1"  # no registry there
    failed = []
    for c in plan:
        for rel in c["carry"]:
            src, dst = REPO / rel if not Path(rel).is_absolute() else Path(rel), device / rel
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        out = outs / f"call{c['call']}"
        out.mkdir(parents=True)
        began = time.perf_counter()
        try:
            done = subprocess.run(
                ["bash", "-c", c["command"]],
                cwd=device,
                env=env | {"OUT": str(out)},
                timeout=c["timeout_s"],
                capture_output=True,
                text=True,
            )
            code, tail = done.returncode, (done.stdout + done.stderr)[-1500:]
        except subprocess.TimeoutExpired:
            code, tail = "timeout", ""
        seconds = time.perf_counter() - began
        bad = out_problems(out)
        print(
            f"[{time.perf_counter() - started:6.1f} s] call {c['call']}: exit {code} in {seconds:.1f} s "
            f"(limit {c['timeout_s']} s, estimate {c['estimate_s']:.0f} s); $OUT: "
            f"{', '.join(p.name for p in out.rglob('*') if p.is_file())}"
        )
        if code != 0 or bad:
            failed.append(f"call {c['call']}: exit {code}; {'; '.join(bad)}\n{tail}")
    tgz = outs / f"call{plan[-1]['call']}" / "gpu_check.tgz"
    if tgz.is_file():
        import tarfile

        with tarfile.open(tgz) as tar:
            payload = json.load(tar.extractfile("gpu_check.json"))
        for s in payload["sections"]:
            print(f"  {s['section']:<20} {s['status']:<8} {s['seconds']:6.1f} s (estimate {s['estimate_s']:.0f} s)")
    else:
        failed.append("no gpu_check.tgz came back")
    print(f"rehearsal in {time.perf_counter() - started:.0f} s: " + ("passed" if not failed else "FAILED"))
    for f in failed:
        print(f, file=sys.stderr)
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("show", "rehearse"):
        p = sub.add_parser(name)
        p.add_argument("--wheels", default=str(REPO / "wheels"), help="the folder offline.py prepare wrote")
        p.add_argument("--gpu-check-args", default="", help="more arguments of gpu_check.py (--smoke, --only ...)")
        if name == "rehearse":
            p.add_argument("--have", help="the image's distributions (prepare's --have file; default KINDS.md's)")
            p.add_argument("--keep", help="rehearse in this folder (default: a new temporary one)")
            p.add_argument(
                "--cold",
                action="store_true",
                help=f"leave {KCACHE} without this machine's compiled CPU modules (each section compiles its own)",
            )
    args = parser.parse_args(argv)
    try:
        plan = calls(Path(args.wheels), args.gpu_check_args)
    except offline.OfflineError as exc:
        print(f"gpu_plan.py: error: {exc}", file=sys.stderr)
        return 2
    if args.command == "show":
        show(plan)
        bad = problems(plan)
        for b in bad:
            print(f"problem: {b}")
        return 1 if bad else 0
    have = set(offline.read_have(Path(args.have) if args.have else offline.IMAGE_PACKAGES))
    keep = Path(args.keep) if args.keep else None
    return rehearse(Path(args.wheels), args.gpu_check_args, have, keep, cpu_modules=not args.cold)


if __name__ == "__main__":
    sys.exit(main())
