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


# -- history, chunks and arguments (tests/recording/test_torch_policies.py) -----------------------------------------


def seen(spec, device, history=3, copy=False):
    """Zero actions; keeps every observation it is given (``policy.seen``: the tensors themselves, so that a
    history overwritten after the call would show, or with ``copy`` clones of them) and so counts its calls."""
    a = spec["action_shape"][0]

    def policy(obs):
        policy.seen.append({k: v.clone() for k, v in obs.items()} if copy else dict(obs))
        return torch.zeros((obs["proprio"].shape[0], a), device=device)

    policy.history, policy.seen = history, []
    return policy


CODE_SCALE = 1024.0
"""``step_code``'s actions are codes / CODE_SCALE: exact in float32 and inside cartpole's bounds [-1, 1]."""


def step_code(spec, device, chunk=4):
    """A chunk whose action k for env n, predicted at the episode's step s, is ``(100 n + 10 s + k) / CODE_SCALE``
    in every action column: what an env executed names the step its chunk was taken at and the offset in it."""
    a = spec["action_shape"][0]

    def policy(obs):
        n = obs["proprio"].shape[0]
        code = 100 * obs["env_id"].float() + 10 * obs["step_id"].float()
        codes = code[:, None] + torch.arange(chunk, device=device, dtype=torch.float32)[None, :]
        return (codes / CODE_SCALE)[:, :, None].expand(n, chunk, a).contiguous()

    policy.chunk = chunk
    return policy


def noisy_chunks(spec, device, chunk=4):
    """Chunks of values in [-0.5, 0.5] drawn from (env, episode, step, offset, column); keeps each call's chunk and
    step ids (``policy.chunks``, ``policy.steps``, ``policy.envs``, ``policy.episodes``)."""
    a = spec["action_shape"][0]

    def policy(obs):
        key = obs["env_id"] * 7919 + obs["episode_id"] * 104729 + obs["step_id"] * 1299709
        k = torch.arange(chunk, device=device)[None, :, None] * 31 + torch.arange(a, device=device)[None, None, :]
        values = 0.5 * torch.sin((key[:, None, None] + k).float() * 0.61803)
        policy.chunks.append(values.clone())
        policy.steps.append(obs["step_id"].clone())
        policy.envs.append(obs["env_id"].clone())
        policy.episodes.append(obs["episode_id"].clone())
        return values

    policy.chunk, policy.chunks, policy.steps, policy.envs, policy.episodes = chunk, [], [], [], []
    return policy


def echo_args(spec, device, out, **kwargs):
    """Zero actions; writes the keyword arguments it was given to the JSON file ``out``."""
    import json

    with open(out, "w") as f:
        json.dump(kwargs, f)
    a = spec["action_shape"][0]
    return lambda obs: torch.zeros((obs["proprio"].shape[0], a), device=device)


def scaled(spec, device, scale):
    """Constant actions ``scale`` (a required argument)."""
    a = spec["action_shape"][0]
    return lambda obs: torch.full((obs["proprio"].shape[0], a), float(scale), device=device)


def bad_history(spec, device):
    """A callable whose history attribute is 0."""
    policy = scaled(spec, device, 0.0)
    policy.history = 0
    return policy
