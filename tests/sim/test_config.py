"""Config loading: TOML files and keyword overrides go through the same checks."""

import pytest
from helpers.reference_cartpole import CartpoleParams

import forge_gpu
from forge_gpu._src.sim.config import load_config


def _write(tmp_path, text):
    path = tmp_path / "cartpole.toml"
    path.write_text('task = "cartpole"\ninstruction = "keep the pole upright"\n' + text)
    return path


def test_shipped_config_loads_with_defaults():
    """The shipped cartpole config parses into frozen dataclasses with the documented values."""
    config = forge_gpu.sim.task_config("cartpole")
    assert config.max_steps == 500
    assert config.solver.name == "mujoco"
    assert config.params.pole_angle_limit == pytest.approx(0.3)
    with pytest.raises(AttributeError):
        config.max_steps = 3
    assert config.to_dict()["action"]["scale"] == [20.0]


@pytest.mark.parametrize(
    "text, words",
    [
        ("bogus = 1\n", ["bogus", "allowed keys"]),
        ("max_steps = 'many'\n", ["max_steps", "'many'", "integer"]),
        ("max_steps = 0\n", ["max_steps", "0", "range"]),
        ("control_dt = -0.1\n", ["control_dt", "-0.1", "range"]),
        ("[solver]\nname = 'bullet'\n", ["solver.name", "'bullet'", "'mujoco'"]),
        ("[solver]\nnconmax = 0\n", ["solver.nconmax", "= 0", "allowed range is [1, 65536]"]),
        ("[solver]\nnjmax = 'lots'\n", ["solver.njmax", "'lots'", "integer"]),
        ("[params]\npole_angle_limit = 3.0\n", ["params.pole_angle_limit", "3.0", "range"]),
        ("[params]\nwheel = 1\n", ["params.wheel", "allowed keys"]),
        ("[action]\nlow = [1.0]\nhigh = [-1.0]\nscale = [1.0]\n", ["action.low"]),
        ("max_steps = \n", ["not valid TOML"]),
    ],
)
def test_bad_file_values_name_file_key_and_allowed(tmp_path, text, words):
    """Unknown keys, wrong types and out-of-range values raise ValueError naming file, key and value."""
    path = _write(tmp_path, text)
    with pytest.raises(ValueError) as info:
        load_config("cartpole", CartpoleParams, path=path)
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"max_steps": -5}, ["max_steps", "-5"]),
        ({"num_envs": 2.5}, ["num_envs", "2.5", "integer"]),
        ({"solver.name": "physx"}, ["solver.name", "physx"]),
        ({"solver.nconmax": 1 << 20}, ["solver.nconmax", "1048576", "[1, 65536]"]),
        ({"params.cart_limit": "far"}, ["params.cart_limit", "number"]),
        ({"colour": "red"}, ["colour", "allowed keys"]),
    ],
)
def test_bad_overrides_checked_like_file_values(overrides, words):
    """Python keyword overrides raise the same ValueError as file values."""
    with pytest.raises(ValueError) as info:
        forge_gpu.sim.task_config("cartpole", **overrides)
    for word in words:
        assert word in str(info.value)


def test_overrides_apply():
    """Dotted and top-level overrides reach the dataclasses."""
    config = forge_gpu.sim.task_config("cartpole", max_steps=7, **{"solver.name": "featherstone"})
    assert (config.max_steps, config.solver.name) == (7, "featherstone")


def test_unknown_task_lists_known_tasks():
    """make() with an unknown task names it and lists the known ones."""
    with pytest.raises(ValueError, match="unknown task 'juggling'.*cartpole"):
        forge_gpu.sim.make("juggling", num_envs=2, device="cpu")


def test_unknown_device_is_a_value_error():
    """An unavailable device is refused with a ValueError naming it."""
    with pytest.raises(ValueError, match="cuda:7"):
        forge_gpu.sim.make("cartpole", num_envs=2, device="cuda:7")
