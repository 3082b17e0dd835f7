"""tools/offline.py: wheels laid out as prepare leaves them install, with no index, into a folder of their own
(issue 21). No network: the wheels are forge_gpu's own, built here, and tiny ones written by the test."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from scripts import TOOLS, load_script

REPO = Path(__file__).resolve().parent.parent
SCRIPT = TOOLS / "offline.py"
HERE_PYTHON = "{}.{}".format(*sys.version_info[:2])


offline = load_script(SCRIPT, "tools_offline")


def tiny_wheel(folder: Path, name: str, version: str = "0.1", requires=(), payload: int = 0, tag="py3-none-any"):
    """A minimal valid wheel: ``name/__init__.py`` (padded with ``payload`` bytes), METADATA, WHEEL, RECORD."""
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n" + "#" * payload + "\n",
        f"{name}-{version}.dist-info/METADATA": "\n".join(
            ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
            + [f"Requires-Dist: {r}" for r in requires]
        )
        + "\n",
        f"{name}-{version}.dist-info/WHEEL": "\n".join(
            ["Wheel-Version: 1.0", "Generator: test", "Root-Is-Purelib: true", f"Tag: {tag}", ""]
        ),
    }
    record = f"{name}-{version}.dist-info/RECORD"
    lines = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(text.encode())}")
    files[record] = "\n".join([*lines, f"{record},,"]) + "\n"
    path = folder / f"{name}-{version}-{tag}.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, text)
    return path


def run_install(wheels: Path, target: Path, cwd: Path):
    return subprocess.run(
        [sys.executable, str(SCRIPT), "install", "--wheels", str(wheels), "--target", str(target)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture(scope="module")
def project_wheel(tmp_path_factory):
    return offline.build_project_wheel(tmp_path_factory.mktemp("own"))


def test_install_rejoins_and_imports_forge_gpu_from_the_target(project_wheel, tmp_path):
    extra = tiny_wheel(tmp_path / "built", "tinyforge_extra")
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    # What prepare does after downloading, with a part size that splits the project's wheel and not the tiny one.
    manifest = offline.lay_out(
        [project_wheel, extra], wheels, part_bytes=64 * 1024, call_bytes=64 * offline.MIB, python_version=HERE_PYTHON
    )
    parts = {w["name"]: [p["path"] for p in w["parts"]] for w in manifest["wheels"]}
    assert len(parts[project_wheel.name]) >= 2
    assert all(p.split("/")[-1].startswith(project_wheel.name + ".part") for p in parts[project_wheel.name])
    assert [p.split("/")[-1] for p in parts[extra.name]] == [extra.name]
    assert not list(wheels.rglob(project_wheel.name))  # only its parts travel

    done = run_install(wheels, target, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"export PYTHONPATH={target}"

    probe = (
        "import importlib.resources, importlib.util, json, forge_gpu, tinyforge_extra\n"
        "print(json.dumps({'forge_gpu': forge_gpu.__file__, 'extra': tinyforge_extra.__file__,\n"
        "  'kernels': importlib.util.find_spec('forge_gpu.kernels').origin,\n"
        "  'rng': importlib.util.find_spec('forge_gpu.kernels.rng').origin,\n"
        "  'cartpole': str(importlib.resources.files('forge_gpu.configs') / 'cartpole.toml'),\n"
        "  'cartpole_is_file': (importlib.resources.files('forge_gpu.configs') / 'cartpole.toml').is_file()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    seen = subprocess.run(
        [sys.executable, "-c", probe],
        env={**env, "PYTHONPATH": str(target)},
        cwd=tmp_path,  # outside the repository: its forge_gpu/ is not on the path
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert seen.returncode == 0, seen.stderr
    found = json.loads(seen.stdout)
    assert found.pop("cartpole_is_file") is True
    for what, path in found.items():
        assert Path(path).resolve().is_relative_to(target.resolve()), (what, path)
    assert Path(found["kernels"]).parent == target / "forge_gpu" / "kernels"


def _split_tiny(tmp_path):
    extra = tiny_wheel(tmp_path / "built", "tinyforge_split", payload=5000)
    wheels = tmp_path / "wheels"
    manifest = offline.lay_out(
        [extra], wheels, part_bytes=1024, call_bytes=64 * offline.MIB, python_version=HERE_PYTHON
    )
    (entry,) = manifest["wheels"]
    assert len(entry["parts"]) >= 3
    return wheels, [wheels / p["path"] for p in entry["parts"]]


@pytest.mark.parametrize("damage", ["corrupt", "truncate", "missing"])
def test_a_damaged_or_missing_part_is_refused_naming_it(tmp_path, capsys, damage):
    wheels, parts = _split_tiny(tmp_path)
    bad = parts[1]
    if damage == "corrupt":
        data = bytearray(bad.read_bytes())
        data[10] ^= 0xFF
        bad.write_bytes(bytes(data))
    elif damage == "truncate":
        bad.write_bytes(bad.read_bytes()[:-1])
    else:
        bad.unlink()
    target = tmp_path / "site"
    assert offline.main(["install", "--wheels", str(wheels), "--target", str(target)]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err
    assert ("missing part" if damage == "missing" else "bring it over again") in err
    assert not target.exists()


def test_a_torch_wheel_is_refused(tmp_path, capsys):
    wheels, _ = _split_tiny(tmp_path)
    torch = tiny_wheel(wheels / "call1", "torch", "2.11.0", tag="cp312-cp312-manylinux_2_28_x86_64")
    target = tmp_path / "site"
    assert offline.main(["install", "--wheels", str(wheels), "--target", str(target)]) == 1
    err = capsys.readouterr().err
    assert str(torch) in err and "CUDA build of torch" in err
    assert not target.exists()
    # A part of one, too; and prepare's own layout never takes one.
    torch.rename(wheels / "call1" / (torch.name + ".part000"))
    assert offline.main(["install", "--wheels", str(wheels), "--target", str(target)]) == 1
    assert "torch wheel" in capsys.readouterr().err
    with pytest.raises(offline.OfflineError, match="torch wheel"):
        offline.lay_out([torch.parent / (torch.name + ".part000")], tmp_path / "again", 1024, 64 * offline.MIB)


def test_walk_follows_extras_and_markers_for_the_target_and_skips_what_the_image_has(tmp_path, monkeypatch):
    built = tmp_path / "built"
    root = tiny_wheel(
        built,
        "rootpkg",
        requires=[
            "Alpha[X]>=1",
            "torch>=2.4",
            "present[e]",
            "winonly; sys_platform == 'win32'",
            "oldpy; python_version < '3.8'",
            "newpy; python_version >= '3.12' and platform_machine == 'x86_64'",
            "tool; extra == 'dev'",
        ],
    )
    # alpha[x] asks for beta and alpha[y], which asks for yonly; gamma asks for present, which the image has:
    # its own needs (epsilon) are the image's, those of its extra e (delta) are not.
    alpha_needs = ["beta; extra == 'x'", "gamma", "alpha[y]; extra == 'x'", "yonly; extra == 'y'", "tool; extra == 'z'"]
    wheels = {
        "alpha": tiny_wheel(built, "alpha", requires=alpha_needs),
        "beta": tiny_wheel(built, "beta"),
        "gamma": tiny_wheel(built, "gamma", requires=["present"]),
        "delta": tiny_wheel(built, "delta"),
        "newpy": tiny_wheel(built, "newpy"),
        "yonly": tiny_wheel(built, "yonly"),
    }
    installed = {"present": [offline.parse_requirement(r) for r in ["epsilon", "delta; extra == 'e'"]]}
    monkeypatch.setattr(offline, "installed_requirements", lambda name: installed.get(name))
    asked = []

    def fetch(pin):
        asked.append(pin)
        return wheels[offline.normalize(pin.split(">")[0].split("=")[0])]

    env = offline.target_environment("3.12", offline.DEFAULT_PLATFORMS)
    closure = offline.walk(root, {"present", "epsilon"}, env, fetch)
    assert sorted(closure.wheels) == ["alpha", "beta", "delta", "gamma", "newpy", "yonly"]
    assert asked[0] == "alpha>=1"  # not installed here: the requirement as written
    assert closure.never == {"torch"}
    assert closure.had == {"present": {"e"}}
    assert any("alpha is not installed here" in n for n in closure.notes)
    # Python 3.11 instead: newpy's marker no longer holds.
    env311 = offline.target_environment("3.11", offline.DEFAULT_PLATFORMS)
    assert "newpy" not in offline.walk(root, {"present", "epsilon"}, env311, fetch).wheels


@pytest.mark.parametrize(
    "marker, extra, expected",
    [
        (
            "(platform_machine != 'ARM64' and extra == 'sim') or (sys_platform != 'win32' and extra == 'sim')",
            "sim",
            True,
        ),
        ("(platform_machine != 'ARM64' and extra == 'sim') or (sys_platform != 'win32' and extra == 'sim')", "", False),
        ('python_version >= "3.10" and python_version < "3.13" and platform_machine == "aarch64"', "", False),
        ("python_full_version < '3.15' and platform_machine != 'aarch64'", "", True),
        ('python_version ~= "3.8"', "", True),
        ("python_version == '3.1'", "", False),
        ('"linux" in sys_platform and implementation_name == "cpython"', "", True),
        ("extra == 'Torch_CU13'", "torch-cu13", True),
    ],
)
def test_markers_are_evaluated_for_the_target(marker, extra, expected):
    env = offline.target_environment("3.12", ["manylinux_2_28_x86_64"])
    assert offline.evaluate_marker(marker, {**env, "extra": extra}) is expected


@pytest.mark.parametrize(
    "argv, named",
    [
        (["prepare", "--out", "w", "--part-mib", "0"], "'0'"),
        (["prepare", "--out", "w", "--part-mib", "lots"], "'lots'"),
        (["prepare", "--out", "w", "--python-version", "3.x"], "'3.x'"),
        (["prepare", "--out", "w", "--platform", "win_amd64"], "'win_amd64'"),
    ],
)
def test_bad_arguments_name_the_value_and_what_is_allowed(argv, named, capsys):
    with pytest.raises(SystemExit) as exc:
        offline.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "give" in err


def test_install_errors_name_what_is_wrong(tmp_path, capsys):
    assert offline.main(["install", "--wheels", str(tmp_path / "nowhere"), "--target", str(tmp_path / "t")]) == 1
    assert str(tmp_path / "nowhere") in capsys.readouterr().err
    wheels, _ = _split_tiny(tmp_path)
    manifest = json.loads((wheels / "manifest.json").read_text())
    manifest["python_version"] = "3.99"
    (wheels / "manifest.json").write_text(json.dumps(manifest))
    assert offline.main(["install", "--wheels", str(wheels), "--target", str(tmp_path / "t")]) == 1
    assert "Python 3.99" in capsys.readouterr().err
    with pytest.raises(offline.OfflineError, match="at most"):
        offline.lay_out(
            [], tmp_path / "x", part_bytes=63 * offline.MIB, call_bytes=64 * offline.MIB, reserve_bytes=offline.MIB
        )
    have = tmp_path / "have.txt"
    have.write_text("numpy==2.5.2\npyarrow\nnot a name!\n")
    with pytest.raises(offline.OfflineError, match="line 3"):
        offline.read_have(have)
