"""Tasks: the interface every task implements (:mod:`base`), the built-in tasks (one module each) and the
catalog that names them (:mod:`catalog`). Importing this package loads nothing else."""
