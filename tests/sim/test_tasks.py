"""Adding a task from outside the package (the recipe in docs/ARCHITECTURE.md), task specs that hold for every
config, and the task interface: hooks take the World, bind's contributions are checked, no task imports the env."""

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import warp as wp
from helpers.reference_cartpole import CONFIG, CartpoleTask

import forge_gpu
from forge_gpu._src.sim.env import SHARED
from forge_gpu._src.sim.task import TaskBinding
from forge_gpu._src.sim.world import World
from forge_gpu._src.tasks.catalog import TASK_CONFIG_FILES
from forge_gpu.sim import VectorEnv


class ShortCartpole(CartpoleTask):
    """A task defined outside forge_gpu's catalog: the hand-written cartpole's scene and kernels
    (tests/helpers/reference_cartpole.py) subclassed here, under its own id and config file."""

    spec = dataclasses.replace(CartpoleTask.spec, id="short_cartpole")


@pytest.fixture
def short_cartpole(tmp_path):
    config = tmp_path / "short_cartpole.toml"
    config.write_text(
        CONFIG.replace('task = "cartpole_handwritten"', 'task = "short_cartpole"').replace(
            "max_steps = 500", "max_steps = 7"
        )
    )
    forge_gpu.sim.register_task(ShortCartpole, config=config)
    try:
        yield ShortCartpole
    finally:
        forge_gpu.sim.TASKS.pop("short_cartpole")
        TASK_CONFIG_FILES.pop("short_cartpole")


def test_a_task_registered_from_outside_the_package_collects(short_cartpole, tmp_path):
    """register_task with a config path makes the task a forge_gpu.sim.make and collect target like the shipped ones."""
    env = forge_gpu.sim.make("short_cartpole", num_envs=2, device="cpu")
    assert env.spec["task"] == "short_cartpole" and env.spec["max_steps"] == 7
    summary = forge_gpu.recording.collect(
        env, forge_gpu.sim.make_policy("random", env), str(tmp_path / "run"), episodes=2
    )
    assert summary.episodes >= 2
    manifest = forge_gpu.formats.read_manifest(tmp_path / "run")
    assert manifest["task"] == "short_cartpole" and manifest["config"]["max_steps"] == 7
    assert len(list(forge_gpu.reading.read_episodes(tmp_path / "run"))) == summary.episodes


def test_register_task_refuses_what_is_not_a_new_task(short_cartpole, tmp_path):
    """A taken id, a class that is no Task, and a missing config file are refused, naming what was wrong."""
    with pytest.raises(ValueError, match="already registered"):
        forge_gpu.sim.register_task(ShortCartpole, config=tmp_path / "short_cartpole.toml")
    with pytest.raises(ValueError, match="subclass of forge_gpu.sim.Task"):
        forge_gpu.sim.register_task(dict)

    class Other(CartpoleTask):
        spec = dataclasses.replace(CartpoleTask.spec, id="other_cartpole")

    with pytest.raises(ValueError, match="no such file"):
        forge_gpu.sim.register_task(Other, config=tmp_path / "missing.toml")
    assert "other_cartpole" not in forge_gpu.sim.TASKS


def test_reach_spec_does_not_claim_an_image_size():
    """TASKS['reach'].spec holds no image shapes (they follow the config); an instance's fields follow its size."""
    reach = forge_gpu.sim.TASKS["reach"]
    assert "rgb" not in reach.spec.extra_fields
    task = reach(forge_gpu.sim.task_config("reach", **{"params.image_size": 32}))
    assert task.observation_fields() == {
        "success": ((), "bool"),
        "rgb": ((32, 32, 3), "uint8"),
        "depth": ((32, 32), "float32"),
    }
    assert reach.spec is forge_gpu.sim.TASKS["reach"].spec  # not replaced per instance


