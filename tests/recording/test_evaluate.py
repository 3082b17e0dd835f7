"""forge_gpu.recording.evaluate and ``forge-gpu evaluate``: exactly N keyed episodes, the same figures at any number
of envs, equal to the truth measured from the draws in plain stepping, and not over-rating slow failures."""

import json
import math

import numpy as np
import pytest

import forge_gpu
from forge_gpu._src.evaluate.figures import mean_interval, wilson
from forge_gpu._src.sim.policies import load_policy
from forge_gpu.cli import main

TASK = "reach"
SETTINGS = {"max_steps": 40, "randomize": {"mass_scale": [0.5, 2.0]}, "params": {"render": False}}
"""The expert within 40 steps reaches the near targets only: success depends on the target drawn at reset."""
EPISODES = 12


def _env(num_envs: int, seed: int = 5):
    return forge_gpu.sim.make(TASK, num_envs=num_envs, device="cpu", seed=seed, **SETTINGS)


def _first_episodes(num_envs: int, policy_name: str = "expert", seed: int = 5) -> dict:
    """The truth, measured on the host in plain stepping: world ``w``'s first episode draws from the keys ``(w, 0)``,
    the keys of an evaluation's episode ``w``. Return, length, success and drawn mass scale per world."""
    env = _env(num_envs, seed)
    policy = load_policy(policy_name, env)
    first = env.reset().numpy()
    n = env.num_envs
    total, length = np.zeros(n), np.zeros(n, np.int64)
    success, done = np.zeros(n, bool), np.zeros(n, bool)
    while not done.all():
        r = env.step(policy(env.observation)).numpy()
        live = r.info["active"] & ~done
        total[live] += r.reward[live]
        ended = live & (r.terminated | r.truncated)
        length[ended] = r.observation["step_id"][ended]
        success[ended] = r.terminated[ended]
        done |= ended
    return {"return": total, "length": length, "success": success, "mass_scale": first.params["mass_scale"]}


def _naive_rate(num_envs: int, episodes: int, seed: int = 5) -> float:
    """The biased count: the success of the first ``episodes`` episodes to end under auto-reset."""
    env = _env(num_envs, seed)
    policy = load_policy("expert", env)
    env.reset()
    outcomes: list[bool] = []
    while len(outcomes) < episodes:
        r = env.step(policy(env.observation)).numpy()
        ended = r.info["active"] & (r.terminated | r.truncated)
        outcomes += r.terminated[ended].tolist()
    return float(np.mean(outcomes[:episodes]))


def _evaluate(num_envs: int, episodes: int, policy_name: str = "expert"):
    env = _env(num_envs)
    return forge_gpu.recording.evaluate(env, load_policy(policy_name, env), episodes=episodes)


@pytest.fixture(scope="module")
def truth():
    return _first_episodes(EPISODES)


