"""Carry forge_gpu and what it needs to a GPU machine that has no package registry (issue 21).

python tools/offline.py prepare --out wheels                      # where pip reaches a registry
python3 tools/offline.py install --wheels wheels --target /tmp/site   # on the bare machine
export PYTHONPATH=/tmp/site

prepare downloads, for the target's Python and platform, the wheels of forge_gpu's runtime dependencies
(pyproject's ``dependencies``, walked through each downloaded wheel's Requires-Dist, extras and markers
evaluated for the target) at the versions installed where prepare runs, so the GPU runs what CI tested,
less what the target image already has (tools/image_packages.txt, or --have FILE). torch is never downloaded: a
CPU build would replace the image's CUDA one. It builds forge_gpu's own wheel, splits every file over
--part-mib into NAME.part000, NAME.part001, ..., and sorts the files into folders call1/, call2/, ...,
each small enough to travel in one call of --call-mib together with the repository, then writes
manifest.json (each wheel's sha256, size and parts).

install rejoins the parts, checks every sha256 against the manifest, refuses a torch wheel and installs
the wheels with ``pip install --no-index --no-deps --no-compile --target``, leaving the interpreter's own
site-packages alone; it prints the ``export PYTHONPATH=...`` line to use.

install uses the standard library alone (it runs on the bare machine); prepare reads requirements and markers
with ``packaging`` (PEP 508).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import deque
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MANIFEST = "manifest.json"
KERNELS = "kernels.tar.xz"
"""The kernel cache's archive (tools/kernel_cache.py pack) as prepare carries it."""
FORMAT = 1
MIB = 1 << 20
# Never carried: a CPU torch from a registry would replace the target image's CUDA build.
NEVER = frozenset({"torch"})

# What the target image already holds, by name: a data file beside this script (its header says where the list
# comes from); --have FILE gives another.
IMAGE_PACKAGES = Path(__file__).resolve().parent / "image_packages.txt"


# The target: CPython 3.12 on x86-64 Linux (Ubuntu 24.04's glibc 2.39). pip matches manylinux_2_N exactly,
# so every N a wheel may carry is named, newest first (pip ranks the tags in this order).
DEFAULT_PYTHON = "3.12"
DEFAULT_PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)]
DEFAULT_PLATFORMS += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
_PLATFORM = re.compile(r"^(?:manylinux1|manylinux2010|manylinux2014|manylinux_\d+_\d+|musllinux_\d+_\d+|linux)_(\w+)$")


class OfflineError(Exception):
    """A problem with the input or the wheels, said in one line for the user."""


# ---------------------------------------------------------------------------------------------- names


def normalize(name: str) -> str:
    """PEP 503: the name pip compares (``Typing_Extensions`` -> ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_dist(filename: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel's file name or one of its parts' (``NAME.whl.part003``)."""
    base = re.sub(r"\.part\d+$", "", Path(filename).name)
    parts = base[: -len(".whl")].split("-") if base.endswith(".whl") else []
    if len(parts) not in (5, 6):
        raise OfflineError(f"{filename!r} is not a wheel's file name (NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl)")
    return normalize(parts[0]), parts[1]


def refuse_torch(paths) -> None:
    for path in paths:
        name = Path(path).name
        try:
            dist = wheel_dist(name)[0] if re.search(r"\.whl(\.part\d+)?$", name) else None
        except OfflineError:
            dist = None  # not a wheel: install only reads what the manifest names
        if dist in NEVER:
            raise OfflineError(
                f"{path} is a torch wheel: installing it would replace the image's CUDA build of torch; "
                "remove it (prepare never downloads torch)"
            )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


# ------------------------------------------------------------------------------- requirements, markers


@dataclass(frozen=True)
class Requirement:
    name: str  # normalized
    extras: frozenset[str]
    spec: str  # the version specifier as written, parentheses dropped ("" for any)
    marker: str  # "" for always
    text: str


