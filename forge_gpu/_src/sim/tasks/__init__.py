"""Tasks: the interface every task implements (:mod:`base`), the built-in tasks (one module each) and the
registry that names them (:mod:`registry`). Importing this package loads nothing else."""
