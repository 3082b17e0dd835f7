"""VectorEnv: ``num_envs`` copies of a task as the worlds of one Newton model, stepped by kernels."""

from __future__ import annotations

import warnings

import newton
import numpy as np
import warp as wp

from forge_gpu._src.core.fields import group_layout
from forge_gpu._src.core.instructions import TEMPLATE_KEY, check_template
from forge_gpu._src.sim.capture import capture_step, capture_unsupported, eager_cost
from forge_gpu._src.sim.config import TaskConfig
from forge_gpu._src.sim.newton_notes import said_once
from forge_gpu._src.sim.randomize import Randomizer
from forge_gpu._src.sim.relabel import ExpertLabels
from forge_gpu._src.sim.solver import SolverOverflow, check_solver, make_solver
from forge_gpu._src.sim.step_result import StepResult
from forge_gpu._src.sim.streams import torch_stream_of, warp_stream_of
from forge_gpu._src.sim.task import Task, bind_task
from forge_gpu._src.sim.world import World
from forge_gpu.kernels import env as kernels


def _described(array: wp.array) -> dict:
    """env.spec's entry of a per-env array: its shape without the env dimension and its dtype."""
    return {"shape": list(array.shape[1:]), "dtype": str(np.dtype(wp.dtype_to_numpy(array.dtype)))}


