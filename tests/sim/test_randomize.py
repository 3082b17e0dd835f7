"""Domain randomization and state: per-world values drawn from (seed, env, episode), applied to Newton's model
inside the captured step, and the state that restores a world exactly (VectorEnv.restore)."""

import numpy as np
import pytest
from helpers.envtools import DEVICES

import forge_gpu

CARTPOLE_RANGES = {"randomize.mass_scale": [0.5, 2.0], "randomize.actuator_gain_scale": [0.8, 1.2]}


def _host(arrays: dict) -> dict:
    return {k: v.numpy().copy() for k, v in arrays.items()}


def _run(env, steps: int, action: float = 0.0) -> list[dict]:
    """Reset, then ``steps`` steps of a constant action; the host copy of every result's state and params."""
    frames = [_host({**env.reset().state, **{f"params/{k}": v for k, v in env.result.params.items()}})]
    a = np.full((env.num_envs, env.spec["action_shape"][0]), action, np.float32)
    for _ in range(steps):
        result = env.step(a)
        frames.append(_host({**result.state, **{f"params/{k}": v for k, v in result.params.items()}}))
    return frames


@pytest.mark.parametrize("device", DEVICES)
def test_drawn_values_of_env_i_do_not_depend_on_the_number_of_envs(device):
    small = forge_gpu.sim.make("cartpole", num_envs=4, device=device, seed=3, max_steps=5, **CARTPOLE_RANGES)
    large = forge_gpu.sim.make("cartpole", num_envs=16, device=device, seed=3, max_steps=5, **CARTPOLE_RANGES)
    a, b = _run(small, 12), _run(large, 12)  # two resets of every env (max_steps 5)
    for name in ("params/mass_scale", "params/actuator_gain_scale"):
        for fa, fb in zip(a, b, strict=True):
            assert np.array_equal(fa[name], fb[name][:4]), name
        values = np.stack([f[name] for f in b])
        assert (values >= 0.5 if name.endswith("mass_scale") else values >= 0.8).all()
        assert len(np.unique(values[0])) == 16  # one value per world ...
        assert not np.array_equal(values[0], values[-1])  # ... and per episode
    assert small.spec["params"] == {"mass_scale": {"shape": [], "dtype": "float32"}} | {
        "actuator_gain_scale": {"shape": [], "dtype": "float32"}
    }


@pytest.mark.parametrize("device", DEVICES)
def test_a_heavier_cart_and_pole_move_less_under_the_same_force(device):
    """mass_scale scales every body's mass and inertia in the solver: the same force accelerates less."""
    trajectories = {}
    for scale in (1.0, 2.0):
        env = forge_gpu.sim.make("cartpole", num_envs=2, device=device, **{"randomize.mass_scale": [scale, scale]})
        trajectories[scale] = _run(env, 10, action=0.5)
        nominal = forge_gpu.sim.make("cartpole", num_envs=2, device=device).model.body_mass.numpy()
        np.testing.assert_allclose(env.model.body_mass.numpy(), nominal * scale, rtol=1e-6)
    light, heavy = (np.abs(trajectories[s][-1]["joint_q"][:, 0] - trajectories[s][0]["joint_q"][:, 0]) for s in (1, 2))
    assert (heavy < 0.75 * light).all(), (light, heavy)


