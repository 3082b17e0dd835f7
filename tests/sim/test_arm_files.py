"""The arm tasks as task files: ``configs/reach.toml`` and ``configs/push.toml`` equal the code tasks they replaced
(frozen in tests/helpers/reference_reach.py and reference_push.py) bit for bit on the CPU: observations (images
included), rewards, flags, state, drawn params and instructions, for the same seed and actions, with the expert's
successes and with randomized physics and visuals."""

import numpy as np
from helpers.reference_push import register_handwritten_push
from helpers.reference_reach import register_handwritten_reach

import forge_gpu
from forge_gpu._src.core.instructions import episode_instructions


def _same_frames(a, b) -> None:
    for name in a.observation:
        assert np.array_equal(a.observation[name].numpy(), b.observation[name].numpy()), name
    for name in ("reward", "terminated", "truncated"):
        assert np.array_equal(getattr(a, name).numpy(), getattr(b, name).numpy()), name
    assert set(a.state) == set(b.state)
    for name in a.state:
        assert np.array_equal(a.state[name].numpy(), b.state[name].numpy()), name


def _same_task_bit_for_bit(hand, file, steps: int, *, expert: bool = False) -> tuple[int, int]:
    """Step both envs with the same actions (random, some beyond the bounds, or the file task's expert's); every
    frame equal. Returns the episodes that ended and those that succeeded."""
    a, b = hand.reset(), file.reset()
    policy = forge_gpu.sim.make_policy("expert", file) if expert else None
    rng = np.random.default_rng(0)
    ended = succeeded = 0
    for _ in range(steps):
        _same_frames(a, b)
        assert np.array_equal(b.observation["success"].numpy(), a.terminated.numpy())
        ended += int(a.terminated.numpy().sum() + a.truncated.numpy().sum())
        succeeded += int(a.terminated.numpy().sum())
        if expert:
            action = policy(file.observation).numpy().copy()
        else:
            action = rng.uniform(-2.5, 2.5, (hand.num_envs, 4)).astype(np.float32)
        a, b = hand.step(action), file.step(action)
    return ended, succeeded


def test_the_file_based_reach_equals_the_code_task_bit_for_bit(tmp_path):
    """Random actions and the IK expert (its episodes succeed: the success flags and bonus are compared where
    they are set); the same fields and state columns but the file task's ``success`` flag."""
    register_handwritten_reach(tmp_path)
    sizes = {"num_envs": 3, "device": "cpu", "seed": 3, "max_steps": 20, "params.image_size": 32}
    hand, file = forge_gpu.sim.make("reach_handwritten", **sizes), forge_gpu.sim.make("reach", **sizes)
    assert _same_task_bit_for_bit(hand, file, 25)[0] >= 3
    observed = dict(file.spec["observation"])
    assert observed.pop("success") == {"shape": [], "dtype": "bool"}
    assert hand.spec["observation"] == observed and hand.spec["state"] == file.spec["state"]
    assert hand.calibration == file.calibration


def test_the_file_based_reach_equals_the_code_task_randomized(tmp_path):
    """Randomized masses, gains, colours and camera pose: the same draws, the same frames; without the camera
    (``params.render = false``) too, and with its parameters overridden."""
    register_handwritten_reach(tmp_path)
    ranges = {
        "randomize.mass_scale": [0.7, 1.4],
        "randomize.joint_stiffness_scale": [0.5, 2.0],
        "randomize.target_color": {"low": [0.5, 0.0, 0.0], "high": [1.0, 0.4, 0.4]},
        "randomize.table_color": {"low": [0.0, 0.0, 0.5], "high": [0.3, 0.3, 1.0]},
        "randomize.camera_position_offset": {"low": [-0.05] * 3, "high": [0.05] * 3},
        "randomize.camera_look_at_offset": {"low": [-0.02] * 3, "high": [0.02] * 3},
    }
    sizes = {"num_envs": 3, "device": "cpu", "seed": 5, "max_steps": 8, "params.image_size": 32}
    hand = forge_gpu.sim.make("reach_handwritten", **sizes, **ranges)
    assert "rgb" in file_spec_fields(sizes)
    file = forge_gpu.sim.make("reach", **sizes, **ranges)
    assert _same_task_bit_for_bit(hand, file, 18)[0] >= 6
    for name in ranges:
        key = name.split(".", 1)[1]
        assert np.array_equal(hand.result.params[key].numpy(), file.result.params[key].numpy()), key
    changed = {"params.render": False, "params.tolerance": 0.05, "params.reset_noise": 0.3}
    old = new = {**changed, "params.target_radius": [0.3, 0.4], "params.camera_position": [0.5, 0.7, 0.6]}
    sizes = {**sizes, "max_steps": 60}
    hand = forge_gpu.sim.make("reach_handwritten", **sizes, **old)
    file = forge_gpu.sim.make("reach", **sizes, **new)
    assert "rgb" not in file.spec["observation"]
    assert _same_task_bit_for_bit(hand, file, 70, expert=True)[1] >= 3


def file_spec_fields(sizes) -> dict:
    return forge_gpu.sim.TASKS["reach"](forge_gpu.sim.task_config("reach", **sizes)).observation_fields()


