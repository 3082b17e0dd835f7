"""Task files: a task made of a model file and a TOML, no task code (docs/ARCHITECTURE.md "A task from a file").

``spec`` reads the file, merges the overrides and replaces its ``"params.NAME"`` references; ``model`` loads the
model and resolves every name of the file against it (the :class:`~model.Plan`); ``terms`` is the term library's
index (the ``@wp.func`` terms are ``forge_gpu.kernels.terms``); ``codegen`` writes the one observe kernel that
calls a plan's terms; ``task`` is the :class:`~task.FileTask` that runs a plan, its camera and its experts. Its
kernels are ``forge_gpu.kernels.taskfile`` and ``forge_gpu.kernels.terms``.
"""
