"""Adding a task from outside the package (the recipe in docs/ARCHITECTURE.md), and task specs that hold
for every config."""

import dataclasses

import pytest

import forge_gpu
from forge_gpu._src.sim.config import config_dir
from forge_gpu._src.sim.tasks import TASK_CONFIG_FILES
from forge_gpu._src.sim.tasks.cartpole import CartpoleTask


class ShortCartpole(CartpoleTask):
    """A task defined outside forge_gpu: cartpole's scene and kernels under its own id and config file."""

    spec = dataclasses.replace(CartpoleTask.spec, id="short_cartpole")


@pytest.fixture
def short_cartpole(tmp_path):
    config = tmp_path / "short_cartpole.toml"
    text = (config_dir() / "cartpole.toml").read_text()
    config.write_text(
        text.replace('task = "cartpole"', 'task = "short_cartpole"').replace("max_steps = 500", "max_steps = 7")
    )
    forge_gpu.register_task(ShortCartpole, config=config)
    try:
        yield ShortCartpole
    finally:
        forge_gpu.TASKS.pop("short_cartpole")
        TASK_CONFIG_FILES.pop("short_cartpole")


def test_a_task_registered_from_outside_the_package_collects(short_cartpole, tmp_path):
    """register_task with a config path makes the task a forge_gpu.make and collect target like the shipped ones."""
    env = forge_gpu.make("short_cartpole", num_envs=2, device="cpu")
    assert env.spec["task"] == "short_cartpole" and env.spec["max_steps"] == 7
    summary = forge_gpu.collect(env, forge_gpu.make_policy("random", env), str(tmp_path / "run"), episodes=2)
    assert summary.episodes >= 2
    manifest = forge_gpu.read_manifest(tmp_path / "run")
    assert manifest["task"] == "short_cartpole" and manifest["config"]["max_steps"] == 7
    assert len(list(forge_gpu.read_episodes(tmp_path / "run"))) == summary.episodes


def test_register_task_refuses_what_is_not_a_new_task(short_cartpole, tmp_path):
    """A taken id, a class that is no Task, and a missing config file are refused, naming what was wrong."""
    with pytest.raises(ValueError, match="already registered"):
        forge_gpu.register_task(ShortCartpole, config=tmp_path / "short_cartpole.toml")
    with pytest.raises(ValueError, match="subclass of forge_gpu.Task"):
        forge_gpu.register_task(dict)

    class Other(CartpoleTask):
        spec = dataclasses.replace(CartpoleTask.spec, id="other_cartpole")

    with pytest.raises(ValueError, match="no such file"):
        forge_gpu.register_task(Other, config=tmp_path / "missing.toml")
    assert "other_cartpole" not in forge_gpu.TASKS


def test_reach_spec_does_not_claim_an_image_size():
    """TASKS['reach'].spec holds no image shapes (they follow the config); an instance's fields follow its size."""
    reach = forge_gpu.TASKS["reach"]
    assert "rgb" not in reach.spec.extra_fields
    task = reach(forge_gpu.task_config("reach", **{"params.image_size": 32}))
    assert task.observation_fields() == {"rgb": ((32, 32, 3), "uint8"), "depth": ((32, 32), "float32")}
    assert reach.spec is forge_gpu.TASKS["reach"].spec  # not replaced per instance
