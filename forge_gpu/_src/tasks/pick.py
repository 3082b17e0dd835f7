"""The scripted pick-and-place expert of the grasping tasks (``forge_gpu.sim:pick_expert``, named by a task file's
``[expert]``): a state machine per world in one kernel (``kernels/pick.py``), its phase, timer, joint targets and
per-episode draws in device arrays, restarted at each world's episode start.

It grasps ``object`` (a free body) with the ``site`` between the fingers pointing down, then lifts it and, with a
``place`` (a body to stack it on, or ``[x, y, z]`` a point on the table), carries it there, lowers it, opens and
retreats. Its action is the task's: with ``[action] kind = "ee_delta"`` the pose change and the gripper column;
with ``kind = "position"`` the joint targets of its own damped least squares steps (``kernels/ik.py``, the same
Jacobian) and the gripper column.
"""

from __future__ import annotations

import math

import numpy as np
import warp as wp

from forge_gpu._src.core.checks import finite_number, number_list
from forge_gpu._src.tasks.taskfile import ee_action
from forge_gpu._src.tasks.taskfile.model import probe
from forge_gpu._src.tasks.taskfile.model import sites as model_sites

SETTINGS = {
    # name: (default, lowest allowed); units in the docstring of pick_expert.
    "approach_height": (0.1, 0.0),
    "grasp_height": (0.0, -1.0),
    "lift_height": (0.15, 0.0),
    "carry_height": (0.06, 0.0),
    "release_height": (0.005, 0.0),
    "retreat_height": (0.1, 0.0),
    "reach_tolerance": (0.01, 1e-4),
    "grasp_tolerance": (0.005, 1e-4),
    "angle_tolerance": (0.05, 1e-4),
    "close_time": (0.4, 0.0),
    "open_time": (0.3, 0.0),
    "descend_time": (2.0, 0.0),
    "gain": (0.5, 1e-3),
    "max_speed": (0.5, 1e-3),
    "max_turn": (2.0, 1e-3),
    "position_noise": (0.0, 0.0),
    "yaw_noise": (0.0, 0.0),
    "action_noise": (0.0, 0.0),
    "gripper_open": (None, -math.inf),
    "gripper_closed": (None, -math.inf),
    "ik_damping": (ee_action.IK_DAMPING, 0.0),
    "max_joint_step": (ee_action.MAX_JOINT_STEP, 1e-9),
    "max_lag": (ee_action.MAX_LAG, 1e-9),
}
"""The numbers ``[expert]`` takes beside ``factory``, ``object``, ``site``, ``place`` and ``gripper``."""
_ORDER = ("approach_height", "grasp_height", "lift_height", "carry_height", "release_height", "retreat_height",
          "reach_tolerance", "grasp_tolerance", "angle_tolerance", "close_steps", "open_steps", "descend_steps",
          "gain", "max_speed", "max_turn", "position_noise", "yaw_noise", "action_noise", "gripper_open",
          "gripper_closed", "ik_damping", "max_joint_step", "max_lag")  # fmt: skip
"""The kernel's ``numbers`` table, row by row (``kernels/pick.py``'s ``N_*``)."""


