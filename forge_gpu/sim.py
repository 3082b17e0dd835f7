"""forge_gpu.sim: batched Newton worlds (Warp and Newton load on first use): tasks, their configs, the env, the
device, policies (``TorchPolicy`` wraps a torch callable: its observation history, its action chunks), and
``describe_run`` (what a recorder is told of an env's run); ``terms``: the module a user's own task-file terms are
written with (``Frame``, the ``term`` decorator, ``param``, ``library``)."""

from forge_gpu._surface import lazy_names

NAMES = {
    "make": "forge_gpu._src.tasks.make",
    "task_config": "forge_gpu._src.tasks.make",
    "VectorEnv": "forge_gpu._src.sim.env",
    "GymVectorEnv": "forge_gpu._src.rl.gym",
    "RslRlVecEnv": "forge_gpu._src.rl.rsl",
    "Sb3VecEnv": "forge_gpu._src.rl.sb3",
    "SkrlVecEnv": "forge_gpu._src.rl.skrl",
    "default_train_config": "forge_gpu._src.rl.rsl",
    "export_policy": "forge_gpu._src.rl.rsl",
    "track_policy_version": "forge_gpu._src.rl.rsl",
    "DictPolicy": "forge_gpu._src.rl.rsl",
    "default_device": "forge_gpu._src.sim.device",
    "StepResult": "forge_gpu._src.sim.step_result",
    "describe_run": "forge_gpu._src.sim.run_description",
    "TaskConfig": "forge_gpu._src.sim.config",
    "make_policy": "forge_gpu._src.sim.policies",
    "load_policy": "forge_gpu._src.sim.policies",
    "TorchPolicy": "forge_gpu._src.sim.policies",
    "TASKS": "forge_gpu._src.tasks.catalog",
    "Task": "forge_gpu._src.sim.task",
    "TaskSpec": "forge_gpu._src.sim.task",
    "register_task": "forge_gpu._src.tasks.catalog",
    "SolverOverflowWarning": "forge_gpu._src.sim.solver",
    "arm_scene": "forge_gpu._src.tasks.arm",
    "reach_expert": "forge_gpu._src.tasks.arm",
    "push_scene": "forge_gpu._src.tasks.push",
    "push_expert": "forge_gpu._src.tasks.push",
    "pick_expert": "forge_gpu._src.tasks.pick",
    "terms": "forge_gpu._src.tasks.taskfile.user_terms",
    "hold_pose": "forge_gpu._src.tasks.taskfile.gaits",
    "ant_trot": "forge_gpu._src.tasks.ant",
    "cartpole_model": "forge_gpu._src.tasks.cartpole",
    "cartpole_lqr": "forge_gpu._src.tasks.cartpole",
    "sinusoid_gait": "forge_gpu._src.tasks.taskfile.gaits",
}

__all__, __getattr__, __dir__ = lazy_names(__name__, NAMES)
