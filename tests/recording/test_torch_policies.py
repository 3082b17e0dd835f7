"""Torch policies as users have them (sim/policies.py, docs/evaluation.md "Policies"): what a policy with a history
sees equals the run's recorded frames (padded at episode starts, across auto-resets), open-loop chunks execute the
actions they should, temporal ensembling equals ACT's formula, the policy is called once per step, factory
arguments reach the factory, and every bad argument is refused in one line."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import warp as wp
from helpers.envtools import DEVICES, torch_on

import forge_gpu
from forge_gpu._src.sim.names import check_policy_name
from forge_gpu._src.sim.policies import TorchPolicy, _History, load_policy
from forge_gpu.cli import main
from forge_gpu.reading import read_episodes
from forge_gpu.recording import collect

torch = pytest.importorskip("torch")

TESTS = Path(__file__).resolve().parents[1]
MAX_STEPS = 5
"""Cartpole episodes of at most 5 transitions: 6 policy calls each (the terminal frame's included)."""


def _env(num_envs: int = 4, max_steps: int = MAX_STEPS, device: str = "cpu"):
    return forge_gpu.sim.make("cartpole", num_envs=num_envs, device=device, max_steps=max_steps)


def _episodes(run) -> dict:
    return {(e.env_id, e.episode_id): e for e in read_episodes(str(run))}


@pytest.mark.parametrize("device", DEVICES)
def test_history_is_the_recorded_frames_padded_at_each_episode_start(tmp_path, device):
    """A policy with ``history = 3`` is given, at each call and for each env, the frames ``t-2 .. t`` of the episode
    it is in as the run records them, the first frame repeated before the episode's start, also after each
    auto-reset; the tensors it keeps are not overwritten by later calls."""
    torch_on(device)
    env = _env(device=device)
    policy = load_policy("helpers.torch_policies:seen", env, {"history": 3})
    assert policy.history == 3
    collect(env, policy, str(tmp_path / "run"), steps=17)
    episodes = _episodes(tmp_path / "run")
    seen = policy.fn.seen
    assert len(seen) == 17
    checked = set()
    for obs in seen:
        assert obs["proprio"].shape == (4, 3, 4) and obs["step_id"].shape == (4, 3)
        for n in range(4):
            key = (int(obs["env_id"][n, -1]), int(obs["episode_id"][n, -1]))
            if key not in episodes:  # the episode the run was stopped in: not published
                continue
            episode, t = episodes[key], int(obs["step_id"][n, -1])
            rows = [max(t - 2 + j, 0) for j in range(3)]
            for name in ("proprio", "step_id", "time", "env_id", "episode_id"):
                frames = np.concatenate([episode.obs[name], episode.next[name][-1:]])  # frames 0 .. T
                np.testing.assert_array_equal(obs[name][n].cpu().numpy(), frames[rows], err_msg=f"{key} t={t}")
            checked.add((key, t))
    assert len({key for key, _ in checked}) >= 8  # two whole episodes per env, each frame up to the terminal one
    assert {t for _, t in checked} == set(range(MAX_STEPS + 1))


@pytest.mark.parametrize("width", [3, 8])
@pytest.mark.parametrize("per_thread", [None, 1, 2])
def test_history_of_a_field_of_bytes(width, per_thread):
    """A field whose frame is not whole 4-byte words (3 bytes) has the same history, by bytes; one of whole words
    of uint8 (8 bytes) by words; whatever each thread copies (a frame on the CPU, a word on CUDA, or 2)."""
    frames = torch.zeros((2, width), dtype=torch.uint8)
    step_id = wp.zeros(2, dtype=wp.int32, device="cpu")
    history = _History("rgb", frames, 3)
    assert history.unit == (torch.int32 if width == 8 else torch.uint8)
    if per_thread is not None:
        history.per_thread, history.parts = per_thread, -(-history.frame.shape[1] // per_thread)
    got = []
    for t, restart_env1 in enumerate([True, False, False, True]):
        frames[:] = torch.tensor([[t + 1] * width, [10 * (t + 1)] * width], dtype=torch.uint8)
        frames[:, -1] += 1  # the last byte differs: a part left uncopied would show
        step_id.assign(np.array([t, 0 if restart_env1 else 5], np.int32))
        got.append(history.update(int(t == 0), step_id, torch))
    assert got[-1].shape == (2, 3, width) and got[-1].dtype == torch.uint8
    np.testing.assert_array_equal(got[2][0, :, 0].numpy(), [1, 2, 3])  # env 0: frames 1, 2, 3
    np.testing.assert_array_equal(got[3][0, :, 0].numpy(), [2, 3, 4])
    np.testing.assert_array_equal(got[2][1, :, 0].numpy(), [10, 20, 30])  # env 1 restarts at call 0 and 3
    np.testing.assert_array_equal(got[3][1, :, 0].numpy(), [40, 40, 40])
    np.testing.assert_array_equal(got[1][0, :, 0].numpy(), [1, 1, 2])  # kept tensors are not overwritten
    np.testing.assert_array_equal(got[3][:, :, -1].numpy(), got[3][:, :, 0].numpy() + 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("steps_per_chunk", [None, 2, 3])
def test_open_loop_executes_k_actions_of_each_chunk(tmp_path, steps_per_chunk, device):
    """Open loop: the action executed at step ``t`` of an episode is action ``t - r`` of the chunk predicted at
    ``r = K * (t // K)``: chunks restart at each episode's first frame (the 7 calls of an episode of 6 transitions
    are no multiple of K = 4, 2 or 3, so a chunk carried over the terminal frame would show)."""
    from helpers.torch_policies import CODE_SCALE

    torch_on(device)
    env = _env(max_steps=6, device=device)
    policy = load_policy("helpers.torch_policies:step_code", env, steps_per_chunk=steps_per_chunk)
    k = steps_per_chunk or 4
    assert (policy.chunk, policy.steps_per_chunk) == (4, k)
    collect(env, policy, str(tmp_path / "run"), episodes=8)
    episodes = _episodes(tmp_path / "run")
    assert len(episodes) >= 8
    for (env_id, _), episode in episodes.items():
        t = np.arange(episode.steps)
        r = k * (t // k)
        want = (100 * env_id + 10 * r + (t - r)).astype(np.float32) / np.float32(CODE_SCALE)
        np.testing.assert_array_equal(episode.action[:, 0], want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("decay", [None, 0.0, 0.7])
def test_ensemble_is_acts_weighted_mean_of_the_overlapping_chunks(decay, device):
    """Ensemble: the action returned at step ``t`` equals, computed in numpy from the chunks the policy predicted,
    ``sum_i w_i a_i / sum_i w_i`` over the predictions of steps ``t-H+1 .. t`` of the same episode, ``w_i =
    exp(-m i)``, ``i = 0`` the oldest; over auto-resets (each episode starts with one prediction)."""
    torch_on(device)
    env = _env(device=device)
    policy = load_policy("helpers.torch_policies:noisy_chunks", env, execution="ensemble", ensemble_decay=decay)
    m = 0.01 if decay is None else decay
    assert policy.ensemble_decay == m
    env.reset()
    returned = []
    for _ in range(16):
        action = policy(env.observation)
        returned.append(action.numpy().copy())
        env.step(action)
    fn, horizon = policy.fn, 4
    chunks = np.stack([c.cpu().numpy() for c in fn.chunks])  # [calls, N, H, A]
    steps = np.stack([s.cpu().numpy() for s in fn.steps])
    episodes = np.stack([e.cpu().numpy() for e in fn.episodes])
    assert steps.max() == MAX_STEPS and (steps == 0).sum() > 4  # the run crossed auto-resets
    for c in range(len(returned)):
        for n in range(4):
            t = steps[c, n]
            same = [p for p in range(c + 1) if episodes[p, n] == episodes[c, n] and t - steps[p, n] < horizon]
            assert [steps[p, n] for p in same] == list(range(max(t - horizon + 1, 0), t + 1))
            w = np.exp(-m * np.arange(len(same)))
            values = np.stack([chunks[p, n, t - steps[p, n]] for p in same])
            want = (w[:, None] * values).sum(0) / w.sum()
            np.testing.assert_allclose(returned[c][n], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_the_policy_is_called_once_per_step(tmp_path, device):
    """collect calls the policy once before each step and never more: its first call's action is executed (the
    first observation is not asked twice: call j sees step j of the first episode), with or without recording,
    and evaluate(record=) (which steps through collect) likewise. Without a history the policy is given views of
    the env's buffers: kept, they show the env's last frame."""
    torch_on(device)
    env = _env(max_steps=50, device=device)
    policy = load_policy("helpers.torch_policies:seen", env, {"history": 1, "copy": True})
    summary = collect(env, policy, str(tmp_path / "run"), steps=7)
    assert summary.env_steps == 7 * 4 and len(policy.fn.seen) == 7
    assert [obs["step_id"].tolist() for obs in policy.fn.seen] == [[t] * 4 for t in range(7)]
    collect(env, policy, None, steps=5)
    assert len(policy.fn.seen) == 12
    views = load_policy("helpers.torch_policies:seen", env, {"history": 1})
    collect(env, views, None, steps=3)
    assert [obs["step_id"].tolist() for obs in views.fn.seen] == [[3] * 4] * 3
    env = _env(max_steps=4, device=device)
    policy = load_policy("helpers.torch_policies:seen", env, {"history": 2})
    result = forge_gpu.recording.evaluate(env, policy, episodes=6, record=str(tmp_path / "eval"))
    assert len(policy.fn.seen) == result.env_steps // 4
    first, second = policy.fn.seen[:2]
    assert first["step_id"][:, -1].tolist() == [0] * 4 and second["step_id"][:, -1].tolist() == [1] * 4


def test_factory_arguments_reach_the_factory(tmp_path):
    """``load_policy(name, env, args)`` calls ``FACTORY(spec, device, **args)``; the command line's
    ``--policy-arg KEY=VALUE`` gives JSON values where they parse, strings otherwise."""
    env = _env()
    out = tmp_path / "args.json"
    load_policy("helpers.torch_policies:echo_args", env, {"out": str(out), "width": 3, "name": "x"})
    assert json.loads(out.read_text()) == {"width": 3, "name": "x"}
    cli = tmp_path / "cli.json"
    values = ["width=64", "rate=0.5", "flag=true", "sizes=[1, 2]", 'quoted="7"', "word=relu", "empty="]
    args = ["--policy", "helpers.torch_policies:echo_args", "--policy-arg", f"out={cli}"]
    for value in values:
        args += ["--policy-arg", value]
    assert _main(["collect", "cartpole", "--steps", "2", "--envs", "2", "--out", str(tmp_path / "r"), *args]) == 0
    want = {"width": 64, "rate": 0.5, "flag": True, "sizes": [1, 2], "quoted": "7", "word": "relu", "empty": ""}
    assert json.loads(cli.read_text()) == want


def test_policy_names():
    """``lerobot:PATH`` is a policy name (a checkpoint directory or hub id), beside the built-in ones and
    ``MODULE:FACTORY``; ``lerobot:`` alone is not."""
    for name in ("random", "expert", "pkg.mod:make", "lerobot:/ckpt/pretrained_model", "lerobot:user/act-cartpole"):
        check_policy_name(name)
    for name in ("lerobot:", "lerobot: ", "clever", "mod:", "mod:not-an-identifier"):
        with pytest.raises(ValueError, match="lerobot:PATH"):
            check_policy_name(name)


def test_bad_attributes_and_options_are_refused_in_one_line():
    """A bad ``history``/``chunk`` attribute, an execution option that does not apply, K out of range and a bad
    decay: ValueError in one line naming the value."""
    from helpers import torch_policies

    env = _env(num_envs=2)
    spec = env.spec
    cases = [
        (torch_policies.bad_history(spec, "cpu"), {}, "history attribute is 0"),
        (torch_policies.scaled(spec, "cpu", 0.1), {"steps_per_chunk": 2}, "steps_per_chunk=2 .*no action chunks"),
        (torch_policies.scaled(spec, "cpu", 0.1), {"execution": "ensemble"}, "execution='ensemble'"),
        (torch_policies.step_code(spec, "cpu"), {"steps_per_chunk": 5}, "steps_per_chunk=5 .*1..4"),
        (torch_policies.step_code(spec, "cpu"), {"steps_per_chunk": 0}, "steps_per_chunk=0"),
        (torch_policies.step_code(spec, "cpu"), {"ensemble_decay": 0.1}, "applies to execution='ensemble'"),
        (torch_policies.step_code(spec, "cpu"), {"execution": "ensemble", "ensemble_decay": -1}, "ensemble_decay=-1"),
        (torch_policies.step_code(spec, "cpu"), {"execution": "ensemble", "steps_per_chunk": 2}, "open_loop' only"),
        (torch_policies.step_code(spec, "cpu"), {"execution": "closed_loop"}, "closed_loop"),
    ]
    for fn, options, words in cases:
        with pytest.raises(ValueError, match=words) as caught:
            TorchPolicy(env, fn, **options)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="'helpers.torch_policies:scaled'.*takes no argument 'depth'"):
        load_policy("helpers.torch_policies:scaled", env, {"scale": 1, "depth": 2})
    with pytest.raises(ValueError, match="'helpers.torch_policies:scaled'.*scale"):
        load_policy("helpers.torch_policies:scaled", env)
    with pytest.raises(ValueError, match="'random' is built in and takes no arguments"):
        load_policy("random", env, {"scale": 1})
    with pytest.raises(ValueError, match="steps_per_chunk=2.*'expert'"):
        load_policy("expert", env, steps_per_chunk=2)


def _main(args: list[str]) -> int:
    sys.path.insert(0, str(TESTS))
    try:
        return main(args)
    finally:
        sys.path.remove(str(TESTS))


CHUNKED = ["--policy", "helpers.torch_policies:step_code"]
MLP = ["--policy", "helpers.torch_policies:tiny_mlp"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--policy-arg", "width"], ["--policy-arg 'width'", "KEY=VALUE"]),
        (["--policy-arg", "=3"], ["--policy-arg '=3'", "KEY=VALUE"]),
        (["--policy-arg", "a=1", "--policy-arg", "a=2"], ["--policy-arg 'a=2'", "twice"]),
        (["--policy-arg", "a=1"], ["--policy-arg", "'random'", "no arguments"]),
        (["--chunk-steps", "2"], ["--chunk-steps", "'random'", "no action chunks"]),
        ([*MLP, "--policy-arg", "width=3"], ["tiny_mlp", "'width'"]),
        ([*MLP, "--chunk-steps", "2"], ["steps_per_chunk=2 (--chunk-steps)", "no action chunks"]),
        ([*MLP, "--chunk-exec", "ensemble"], ["--chunk-exec", "no action chunks"]),
        ([*MLP, "--chunk-exec", "open_loop"], ["--chunk-exec open_loop", "no action chunks"]),
        ([*CHUNKED, "--chunk-steps", "9"], ["--chunk-steps", "9", "1..4"]),
        ([*CHUNKED, "--chunk-steps", "0"], ["--chunk-steps 0", ">= 1"]),
        ([*CHUNKED, "--chunk-exec", "ensemble", "--chunk-steps", "2"], ["--chunk-steps 2", "open_loop only"]),
        ([*CHUNKED, "--ensemble-decay", "0.1"], ["--ensemble-decay 0.1", "ensemble only"]),
        ([*CHUNKED, "--chunk-exec", "ensemble", "--ensemble-decay", "-1"], ["--ensemble-decay -1.0", ">= 0"]),
        ([*CHUNKED, "--chunk-exec", "ensemble", "--ensemble-decay", "nan"], ["--ensemble-decay nan", ">= 0"]),
        ([*CHUNKED, "--chunk-exec", "closed"], ["--chunk-exec", "open_loop", "ensemble"]),
    ],
)
@pytest.mark.parametrize("command", ["collect", "evaluate"])
def test_bad_policy_flags_exit_2_in_one_line(tmp_path, capsys, command, args, words):
    """Each bad policy flag, on collect and on evaluate: exit status 2, one line naming the flag, nothing created."""
    out = tmp_path / "run"
    if command == "collect":
        full = ["collect", "cartpole", "--envs", "2", "--steps", "2", "--out", str(out), *args]
    else:
        full = ["evaluate", "cartpole", "--envs", "2", "--episodes", "2", "--record", str(out), *args]
    if "--policy" not in full:
        full += ["--policy", "random"]
    code = _main(full)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err
    assert not out.exists()


def test_ray_workers_get_the_policy_arguments_and_chunk_options(tmp_path, monkeypatch):
    """``collect --workers 2``: every worker's policy is made with the ``--policy-arg``s and runs its chunks as
    ``--chunk-steps`` says (each run's actions follow the open-loop formula with K = 5, which the default chunk of
    4 would refuse)."""
    pytest.importorskip("ray")
    from helpers.torch_policies import CODE_SCALE

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    root = tmp_path / "data"
    args = ["collect", "cartpole", "--envs", "2", "--set", "max_steps=6", "--device", "cpu", "--workers", "2"]
    args += ["--episodes", "4", "--out", str(root), "--policy", "helpers.torch_policies:step_code"]
    assert _main([*args, "--policy-arg", "chunk=6", "--chunk-steps", "5"]) == 0  # K = 5 > the default chunk 4
    episodes = list(read_episodes(root))
    assert len(episodes) >= 4 and max(e.steps for e in episodes) == 6  # t = 5 tells K = 5 from K = H = 6
    for episode in episodes:
        t = np.arange(episode.steps)
        r = 5 * (t // 5)
        want = (100 * episode.env_id + 10 * r + (t - r)).astype(np.float32) / np.float32(CODE_SCALE)
        np.testing.assert_array_equal(episode.action[:, 0], want)
