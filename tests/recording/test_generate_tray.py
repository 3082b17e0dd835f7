"""bench/tasks/tray.toml, a task with no expert: the file loads with its subtasks (grasp relative to the cube, drop
relative to the tray's point), forge-gpu tasks lists them, and its scripted source demonstrations cut into every
subtask and generate a successful episode."""

import importlib.util
from pathlib import Path

import forge_gpu
from forge_gpu._src.tasks.make import task_class
from forge_gpu._src.tasks.taskfile.subtasks import BODY, TARGET
from forge_gpu.cli import main

TASKS = Path(__file__).resolve().parents[2] / "bench" / "tasks"
TASK_FILE = str(TASKS / "tray.toml")


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
    assert [(s.name, s.kind, s.object, s.count) for s in plan.subtasks] == [
        ("grasp", BODY, "cube", 1),
        ("drop", TARGET, "tray", 0),
    ]
    assert main(["tasks", TASK_FILE]) == 0
    out = capsys.readouterr().out
    assert "subtask grasp (relative to body cube): ends when body_above [0.045] held 0.1 s" in out
    assert "subtask drop (relative to target tray): ends when the task's success" in out


def test_the_scripted_sources_cut_into_every_subtask_and_generate(tmp_path):
    """Two scripted episodes at two envs: at least one cuts into grasp and drop, and a generated attempt from it
    succeeds."""
    source = tmp_path / "source"
    _sources().record(str(source), episodes=2, num_envs=2, device="cpu", seed=0)
    summary = forge_gpu.recording.generate(source, tmp_path / "gen", episodes=1, num_envs=2, device="cpu")
    assert summary.sources >= 1 and summary.subtasks == ["grasp", "drop"]
    assert summary.episodes == 1 and summary.reached[-1] >= 1