class _FromWorld:
    """A read-only attribute of :class:`VectorEnv`: the attribute of the same name of its ``world``."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, env, owner=None):
        return self if env is None else getattr(env.world, self.name)

    def __set__(self, env, value) -> None:
        raise AttributeError(f"VectorEnv.{self.name} is read-only (it is env.world.{self.name})")


class VectorEnv:
    """``N`` environments of one task, stepped together on one device.

    ``step(action)`` follows next-step auto-reset: an env whose previous transition ended is reset
    during the call and its row is the first frame of its next episode, with ``active`` false.
    The whole step (physics substeps and task kernels) is captured once as a graph and replayed:
    a CUDA graph on CUDA, Warp's recorded launch graph on the CPU (``capture_graph = false`` steps
    eagerly instead).

    The buffers the task shares live in ``world`` (:class:`World`); the env shows the ones named in
    ``SHARED`` read-only under the same names (``env.executed_action`` is ``env.world.executed_action``).
    """

    def __init__(self, task: Task, config: TaskConfig):
        self.task = task
        n = config.num_envs
        device = wp.get_device(config.device)

        check_solver(config, task.spec.has_contacts)  # before the model is built (and says anything)
        with wp.ScopedDevice(device):
            builder = newton.ModelBuilder()
            if config.solver.name == "mujoco":
                newton.solvers.SolverMuJoCo.register_custom_attributes(builder)
            with said_once():  # Newton's and MuJoCo Warp's warnings: one line of each kind
                task.build_world(builder)
                scene = newton.ModelBuilder()
                scene.replicate(builder, n)
                model = scene.finalize(device=device)
                self.solver = make_solver(model, config, task.spec.has_contacts)
            self.solver_overflow = SolverOverflow(self.solver, n, device)
            self.world = World(config, model, proprio_dim=task.spec.proprio_dim, action_dim=task.spec.action_dim)
            """What the task's hooks read and write: model, state, control, action and observation buffers."""
            self.world.solver = self.solver  # a task file's contact terms read its contacts
            self.state_1 = model.state()
            self.contacts = None
            self._maximal_coordinates = config.solver.name in ("semi_implicit", "xpbd")

            def zeros(shape, dtype=float):
                return wp.zeros(shape, dtype=dtype, device=device)

            self.env_id = wp.array(np.arange(n, dtype=np.int32), device=device)
            self.step_id = zeros(n, wp.int32)
            """Transitions since the episode's first frame, int32 [N]."""
            self.time = zeros(n)
            """Episode time [s], float32 [N]."""
            self.ended = zeros(n, wp.bool)
            """The env's last transition ended its episode, bool [N]."""
            self.articulation_mask = zeros(model.articulation_count, wp.bool)
            self.reward = zeros(n)
            self.terminated = zeros(n, wp.bool)
            self.truncated = zeros(n, wp.bool)
            self.active = zeros(n, wp.bool)
            self.action_nonfinite = zeros(n, wp.bool)
            """The action given for the env this step held a NaN or inf (it executed zeros), bool [N]."""
            self._nonfinite = zeros(1, wp.int32)
            self.randomizer = Randomizer(self.world, task.randomizable(), config.randomize)
            """The per-world randomized values, their draws at reset and their writes into the model."""
            self.world.params = dict(self.randomizer.values)
            binding = bind_task(task, self.world)
            self.world.task_fields = dict(binding.fields)
            self.world.calibration = dict(binding.calibration)
            self.task_state = dict(binding.state)
            """The task's own state arrays (name -> [N, ...]), beside ``joint_q`` and ``joint_qd``."""
            self.labels = ExpertLabels(task, self.world, config.expert_mix) if config.label else None
            """The expert's label of every frame and the per-episode mix (``sim/relabel.py``); None without
            ``label`` in the config."""
        body_q = wp.array(ptr=self.state_0.body_q.ptr, dtype=float, shape=(n, model.body_count // n, 7), device=device)
        self.state_fields = {"joint_q": self.joint_q, "joint_qd": self.joint_qd, "body_q": body_q, **self.task_state}
        """Every state array a frame records and :meth:`restore` writes back: name -> [N, ...] device array.
        ``body_q`` (each body's position and quaternion xyzw, float32 [N, bodies, 7]) is what the solver made of
        ``joint_q``; restoring it as recorded makes observations and images of a restored frame equal the
        recorded ones bit for bit."""
        self.spec = self._make_spec()

        self.result = StepResult(
            observation={
                "env_id": self.env_id,
                "episode_id": self.episode_id,
                "step_id": self.step_id,
                "time": self.time,
                "proprio": self.proprio,
                **self.task_fields,
                **(self.labels.fields if self.labels else {}),
            },
            reward=self.reward,
            terminated=self.terminated,
            truncated=self.truncated,
            info={
                "active": self.active,
                "executed_action": self.executed_action,
                "action_nonfinite": self.action_nonfinite,
                "solver_overflow": self.solver_overflow.bits,
            },
            state=dict(self.state_fields) if config.record_state else {},
            params=self._recorded_params(),
        )
        self.packed_result, self.result_layout, self._pack_pairs = packed_result(self.result, self.device)
        self._graph = None
        self._graph_launched = False  # its first launch is guarded like the capture (step)
        # Warp replays captured graphs on CUDA and, since Warp 1.19, on the CPU too, where replay
        # skips the per-launch Python cost that dominates small batches (bench/stepping.py).
        self._use_graph = config.capture_graph
        self.step_mode = "graph" if config.capture_graph else "eager: capture_graph = false in the config"
        """How ``step`` runs: ``graph`` (one captured graph per step) or ``eager: <why>``."""
        self._started = False
        self._extension = None
        self._plain = (self.world.draw_env, self.world.idle)

    # -- description ---------------------------------------------------------------------------

    def _recorded_params(self) -> dict[str, wp.array]:
        """The per-episode values a frame records: the randomized ones and the mix's draw (``expert_executed``)."""
        return {**self.randomizer.recorded, **(self.labels.params if self.labels else {})}

    def _make_spec(self) -> dict:
        spec, cfg = self.task.spec, self.config
        fields = {
            "env_id": ((), "int32"),
            "episode_id": ((), "int32"),
            "step_id": ((), "int32"),
            "time": ((), "float32"),
            "proprio": ((spec.proprio_dim,), "float32"),
            **self.task.observation_fields(),
        }
        described = {
            "task": spec.id,
            "action_shape": [spec.action_dim],
            "action_low": list(cfg.action.low),
            "action_high": list(cfg.action.high),
            "observation": {k: {"shape": list(s), "dtype": d} for k, (s, d) in fields.items()},
            "instruction": cfg.instruction,
            "control_dt": cfg.control_dt,
            "max_steps": cfg.max_steps,
            "has_success": spec.has_success,
            "state": {k: _described(a) for k, a in self.state_fields.items()} if cfg.record_state else {},
            "params": self.randomizer.spec(),
        }
        if self.labels is not None:  # the label field, marked as such, and the mix's param
            added = self.labels.spec()
            described["observation"].update(added["observation"])
            described["labels"] = added["labels"]
            described["params"].update(added["params"])
        if (environment_state := self.task.environment_state()) is not None:  # LeRobot's observation.environment_state
            described["environment_state"] = environment_state
        if (template := self.task.instruction_template()) is not None:  # each episode's, from its drawn params
            check_template(template, group_layout(described, "params"), name=f"task {spec.id!r}: {TEMPLATE_KEY}")
            described[TEMPLATE_KEY] = template
        return described

    @property
    def observation(self) -> dict[str, wp.array]:
        """The current observation (device arrays, overwritten by the next call)."""
        return self.result.observation

    # -- stepping ------------------------------------------------------------------------------

    def reset(self) -> StepResult:
        """Start a fresh episode in every env (episode ids advance by one) and return the first frames."""
        self._mark_all()
        self._reset_selected()
        self._observe()
        self._pack()
        if self._extension is not None:
            self._extension()
        self._start()
        return self.result

    def extend_step(
        self,
        launch=None,
        *,
        draw_env: wp.array | None = None,
        draw_episode: wp.array | None = None,
        idle: wp.array | None = None,
    ) -> None:
        """Run ``launch()`` (launches on the env's device) at the end of every ``reset`` and ``step``, inside the
        captured step, with the world's draw keys (``World.draw_env``, ``World.draw_episode``, int32 [N]) and idle
        flags (``World.idle``, bool [N]) replaced by these arrays; ``extend_step()`` gives the plain step back. A
        captured step is captured again."""
        world = self.world
        world.draw_env = self._plain[0] if draw_env is None else draw_env
        world.draw_episode = world.episode_id if draw_episode is None else draw_episode
        world.idle = self._plain[1] if idle is None else idle
        self._extension = launch
        if self._graph is not None:
            self._graph, self._graph_launched = None, False
            self._capture()

    def _mark_all(self) -> None:
        """Select every world for reset, with zero executed actions."""
        wp.launch(
            kernels.mark_all_kernel,
            dim=self.executed_action.shape,
            outputs=[self.reset_mask, self.executed_action, self.action_nonfinite],
            device=self.device,
        )
        self.solver_overflow.clear()

    def _start(self) -> None:
        """After the first frames: stepping may begin; the step graph is captured now, before a consumer thread
        could wait on the device during the capture."""
        self._started = True
        if self._use_graph and self._graph is None:
            self._capture()

    def step(self, action) -> StepResult:
        """Advance every env by one control step with next-step auto-reset.

        Args:
            action: float32 ``[N, A]``: a Warp array or torch tensor on the env's device, or a numpy
                array. Clipped to the action bounds. Bad input raises ``ValueError`` and changes nothing.
        """
        if not self._started:
            raise RuntimeError("call reset() before step()")
        self._stage_action(action)
        if self._graph_launched:
            wp.capture_launch(self._graph)
        elif self._use_graph:
            self._first_launch()
        else:
            self._step_body()
        return self.result

    def _capture(self) -> None:
        """Capture the step as one graph, instantiated at once (a driver's refusal is a failed capture); where
        that cannot work, step eagerly and say why, once."""
        reason = capture_unsupported(self.device, uses_conditional_nodes=self.config.solver.name == "mujoco")
        if reason is None:
            try:
                self._graph = capture_step(self.device, self._step_body)
                return
            except Exception as exc:  # a failed capture must not stop the collection: eager stepping works
                reason = f"graph capture failed ({type(exc).__name__}: {exc})"
        self._fall_back(reason)

    def _first_launch(self) -> None:
        """The graph's first launch, guarded like its capture: where it is refused (Warp instantiates there
        when it could not earlier; a refused launch runs nothing), this step and the next run eagerly."""
        try:
            wp.capture_launch(self._graph)
        except Exception as exc:  # the collection goes on eagerly, as after a failed capture
            self._fall_back(f"the captured graph's first launch failed ({type(exc).__name__}: {exc})")
            self._step_body()
            return
        self._graph_launched = True

    def _fall_back(self, reason: str) -> None:
        """Step eagerly from now on; ``step_mode`` says why and one warning tells the caller of reset/step."""
        self._graph, self._use_graph = None, False
        self.step_mode = f"eager: {reason}"
        why = f"forge_gpu: stepping {self.device} eagerly because {reason}; {eager_cost(self.config, self.device)}"
        warnings.warn(why, RuntimeWarning, stacklevel=4)

    def check_action(self, action) -> None:
        """Raise ``ValueError`` if ``step`` would refuse ``action``, non-finite values included (on CUDA
        this waits for the device); changes no state."""
        self._stage_action(action, check_values=True)

    def _stage_action(self, action, *, check_values: bool = False) -> None:
        """Check ``action`` and copy it into the step's input buffer; raise before any state changes.

        Non-finite values are refused here where that costs no wait on the device (numpy actions, the
        CPU, or ``check_values``). Otherwise (a device array on CUDA) the step's first kernel flags them
        in ``action_nonfinite`` and executes zeros for those envs; ``collect`` raises when the flag
        reaches the host with the step's batch.
        """
        shape = tuple(self.action_input.shape)
        if isinstance(action, np.ndarray):
            if action.dtype != np.float32 or action.shape != shape:
                raise ValueError(f"action has dtype {action.dtype} and shape {action.shape}; expected float32 {shape}")
            if not np.isfinite(action).all():
                raise ValueError("action has non-finite values (NaN or inf); every value must be finite")
            self.action_input.assign(action)
            return
        if not isinstance(action, wp.array):
            if not type(action).__module__.startswith("torch"):
                raise ValueError(
                    f"action is a {type(action).__name__}; expected a Warp array, torch tensor or numpy array"
                )
            if str(action.device) != str(wp.device_to_torch(self.device)):
                raise ValueError(f"action is on {action.device}; expected the env's device {self.device}")
            action = self._from_torch(action)
        if action.device != self.device:
            raise ValueError(f"action is on {action.device}; expected the env's device {self.device}")
        if action.dtype != wp.float32 or tuple(action.shape) != shape:
            raise ValueError(
                f"action has dtype {wp.types.type_repr(action.dtype)} and shape {tuple(action.shape)}; "
                f"expected float32 {shape}"
            )
        if check_values or not self.device.is_cuda:
            self._nonfinite.zero_()
            wp.launch(
                kernels.count_nonfinite_kernel,
                dim=shape,
                inputs=[action],
                outputs=[self._nonfinite],
                device=self.device,
            )
            bad = int(self._nonfinite.numpy()[0])
            if bad:
                raise ValueError(f"action has {bad} non-finite values (NaN or inf); every value must be finite")
        wp.copy(self.action_input, action)

    def _from_torch(self, action) -> wp.array:
        """A Warp view of a torch action, ordered for the env's stream (on CUDA: :meth:`_order_after_torch`)."""
        action = action.detach().contiguous()
        if self.device.is_cuda:
            self._order_after_torch(action)
        return wp.from_torch(action, requires_grad=False)

    def _order_after_torch(self, action) -> None:
        """CUDA: the contiguous copy (if any) is made first, then the env's stream waits for the torch stream
        that made it, and the tensor's memory is kept until the env's stream has used it. The wrappers of the
        two streams are made once per stream (``sim/streams.py``), not once per step."""
        import torch

        env_stream = wp.get_stream(self.device)
        env_stream.wait_stream(warp_stream_of(torch.cuda.current_stream(action.device)))
        action.record_stream(torch_stream_of(env_stream))

    def _step_body(self) -> None:
        action = self.labels.choose(self.action_input) if self.labels is not None else self.action_input
        wp.launch(
            kernels.begin_step_kernel,
            dim=self.num_envs,
            inputs=[self.action_low, self.action_high, action, self.ended, self.world.idle],
            outputs=[self.executed_action, self.reset_mask, self.action_nonfinite],
            device=self.device,
        )
        self.task.apply_action(self.world)
        dt = self.config.sim_dt
        a, b = self.state_0, self.state_1
        for substep in range(self.config.substeps):
            a.clear_forces()
            self.solver.step(a, b, self.control, self.contacts, dt)
            self.solver_overflow.gather(substep)
            a, b = b, a
        if a is not self.state_0:
            self.state_0.assign(a)
        if self._maximal_coordinates:
            newton.eval_ik(self.model, self.state_0, self.state_0.joint_q, self.state_0.joint_qd)
        self._reset_selected()
        self._observe()
        self._pack()
        if self._extension is not None:
            self._extension()

    def _pack(self) -> None:
        """Copy every array of the result into ``packed_result`` (inside the captured step)."""
        for view, array in self._pack_pairs:
            wp.copy(view, array)

    def restore(self, state: dict, params: dict | None = None, worlds=None) -> StepResult:
        """Reset every world to exactly ``state`` (name -> [N, ...] numpy arrays, one per entry of
        ``state_fields``) and, when given, set the drawn values ``params`` (name -> [N, ...], one per recorded
        parameter) of the worlds in ``worlds`` (bool [N]; default all; the others keep theirs), then observe;
        the result is a reset frame (episode ids advance). Steps taken after it replay the recorded episodes
        (``forge_gpu.recording.replay``). Eager (not captured): a few dozen launches and the copies of ``state``.
        ValueError names a missing or misshapen entry and changes nothing."""
        _check_given("state", state, self.state_fields)
        if params is not None:
            _check_given("params", params, self._recorded_params())
        if worlds is not None and np.shape(worlds) != (self.num_envs,):
            raise ValueError(f"restore: worlds has shape {np.shape(worlds)}; expected ({self.num_envs},)")
        self._mark_all()
        self._reset_selected(state=state, params=params, worlds=worlds)
        self._observe()
        self._pack()
        self._start()
        return self.result

    def _reset_selected(self, state: dict | None = None, params: dict | None = None, worlds=None) -> None:
        """Reset the worlds in ``reset_mask`` to their randomized start state (or, from :meth:`restore`, to
        ``state``, and the values ``params`` of ``worlds``)."""
        self.solver.reset(self.state_0, world_mask=self.reset_mask)
        randomizer = self.randomizer
        if state is None or params is not None:
            if worlds is not None:  # the values of these worlds only
                self.reset_mask.assign(np.append(np.asarray(worlds, bool), False))
            randomizer.draw(self.reset_mask)
            if self.labels is not None:
                self.labels.draw(self.reset_mask)
            if params is not None:
                randomizer.restore(self.reset_mask, params)
                if self.labels is not None:
                    self.labels.restore(self.reset_mask, params)
            randomizer.apply(self.reset_mask)
            self.task.apply_params(self.world)
            if worlds is not None:
                self._mark_all()
        self.task.reset_worlds(self.world)
        if state is not None:
            for name, array in self.state_fields.items():
                if name != "body_q":  # forward kinematics writes it: restored after
                    array.assign(np.ascontiguousarray(state[name], dtype=np.float32))
            self.task.restore_state(self.world)
        wp.launch(
            kernels.world_to_articulation_mask_kernel,
            dim=self.model.articulation_count,
            inputs=[self.model.articulation_world, self.reset_mask],
            outputs=[self.articulation_mask],
            device=self.device,
        )
        newton.eval_fk(
            self.model, self.state_0.joint_q, self.state_0.joint_qd, self.state_0, mask=self.articulation_mask
        )
        if state is not None:
            self.state_fields["body_q"].assign(np.ascontiguousarray(state["body_q"], dtype=np.float32))
        if randomizer.notify_flags and (state is None or params is not None):  # once per step, in the graph
            self.solver.notify_model_changed(randomizer.notify_flags)

    def _observe(self) -> None:
        self.task.observe(self.world)
        wp.launch(
            kernels.finish_step_kernel,
            dim=self.num_envs,
            inputs=[
                self.config.max_steps,
                self.config.control_dt,
                self.reset_mask,
                self.task_reward,
                self.task_terminated,
            ],
            outputs=[
                self.episode_id,
                self.step_id,
                self.ended,
                self.time,
                self.reward,
                self.terminated,
                self.truncated,
                self.active,
            ],
            device=self.device,
        )
        if self.labels is not None:  # the expert's action for the observation just made, before it is packed
            self.labels.observe(self.result.observation)


def _check_given(what: str, given, expected: dict) -> None:
    """ValueError unless ``given`` maps exactly ``expected``'s names to arrays of their shapes."""
    if not isinstance(given, dict) or set(given) != set(expected):
        names = sorted(given) if isinstance(given, dict) else type(given).__name__
        raise ValueError(f"restore: {what} must hold exactly {sorted(expected)}, got {names}")
    for name, array in expected.items():
        shape = np.shape(given[name])
        if shape != tuple(array.shape):
            raise ValueError(f"restore: {what}[{name!r}] has shape {shape}; expected {tuple(array.shape)}")


SHARED = (
    "config", "device", "num_envs", "seed", "model", "state_0", "control", "joint_q", "joint_qd", "joint_f",
    "action_low", "action_high", "action_scale", "action_input", "executed_action", "reset_mask", "episode_id",
    "proprio", "task_reward", "task_terminated", "task_fields", "calibration",
)  # fmt: skip
"""The :class:`World` attributes that :class:`VectorEnv` shows under the same names."""
for _name in SHARED:
    setattr(VectorEnv, _name, _FromWorld(_name))

#: Byte alignment of each field in ``VectorEnv.packed_result``.
PACK_ALIGNMENT = 64


def packed_result(result: StepResult, device) -> tuple[wp.array, list[tuple], list[tuple]]:
    """One contiguous byte buffer for every array of ``result``, so that a publish is one copy.

    Returns the buffer (uint8), its layout (``(name, offset, shape, numpy dtype)`` per array of
    ``result.arrays()``, offsets aligned to PACK_ALIGNMENT bytes) and ``(typed view, source)`` pairs.
    """
    layout, offset = [], 0
    for name, array in result.arrays().items():
        offset = -(-offset // PACK_ALIGNMENT) * PACK_ALIGNMENT
        layout.append((name, offset, tuple(array.shape), np.dtype(wp.dtype_to_numpy(array.dtype))))
        offset += array.capacity
    packed = wp.zeros(max(offset, 1), dtype=wp.uint8, device=device)
    pairs = [
        (wp.array(ptr=packed.ptr + at, dtype=a.dtype, shape=a.shape, capacity=a.capacity, device=device), a)
        for (_, at, _, _), a in zip(layout, result.arrays().values(), strict=True)
    ]
    return packed, layout, pairs
