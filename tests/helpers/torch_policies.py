"""Torch policies for the CLI tests, loaded as ``torch_policies:FACTORY``."""

import torch


def tiny_mlp(spec, device):
    """A 2-layer MLP from proprio to the action, squashed into the action bounds."""
    torch.manual_seed(0)
    p, a = spec["observation"]["proprio"]["shape"][0], spec["action_shape"][0]
    net = torch.nn.Sequential(torch.nn.Linear(p, 16), torch.nn.Tanh(), torch.nn.Linear(16, a), torch.nn.Tanh())
    net.to(device)
    return lambda obs: net(obs["proprio"])


def wrong_shape(spec, device):
    """Returns one action column too many."""
    return lambda obs: torch.zeros((obs["proprio"].shape[0], spec["action_shape"][0] + 1), device=device)


def nan_actions(spec, device):
    """Returns NaN actions."""
    return lambda obs: torch.full((obs["proprio"].shape[0], spec["action_shape"][0]), float("nan"), device=device)


def wrong_dtype(spec, device):
    """Returns float64 actions."""
    return lambda obs: torch.zeros((obs["proprio"].shape[0], spec["action_shape"][0]), dtype=torch.float64)


def wrong_device(spec, device):
    """Returns actions on torch's meta device instead of the env's."""
    return lambda obs: torch.zeros((obs["proprio"].shape[0], spec["action_shape"][0]), device="meta")


FAIL_CLAIM_ENV = "FORGE_GPU_TEST_FAIL_CLAIM"
"""A path: the first process to create that file gets a policy that raises after a few calls (one failing
worker among several, injected through the public policy option instead of a hook in the library)."""


def fails_in_one_worker(spec, device):
    """Zero actions; in the one process that claims FORGE_GPU_TEST_FAIL_CLAIM's file, raises on the 6th call."""
    import os

    try:
        os.close(os.open(os.environ[FAIL_CLAIM_ENV], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        claimed = True
    except (KeyError, FileExistsError):
        claimed = False
    calls = [0]

    def policy(obs):
        calls[0] += 1
        if claimed and calls[0] > 5:
            raise RuntimeError(f"injected failure in process {os.getpid()} (tests/helpers/torch_policies.py)")
        return torch.zeros((obs["proprio"].shape[0], spec["action_shape"][0]), device=device)

    return policy