def parse_requirement(text: str) -> Requirement:
    """A PEP 508 requirement (``packaging.requirements``: its name normalized, its specifier and marker as text)."""
    from packaging.requirements import InvalidRequirement
    from packaging.requirements import Requirement as Parsed

    try:
        req = Parsed(text)
    except InvalidRequirement as exc:
        why = f"cannot read the requirement {text!r} (PEP 508: NAME[EXTRAS] SPECIFIER; MARKER): {exc}"
        raise OfflineError(why) from None
    spec = f"@ {req.url}" if req.url else str(req.specifier)
    extras = frozenset(normalize(e) for e in req.extras)
    return Requirement(normalize(req.name), extras, spec, str(req.marker or ""), text.strip())


def evaluate_marker(marker: str, env: dict[str, str]) -> bool:
    """A PEP 508 environment marker against ``env`` (``packaging.markers``)."""
    from packaging.markers import InvalidMarker, Marker

    try:
        return Marker(marker).evaluate(env)
    except InvalidMarker as exc:
        raise OfflineError(f"cannot read the marker {marker!r}: {exc}") from None


def target_environment(python_version: str, platforms: list[str]) -> dict[str, str]:
    """Marker variables of the target: CPython ``python_version`` on Linux, the platforms' machine."""
    machines = {_PLATFORM.match(p)[1] for p in platforms}
    if len(machines) != 1:
        raise OfflineError(f"--platform tags name several machines ({', '.join(sorted(machines))}); give one")
    full = python_version if python_version.count(".") == 2 else python_version + ".0"
    return {
        "python_version": ".".join(python_version.split(".")[:2]),
        "python_full_version": full,
        "implementation_name": "cpython",
        "implementation_version": full,
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": machines.pop(),
        "platform_release": "",
        "platform_version": "",
        "extra": "",
    }


def needed(requirements, env, extras, already) -> list[Requirement]:
    """The requirements that apply under one of ``extras`` ("" is the base) and under none of ``already``."""

    def applies(req, extra):
        return not req.marker or evaluate_marker(req.marker, {**env, "extra": extra})

    return [r for r in requirements if any(applies(r, e) for e in extras) and not any(applies(r, e) for e in already)]


def wheel_requirements(path: Path) -> list[Requirement]:
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(names) != 1:
            raise OfflineError(f"{path.name} holds {len(names)} .dist-info/METADATA files; a wheel holds one")
        text = zf.read(names[0]).decode("utf-8", errors="replace")
    head = text.split("\n\n", 1)[0]
    return [parse_requirement(line.split(":", 1)[1]) for line in head.splitlines() if line.startswith("Requires-Dist:")]


# -------------------------------------------------------------------------------------------- prepare


@dataclass
class Closure:
    wheels: dict[str, Path] = field(default_factory=dict)  # name -> downloaded wheel
    had: dict[str, set[str]] = field(default_factory=dict)  # name -> extras asked of a distribution the image has
    never: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def installed_requirements(name: str) -> list[Requirement] | None:
    try:
        return [parse_requirement(r) for r in metadata.distribution(name).requires or []]
    except metadata.PackageNotFoundError:
        return None


def pin(req: Requirement, notes: list[str]) -> str:
    """``name==version`` as installed here (what CI tested), else the requirement as written."""
    try:
        return f"{req.name}=={metadata.version(req.name)}"
    except metadata.PackageNotFoundError:
        if req.spec.startswith("@"):
            raise OfflineError(f"{req.text!r} is a direct reference and {req.name} is not installed here") from None
        notes.append(f"{req.name} is not installed here: pip chose the newest {req.name}{req.spec}")
        return f"{req.name}{req.spec}"


