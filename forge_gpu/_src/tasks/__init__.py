"""Tasks: the shipped tasks' builders and experts (one module each), task files (``taskfile/``), cameras, the catalog
that names every task, ``make`` and what ``forge-gpu tasks`` prints. The env steps a task through the interface in
``sim/task.py`` and never imports this package."""
