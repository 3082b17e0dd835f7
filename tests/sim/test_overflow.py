"""MuJoCo-Warp's overflows: counted per step and per collection, said once, never printed by the kernels; the
shipped contact tasks leave room for their contacts at a few envs."""

import json
import warnings

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.sim.solver import FLAGS, MAX_LISTED, OverflowTally, overflow_lines
from forge_gpu.cli import main
from forge_gpu.recording import collect
from forge_gpu.sim import SolverOverflowWarning, load_policy

BROADPHASE, LINESEARCH = FLAGS["BROADPHASE"], FLAGS["LS_ITERATIONS"]
PRINTED = "please increase"  # every MuJoCo-Warp overflow printf says it
LIMITS = {"nconmax": 48, "njmax": 64, "iterations": 10, "ls_iterations": 5}


def test_a_tiny_nconmax_drops_contacts_counted_per_step_and_said_once(tmp_path, capfd):
    """ant's ~20 collision candidates per world overflow nconmax = 8 (its 8 starting contacts fit) in every step:
    each step's info flags every env, collect warns once, run.json and the summary count every env-step, and no
    kernel prints a line."""
    envs, steps = 2, 5
    env = forge_gpu.sim.make("ant", num_envs=envs, device="cpu", seed=0, **{"solver.nconmax": 8})
    policy = load_policy("random", env)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = collect(env, policy, str(tmp_path / "run"), steps=steps)
    assert env.solver_overflow.limits["nconmax"] == 8
    assert (env.result.numpy().info["solver_overflow"] & BROADPHASE != 0).all()
    said = [w for w in caught if issubclass(w.category, SolverOverflowWarning)]
    assert len(said) == 1 and "raise [solver] nconmax (now 8)" in str(said[0].message)
    report = summary.solver_overflow
    assert report["dropped"]["steps"] == steps and report["dropped"]["envs"] == envs
    assert report["flags"]["BROADPHASE"]["env_steps"] == steps * envs
    assert json.loads((tmp_path / "run" / "run.json").read_text())["solver_overflow"] == report
    assert summary.solver_warnings[0].startswith(f"contacts or constraint rows dropped in {steps} of {steps} steps")
    out, err = capfd.readouterr()
    assert PRINTED not in out + err