def walk(root: Path, have: set[str], env: dict[str, str], fetch) -> Closure:
    """Every distribution the root wheel needs on the target, through each wheel's Requires-Dist.

    ``fetch(pin) -> Path`` downloads one wheel. A distribution the image has is not fetched; the needs of
    the extras asked of it are still followed (its installed metadata here says which), since the image
    holding ``etils`` does not say it holds what ``etils[epath]`` needs."""
    out = Closure()
    todo = deque((r, "forge-gpu") for r in needed(wheel_requirements(root), env, {""}, set()))
    expanded: dict[str, set[str]] = {}
    while todo:
        req, by = todo.popleft()
        if req.name in NEVER:
            out.never.add(req.name)
            continue
        image = req.name in have
        if image:
            out.had.setdefault(req.name, set()).update(req.extras)
        done = expanded.setdefault(req.name, {""} if image else set())
        new = ({""} | set(req.extras)) - done
        if not new:
            continue
        if image:
            requirements = installed_requirements(req.name)
            if requirements is None:
                out.notes.append(
                    f"{req.name}[{','.join(sorted(new))}] (for {by}): not installed here, so what the "
                    "extras need was not followed"
                )
                requirements = []
        else:
            if req.name not in out.wheels:
                out.wheels[req.name] = fetch(pin(req, out.notes))
            requirements = wheel_requirements(out.wheels[req.name])
        todo.extend((r, req.name) for r in needed(requirements, env, new, done))
        done |= new
    return out