def _same_push(hand, file, steps: int, *, expert: bool = False) -> tuple[int, int]:
    """Step both push envs with the same actions; every frame equal, the drawn params and the instructions too."""
    a, b = hand.reset(), file.reset()
    policy = forge_gpu.sim.make_policy("expert", file) if expert else None
    rng = np.random.default_rng(1)
    ended = succeeded = 0
    for _ in range(steps):
        _same_frames(a, b)
        assert np.array_equal(b.observation["success"].numpy(), a.terminated.numpy())
        assert set(a.params) == set(b.params)
        for name in a.params:
            assert np.array_equal(a.params[name].numpy(), b.params[name].numpy()), name
        template = hand.spec["instruction_template"]
        if template is not None:
            values = {name: a.params[name].numpy() for name in a.params}
            assert episode_instructions(template, values) == episode_instructions(file.spec["instruction_template"],
                                                                                  values)  # fmt: skip
        ended += int(a.terminated.numpy().sum() + a.truncated.numpy().sum())
        succeeded += int(a.terminated.numpy().sum())
        if expert:
            action = policy(file.observation).numpy().copy()
        else:
            action = rng.uniform(-2.5, 2.5, (hand.num_envs, 4)).astype(np.float32)
        a, b = hand.step(action), file.step(action)
    return ended, succeeded


def _four_colours(template: dict) -> dict:
    """The file's template with its colour slots cut to the code task's 4 names: the file's palette holds 4 more
    object colours (held out of the shipped draw), whose names follow the 4 kept."""
    slots = dict(template["slots"])
    for slot in ("cube", "goal"):
        if slot in slots:
            names = slots[slot]["names"]
            assert names[4:] == ["purple", "orange", "cyan", "magenta"]
            slots[slot] = {**slots[slot], "names": names[:4]}
    return {**template, "slots": slots}


def test_the_file_based_push_equals_the_code_task_bit_for_bit(tmp_path):
    """push's default randomization (cube size, mass, friction, start pose, goal, colours with their clash rule) and
    the code task's camera jitter (the file's variant visual jitters it alike), images included, random actions; the
    spec, calibration and instruction template alike."""
    register_handwritten_push(tmp_path)
    sizes = {"num_envs": 3, "device": "cpu", "seed": 3, "max_steps": 6, "params.image_size": 32}
    jitter = {
        "randomize.camera_position_offset": {"low": [-0.03] * 3, "high": [0.03] * 3},
        "randomize.camera_look_at_offset": {"low": [-0.02] * 3, "high": [0.02] * 3},
    }
    hand, file = forge_gpu.sim.make("push_handwritten", **sizes), forge_gpu.sim.make("push", **sizes, **jitter)
    assert _same_push(hand, file, 8)[0] >= 3
    observed = dict(file.spec["observation"])
    assert observed.pop("success") == {"shape": [], "dtype": "bool"}
    assert hand.spec["observation"] == observed and hand.spec["state"] == file.spec["state"]
    assert hand.spec["params"] == file.spec["params"]
    front, file_front = hand.calibration["cameras"]["front"], file.calibration["cameras"]["front"]
    assert "camera_position_offset" in front.pop("randomized") and "camera_position_offset" in file_front.pop(
        "randomized"
    )  # the same rule, the file's words (its camera has no params.camera_position of its own)
    assert hand.calibration == file.calibration
    assert hand.spec["instruction_template"] == _four_colours(file.spec["instruction_template"])


def _only_goal_color(text: str, task: str) -> str:
    """A push file with ``task = task`` whose ``[randomize]`` draws the goal's colour alone."""
    head = text[: text.index("\n[randomize]")]
    head = head.replace('task = "push_handwritten"', 'task = "push"').replace('task = "push"', f'task = "{task}"', 1)
    return head + '\n[randomize]\ngoal_color = { low = 0, high = 3, dist = "integer" }\n'


def test_the_file_based_push_equals_the_code_task_fixed_and_with_its_expert(tmp_path):
    """Nothing drawn but the goal's colour (the fixed parts of the instruction written out, the side left out), no
    camera, overridden parameters; the expert's pushes succeed alike."""
    import dataclasses
    from pathlib import Path

    from helpers import reference_push

    code = tmp_path / "push_fixed_code.toml"
    code.write_text(_only_goal_color(reference_push.CONFIG, "push_fixed_code"))
    spec = dataclasses.replace(reference_push.PushTask.spec, id="push_fixed_code")
    if "push_fixed_code" not in forge_gpu.sim.TASKS:
        forge_gpu.sim.register_task(type("PushFixed", (reference_push.PushTask,), {"spec": spec}), config=code)
    file = tmp_path / "push_fixed.toml"
    root = Path(forge_gpu.sim.TASKS["push"].path)
    file.write_text(_only_goal_color(root.read_text(), "push_fixed"))
    changed = {"params.render": False, "params.tolerance": 0.05, "params.cube_color": "blue", "params.cube_mass": 0.3}
    changed["params.goal_position"] = [0.37, 0.0]  # a short push: the expert succeeds within the steps
    sizes = {"num_envs": 2, "device": "cpu", "seed": 8, "max_steps": 120, **changed}
    hand, file = forge_gpu.sim.make("push_fixed_code", **sizes), forge_gpu.sim.make(str(file), **sizes)
    assert file.spec["instruction_template"]["text"] == "push the blue cube to the {goal} square"
    assert hand.spec["instruction_template"] == _four_colours(file.spec["instruction_template"])
    assert _same_push(hand, file, 100, expert=True)[1] >= 1
