"""An offline install carried in parts of limited size: a wheelhouse and a kernel cache, packed, checked, rejoined.

On a machine with the index (the target's platform and Python, or say them: pip download's --platform,
--python-version and --only-binary=:all:):
    pip download -d wheels "forge-gpu[torch]"                      # pip resolves and fetches every wheel
    forge-gpu precompile --arch 90 --out kernel-cache              # optional: the CUDA kernels, built ahead
    python tools/wheelhouse.py pack --wheels wheels --kernel-cache kernel-cache --part-mib 500 --out parts
Carry the folder ``parts`` (parts of at most --part-mib MiB and manifest.json), then on the offline machine:
    python tools/wheelhouse.py unpack --parts parts --out house [--install]

pack writes one tar stream (``wheels/`` and ``kernel-cache/``) split into ``wheelhouse.tar.NNN`` and
manifest.json: each part's size and SHA-256. unpack checks every part against the manifest before it reads any,
rejoins and extracts them, and prints the install command (``pip install --no-index --find-links OUT/wheels``) and
the WARP_CACHE_PATH to set; --install runs that command. pip does the resolving, on both sides. Exit status 2 on a
bad pack argument, 1 on a missing or damaged part (named, nothing extracted).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

MIB = 1 << 20
MANIFEST = "manifest.json"
PART = "wheelhouse.tar.{:03d}"
WHEELS, KERNEL_CACHE = "wheels", "kernel-cache"


class Refused(Exception):
    """A bad argument or a damaged set of parts: one line that names it."""


class PartWriter:
    """A write-only file that spreads what it is given over parts of at most ``part_bytes``."""

    def __init__(self, out: Path, part_bytes: int):
        self.out, self.part_bytes = out, part_bytes
        self.parts: list[dict] = []
        self._file = None

    def write(self, data) -> int:
        view = memoryview(data)
        while view:
            if self._file is None or self.parts[-1]["bytes"] == self.part_bytes:
                self._next()
            room = self.part_bytes - self.parts[-1]["bytes"]
            chunk = view[:room]
            self._file.write(chunk)
            self._hash.update(chunk)
            self.parts[-1]["bytes"] += len(chunk)
            view = view[len(chunk) :]
        return len(data)

    def _next(self) -> None:
        self._close_part()
        name = PART.format(len(self.parts))
        self._file, self._hash = open(self.out / name, "wb"), hashlib.sha256()
        self.parts.append({"name": name, "bytes": 0})

    def _close_part(self) -> None:
        if self._file is not None:
            self._file.close()
            self.parts[-1]["sha256"] = self._hash.hexdigest()
            self._file = None

    def close(self) -> None:
        self._close_part()


def pack(wheels: Path, kernel_cache: Path | None, part_mib: int, out: Path) -> list[dict]:
    """``wheels`` (and ``kernel_cache``) as parts of at most ``part_mib`` MiB under ``out``, with the manifest."""
    if part_mib < 1:
        raise Refused(f"--part-mib {part_mib}: must be an integer >= 1")
    for flag, folder in (("--wheels", wheels), ("--kernel-cache", kernel_cache)):
        if folder is not None and not folder.is_dir():
            raise Refused(f"{flag} {folder}: no such folder")
    if not any(wheels.glob("*.whl")):
        raise Refused(f"--wheels {wheels}: holds no .whl file (make it with: pip download -d {wheels} forge-gpu)")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise Refused(f"--out {out}: not empty")
    writer = PartWriter(out, part_mib * MIB)
    with tarfile.open(fileobj=writer, mode="w|") as tar:
        tar.add(wheels, arcname=WHEELS)
        if kernel_cache is not None:
            tar.add(kernel_cache, arcname=KERNEL_CACHE)
    writer.close()
    manifest = {"part_mib": part_mib, "parts": writer.parts}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return writer.parts


def check_parts(parts: Path) -> list[Path]:
    """The parts the manifest lists, each checked (present, its size, its SHA-256); Refused at the first bad one."""
    try:
        manifest = json.loads((parts / MANIFEST).read_text())
        listed = manifest["parts"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise Refused(f"--parts {parts}: no readable {MANIFEST} ({exc})") from exc
    paths = []
    for entry in listed:
        path = parts / entry["name"]
        if not path.is_file():
            raise Refused(f"part {path}: missing ({len(listed)} parts listed in {parts / MANIFEST})")
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(MIB):
                digest.update(chunk)
        size = path.stat().st_size
        if size != entry["bytes"] or digest.hexdigest() != entry["sha256"]:
            raise Refused(f"part {path}: damaged ({size} bytes, SHA-256 differs from {MANIFEST}); carry it again")
        paths.append(path)
    return paths


class PartReader:
    """A read-only file of the parts, one after another."""

    def __init__(self, paths: list[Path]):
        self.paths, self._file = list(paths), None

    def read(self, size: int = -1) -> bytes:
        while True:
            if self._file is None:
                if not self.paths:
                    return b""
                self._file = open(self.paths.pop(0), "rb")
            data = self._file.read(size)
            if data or size == 0:
                return data
            self._file.close()
            self._file = None


def unpack(parts: Path, out: Path) -> Path:
    """Check, rejoin and extract the parts into ``out``; ``out``."""
    paths = check_parts(parts)
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=PartReader(paths), mode="r|") as tar:
        tar.extractall(out, filter="data")
    return out


def install_command(out: Path, package: str) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(out / WHEELS), package]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="a wheelhouse (and a kernel cache) as parts of at most N MiB with checksums")
    p.add_argument("--wheels", type=Path, required=True, help="the folder pip download -d filled")
    p.add_argument("--kernel-cache", type=Path, default=None, help="a kernel cache (forge-gpu precompile --out)")
    p.add_argument("--part-mib", type=int, required=True, help="the largest part, in MiB")
    p.add_argument("--out", type=Path, required=True, help="a new (or empty) folder for the parts")
    u = sub.add_parser("unpack", help="check every part, rejoin and extract them; print (or run) the install")
    u.add_argument("--parts", type=Path, required=True, help="the folder of the parts and manifest.json")
    u.add_argument("--out", type=Path, required=True, help="where wheels/ and kernel-cache/ go")
    u.add_argument("--install", action="store_true", help="run the pip install command too")
    u.add_argument("--package", default="forge-gpu", help="what to install (default forge-gpu; e.g. forge-gpu[torch])")
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            written = pack(args.wheels, args.kernel_cache, args.part_mib, args.out)
            total = sum(part["bytes"] for part in written)
            print(f"{len(written)} parts of at most {args.part_mib} MiB ({total / MIB:.1f} MiB) in {args.out}")
            return 0
        out = unpack(args.parts, args.out)
    except Refused as exc:
        print(f"wheelhouse.py: {exc}", file=sys.stderr)
        return 2 if args.command == "pack" else 1
    command = install_command(out.absolute(), args.package)
    print(f"install: {shlex.join(command)}")
    if (out / KERNEL_CACHE).is_dir():
        print(f"kernel cache: export WARP_CACHE_PATH={(out / KERNEL_CACHE).absolute()}")
    if args.install:
        return subprocess.run(command).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