@pytest.mark.parametrize("num_envs", [4, 16])
def test_evaluation_equals_the_truth_from_the_draws(truth, num_envs):
    """Episode j's figures and drawn values are those of the keys (seed, j), whatever the number of envs (4 envs
    run 3 episodes each, 16 leave 4 idle), and the figures are measured over exactly N episodes."""
    result = _evaluate(num_envs, EPISODES)
    assert 0 < truth["success"].sum() < EPISODES, "the draws must decide the success"
    np.testing.assert_array_equal(result.success_at_end, truth["success"])
    np.testing.assert_array_equal(result.success_once, truth["success"])
    np.testing.assert_array_equal(result.lengths, truth["length"])
    np.testing.assert_allclose(result.returns, truth["return"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(result.params["mass_scale"], truth["mass_scale"])
    assert result.episodes == EPISODES and result.num_envs == num_envs
    assert sorted(set(result.worlds.tolist())) == list(range(min(num_envs, EPISODES)))
    metrics = result.metrics()
    assert metrics["n_episodes"] == EPISODES
    assert metrics["pc_success"] == pytest.approx(100.0 * truth["success"].mean())
    assert metrics["avg_sum_reward"] == pytest.approx(truth["return"].mean(), rel=1e-5)
    assert sum(b["episodes"] for b in metrics["by_param"]["mass_scale"]) == EPISODES


def test_random_policy_noise_follows_the_episode_key():
    """The random policy's draws of episode j are keyed by j: the same per-episode figures at 3 and 8 envs, and
    those of the worlds' first episodes in plain stepping."""
    truth = _first_episodes(6, "random")
    for num_envs in (3, 8):
        result = _evaluate(num_envs, 6, "random")
        np.testing.assert_allclose(result.returns, truth["return"], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(result.lengths, truth["length"])


def test_slow_failures_are_not_over_rated(truth):
    """Failures run to the step limit; successes end early. Counting the first N episodes to end (16 envs, N = 8)
    over-rates the policy; the evaluation of N = 8 gives the rate of episodes 0 .. 7 exactly."""
    rate = truth["success"][:8].mean()
    naive = _naive_rate(16, 8)
    result = _evaluate(16, 8)
    assert result.success_at_end.mean() == pytest.approx(rate)
    assert naive > rate + 0.2, (naive, rate)


def test_reuse_of_the_env_after_an_evaluation():
    """The env is given back with its plain step: its draw keys are the world index and the episode id again, and an
    evaluation of an env that already stepped gives the same figures as a fresh one's."""
    env = _env(4)
    policy = load_policy("expert", env)
    env.reset()
    env.step(policy(env.observation))
    first = forge_gpu.recording.evaluate(env, policy, episodes=5)
    assert env.world.draw_episode is env.world.episode_id
    np.testing.assert_array_equal(env.world.draw_env.numpy(), np.arange(4))
    env.reset()
    env.step(policy(env.observation))
    second = forge_gpu.recording.evaluate(env, policy, episodes=5)
    np.testing.assert_array_equal(first.lengths, second.lengths)
    np.testing.assert_array_equal(first.success_at_end, second.success_at_end)


def test_intervals():
    """Wilson's interval holds the rate, stays in [0, 1] and narrows with n; the mean's is symmetric."""
    low, high = wilson(0, 10)
    assert low == 0.0 and 0.2 < high < 0.35
    low, high = wilson(5, 10)
    assert low < 0.5 < high and math.isclose(low + high, 1.0)
    assert wilson(50, 100)[1] - wilson(50, 100)[0] < high - low
    m = mean_interval(np.array([1.0, 2.0, 3.0, 4.0]))
    assert m["mean"] == 2.5 and math.isclose(m["high"] - 2.5, 2.5 - m["low"])
    assert math.isclose(m["std"], np.std([1.0, 2.0, 3.0, 4.0], ddof=1))


def test_cli_prints_and_writes_the_figures(tmp_path, capsys, truth):
    out = tmp_path / "eval.json"
    args = ["evaluate", TASK, "--policy", "expert", "--episodes", str(EPISODES), "--envs", "4", "--seed", "5"]
    sets = ["--set", "max_steps=40", "--set", "randomize.mass_scale=[0.5, 2.0]", "--set", "params.render=false"]
    assert main([*args, *sets, "--device", "cpu", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "success at end" in printed and "mass_scale in [" in printed
    data = json.loads(out.read_text())
    for key in ("pc_success", "avg_sum_reward", "avg_max_reward", "n_episodes"):
        assert key in data
    assert data["n_episodes"] == EPISODES
    assert data["per_episode"]["success_at_end"] == truth["success"].tolist()
    assert data["per_episode"]["length"] == truth["length"].tolist()


def test_cli_record_takes_the_recording_flags(tmp_path):
    """``--record OUT`` with collect's recording flags: the run is written as they say."""
    run = tmp_path / "r"
    args = ["evaluate", TASK, "--policy", "expert", "--episodes", "4", "--envs", "4", "--device", "cpu"]
    sets = ["--set", "max_steps=40", "--set", "params.render=false"]
    assert main([*args, *sets, "--record", str(run), "--format", "npz"]) == 0
    assert len(list(run.glob("env*-episode*.npz"))) == 4  # the npz layout: one file per episode
    assert forge_gpu.formats.read_manifest(run)["completed_episodes"] == 4


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--episodes", "0"], "--episodes 0: must be >= 1"),
        (["--episodes", "4", "--envs", "0"], "--envs 0: must be >= 1"),
        (["--episodes", "4", "--set", "num_envs=3"], "--set num_envs=...: use the --envs option instead"),
        (["--episodes", "4", "--set", "nokey"], "--set 'nokey': expected KEY=VALUE"),
        (["--episodes", "4", "--set", "max_steps=-1"], "max_steps"),
        (["--episodes", "4", "--policy", "nosuch"], "nosuch"),
        (["--episodes", "four"], "--episodes: invalid int value"),
        (["--episodes", "4", "--record", "/proc/nosuch/run"], "--record /proc/nosuch/run"),
        (["--episodes", "4", "--compression", "lz4"], "apply with --record OUT only"),
        ([], "--episodes"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(args, says, capsys):
    policy = [] if "--policy" in args else ["--policy", "expert"]
    assert main(["evaluate", TASK, *policy, *args, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_unknown_task_and_existing_json_are_refused(tmp_path, capsys):
    assert main(["evaluate", "nosuch", "--policy", "expert", "--episodes", "2"]) == 2
    assert "unknown task 'nosuch'" in capsys.readouterr().err
    taken = tmp_path / "taken.json"
    taken.write_text("{}")
    assert main(["evaluate", TASK, "--policy", "expert", "--episodes", "2", "--json", str(taken)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and err.count("\n") == 1
    assert taken.read_text() == "{}"


@pytest.mark.parametrize("num_envs", [4, 16])
def test_record_writes_exactly_the_evaluated_episodes(tmp_path, truth, num_envs):
    """--record: a run that verify calls ok, holding exactly the N evaluated episodes (none cut, none extra: the
    worlds idle at the end, and those 16 - 12 idle from the start, publish nothing), each episode j at the
    ``(env_id, episode_id)`` the result names, with episode j's figures and drawn values; the figures equal those
    of the evaluation without recording."""
    env = _env(num_envs)
    run = str(tmp_path / "r")
    result = forge_gpu.recording.evaluate(env, load_policy("expert", env), episodes=EPISODES, record=run)
    assert forge_gpu.reading.verify_run(str(tmp_path / "r"))["ok"]
    episodes = {(e.env_id, e.episode_id): e for e in forge_gpu.reading.read_episodes(str(tmp_path / "r"))}
    assert sorted(episodes) == sorted(zip(result.worlds.tolist(), result.episode_ids.tolist(), strict=True))
    for j, key in enumerate(zip(result.worlds.tolist(), result.episode_ids.tolist(), strict=True)):
        episode = episodes[key]
        assert episode.steps == truth["length"][j] == result.lengths[j]
        assert bool(episode.terminated[-1]) == truth["success"][j]
        assert float(episode.reward.sum()) == pytest.approx(truth["return"][j], rel=1e-5, abs=1e-5)
        assert float(episode.params["mass_scale"]) == truth["mass_scale"][j]
    np.testing.assert_array_equal(result.success_at_end, truth["success"])
    assert result.run == str(tmp_path / "r")
    if num_envs == 4:  # the failures, replayed from their actions, follow the recorded states
        failed = ~result.success_at_end
        keys = list(zip(result.worlds[failed].tolist(), result.episode_ids[failed].tolist(), strict=True))
        report = forge_gpu.recording.replay(run, tmp_path / "replayed", from_="actions", episodes=keys, device="cpu")
        assert report["episodes"] == len(keys) > 0
        assert report["diverged"] == 0, report


def test_a_non_finite_action_is_refused():
    """A policy that gives NaN fails the evaluation in one line, on the CPU at the step, on CUDA from the step's
    flag counted on the device."""
    env = _env(4)
    expert = load_policy("expert", env)
    calls = []

    def bad(observation):
        action = expert(observation)
        calls.append(1)
        if len(calls) == 20:
            action = action.numpy()
            action[1, 0] = np.nan
        return action

    with pytest.raises(ValueError, match="non-finite"):
        forge_gpu.recording.evaluate(env, bad, episodes=8)