def pick_expert(task, world, settings: dict):
    """A task file's ``[expert] factory`` (``forge_gpu.sim:pick_expert``): grasp ``object`` (a body name), lift it
    and, with ``place``, put it on a body (its name), at a ``[targets]`` point (its name: each world's drawn point,
    z the surface) or at a point ``[x, y, z]`` (world frame [m], z the surface it rests on); ``site`` is the point
    between the fingers (default ``tcp``), ``gripper`` the action joint of the gripper's column (default: the
    action's one column that is not on the site's chain) and ``gripper_open``,
    ``gripper_closed`` its values (action units, required). Heights [m]: ``approach_height`` (above the object's
    centre before descending), ``grasp_height`` (the site above the object's centre when it closes),
    ``lift_height`` (above the object's resting height), ``carry_height`` (above the release height, for a place),
    ``release_height`` (the object's bottom above the place's top when it opens), ``retreat_height``. Thresholds:
    ``reach_tolerance`` (a waypoint in the air), ``grasp_tolerance`` (the grasp and release points) [m],
    ``angle_tolerance`` [rad]; timers [s]: ``close_time``, ``open_time``, ``descend_time`` (a descent closes or
    opens after it even short of its point). Motion: ``gain`` (the share of the pose error commanded per step),
    ``max_speed`` [m/s], ``max_turn`` [rad/s]; IK (position actions): ``ik_damping``, ``max_joint_step``,
    ``max_lag``. Noise, so that demonstrations vary: ``position_noise`` (the grasp point's offset on x and y,
    uniform in +- this per episode [m]), ``yaw_noise`` (the grasp's yaw offset per episode [rad]),
    ``action_noise`` (uniform in +- this on each step's position change [m]). Draws are keyed by the world's
    episode (``kernels/rng.py``, stream 6), so an expert's demonstrations replay alike.

    A bad setting is a ValueError of one line naming the file and the key."""
    from forge_gpu.kernels import pick as kernels

    file, plan = task.config.params.file, task.plan
    where = f"{file}: expert"
    settings = dict(settings)
    allowed = ("object", "site", "place", "gripper", *SETTINGS)
    for key in settings:
        if key not in allowed:
            raise ValueError(f"{where}.{key}: unknown key; pick_expert takes {', '.join(allowed)}")
    kind = plan.action_kind
    if kind not in ("position", ee_action.KIND):
        raise ValueError(f"{where}: pick_expert needs [action] kind = 'position' or '{ee_action.KIND}', not {kind!r}")
    builder = probe(task.file.model, file)
    bodies = plan.body_names
    found = model_sites(builder)

    def body(key: str) -> int:
        name = settings.get(key)
        if not isinstance(name, str) or name not in bodies:
            raise ValueError(f"{where}.{key} = {name!r}: expected a body of the model ({', '.join(bodies)})")
        return bodies.index(name)

    if "object" not in settings:
        raise ValueError(f'{where}: pick_expert needs object = "<the body it grasps>"')
    object_body = body("object")
    site = settings.get("site", "tcp")
    if site not in found:
        raise ValueError(f"{where}.site = {site!r}: no such site; the model's sites are {', '.join(found) or 'none'}")
    point_body, offset = found[site]
    place = settings.get("place")
    place_mode, place_body, place_point = kernels.PLACE_NONE, -1, (0.0, 0.0, 0.0)
    targets = [t["name"] for t in plan.targets]
    if isinstance(place, str) and place in targets:
        if place in bodies:
            raise ValueError(f"{where}.place = {place!r}: both a body and a [targets] name; rename one")
        place_mode, place_body = kernels.PLACE_TARGET, targets.index(place)
    elif isinstance(place, str):
        if place not in bodies:
            held = ", ".join([*bodies, *targets])
            raise ValueError(f"{where}.place = {place!r}: expected a body or a [targets] name ({held}) or [x, y, z]")
        place_mode, place_body = kernels.PLACE_BODY, bodies.index(place)
    elif place is not None:
        if not number_list(place, 3):
            raise ValueError(f"{where}.place = {place!r}: expected a body's name or [x, y, z] [m]")
        place_mode, place_point = kernels.PLACE_POINT, tuple(float(v) for v in place)
    numbers = {}
    for key, (default, low) in SETTINGS.items():
        value = settings.get(key, default)
        if value is None:
            raise ValueError(f"{where}: pick_expert needs {key} (the gripper column's value, action units)")
        if not finite_number(value) or value < low:
            raise ValueError(f"{where}.{key} = {value!r}: expected a number >= {low:g}")
        numbers[key] = float(value)
    dt = float(world.config.control_dt)
    numbers["close_steps"] = round(numbers["close_time"] / dt)
    numbers["open_steps"] = round(numbers["open_time"] / dt)
    numbers["descend_steps"] = round(numbers["descend_time"] / dt)
    numbers["max_speed"] *= dt
    numbers["max_turn"] *= dt

    columns = list(plan.action_joints)
    if kind == ee_action.KIND:
        chain_names = plan.ik["joint_names"]
        if plan.ik["point_body"] != point_body:
            raise ValueError(f"{where}.site = {site!r}: the action moves another point; name the action's site")
        others = columns[6:]
        joint_column = [-1] * len(chain_names)
    else:
        on = ee_action.on_chain(builder, point_body, columns)
        chain_names = [n for n, o in zip(columns, on, strict=True) if o]
        others = [n for n, o in zip(columns, on, strict=True) if not o]
        if not chain_names:
            raise ValueError(f"{where}.site = {site!r}: no action joint moves it")
        joint_column = [columns.index(n) for n in chain_names]
    gripper = settings.get("gripper", others[0] if len(others) == 1 else None)
    if gripper not in others:
        raise ValueError(f"{where}.gripper = {gripper!r}: expected the action joint of the gripper's column, one of "
                         f"{', '.join(others) or 'none'}")  # fmt: skip
    tables = ee_action.chain_tables(builder, chain_names)
    coords = [int(builder.joint_q_start[ee_action.joint_labels(builder).index(n)]) for n in chain_names]
    n, device = world.num_envs, world.device

    def ints(values):
        return wp.array(np.asarray(values, np.int32), dtype=int, device=device)

    model = [
        ints(coords), ints(tables["child"]), wp.array(np.asarray(tables["xc"], np.float32), dtype=wp.transform,
        device=device), wp.array(np.asarray(tables["axis"], np.float32), dtype=wp.vec3, device=device),
        ints(tables["slide"]), ints(joint_column), point_body,
        wp.transform(wp.vec3(*offset[:3]), wp.quat(*offset[3:])), object_body, place_mode, place_body,
        wp.vec3(*place_point), columns.index(gripper), int(kind == ee_action.KIND),
        wp.array(np.asarray([numbers[k] for k in _ORDER], np.float32), dtype=float, device=device),
        task.lower, task.upper, task.action_origin, world.action_scale, world.action_low, world.action_high,
    ]  # fmt: skip
    state = {
        "phase": wp.zeros(n, dtype=int, device=device),
        "timer": wp.zeros(n, dtype=int, device=device),
        "joint_target": wp.zeros((n, len(coords)), dtype=float, device=device),
        "episode_draw": wp.zeros((n, 6), dtype=float, device=device),
    }
    action = wp.zeros((n, task.spec.action_dim), dtype=float, device=device)
    body_q = task.frame.body_q

    points = task.targets.points if task.targets.count else wp.zeros((n, 1), dtype=wp.vec3, device=device)

    def act(observation: dict) -> wp.array:
        wp.launch(
            kernels.pick_expert_kernel,
            dim=n,
            inputs=[*model, world.seed, world.draw_env, world.draw_episode, observation["step_id"], world.joint_q]
            + [body_q, points],
            outputs=[*state.values(), action],
            device=device,
        )
        return action

    act.phase = state["phase"]
    """The phase of each world (``kernels/pick.py``'s ``PHASES``), for tests and a look at where it stands."""
    return act