@pytest.mark.parametrize("device", DEVICES)
def test_ant_friction_armature_and_mass_reach_mujoco_per_world(device):
    ranges = {"randomize.friction": [0.3, 1.5], "randomize.joint_armature_scale": [0.5, 1.5]}
    env = forge_gpu.sim.make("ant", num_envs=3, device=device, **ranges)
    result = env.reset()
    friction = result.params["friction"].numpy()
    mjw = env.solver.mjw_model
    np.testing.assert_allclose(mjw.geom_friction.numpy()[:, :, 0], np.repeat(friction[:, None], mjw.ngeom, 1))
    armature = result.params["joint_armature_scale"].numpy()
    nominal = forge_gpu.sim.make("ant", num_envs=3, device=device).solver.mjw_model.dof_armature.numpy()
    np.testing.assert_allclose(mjw.dof_armature.numpy(), nominal * armature[:, None], rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_a_colour_range_changes_the_pixels_and_not_the_depth(device):
    size = {"params.image_size": 32}
    plain = forge_gpu.sim.make("reach", num_envs=2, device=device, **size).reset()
    plain = _host(plain.observation)
    blue = {"randomize.table_color": {"low": [0.0, 0.0, 0.8], "high": [0.1, 0.1, 1.0]}}
    env = forge_gpu.sim.make("reach", num_envs=2, device=device, **size, **blue)
    coloured = _host(env.reset().observation)
    assert np.array_equal(plain["depth"], coloured["depth"])
    changed = (plain["rgb"] != coloured["rgb"]).any(axis=-1)
    assert changed.mean() > 0.2  # the table fills much of the image
    table = coloured["rgb"][changed]
    assert (table[:, 2].astype(int) > table[:, 0].astype(int) + 30).mean() > 0.9  # and it is blue now


@pytest.mark.parametrize("device", DEVICES)
def test_restore_gives_back_the_recorded_frame_bit_for_bit(device):
    """state round-trips: restore a frame's state into a fresh env of another size, read it back, equal; the
    observations (rendered images included) equal the recorded ones."""
    size = {"params.image_size": 32, "randomize.camera_position_offset": [[-0.05] * 3, [0.05] * 3]}
    env = forge_gpu.sim.make("reach", num_envs=3, device=device, seed=1, **size)
    env.reset()
    a = np.full((3, 4), 0.3, np.float32)
    for _ in range(4):
        env.step(a)
    state, params, observation = _host(env.result.state), _host(env.result.params), _host(env.observation)
    assert set(state) == {"joint_q", "joint_qd", "body_q", "target_pos"}
    other = forge_gpu.sim.make("reach", num_envs=3, device=device, seed=9, **size)
    restored = other.restore(state, params)
    for name, values in state.items():
        assert np.array_equal(restored.state[name].numpy(), values), name
    for name in ("proprio", "rgb", "depth"):
        assert np.array_equal(restored.observation[name].numpy(), observation[name]), name
    with pytest.raises(ValueError, match=r"state\['joint_q'\] has shape"):
        other.restore({**state, "joint_q": state["joint_q"][:2]})


@pytest.mark.parametrize("device", DEVICES)
def test_record_state_false_records_no_state(device):
    env = forge_gpu.sim.make("cartpole", num_envs=2, device=device, record_state=False)
    assert env.reset().state == {} and env.spec["state"] == {}
    assert not any(k.startswith("state/") for k in env.result.arrays())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"randomize.friction": [0.5, 1.0]}, "task 'cartpole' cannot randomize it; allowed: actuator_gain_scale"),
        ({"randomize.target_color": [0.5, 1.0]}, "randomize.target_color: expected 3 value"),
        ({"randomize.mass_scale": [2.0, 1.0]}, r"low \[2.0\] must not exceed high \[1.0\]"),
        ({"randomize.mass_scale": {"low": 0.0, "high": 1.0, "dist": "log_uniform"}}, "needs low > 0"),
        ({"randomize.mass_scale": {"low": 1, "high": 2, "dist": "normal"}}, "allowed values are 'uniform'"),
    ],
)
def test_bad_ranges_name_the_key_and_what_is_allowed(device, overrides, words):
    task = "reach" if "target_color" in str(overrides) else "cartpole"
    with pytest.raises(ValueError, match=words):
        forge_gpu.sim.make(task, num_envs=2, device=device, **overrides)


def test_ranges_are_recorded_in_the_config():
    config = forge_gpu.sim.task_config("cartpole", **CARTPOLE_RANGES).to_dict()
    assert config["randomize"]["mass_scale"] == {"low": 0.5, "high": 2.0, "dist": "uniform"}
    again = forge_gpu.sim.task_config("cartpole", randomize=config["randomize"])
    assert again.randomize == forge_gpu.sim.task_config("cartpole", **CARTPOLE_RANGES).randomize
