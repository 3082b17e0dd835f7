"""forge-gpu precompile: the kernel cache it builds holds every module a fresh process loads for the task, so
that process compiles none; the CUDA binaries are where Warp looks them up; bad input is one line, exit 2."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forge_gpu.cli import main

# A fresh process with the cache: cartpole at another size than discovery's, made, reset and stepped on the CPU
# (by the random policy, a torch learner with history and chunks, and with the expert's labels and a mix),
# with Warp's module-load lines ("Module NAME HASH load on device 'cpu' took ... (compiled|cached)").
FRESH = """
import forge_gpu
env = forge_gpu.sim.make("cartpole", num_envs=5, device="cpu", seed=2)
env.reset()
policy = forge_gpu.sim.make_policy("random", env)
for _ in range(4):
    env.step(policy(env.observation))
import torch
def fn(observation):
    return torch.ones((5, 3, 1), dtype=torch.float32) * observation["proprio"][:, -1, :1, None]
fn.history, fn.chunk = 3, 3
for execution in ("open_loop", "ensemble"):
    learner = forge_gpu.sim.TorchPolicy(env, fn, execution=execution)
    for _ in range(4):
        env.step(learner())
labelled = forge_gpu.sim.make("cartpole", num_envs=5, device="cpu", seed=2, label="expert", expert_mix=0.3)
labelled.reset()
for _ in range(4):
    labelled.step(policy(labelled.observation))
"""
LOAD = re.compile(r"^Module (\S+) .*load on device 'cpu'.*\((compiled|cached)\)", re.M)


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_a_fresh_process_finds_every_cpu_module_in_the_precompiled_cache(tmp_path):
    """forge-gpu precompile, run as a user runs it (its own process: modules this test process already loaded,
    with other overloads of Newton's generic kernels, would not be the states a fresh process loads)."""
    cache = tmp_path / "cache"
    command = [sys.executable, "-m", "forge_gpu", "precompile", "--arch", "cpu", "--out", str(cache), "cartpole"]
    made = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stderr[-3000:]
    assert f"WARP_CACHE_PATH={cache}" in made.stdout
    before = listing(cache)
    assert any(name.endswith(".o") for name in before)
    env = dict(os.environ, WARP_CACHE_PATH=str(cache), FORGE_GPU_VERBOSE="1")
    done = subprocess.run([sys.executable, "-c", FRESH], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    loads = LOAD.findall(done.stdout + done.stderr)
    assert loads, (done.stdout + done.stderr)[-3000:]
    assert [name for name, how in loads if how == "compiled"] == []
    assert listing(cache) == before  # no module folder or file added


def test_cuda_binaries_are_where_warp_looks_them_up(tmp_path):
    """forge_gpu's own modules of cartpole's task file compiled for sm_90 and sm_80 (NVRTC, no GPU): for each, the
    .cubin at the arch and the .ptx at Warp's PTX arch, under the names Warp's loader computes. (Every module of
    the task, MuJoCo Warp's included, is a few minutes of NVRTC on two cores: the same code path, left out here.)"""
    from forge_gpu._src.machine.precompile import precompile, ptx_arch

    cache = tmp_path / "cache"
    cache.mkdir()
    task_file = str(Path(__file__).resolve().parents[2] / "configs" / "cartpole.toml")
    result = precompile([task_file], [90, 80], cache, only=["forge_gpu"], say=lambda line: None)
    assert result.failed == [] and result.variants and result.cache.parent == cache
    names = {v.module.name for v in result.variants}
    assert {"forge_gpu.kernels.env", "forge_gpu.kernels.policies"} <= names
    for v in result.variants:
        folder = result.cache / v.identifier
        # A generic kernel's module moves on to a new hash as overloads join it: the names Warp computes for the
        # module now, with its hash then.
        now = v.module.get_module_identifier(v.block_dim)

        def then(name: str) -> str:
            return name.replace(now, v.identifier)  # noqa: B023

        assert (folder / then(v.module._get_meta_name(v.block_dim))).is_file()
        for arch in (90, 80):
            cubin = then(v.module._get_compile_output_name(None, arch, use_ptx=False, block_dim=v.block_dim))
            ptx = then(v.module._get_compile_output_name(None, ptx_arch(arch), use_ptx=True, block_dim=v.block_dim))
            assert (folder / cubin).stat().st_size > 0 and (folder / ptx).stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--arch", "40"], "--arch 40"),
        (["--arch", "sm90"], "--arch sm90"),
        (["--arch", "90", "missing.toml"], "missing.toml"),
        (["--arch", "90", "catpole"], "'catpole'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, named):
    assert main(["precompile", *argv, "--out", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err, err
    assert not (tmp_path / "cache").exists()


def test_an_unwritable_out_is_refused(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["precompile", "--arch", "cpu", "--out", str(blocker / "cache")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--out {blocker / 'cache'}" in err, err
