"""The GPU run rehearsed on the CPU (issue 33): the tests section's pytest command in the wheel-install layout,
the delay kernel's calibration, the results as one file after every section, the kernel cache built ahead,
LZMA-recompressed wheels that pip installs with no index, and a plan of at most 3 calls below 60 MiB each."""

import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from scripts import TOOLS, load_script

TOOLS_USED = ("gpu_check", "offline", "gpu_plan", "pytest_driver")

REPO = Path(__file__).resolve().parent.parent
gpu_check, offline, gpu_plan, pytest_driver = (
    load_script(TOOLS / f"{name}.py", f"tools_{name}_plan") for name in TOOLS_USED
)


def test_the_tests_sections_pytest_collects_the_tests_that_import_test_helpers():
    """Defect 1: pytest ran with -P from the root, so ``from tests.crashsim import ...`` (tests/test_crash.py)
    failed to import and the section ran no test. The command now puts the root last on PYTHONPATH."""
    command, env = pytest_driver.pytest_command(["tests/test_crash.py"], None, REPO)
    assert "-P" in command  # the installed forge_gpu, not the source tree's, comes first
    done = subprocess.run([*command, "--collect-only", "-q"], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert "collected" in summary and "error" not in summary, summary


def test_the_delay_kernel_is_timed_after_a_warm_launch():
    """Defect 2: the first launch's time includes loading or compiling the module; timed, it made the kernel look
    slow and the delay far too short. A fake device: 4 s for the first launch, then 1e-5 ms per iteration."""
    calls = []

    def launch_ms(iterations):
        calls.append(iterations)
        return 4000.0 if len(calls) == 1 else iterations * 1e-5

    iterations = gpu_check.delay_iterations(launch_ms, 0.25)
    assert iterations * 1e-5 == pytest.approx(250.0, rel=0.05)
    assert calls[0] == 1  # the warm-up launch is tiny


def test_the_results_come_back_as_one_file_after_every_section(tmp_path):
    """Defect 4: --tar rewrites one .tgz (table, JSON, logs) after every section, so a call cut at its limit
    returns what was done; a section left out by --deadline-s is a skipped row."""
    tgz = tmp_path / "OUT" / gpu_check.TAR_NAME
    args = ["--smoke", "--test-section", "crash", "--only", "kernels", "--out", str(tmp_path / "r")]
    assert gpu_check.main([*args, "--tar", str(tgz), "--deadline-s", "120"]) == 1  # the crash hook fails
    with tarfile.open(tgz) as tar:
        names = tar.getnames()
        payload = json.load(tar.extractfile("gpu_check.json"))
    assert [s["section"] for s in payload["sections"]] == ["crash", "machine", "kernels"]
    assert {"gpu_check.md", "gpu_check_logs/crash.log", "gpu_check_logs/kernels.log"} <= set(names)
    assert gpu_check.main([*args, "--tar", str(tgz), "--deadline-s", "1"]) == 1
    with tarfile.open(tgz) as tar:
        payload = json.load(tar.extractfile("gpu_check.json"))
    assert {s["status"] for s in payload["sections"]} == {"skipped"}


def test_a_kernel_cache_built_ahead_holds_what_warp_looks_up(tmp_path):
    """build compiles the discovered modules for sm_90 with no GPU; verify, in a fresh process, finds every file
    Warp will look for (wp_NAME_HASH.sm90.cubin and .meta); a file gone is named; pack holds them and the index."""
    cache, script = tmp_path / "cache", str(TOOLS / "kernel_cache.py")
    run = [sys.executable, script]
    done = subprocess.run([*run, "build", "--cache", str(cache), "--sections", "delay"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    assert folder.name.startswith("wp_gpu_check_delay_") and (folder / f"{folder.name}.sm90.cubin").is_file()
    verify = [*run, "verify", "--cache", str(cache), "--sections", "delay"]
    done = subprocess.run(verify, capture_output=True, text=True)
    assert done.returncode == 0 and "missing 0 files" in done.stdout, done.stdout + done.stderr
    archive = tmp_path / "kernels.tar.xz"
    done = subprocess.run([*run, "pack", "--cache", str(cache), "--sections", "delay", "--out", str(archive)])
    assert done.returncode == 0
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))
        assert f"{folder.name}/{folder.name}.sm90.cubin" in tar.getnames()
    assert index["archs"] == [90] and [e["identifier"] for e in index["entries"]] == [folder.name]
    (folder / f"{folder.name}.sm90.cubin").unlink()
    done = subprocess.run(verify, capture_output=True, text=True)
    assert done.returncode == 1 and f"missing {folder.name}/{folder.name}.sm90.cubin" in done.stdout


def test_recompressed_wheels_and_the_kernel_archive_install_with_no_index(tmp_path):
    """A wheel rewritten LZMA-compressed installs with pip --no-index and imports; the kernel archive travels in
    the manifest's files and install --kernels unpacks it."""
    tiny = _load_offline_test_helpers().tiny_wheel(tmp_path / "built", "tinylzma", payload=300_000)
    packed = offline.recompress(tiny, tmp_path / "lzma")
    with zipfile.ZipFile(packed) as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_LZMA}
    archive = tmp_path / offline.KERNELS
    (tmp_path / "k" / "wp_x_1234567").mkdir(parents=True)
    (tmp_path / "k" / "wp_x_1234567" / "wp_x_1234567.meta").write_text("{}")
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(tmp_path / "k" / "wp_x_1234567", arcname="wp_x_1234567")
    wheels = tmp_path / "wheels"
    here = "{}.{}".format(*sys.version_info[:2])
    manifest = offline.lay_out([packed], wheels, 1 << 20, 60 << 20, files=[archive], python_version=here)
    assert [f["name"] for f in manifest["files"]] == [offline.KERNELS]
    target, kernels = tmp_path / "site", tmp_path / "kcache"
    command = [sys.executable, str(TOOLS / "offline.py"), "install", "--wheels", str(wheels), "--target", str(target)]
    done = subprocess.run([*command, "--kernels", str(kernels)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (kernels / "wp_x_1234567" / "wp_x_1234567.meta").is_file()
    code = "import tinylzma; print(tinylzma.VERSION)"
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout == "0.1\n"


def _load_offline_test_helpers():
    return load_script(REPO / "tests" / "test_offline.py", "tests_offline_helpers")


def test_the_plan_has_at_most_three_calls_below_60_mib_and_leaves_40_percent(tmp_path, monkeypatch):
    """Wheel parts of 150 MiB in all (what prepare leaves, LZMA-recompressed) in 3 calls, each below 60 MiB with
    the repository; the plan leaves at least 40% of the 900 s; 4 calls, or a call of 60 MiB, is a problem."""
    wheels = REPO / "wheels-test-plan"
    monkeypatch.setattr(gpu_plan, "REPO", REPO)
    offline.clear_previous(wheels)
    try:
        big = [tmp_path / f"w{k}-1.0-py3-none-any.whl" for k in range(3)]
        for path in big:
            path.write_bytes(b"\0" * (50 << 20))
        offline.lay_out(big, wheels, 48 << 20, 60 << 20, offline.tree_bytes(wheels), python_version="3.12")
        plan = gpu_plan.calls(wheels)
        assert len(plan) == 3 and gpu_plan.problems(plan) == [], gpu_plan.problems(plan)
        assert all(c["carry_bytes"] < 60 << 20 for c in plan)
        assert "gpu_check.py" in plan[-1]["command"] and "--tar $OUT/gpu_check.tgz" in plan[-1]["command"]
        assert gpu_plan.budget(plan)["left_share"] >= 0.4
        four = [*plan, dict(plan[0], call=4)]
        assert any("4 calls" in p for p in gpu_plan.problems(four))
        heavy = [dict(plan[0], carry_bytes=60 << 20)]
        assert any("below 60 MiB" in p for p in gpu_plan.problems(heavy))
    finally:
        offline.clear_previous(wheels)
        if wheels.exists():
            wheels.rmdir()
