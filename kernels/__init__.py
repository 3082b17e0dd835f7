"""Warp kernels and functions of forge_gpu, each module named after the concept of the Python that launches it.

Installed as ``forge_gpu.kernels``. The engine's (``forge_gpu._src.sim``): ``env`` with ``sim/env.py`` (the step's
task-independent kernels), ``solver`` with ``sim/solver.py`` (the overflow bits), ``camera`` with ``sim/camera.py``,
``randomize`` with ``sim/randomize.py``, ``policies`` with ``sim/policies.py``, ``relabel`` with ``sim/relabel.py``.
The tasks' (``forge_gpu._src.tasks``): ``ant``, ``cartpole``, ``arm`` (reach and push's shared arm, reach's expert),
``push``, ``pick``, each with ``tasks/<name>.py``; ``taskfile`` (the kernels of every task file) and ``terms`` (the
term library a task file names) with ``tasks/taskfile/``; ``ik`` (the Jacobian and the damped least-squares step),
launched by the task files' end-effector action and by the pick expert. ``evaluate`` with ``forge_gpu._src.evaluate``,
``doctor`` with ``forge_gpu._src.machine.doctor``. ``rng``: the random streams every module draws from.
"""