def test_the_command_line_prints_the_overflow_once(tmp_path, capfd):
    """forge-gpu collect says what was dropped in one line of its summary, neither warned again nor printed by the
    kernels."""
    args = ["collect", "ant", "--envs", "2", "--steps", "4", "--device", "cpu", "--set", "solver.nconmax=8"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    out, err = capfd.readouterr()
    assert (out + err).count("contacts or constraint rows dropped") == 1, out + err
    assert "warning: contacts or constraint rows dropped in 4 of 4 steps" in out
    assert PRINTED not in out + err
    assert "MuJoCo's load" not in out + err  # a shipped model: its check against MuJoCo says nothing


@pytest.mark.parametrize("task", ["quadruped", "humanoid", "ant", "push"])
def test_shipped_contact_tasks_drop_no_contacts_at_four_envs(task, capfd):
    """At 4 envs the random policy's falls stay within each task file's [solver] nconmax and njmax (humanoid at
    MuJoCo-Warp's estimate, 48 per world, dropped contacts within 300 steps)."""
    env = forge_gpu.sim.make(task, num_envs=4, device="cpu", seed=0)
    summary = collect(env, load_policy("random", env), None, steps=300)
    report = summary.solver_overflow
    assert report["steps"] >= 290 and report["dropped"]["env_steps"] == 0, overflow_lines(report)
    assert PRINTED not in "".join(capfd.readouterr())


def _tally(rows):
    """An OverflowTally fed ``rows``: per step (bits, active, ended) of 3 envs, episode ids from the ends."""
    tally, episode = OverflowTally(3, LIMITS), np.zeros(3, np.int32)
    for bits, active, ended in rows:
        active, ended = np.array(active, bool), np.array(ended, bool)
        tally.add(np.array(bits, np.int32), active, ended, np.arange(3), episode.copy())
        episode += ended
    return tally.report()


def test_the_tally_counts_steps_envs_and_ended_episodes_of_active_rows():
    """Bits of inactive rows (a reset's first frame) count nowhere; an episode counts once when it ends, with the
    flags of any of its transitions; dropped ones are listed by (env_id, episode_id)."""
    report = _tally(
        [
            ([BROADPHASE, 0, LINESEARCH], [1, 1, 1], [0, 0, 0]),
            ([BROADPHASE, 0, 0], [1, 1, 1], [1, 1, 0]),  # env 0's episode 0 ends, dropped twice; env 1's clean
            ([BROADPHASE, BROADPHASE, 0], [0, 0, 1], [0, 0, 1]),  # 0 and 1 restart: their bits belong to no episode
            ([0, LINESEARCH, 0], [1, 1, 1], [0, 1, 0]),
        ]
    )
    assert (report["steps"], report["env_steps"], report["episodes"]) == (4, 10, 4)
    assert report["dropped"] == {"steps": 2, "env_steps": 2, "episodes": 1, "envs": 1, "episode_ids": [[0, 0]]}
    assert report["not_converged"] == {"steps": 2, "env_steps": 2, "episodes": 2, "envs": 2}
    twice = {"steps": 2, "env_steps": 2}
    assert report["flags"] == {"BROADPHASE": twice, "LS_ITERATIONS": twice}
    dropped, slow = overflow_lines(report)
    assert dropped.startswith("contacts or constraint rows dropped in 2 of 4 steps (broadphase overflow in 2 env-steps")
    assert dropped.endswith("raise [solver] nconmax (now 48)")
    assert "1 of 3 envs, 1 of 4 ended episodes" in dropped
    assert slow.endswith("less converged; raise [solver] ls_iterations (now 5)")


def test_a_clean_tally_says_nothing_and_its_list_is_bounded():
    assert overflow_lines(_tally([([0, 0, 0], [1, 1, 1], [1, 1, 1])] * 3)) == []
    assert overflow_lines({}) == []
    report = _tally([([BROADPHASE] * 3, [1, 1, 1], [1, 1, 1])] * (MAX_LISTED // 3 + 2))
    assert report["dropped"]["episodes"] == 3 * (MAX_LISTED // 3 + 2)
    assert len(report["dropped"]["episode_ids"]) == MAX_LISTED


def test_a_solver_without_overflow_bits_reports_nothing(tmp_path):
    """featherstone keeps no overflow mask: zero bits each step, an empty report, no run.json key."""
    env = forge_gpu.sim.make("cartpole", num_envs=2, device="cpu", seed=0, **{"solver.name": "featherstone"})
    summary = collect(env, load_policy("random", env), str(tmp_path / "run"), steps=3)
    assert env.solver_overflow.limits == {} and not env.result.numpy().info["solver_overflow"].any()
    assert summary.solver_overflow == {} and summary.solver_warnings == []
    assert "solver_overflow" not in json.loads((tmp_path / "run" / "run.json").read_text())


def test_the_workers_reports_are_summed_and_said_once_for_the_dataset(capsys):
    """A distributed collection's summary sums its workers' reports (a clean worker's too, and none from a failed
    one) and the command line says each kind once, for all of them."""
    from forge_gpu._src.collect.distributed import DatasetSummary
    from forge_gpu._src.sim.solver import merge_reports
    from forge_gpu.cli._collect import print_dataset_summary

    a = _tally([([BROADPHASE, 0, LINESEARCH], [1, 1, 1], [1, 0, 0]), ([0, 0, 0], [0, 1, 1], [0, 0, 0])])
    b = _tally([([0, LINESEARCH, 0], [1, 1, 1], [0, 1, 0])])
    clean = _tally([([0, 0, 0], [1, 1, 1], [0, 0, 0])])
    merged = merge_reports([a, b, clean])
    assert (merged["steps"], merged["env_steps"], merged["envs"], merged["episodes"]) == (4, 11, 9, 2)
    assert merged["flags"] == {
        "BROADPHASE": {"steps": 1, "env_steps": 1},
        "LS_ITERATIONS": {"steps": 2, "env_steps": 2},
    }
    assert merged["not_converged"] == {"steps": 2, "env_steps": 2, "episodes": 1, "envs": 2}
    assert merged["dropped"] == {"steps": 1, "env_steps": 1, "episodes": 1, "envs": 1}
    assert merge_reports([]) == {} and overflow_lines({}) == []

    run = {"worker": 0, "device": "cpu", "status": "closed", "episodes": 1, "env_steps": 3, "seconds": 1.0}
    run |= {"stall_seconds": 0.0, "error": None}
    runs = [dict(run, solver_overflow=a), dict(run, worker=1, solver_overflow=b), dict(run, worker=2, error="x")]
    summary = DatasetSummary(directory="out", runs=runs, seconds=1.0)
    assert summary.solver_overflow == merge_reports([a, b])
    print_dataset_summary(summary)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: ")]
    assert printed == [f"warning: {line}" for line in overflow_lines(merge_reports([a, b]))] and len(printed) == 2
