"""bench/tasks/tray.toml, a task with no expert: the file loads with its subtasks (grasp relative to the cube, drop
relative to the tray's point), forge-gpu tasks lists them, and its scripted source demonstrations cut into every
subtask and generate a successful episode."""

import importlib.util
from pathlib import Path

import numpy as np

import forge_gpu
from forge_gpu._src.generate.sources import compose, in_tcp_frame
from forge_gpu._src.tasks.make import task_class
from forge_gpu._src.tasks.taskfile.model import probe, sites
from forge_gpu._src.tasks.taskfile.subtasks import BODY, TARGET
from forge_gpu.cli import main

TASKS = Path(__file__).resolve().parents[2] / "bench" / "tasks"
TASK_FILE = str(TASKS / "tray.toml")
INTERPOLATION = 5


def _sources():
    spec = importlib.util.spec_from_file_location("tray_sources", TASKS / "tray_sources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tray_task_loads_with_its_subtasks(capsys):
    """grasp (relative to the cube, ended by the cube above 4.5 cm) then drop (relative to the tray's target, ended by
    the task's success); forge-gpu tasks shows both."""
    config = forge_gpu.sim.task_config(TASK_FILE, variant="ee")
    plan = task_class(TASK_FILE)(config).plan
    assert [(s.name, s.kind, s.object, s.count, s.held) for s in plan.subtasks] == [
        ("grasp", BODY, "cube", 1, ""),
        ("drop", TARGET, "tray", 0, "cube"),
    ]
    assert main(["tasks", TASK_FILE]) == 0
    out = capsys.readouterr().out
    assert "subtask grasp (relative to body cube): ends when body_above [0.045] held 0.1 s" in out
    assert "subtask drop (relative to target tray, carrying body cube): ends when the task's success" in out


def test_the_scripted_sources_cut_into_every_subtask_and_generate(tmp_path):
    """Two scripted episodes at two envs: at least one cuts into grasp and drop, and a generated attempt from it
    succeeds; its drop segment is corrected by the cube's offset in the hand: the recorded correction is the cube's
    position in the tcp's frame where the source's drop began less where the generated drop began (none for the
    grasp), and the trace (source, frames, transform, correction) reproduces the tcp's path."""
    source = tmp_path / "source"
    _sources().record(str(source), episodes=2, num_envs=2, device="cpu", seed=0)
    summary = forge_gpu.recording.generate(source, tmp_path / "gen", episodes=1, num_envs=2, device="cpu",
                                           interpolation_steps=INTERPOLATION)  # fmt: skip
    assert summary.sources >= 1 and summary.subtasks == ["grasp", "drop"]
    assert summary.episodes == 1 and summary.reached[-1] >= 1
    task = forge_gpu.sim.make(TASK_FILE, num_envs=1, device="cpu", variant="ee").task
    body, offset = sites(probe(task.file.model, task.file.file))["tcp"]
    cube = task.plan.body_names.index("cube")

    def tcp_and_cube(episode):
        body_q = episode.state["body_q"].astype(np.float64)
        return compose(body_q[:, body], np.broadcast_to(np.asarray(offset), body_q[:, body].shape)), body_q[:, cube]

    options = forge_gpu.reading.EpisodeReadOptions(state=True)
    sources = forge_gpu.reading.open_run(source)
    by_id = {(e.env_id, e.episode_id): e for e in sources.read(list(range(len(sources))), options)}
    (episode,) = forge_gpu.reading.open_run(tmp_path / "gen").read([0], options)
    tcp, held = tcp_and_cube(episode)
    trace = [
        (by_id[tuple(int(v) for v in ids)], frames.astype(int), transform, fix)
        for ids, frames, transform, fix in zip(
            *(episode.params[f"generate_{k}"] for k in ("source", "frames", "transform", "hold")), strict=True
        )
    ]
    np.testing.assert_array_equal(trace[0][3], 0.0)
    (first, last), (drop_source, (d_first, d_last), transform, fix) = trace[0][1], trace[1]
    began = INTERPOLATION + last - first  # the frame the generated drop began at (the grasp's segment followed)
    first, last = d_first, d_last
    s_tcp, s_cube = tcp_and_cube(drop_source)
    expected = in_tcp_frame(s_tcp[first], s_cube[first, :3]) - in_tcp_frame(tcp[began], held[began, :3])
    np.testing.assert_allclose(fix, expected, atol=2e-4)
    assert np.linalg.norm(fix) > 1e-4  # the hand holds the cube elsewhere than its source did
    path = compose(compose(np.broadcast_to(transform, (last - first + 1, 7)), s_tcp[first : last + 1]),
                   np.broadcast_to(np.concatenate([fix, [0.0, 0.0, 0.0, 1.0]]), (last - first + 1, 7)))  # fmt: skip
    steps = min(last - first, episode.steps - began - INTERPOLATION)
    followed = tcp[began + INTERPOLATION : began + INTERPOLATION + steps + 1, :3]
    assert np.median(np.linalg.norm(followed - path[: steps + 1, :3], axis=1)) < 0.02
