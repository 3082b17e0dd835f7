"""The Panda's grasp holds by contact: driven by joint targets (a numeric IK in the test), the open fingers go
around a cube on the table, close, lift it 15 cm and hold it 2 s; the cube's slip relative to the tcp stays under
1 cm. With the pads' and the cube's friction at 0 the same motion leaves the cube on the table."""

import numpy as np
import warp as wp

import forge_gpu

# One world of lift without the camera: the cube (5 cm, 0.2 kg) at (0.5, 0) with no yaw, the arm at home.
SCENE = {
    "params.render": False,
    "params.reset_spread": 0.0,
    "max_steps": 1000,
    "params.hold_time": 10.0,  # no success (which ends the episode) during the test's hold
    "randomize.cube_position": {"low": [0.5, 0.0], "high": [0.5, 0.0]},
    "randomize.cube_yaw": [0.0, 0.0],
    "randomize.cube_size": [0.05, 0.05],
    "randomize.cube_mass": [0.2, 0.2],
    "randomize.cube_friction": [0.8, 0.8],
}
OPEN, CLOSED = 0.08, 0.0
"""The gripper's width command [m]."""


def _tcp_pose(env, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tcp's position and the hand's rotation matrix at the arm's joint angles ``q`` (Newton's forward
    kinematics of the env's one world)."""
    import newton

    model = env.world.model
    full = model.joint_q.numpy().copy()
    full[: len(q)] = q
    state = model.state()
    newton.eval_fk(model, wp.array(full, dtype=float), model.joint_qd, state)
    hand = env.task.plan.body_names.index("hand")
    pose = state.body_q.numpy()[hand]
    rotation = np.array(wp.quat_to_matrix(wp.quat(*pose[3:7]))).reshape(3, 3)
    return pose[:3] + rotation @ np.array([0.0, 0.0, 0.1034]), rotation


def _ik(env, q: np.ndarray, target: np.ndarray, rotation: np.ndarray) -> np.ndarray:
    """Arm angles (7) that put the tcp at ``target`` with the hand at ``rotation``: damped least squares on a
    finite-difference Jacobian, from ``q``."""
    q = q.copy()
    for _ in range(30):
        p, r = _tcp_pose(env, q)
        error = np.concatenate([target - p, 0.5 * sum(np.cross(r[:, i], rotation[:, i]) for i in range(3))])
        if np.linalg.norm(error) < 1e-5:
            break
        jac = np.zeros((6, 7))
        for j in range(7):
            dq = q.copy()
            dq[j] += 1e-4
            p2, r2 = _tcp_pose(env, dq)
            jac[:3, j] = (p2 - p) / 1e-4
            jac[3:, j] = 0.5 * sum(np.cross(r[:, i], r2[:, i]) for i in range(3)) / 1e-4
        q[:7] += jac.T @ np.linalg.solve(jac @ jac.T + 1e-6 * np.eye(6), error)
    return q


def _grasp(overrides: dict, on_hand: bool = False, finger_friction: float | None = None) -> dict:
    """Reach over the cube, descend, close, lift 15 cm and hold 2 s; the cube's height and its offset from the tcp
    at the start and the end of the hold [m], and the success conditions' timers at the end [s]. ``on_hand``:
    lift the closed gripper without the cube, then put the cube on the hand's top (beside the wrist) and hold.
    ``finger_friction``: the fingers' shapes' friction coefficient (the pads' and the finger boxes')."""
    env = forge_gpu.sim.make("lift", num_envs=1, device="cpu", seed=1, **{**SCENE, **overrides})
    env.reset()
    if finger_friction is not None:
        _set_finger_friction(env, finger_friction)
    q0 = env.world.joint_q.numpy()[0, :9].astype(np.float64)
    _, down = _tcp_pose(env, q0)
    cube = env.observation["cube_pose"].numpy()[0, :3].astype(np.float64)
    bias = np.zeros(3)

    def go(tcp, width, steps):
        """Hold the joint targets that put the tcp at ``tcp`` for ``steps`` steps, aiming off by the error that the
        drives' sag under gravity left so far (the position drives are PD, without gravity compensation)."""
        nonlocal q0, bias
        for part in (steps // 2, steps - steps // 2):
            q0 = _ik(env, q0, np.asarray(tcp) + bias, down)
            action = np.append(q0[:7], width).astype(np.float32)[None]
            for _ in range(part):
                env.step(action)
            bias = bias + (np.asarray(tcp) - env.observation["proprio"].numpy()[0, 18:21])

    def offset():
        obs = env.observation
        return obs["cube_pose"].numpy()[0, :3] - obs["proprio"].numpy()[0, 18:21]

    if on_hand:
        go(cube + [0, 0, 0.15], CLOSED, 50)
        _put_on_hand(env)
    else:
        go(cube + [0, 0, 0.1], OPEN, 50)
        go(cube + [0, 0, 0.0], OPEN, 60)
        go(cube + [0, 0, 0.0], CLOSED, 40)
        go(cube + [0, 0, 0.15], CLOSED, 50)
    start = offset()
    go(cube + [0, 0, 0.15], CLOSED, 100)  # 2 s at 50 Hz
    end = offset()
    state = env.result.state
    return {"height": float(env.observation["cube_pose"].numpy()[0, 2]), "start": start, "end": end,
            "tcp": env.observation["proprio"].numpy()[0, 18:21].copy(), "table": float(cube[2]),
            "timers": state["condition_timers"].numpy()[0].copy(), "pairs": state["contact_pairs"].numpy()[0].copy(),
            "success": bool(env.observation["success"].numpy()[0])}  # fmt: skip


def _set_finger_friction(env, mu: float) -> None:
    """Every shape of the two finger bodies gets friction ``mu`` (the solver told)."""
    import newton

    model, names = env.world.model, env.task.plan.body_names
    fingers = [names.index("left_finger"), names.index("right_finger")]
    bodies = model.shape_body.numpy()
    friction = model.shape_material_mu.numpy()
    friction[np.isin(bodies, fingers)] = mu
    model.shape_material_mu.assign(friction)
    env.world.solver.notify_model_changed(int(newton.ModelFlags.SHAPE_PROPERTIES))


def _put_on_hand(env) -> None:
    """Set the cube (at rest, aligned with the hand) on the hand box's top, 7.5 cm off the wrist's axis along the
    hand's long side: the state a cube resting on the gripper has."""
    hand = env.task.plan.body_names.index("hand")
    pose = env.world.state_0.body_q.numpy()[hand]
    rotation = np.array(wp.quat_to_matrix(wp.quat(*pose[3:7]))).reshape(3, 3)
    half = 0.5 * float(env.result.params["cube_size"].numpy()[0])
    # The hand points down: its box's top face is at the hand's z = 0.002, above it means a smaller z.
    centre = pose[:3] + rotation @ np.array([0.0, 0.075, 0.002 - half - 1e-3])
    q, qd = env.world.joint_q.numpy(), env.world.joint_qd.numpy()
    q[0, 9:16] = [*centre, *pose[3:7]]
    qd[0, 9:15] = 0.0
    env.world.joint_q.assign(q)
    env.world.joint_qd.assign(qd)


def test_grasp_holds_by_friction():
    held = _grasp({})
    slip = float(np.linalg.norm(held["end"] - held["start"]))
    print(f"held: cube at z = {held['height']:.4f} m (from {held['table']:.4f}); offset to the tcp at the start of "
          f"the 2 s hold {np.round(held['start'], 4).tolist()}, at its end {np.round(held['end'], 4).tolist()}; "
          f"slip {slip * 1000:.2f} mm")  # fmt: skip
    assert held["height"] > held["table"] + 0.12
    assert np.linalg.norm(held["end"]) < 0.02
    assert slip < 0.01
    # lift's success conditions (cube above lift_height, each finger touching it) held through the 2 s: with
    # hold_time = 1 s the grasp is a success.
    assert held["pairs"].tolist() == [1.0, 1.0]
    assert (held["timers"] >= 1.0).sum() == 3


def test_cube_on_the_hand_is_no_success():
    """A cube resting on the gripper's top, lifted as high as a grasped one, is no success: the fingers do not
    touch it."""
    rested = _grasp({"params.hold_time": 1.0}, on_hand=True)
    print(f"on the hand: cube at z = {rested['height']:.4f} m, contact flags {rested['pairs'].tolist()}, condition "
          f"timers {np.round(rested['timers'], 3).tolist()}")  # fmt: skip
    assert rested["height"] > rested["table"] + 0.12  # it stayed on the hand, as high as a grasped cube
    assert rested["pairs"].tolist() == [0.0, 0.0]
    assert (rested["timers"] >= 1.0).sum() == 1  # the height condition alone held
    assert not rested["success"]


def test_grasp_without_friction_drops():
    """With the fingers' and the cube's friction at 0 the same motion leaves the cube on the table: nothing but the
    pads' friction lifts it."""
    frictionless = _grasp({"randomize.cube_friction": [0.0, 0.0]}, finger_friction=0.0)
    print(f"frictionless: cube at z = {frictionless['height']:.4f} m, tcp at z = {frictionless['tcp'][2]:.4f} m")
    assert frictionless["height"] < frictionless["table"] + 0.02
    assert frictionless["tcp"][2] > frictionless["table"] + 0.12
