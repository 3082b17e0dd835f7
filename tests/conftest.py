"""Fixtures every test module may use: the recording of a synthetic run (tests/helpers/synthetic.py), which the modules'
own fixtures call with the run they need, instead of each writing out description, generator, batches and
recorder again."""

import pytest
from helpers.synthetic import SyntheticSim, make_batches, record


@pytest.fixture(scope="session")
def synthetic_run(tmp_path_factory):
    """``synthetic_run(env, steps, *, seed=0, end_prob=0.25, resets_at=(), recorder=None, **options)`` records
    ``steps`` step batches of :class:`SyntheticSim` over the description ``env`` into a new run directory with
    ``recorder`` (a class; default NpzRecorder) and its ``options``, and returns (directory, sim): the sim knows
    the episodes the run must hold (``sim.completed``, ``sim.in_progress()``)."""

    def make(env, steps, *, seed=0, end_prob=0.25, resets_at=(), recorder=None, **options):
        directory = tmp_path_factory.mktemp("synthetic") / "run"
        sim = SyntheticSim(env, seed=seed, end_prob=end_prob)
        record(directory, env, make_batches(sim, steps, resets_at=resets_at), recorder=recorder, **options)
        return directory, sim

    return make
