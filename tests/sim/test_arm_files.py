"""The arm tasks as task files: ``configs/reach.toml`` equals the code task it replaced (frozen in
tests/helpers/reference_reach.py) bit for bit on the CPU: observations (images included), rewards, flags and state,
for the same seed and actions, with the expert's successes and with randomized physics and visuals."""

import numpy as np
from helpers.reference_reach import register_handwritten_reach

import forge_gpu


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