SIM = Path(forge_gpu.__file__).resolve().parent / "_src" / "sim"


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (function level and TYPE_CHECKING blocks included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("path", sorted((SIM / "tasks").glob("*.py")), ids=lambda p: p.name)
def test_no_task_module_imports_the_env(path):
    """The tasks see the env only through sim/world.py: no import of sim.env (nor of the env through sim)."""
    names = imported_modules(path)
    assert not {n for n in names if n.startswith("forge_gpu._src.sim.env")}, sorted(names)
    assert "forge_gpu._src.sim.VectorEnv" not in names and "forge_gpu.sim.VectorEnv" not in names


def test_the_env_imports_the_task_interface_not_the_registry():
    """sim/env.py imports tasks.base (and world), never the registry package that imports every task."""
    names = imported_modules(SIM / "env.py")
    assert "forge_gpu._src.sim.task" in names and "forge_gpu._src.sim.world" in names
    tasks = {n for n in names if n.startswith("forge_gpu._src.tasks")}
    assert all(n.startswith("forge_gpu._src.sim.task") for n in tasks), sorted(tasks)
    code = "import sys, forge_gpu._src.tasks.catalog; assert 'forge_gpu._src.sim.env' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    code = (
        "import sys, forge_gpu._src.sim.env; "
        "loaded = sorted(m for m in sys.modules if m.startswith('forge_gpu._src.tasks.') and m != "
        "'forge_gpu._src.sim.task'); assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class SpyCartpole(forge_gpu.sim.TASKS["cartpole"]):
    """The shipped cartpole (a task file) recording what its hooks are given."""

    def __init__(self, config):
        super().__init__(config)
        self.given = []

    def bind(self, world):
        self.given.append(("bind", world))
        return super().bind(world)

    def apply_action(self, world):
        self.given.append(("apply_action", world))
        super().apply_action(world)

    def reset_worlds(self, world):
        self.given.append(("reset_worlds", world))
        super().reset_worlds(world)

    def observe(self, world):
        self.given.append(("observe", world))
        super().observe(world)

    def expert(self, world):
        self.given.append(("expert", world))
        return super().expert(world)


def test_hooks_get_the_world_and_the_env_shows_it_read_only():
    """Every hook gets the env's World (never the env); the env's shared names are the world's, read-only."""
    config = forge_gpu.sim.task_config("cartpole", num_envs=2, device="cpu", capture_graph=False)
    task = SpyCartpole(config)
    env = VectorEnv(task, config)
    env.reset()
    env.step(forge_gpu.sim.make_policy("expert", env)(env.observation))
    assert {hook for hook, _ in task.given} == {"bind", "apply_action", "reset_worlds", "observe", "expert"}
    assert all(type(world) is World and world is env.world for _, world in task.given)
    for name in SHARED:
        assert getattr(env, name) is getattr(env.world, name)
        with pytest.raises(AttributeError, match=rf"VectorEnv.{name} is read-only"):
            setattr(env, name, None)
    assert env.action_input.shape == (2, 1) and env.world.config is config


def test_reach_contributes_its_fields_and_calibration_through_bind():
    """reach's bind returns rgb, depth and the camera calibration; the env keeps them in the world and the result."""
    config = forge_gpu.sim.task_config("reach", num_envs=2, device="cpu", **{"params.image_size": 32})
    task = forge_gpu.sim.TASKS["reach"](config)
    env = VectorEnv(task, config)
    cameras = task.camera.cameras
    assert env.world.task_fields == {"success": task.success, "rgb": cameras.rgb, "depth": cameras.depth}
    assert env.observation["rgb"] is cameras.rgb and env.observation["depth"] is cameras.depth
    assert env.calibration is env.world.calibration
    assert env.calibration["cameras"]["front"]["intrinsics"]["width"] == 32


class FieldCartpole(forge_gpu.sim.TASKS["cartpole"]):
    """Cartpole declaring a ``gap`` field float32 [2]; ``bind`` returns whatever ``returns(world)`` makes."""

    returns = staticmethod(lambda world: TaskBinding())

    def observation_fields(self):
        return {"gap": ((2,), "float32")}

    def bind(self, world):
        super().bind(world)
        return self.returns(world)


def gap(world, shape=(2,), dtype=wp.float32, device=None):
    return wp.zeros((world.num_envs, *shape), dtype=dtype, device=device or world.device)


@pytest.mark.parametrize(
    "returns, message",
    [
        (lambda w: None, r"FieldCartpole.bind returned fields \[\]; observation_fields\(\) declares \['gap'\]"),
        (lambda w: {"gap": gap(w)}, r"FieldCartpole.bind returned \{'gap': .*; expected a TaskBinding or None"),
        (lambda w: TaskBinding(fields={"gap": gap(w), "more": gap(w)}), r"returned fields \['gap', 'more'\]"),
        (lambda w: TaskBinding(fields={"gap": gap(w, (3,))}), r"field 'gap' is float32 \(2, 3\) on cpu; expected "),
        (lambda w: TaskBinding(fields={"gap": gap(w, dtype=wp.int32)}), r"'gap' is int32 \(2, 2\) on cpu; expected"),
        (lambda w: TaskBinding(fields={"gap": np.zeros((2, 2), np.float32)}), r"'gap' is a ndarray; expected a Warp"),
        (
            lambda w: TaskBinding(fields={"gap": gap(w)}, calibration={"pose": np.eye(4)}),
            r"FieldCartpole.bind: calibration is not JSON-serializable",
        ),
    ],
)
def test_what_bind_returns_is_checked(returns, message):
    """A binding that does not match observation_fields (names, shape, dtype, type) or a calibration that run.json
    cannot hold is refused when the env is made, naming the task and the field."""
    config = forge_gpu.sim.task_config("cartpole", num_envs=2, device="cpu")
    task = FieldCartpole(config)
    task.returns = returns
    with pytest.raises(ValueError, match=message):
        VectorEnv(task, config)


def test_a_field_returned_by_bind_is_observed_and_described():
    """A well-formed binding's field is in the observation and the spec, and its calibration is the env's."""
    config = forge_gpu.sim.task_config("cartpole", num_envs=2, device="cpu")
    task = FieldCartpole(config)
    task.returns = lambda w: TaskBinding(fields={"gap": gap(w)}, calibration={"units": "m"})
    env = VectorEnv(task, config)
    result = env.reset().numpy()
    assert result.observation["gap"].shape == (2, 2)
    assert env.spec["observation"]["gap"] == {"shape": [2], "dtype": "float32"}
    assert env.calibration == {"units": "m"}