def pip_download(dest: Path, python_version: str, platforms: list[str]):
    def fetch(requirement: str) -> Path:
        before = set(dest.iterdir())
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            "-d",
            str(dest),
        ]
        for p in platforms:
            cmd += ["--platform", p]
        done = subprocess.run([*cmd, requirement], capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
            raise OfflineError(f"pip download {requirement} for Python {python_version} failed:\n{tail}")
        name = normalize(re.split(r"[=<>!~ @\[]", requirement, maxsplit=1)[0])
        new = [p for p in set(dest.iterdir()) - before if p.suffix == ".whl"] or [
            p for p in dest.glob("*.whl") if wheel_dist(p.name)[0] == name
        ]
        if len(new) != 1:
            raise OfflineError(f"pip download {requirement} left {len(new)} new wheels in {dest}, not one")
        print(f"  {requirement:<28} {new[0].name}  {mib(new[0].stat().st_size)}", flush=True)
        return new[0]

    return fetch


# Left out of the copy the project's wheel is built from: outputs at the top (dot folders too), caches anywhere.
_TOP_IGNORED = {"build", "dist", "runs", "wheels"}


def build_project_wheel(dest: Path) -> Path:
    """forge_gpu's own wheel (``pip wheel --no-deps --no-build-isolation``), built from a copy of the tree
    so that no stale ``build/`` of an earlier build slips into it and the checkout stays clean."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"

        def ignore(folder, names):
            top = Path(folder).resolve() == REPO
            bench = Path(folder).resolve() == REPO / "bench"
            return [
                n
                for n in names
                if n == "__pycache__"
                or n.endswith(".egg-info")
                or (bench and n == "results")
                or (top and (n in _TOP_IGNORED or n.startswith(".")))
            ]

        shutil.copytree(REPO, src, ignore=ignore, symlinks=True)
        built = Path(tmp) / "built"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--disable-pip-version-check",
                "-w",
                str(built),
                str(src),
            ],
            capture_output=True,
            text=True,
        )
        wheels = list(built.glob("*.whl")) if built.is_dir() else []
        if done.returncode != 0 or len(wheels) != 1:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
            raise OfflineError(
                f"pip wheel --no-deps --no-build-isolation {REPO} failed (it needs setuptools>=77 "
                f"in this Python):\n{tail}"
            )
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(wheels[0], dest / wheels[0].name))


def tree_bytes(out: Path) -> int:
    """What a device call carries besides the wheels: the repository's tracked and untracked-not-ignored
    files (0 where git cannot say), less anything under ``out``."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return 0
    total = 0
    for rel in filter(None, done.stdout.decode(errors="replace").split("\0")):
        path = REPO / rel
        if path.is_file() and not path.resolve().is_relative_to(out.resolve()):
            total += path.stat().st_size
    return total


def lay_out(
    wheels: list[Path], out: Path, part_bytes: int, call_bytes: int, reserve_bytes: int = 0, files=(), **facts
) -> dict:
    """Copy ``wheels`` into ``out`` as prepare leaves them and write ``out/manifest.json``.

    A wheel over ``part_bytes`` becomes NAME.part000, NAME.part001, ...; the files go into folders call1/,
    call2/, ... (first fit, largest first), none over ``call_bytes - reserve_bytes`` (the rest of a call is
    the repository). ``files`` (the kernel cache's archive) travel the same way, listed under ``files``.
    ``facts`` (python_version, platforms, ...) are recorded in the manifest as they are."""
    if part_bytes <= 0:
        raise OfflineError(f"part size {part_bytes} bytes: must be positive")
    room = call_bytes - reserve_bytes - 64 * 1024  # the manifest travels in every call
    if part_bytes > room:
        raise OfflineError(
            f"parts of {mib(part_bytes)} do not fit a call of {mib(call_bytes)} that also carries "
            f"the repository ({mib(reserve_bytes)}); give --part-mib of at most {room // MIB}"
        )
    names = [w.name for w in wheels]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise OfflineError(f"the same wheel twice: {', '.join(dupes)}")
    dists = [wheel_dist(n)[0] for n in names]
    twice = sorted({d for d in dists if dists.count(d) > 1})
    if twice:
        raise OfflineError(f"two wheels of {', '.join(twice)}: keep one version of each (pip stops at two)")
    refuse_torch(wheels)
    pieces = []  # [wheel index, part name, offset, size]
    entries = []
    for i, wheel in enumerate([*sorted(wheels, key=lambda w: w.name), *files]):
        size = wheel.stat().st_size
        dist, version = wheel_dist(wheel.name) if i < len(wheels) else (None, None)
        entries.append(
            {
                "name": wheel.name,
                "dist": dist,
                "version": version,
                "sha256": sha256_of(wheel),
                "size": size,
                "parts": [],
                "source": wheel,
            }
        )
        if size <= part_bytes:
            pieces.append([i, wheel.name, 0, size])
        else:
            for k, offset in enumerate(range(0, size, part_bytes)):
                pieces.append([i, f"{wheel.name}.part{k:03d}", offset, min(part_bytes, size - offset)])
    calls: list[int] = []  # bytes in each call
    placed = {}
    for piece in sorted(pieces, key=lambda p: (-p[3], p[1])):
        call = next((c for c, used in enumerate(calls) if used + piece[3] <= room), None)
        if call is None:
            calls.append(0)
            call = len(calls) - 1
        calls[call] += piece[3]
        placed[piece[1]] = call + 1
    out.mkdir(parents=True, exist_ok=True)
    for i, name, offset, size in pieces:
        entry = entries[i]
        rel = f"call{placed[name]}/{name}"
        (out / rel).parent.mkdir(exist_ok=True)
        with open(entry["source"], "rb") as src, open(out / rel, "wb") as dst:
            src.seek(offset)
            for start in range(0, size, MIB):
                dst.write(src.read(min(MIB, size - start)))
        entry["parts"].append({"path": rel, "size": size, "sha256": sha256_of(out / rel), "call": placed[name]})
    for entry in entries:
        del entry["source"]
    manifest = {
        "format": FORMAT,
        **facts,
        "part_bytes": part_bytes,
        "call_bytes": call_bytes,
        "reserve_bytes": reserve_bytes,
        "calls": len(calls),
        "wheels": entries[: len(wheels)],
        "files": entries[len(wheels) :],
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    tmp.replace(out / MANIFEST)
    return manifest


def read_manifest(folder: Path) -> dict:
    """``folder/manifest.json``, checked for shape: each wheel's name, sha256, size and parts."""
    path = folder / MANIFEST
    if not folder.is_dir():
        raise OfflineError(f"{folder} is not a folder (give the folder prepare wrote, holding {MANIFEST})")
    if not path.is_file():
        raise OfflineError(f"{path} is missing: {folder} is not a folder prepare wrote (or {MANIFEST} did not travel)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise OfflineError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise OfflineError(
            f"{path}: format {manifest.get('format') if isinstance(manifest, dict) else None!r}, expected {FORMAT}"
        )
    wheels = manifest.get("wheels")
    if not isinstance(wheels, list) or not wheels:
        raise OfflineError(f"{path}: 'wheels' must be a non-empty list")
    files = manifest.setdefault("files", [])
    if not isinstance(files, list):
        raise OfflineError(f"{path}: 'files' must be a list")
    for w in [*wheels, *files]:
        ok = isinstance(w, dict) and isinstance(w.get("name"), str) and isinstance(w.get("sha256"), str)
        ok = ok and isinstance(w.get("size"), int) and isinstance(w.get("parts"), list) and w["parts"]
        ok = ok and all(
            isinstance(p, dict)
            and isinstance(p.get("path"), str)
            and isinstance(p.get("size"), int)
            and isinstance(p.get("sha256"), str)
            for p in w["parts"]
        )
        if not ok:
            raise OfflineError(f"{path}: wheel entry {w!r} lacks name, sha256, size or parts (path, size, sha256)")
        if sum(p["size"] for p in w["parts"]) != w["size"]:
            raise OfflineError(
                f"{path}: the parts of {w['name']} add up to {sum(p['size'] for p in w['parts'])} "
                f"bytes, not its size {w['size']}"
            )
        for p in w["parts"]:
            if Path(p["path"]).is_absolute() or ".." in Path(p["path"]).parts:
                raise OfflineError(f"{path}: part path {p['path']!r} must be relative, inside {folder}")
    for w in wheels:
        wheel_dist(w["name"])
    return manifest


def summarize(manifest: dict, folder: Path) -> None:
    wheels = manifest["wheels"]
    width = max(len(w["name"]) for w in wheels)
    for w in wheels:
        parts = f"  {len(w['parts'])} parts" if len(w["parts"]) > 1 else ""
        print(f"  {w['name']:<{width}}  {mib(w['size']):>10}{parts}")
    total = sum(w["size"] for w in wheels)
    files = sum(len(w["parts"]) for w in wheels)
    print(f"total {mib(total)} ({total:,} bytes) in {len(wheels)} wheels, {_files(files)}")
    for f in manifest.get("files", []):
        print(f"  {f['name']:<{width}}  {mib(f['size']):>10}  (not a wheel: install --kernels unpacks it)")
    calls = {}
    for w in [*wheels, *manifest.get("files", [])]:
        for p in w["parts"]:
            calls.setdefault(p.get("call", 1), []).append(p["size"])
    print(
        f"{len(calls)} calls of at most {mib(manifest['call_bytes'])} each (each also carries the repository, "
        f"{mib(manifest.get('reserve_bytes', 0))}):"
    )
    for call in sorted(calls):
        print(
            f"  call {call}: {folder}/{MANIFEST} and {folder}/call{call}/  ({_files(len(calls[call]))}, "
            f"{mib(sum(calls[call]))})"
        )


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def clear_previous(out: Path) -> None:
    """Remove what an earlier prepare left in ``out``; refuse a folder that holds anything else."""
    if out.exists() and not out.is_dir():
        raise OfflineError(f"--out {out} is a file; give a new or empty folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not (out / MANIFEST).is_file():
        raise OfflineError(f"--out {out} is not empty and holds no {MANIFEST}; give a new or empty folder")
    manifest = read_manifest(out)
    for w in [*manifest["wheels"], *manifest["files"]]:
        for p in w["parts"]:
            (out / p["path"]).unlink(missing_ok=True)
    for call in out.glob("call*"):
        if call.is_dir() and not any(call.iterdir()):
            call.rmdir()
    (out / MANIFEST).unlink()


def read_have(path: Path) -> dict[str, str | None]:
    """Names (and versions, where given) from ``pip list --format=freeze`` output or one name a line."""
    if not path.is_file():
        raise OfflineError(f"--have {path}: no such file")
    have = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith(("-e ", "--editable")):
            continue
        m = re.fullmatch(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:(?:===?)\s*(\S+)|@\s*\S+)?", line)
        if not m:
            raise OfflineError(
                f"--have {path}, line {number}: {raw.strip()!r} is neither NAME nor NAME==VERSION "
                "(pip list --format=freeze)"
            )
        have[normalize(m[1])] = m[2]
    if not have:
        raise OfflineError(f"--have {path} names no distribution")
    return have


def prepare(args) -> None:
    out = Path(args.out)
    platforms = args.platform or DEFAULT_PLATFORMS
    env = target_environment(args.python_version, platforms)
    have_versions = read_have(Path(args.have) if args.have else IMAGE_PACKAGES)
    have = set(have_versions)
    source = args.have or str(IMAGE_PACKAGES.relative_to(REPO))
    clear_previous(out)
    out.mkdir(parents=True, exist_ok=True)  # git tells an ignored folder (a pattern with a slash) only if it exists
    reserve = tree_bytes(out)
    if out.resolve().is_relative_to(REPO):
        try:
            check = ["git", "-C", str(REPO), "check-ignore", "-q", str(out.resolve())]
            ignored = subprocess.run(check, capture_output=True).returncode == 0
        except OSError:
            ignored = True  # no git, no way to tell
        if not ignored:
            print(
                f"warning: {out} is inside the repository and git does not ignore it, so every call would carry "
                "all of it; add it to .gitignore",
                file=sys.stderr,
            )
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)
        print(f"forge_gpu's wheel, built from {REPO}:")
        own = build_project_wheel(stage / "own")
        print(f"  {own.name}  {mib(own.stat().st_size)}")
        print(
            f"downloading for CPython {args.python_version} on {env['platform_machine']} Linux "
            f"(versions as installed in {sys.executable}):"
        )
        (stage / "dl").mkdir()
        closure = walk(own, have, env, pip_download(stage / "dl", args.python_version, platforms))
        wheels = [own, *closure.wheels.values()]
        if args.recompress_mib:
            big = [w for w in wheels if w.stat().st_size > args.recompress_mib * MIB]
            for w in big:
                print(f"  recompressing {w.name} (LZMA) ...", flush=True)
            wheels = [recompress(w, stage / "lzma") if w in big else w for w in wheels]
        files = [kernel_archive(args, stage)] if args.kernel_cache else []
        lay_out(
            wheels,
            out,
            int(args.part_mib * MIB),
            int(args.call_mib * MIB),
            reserve,
            files=files,
            python_version=args.python_version,
            platforms=platforms,
            have=source,
        )
    print(f"\nwheels in {out} (the image lacks these; it has {len(have)} distributions, from {source}):")
    summarize(read_manifest(out), out)
    if closure.had:
        named = [n + (f"[{','.join(sorted(x))}]" if x else "") for n, x in sorted(closure.had.items())]
        print(f"not carried, the image has them: {', '.join(named)}")
    for name in sorted(closure.had):
        here = _version_here(name)
        if have_versions.get(name) and here and have_versions[name] != here:
            print(f"  note: the image has {name} {have_versions[name]}; CI here tested {here}")
    if closure.never:
        print(f"never carried: {', '.join(sorted(closure.never))} (the image's CUDA build stays)")
    for note in closure.notes:
        print(f"note: {note}")


def kernel_archive(args, stage: Path) -> Path:
    """tools/kernel_cache.py build (compiles only what --kernel-cache lacks) and pack, in this Python."""
    script = Path(__file__).resolve().parent / "kernel_cache.py"
    archs = [a for arch in args.arch or [90] for a in ("--arch", str(arch))]
    out = stage / KERNELS
    for command in (["build", "--cache", args.kernel_cache, *archs], ["pack", "--cache", args.kernel_cache, *archs]):
        extra = ["--out", str(out)] if command[0] == "pack" else []
        extra += ["--sections", *args.kernel_sections] if args.kernel_sections else []
        done = subprocess.run([sys.executable, str(script), *command, *extra])
        if done.returncode != 0:
            raise OfflineError(f"kernel_cache.py {command[0]} failed (exit {done.returncode}); see above")
    return out


def _version_here(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# -------------------------------------------------------------------------------------------- install


def assemble(folder: Path, wheel: dict, scratch: Path) -> Path:
    """The wheel file, its parts checked and rejoined (in ``scratch``) where it was split."""
    for p in wheel["parts"]:
        path = folder / p["path"]
        where = f"prepare put it in call {p['call']}" if "call" in p else "listed in the manifest"
        if not path.is_file():
            raise OfflineError(f"missing part {path} of {wheel['name']} ({where}; bring it over again)")
        if path.stat().st_size != p["size"]:
            raise OfflineError(
                f"{path} is {path.stat().st_size} bytes, the manifest says {p['size']}: "
                f"truncated or corrupted in transit; bring it over again ({where})"
            )
        if sha256_of(path) != p["sha256"]:
            raise OfflineError(
                f"{path}: sha256 does not match the manifest's: corrupted in transit; bring it over again ({where})"
            )
    if len(wheel["parts"]) == 1 and Path(wheel["parts"][0]["path"]).name == wheel["name"]:
        joined = folder / wheel["parts"][0]["path"]
    else:
        joined = scratch / wheel["name"]
        with open(joined, "wb") as dst:
            for p in wheel["parts"]:
                with open(folder / p["path"], "rb") as src:
                    shutil.copyfileobj(src, dst, MIB)
    if sha256_of(joined) != wheel["sha256"]:
        raise OfflineError(
            f"{wheel['name']}: rejoined from {len(wheel['parts'])} parts, its sha256 does not match the manifest's"
        )
    return joined


def unpack_kernels(archive: Path, folder: Path) -> None:
    """The kernel cache's archive (tools/kernel_cache.py pack) into ``folder``, Warp's kernel cache there."""
    import tarfile

    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        tar.extractall(folder, filter="data")
    modules = len({m.name.split("/", 1)[0] for m in members if "/" in m.name})
    print(f"kernel cache: {modules} module folders from {archive.name} into {folder}")


def recompress(wheel: Path, dest: Path) -> Path:
    """``wheel`` rewritten with every member LZMA-compressed (zip method 14, which pip's zipfile reads): the
    same files, so the same RECORD hashes, in about two thirds of the bytes for warp-lang's libraries."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_LZMA) as dst:
        for info in src.infolist():
            with src.open(info) as member:
                copy = zipfile.ZipInfo(info.filename, info.date_time)
                copy.external_attr, copy.compress_type = info.external_attr, zipfile.ZIP_LZMA
                with dst.open(copy, "w") as target:
                    shutil.copyfileobj(member, target, MIB)
    return out


def install(args) -> None:
    folder, target = Path(args.wheels), Path(args.target).absolute()
    if target.exists() and not target.is_dir():
        raise OfflineError(f"--target {target} is a file; give a folder (it is made if missing)")
    manifest = read_manifest(folder)
    refuse_torch([folder / w["name"] for w in manifest["wheels"]])
    refuse_torch(p for p in folder.rglob("*") if p.is_file())
    want = manifest.get("python_version")
    here = "{}.{}".format(*sys.version_info[:2])
    if want and ".".join(str(want).split(".")[:2]) != here:
        raise OfflineError(
            f"{folder / MANIFEST} holds wheels for Python {want}; this is Python {here} "
            f"({sys.executable}): run install with that Python"
        )
    listed = {p["path"] for w in [*manifest["wheels"], *manifest["files"]] for p in w["parts"]} | {MANIFEST}
    extra = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    extra = [p for p in extra if p not in listed]
    if extra:
        print(
            f"note: {len(extra)} files in {folder} are not in its manifest and are left alone: {', '.join(extra[:5])}"
        )
    with tempfile.TemporaryDirectory() as tmp:
        wheels = [assemble(folder, w, Path(tmp)) for w in manifest["wheels"]]
        print(f"{len(wheels)} wheels checked against {folder / MANIFEST}; installing into {target}")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--upgrade",
            "--target",
            str(target),
            *map(str, wheels),
        ]
        done = subprocess.run(cmd)
        if done.returncode != 0:
            raise OfflineError(f"pip install --target {target} failed (exit {done.returncode}); see above")
        for entry in manifest["files"]:
            archive = assemble(folder, entry, Path(tmp))
            if entry["name"] == KERNELS and args.kernels:
                unpack_kernels(archive, Path(args.kernels))
    print(f"export PYTHONPATH={target}" + (f" WARP_CACHE_PATH={Path(args.kernels).absolute()}" if args.kernels else ""))


# ----------------------------------------------------------------------------------------------- main


def _python_version(text: str) -> str:
    if not re.fullmatch(r"3\.\d+(\.\d+)?", text):
        raise argparse.ArgumentTypeError(f"{text!r}: give MAJOR.MINOR[.MICRO] of a Python 3, such as 3.12")
    return text


def _platform(text: str) -> str:
    if not _PLATFORM.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a Linux wheel platform tag, such as manylinux_2_28_x86_64, manylinux2014_x86_64, "
            "musllinux_1_2_x86_64 or linux_x86_64"
        )
    return text


def _mib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of MiB, such as 48")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="offline.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{prepare,install}")
    p = sub.add_parser(
        "prepare", help="download the wheels the target lacks, build forge_gpu's, split, write the manifest"
    )
    p.add_argument("--out", required=True, help="folder for the wheels, their parts and manifest.json")
    p.add_argument("--python-version", type=_python_version, default=DEFAULT_PYTHON, help="target Python (3.12)")
    p.add_argument(
        "--platform",
        type=_platform,
        nargs="+",
        action="extend",
        metavar="TAG",
        help="target wheel platform tags (default: manylinux_2_39..2_17, manylinux2014/2010/1, x86_64)",
    )
    p.add_argument("--part-mib", type=_mib, default=48.0, help="split files larger than this (48)")
    p.add_argument("--call-mib", type=_mib, default=60.0, help="what one call to the GPU machine carries (60)")
    p.add_argument(
        "--recompress-mib", type=float, default=4.0, help="rewrite wheels over this LZMA-compressed (4; 0: none)"
    )
    p.add_argument("--kernel-cache", help="build the CUDA kernel cache here (kept: reruns compile only what changed)")
    p.add_argument("--arch", type=int, action="append", help="CUDA arch of the kernel cache (90); repeatable")
    p.add_argument("--kernel-sections", nargs="+", help=argparse.SUPPRESS)  # a subset, for the rehearsal
    p.add_argument(
        "--have",
        help="what the target has: `pip list --format=freeze` output or one name a line "
        "(default: the list in this script, from KINDS.md)",
    )
    i = sub.add_parser("install", help="check, rejoin and install the wheels into a folder of their own")
    i.add_argument("--wheels", required=True, help="the folder prepare wrote (manifest.json, call1/, ...)")
    i.add_argument("--target", required=True, help="folder to install into; put it on PYTHONPATH")
    i.add_argument("--kernels", help="unpack the carried kernel cache here; export WARP_CACHE_PATH to it")
    args = parser.parse_args(argv)
    try:
        (prepare if args.command == "prepare" else install)(args)
    except OfflineError as exc:
        print(f"offline.py {args.command}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
