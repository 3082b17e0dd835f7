"""tools/wheelhouse.py: a wheelhouse and a kernel cache packed into parts of at most N MiB rejoin byte for byte;
a damaged or missing part is refused, naming it, before anything is extracted."""

import os

import pytest
from helpers.scripts import TOOLS, load_script

wheelhouse = load_script(TOOLS / "wheelhouse.py", "tools_wheelhouse")
MIB = 1 << 20


@pytest.fixture
def packed(tmp_path):
    """2.5 MiB of wheels and a small kernel cache, packed in parts of at most 1 MiB."""
    wheels, cache = tmp_path / "wheels", tmp_path / "cache" / "wp_mod_abc1234"
    wheels.mkdir()
    cache.mkdir(parents=True)
    files = {
        wheels / "forge_gpu-1.0-py3-none-any.whl": os.urandom(MIB + 12345),
        wheels / "other-2.0-py3-none-any.whl": os.urandom(MIB + MIB // 2),
        cache / "wp_mod_abc1234.sm90.cubin": os.urandom(5000),
        cache / "wp_mod_abc1234.meta": b"{}",
    }
    for path, data in files.items():
        path.write_bytes(data)
    parts = tmp_path / "parts"
    argv = ["pack", "--wheels", str(wheels), "--kernel-cache", str(tmp_path / "cache"), "--part-mib", "1"]
    assert wheelhouse.main([*argv, "--out", str(parts)]) == 0
    return tmp_path, files, parts


def test_parts_are_at_most_n_mib_and_rejoin_byte_for_byte(packed, capsys):
    tmp_path, files, parts = packed
    written = sorted(parts.glob("wheelhouse.tar.*"))
    assert len(written) >= 3 and all(p.stat().st_size <= MIB for p in written)
    capsys.readouterr()
    out = tmp_path / "house"
    assert wheelhouse.main(["unpack", "--parts", str(parts), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    for path, data in files.items():
        top = "wheels" if path.parent.name == "wheels" else "kernel-cache/wp_mod_abc1234"
        assert (out / top / path.name).read_bytes() == data
    assert f"--no-index --find-links {out.absolute() / 'wheels'} forge-gpu" in said
    assert f"WARP_CACHE_PATH={out.absolute() / 'kernel-cache'}" in said


def test_a_damaged_part_is_refused_naming_it(packed, capsys):
    tmp_path, _, parts = packed
    second = parts / "wheelhouse.tar.001"
    data = bytearray(second.read_bytes())
    data[1000] ^= 0xFF
    second.write_bytes(bytes(data))
    capsys.readouterr()
    assert wheelhouse.main(["unpack", "--parts", str(parts), "--out", str(tmp_path / "house")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(second) in err and "damaged" in err, err
    assert not (tmp_path / "house").exists()


def test_a_missing_part_is_refused_naming_it(packed, capsys):
    tmp_path, _, parts = packed
    last = sorted(parts.glob("wheelhouse.tar.*"))[-1]
    last.unlink()
    capsys.readouterr()
    assert wheelhouse.main(["unpack", "--parts", str(parts), "--out", str(tmp_path / "house")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(last) in err and "missing" in err, err
    assert not (tmp_path / "house").exists()


@pytest.mark.parametrize(("flag", "value"), [("--part-mib", "0"), ("--wheels", "nowhere")])
def test_bad_pack_arguments_are_one_line_and_exit_2(tmp_path, capsys, flag, value):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "a-1.0-py3-none-any.whl").write_bytes(b"x")
    args = {"--wheels": str(wheels), "--part-mib": "1", "--out": str(tmp_path / "parts")}
    args[flag] = str(tmp_path / value) if flag == "--wheels" else value
    assert wheelhouse.main(["pack", *(x for kv in args.items() for x in kv)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{flag} {args[flag]}" in err, err


def tiny_wheel(folder, name: str = "tinyhouse") -> None:
    """A pure-Python wheel of one module, ``NAME.VALUE == 7``, written by hand (RECORD with its hashes)."""
    import base64
    import hashlib
    import zipfile

    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}.py": b"VALUE = 7\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)


def test_unpack_install_runs_pip_without_an_index(tmp_path):
    """unpack --install in a fresh virtual environment: pip installs the carried wheel with --no-index."""
    import subprocess
    import venv

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    tiny_wheel(wheels)
    assert wheelhouse.main(["pack", "--wheels", str(wheels), "--part-mib", "1", "--out", str(tmp_path / "parts")]) == 0
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    script = [python, str(TOOLS / "wheelhouse.py"), "unpack", "--parts", str(tmp_path / "parts")]
    script += ["--out", str(tmp_path / "house"), "--install", "--package", "tinyhouse"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV"))}
    done = subprocess.run(script, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--no-index" in done.stdout
    code = "import tinyhouse; print(tinyhouse.VALUE)"
    check = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert check.stdout.strip() == "7", check.stderr
