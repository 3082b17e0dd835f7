"""Test helpers imported by name (``from helpers.reference_cartpole import ...``): the reference tasks the task files
are checked against."""
