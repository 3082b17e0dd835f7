"""[[subtasks]] in task files (tasks/taskfile/subtasks.py): the shipped grasping tasks' subtasks bound to their
bodies and targets, shown by forge-gpu tasks, and every bad entry refused in one line naming its key."""

import pytest

import forge_gpu
from forge_gpu._src.tasks.catalog import TASKS
from forge_gpu._src.tasks.taskfile.subtasks import BODY, TARGET
from forge_gpu.cli import main

ABOVE = {"term": "body_above", "body": "cube", "height": 0.1}


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("lift", [("grasp", BODY, "cube", 1, ""), ("lift", BODY, "cube", 0, "")]),
        ("stack", [("grasp", BODY, "cube", 1, ""), ("carry_and_release", BODY, "base", 0, "cube")]),
        ("place", [("grasp", BODY, "cube", 1, ""), ("carry_and_release", TARGET, "region", 0, "cube")]),
    ],
)
def test_the_grasping_tasks_ship_their_subtasks(task, expected):
    """lift: grasp then lift, relative to the cube; stack and place: grasp, then carry and release relative to the
    base cube or the square's target, carrying the cube; the last ends with the task's success (no conditions of its
    own)."""
    config = forge_gpu.sim.task_config(task)
    plan = TASKS[task](config).plan
    assert [(s.name, s.kind, s.object, s.count, s.held) for s in plan.subtasks] == expected
    cube = plan.body_names.index("cube")
    assert [s.held_index for s in plan.subtasks] == [-1, -1 if task == "lift" else cube]
    assert [r.stage for r in plan.subtask_rows] == ["subtasks"] and plan.subtask_rows[0].hold == pytest.approx(0.1)


def test_forge_gpu_tasks_shows_the_subtasks(capsys):
    """One line per subtask: its name, what it is relative to and what ends it."""
    assert main(["tasks", "place"]) == 0
    out = capsys.readouterr().out
    assert "subtask grasp (relative to body cube): ends when body_above [0.045] held 0.1 s" in out
    assert (
        "subtask carry_and_release (relative to target region, carrying body cube): ends when the task's success" in out
    )


@pytest.mark.parametrize(
    ("subtasks", "message"),
    [
        ([{"name": "a", "object": "cub"}], "subtasks[0].object = 'cub': no such body or [targets] name"),
        ([{"name": "a", "color": 1}], "unknown key subtasks[0].color; a subtask takes name, object, held, conditions"),
        ([{"name": "a", "held": "cub"}], 'subtasks[0].held = "cub": expected the name of a body the subtask carries'),
        ([{"name": "a", "held": 3}], "subtasks[0].held = 3: expected the name of a body"),
        ([{"name": "a", "object": "cube", "held": "cube"}], "subtasks[0].held = 'cube': the body it carries cannot"),
        ([{"name": "a"}, {"name": "b"}], "subtasks[0] (a): no conditions; only the last subtask may leave them out"),
        ([{"name": "a", "conditions": [{**ABOVE, "require": False}]}], "subtasks[0].conditions[0].require = false"),
        ([{"name": "a", "conditions": [{"term": "nope"}]}], "subtasks[0].conditions[0].term = 'nope': unknown"),
        ([{"name": "a", "conditions": [{**ABOVE, "hold": -1}]}], "subtasks[0].conditions[0].hold = -1: expected"),
        ([{"name": "a", "conditions": [ABOVE]}, {"name": "a"}], "subtasks[1].name = 'a': a second subtask"),
        ([{"name": "a b"}], 'subtasks[0].name = "a b": expected a name'),
    ],
)
def test_a_bad_subtask_is_refused_in_one_line(subtasks, message):
    """Each bad entry is a ValueError of one line naming the file and the key."""
    with pytest.raises(ValueError) as e:
        forge_gpu.sim.task_config("lift", **{"params.subtasks": subtasks})
    assert message in str(e.value) and "lift.toml" in str(e.value) and "\n" not in str(e.value)


def test_a_last_subtask_without_conditions_needs_the_tasks_success():
    """A file that drops lift's success keeps a last subtask nothing ends: refused, saying to drop the subtasks."""
    with pytest.raises(ValueError, match=r"subtasks\[1\] \(lift\): no conditions, and the task has no \[\[success\]\]"):
        forge_gpu.sim.task_config("lift", success=[])
    assert forge_gpu.sim.task_config("lift", success=[], subtasks=[]).params.subtasks == []
