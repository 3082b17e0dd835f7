"""Warp kernels and functions of forge_gpu, one module per concern.

Installed as ``forge_gpu.kernels``. Each module is paired with the module that launches it:
``rng`` (shared), ``camera`` with ``forge_gpu._src.sim.camera``, ``randomize`` with
``forge_gpu._src.sim.randomize``, ``env`` with ``forge_gpu._src.sim.env``, ``policies`` with
``forge_gpu._src.sim.policies`` one module per task with ``forge_gpu._src.tasks.<task>``, and ``taskfile`` (the
kernels of every task file) and ``terms`` (the term library a task file names) with ``forge_gpu._src.tasks.taskfile``.
"""
