"""Relabeling with the expert (DAgger): ``label = "expert"`` records every frame's expert action for its state as
``obs/expert_action`` (computed inside the step); ``expert_mix`` executes the expert's actions in a per-episode share
of episodes, drawn from the seed and recorded as the param ``expert_executed``. push on the CPU, images off, few envs
and steps; the random policy is the learner."""

import re
from pathlib import Path

import numpy as np
import pytest

import forge_gpu
from forge_gpu.cli import main
from forge_gpu.reading import read_episodes
from forge_gpu.recording import collect

LABEL, DRAW = "expert_action", "expert_executed"
SMALL = {"max_steps": 6, "params.render": False}
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _make(num_envs=4, seed=0, **options):
    return forge_gpu.sim.make("push", num_envs=num_envs, device="cpu", seed=seed, **SMALL, **options)


def _collect(env, directory, episodes=12):
    collect(env, forge_gpu.sim.make_policy("random", env), str(directory), episodes=episodes)
    return {(e.env_id, e.episode_id): e for e in read_episodes(directory, options=_with_state())}


def _with_state():
    from forge_gpu._src.core.episode import EpisodeReadOptions

    return EpisodeReadOptions(state=True)


def _clip(env, values):
    low, high = (np.asarray(env.spec[k], np.float32) for k in ("action_low", "action_high"))
    return np.clip(values, low, high)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """(env, episodes) of a run with labels and a 0.5 mix."""
    env = _make(label="expert", expert_mix=0.5)
    return env, _collect(env, tmp_path_factory.mktemp("mixed") / "run")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The episodes of the same collection without labels."""
    return _collect(_make(), tmp_path_factory.mktemp("plain") / "run")


def test_the_spec_marks_the_label_field_and_the_draw(mixed):
    env, _ = mixed
    assert env.spec["observation"][LABEL] == {"shape": [4], "dtype": "float32"}
    assert env.spec["labels"] == {LABEL: "expert"}
    assert env.spec["params"][DRAW] == {"shape": [], "dtype": "float32"}
    unmixed = _make(num_envs=1, label="expert")
    assert DRAW not in unmixed.spec["params"] and unmixed.spec["labels"] == {LABEL: "expert"}


def test_the_label_is_the_experts_action_for_the_recorded_state_bit_for_bit(mixed):
    """Every recorded frame restored (its state and its episode's params) in the env: the expert called on the
    restored observation returns the recorded label, bit for bit, and the restore labels it alike."""
    env, episodes = mixed
    expert = env.task.expert(env.world)
    group = list(episodes.values())[: env.num_envs]
    frames = [np.concatenate([e.obs[LABEL], e.next[LABEL][-1:]]) for e in group]
    params = {name: np.stack([np.asarray(e.params[name], np.float32) for e in group]) for name in group[0].params}
    checked = 0
    for t in range(max(e.steps for e in group) + 1):
        at = [min(t, e.steps) for e in group]
        state = {
            name: np.stack([e.state[name][k] for e, k in zip(group, at, strict=True)]) for name in env.state_fields
        }
        result = env.restore(state, params)
        labelled = result.observation[LABEL].numpy()
        called = expert(env.observation).numpy()
        for i, (frame, k) in enumerate(zip(frames, at, strict=True)):
            assert labelled[i].tobytes() == frame[k].tobytes(), (i, t)
            assert called[i].tobytes() == frame[k].tobytes(), (i, t)
            checked += 1
    assert checked >= 4 * 7


def test_the_mix_executes_the_expert_in_the_drawn_episodes_and_the_learner_in_the_others(mixed, plain):
    env, episodes = mixed
    draws = {key: float(e.params[DRAW]) for key, e in episodes.items()}
    assert set(draws.values()) == {0.0, 1.0}
    for key, episode in episodes.items():
        if draws[key] == 1.0:
            np.testing.assert_array_equal(episode.action, _clip(env, episode.obs[LABEL]))
        elif key in plain:  # the learner's episode, as a collection without labels runs it
            np.testing.assert_array_equal(episode.action, plain[key].action)
            np.testing.assert_array_equal(episode.obs["proprio"], plain[key].obs["proprio"])
            np.testing.assert_array_equal(episode.reward, plain[key].reward)
    assert any(d == 0.0 and key in plain for key, d in draws.items())
    assert not any(np.array_equal(e.action, _clip(env, e.obs[LABEL])) for k, e in episodes.items() if not draws[k])


def test_the_draw_is_per_episode_from_the_seed_whatever_the_number_of_envs(mixed, tmp_path):
    _, episodes = mixed
    again = _collect(_make(num_envs=2, label="expert", expert_mix=0.5), tmp_path / "again", episodes=6)
    common = set(again) & set(episodes)
    assert len(common) >= 4
    assert all(float(again[k].params[DRAW]) == float(episodes[k].params[DRAW]) for k in common)
    other = _collect(_make(num_envs=2, seed=1, label="expert", expert_mix=0.5), tmp_path / "other", episodes=6)
    common = sorted(set(other) & set(episodes))
    assert len(common) >= 4  # another seed, other draws
    assert [float(other[k].params[DRAW]) for k in common] != [float(episodes[k].params[DRAW]) for k in common]


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_mix_of_1_executes_the_expert_and_of_0_the_learner(share, plain, tmp_path):
    env = _make(label="expert", expert_mix=share)
    episodes = _collect(env, tmp_path / "run", episodes=4)
    assert {float(e.params[DRAW]) for e in episodes.values()} == {share}
    for key, episode in episodes.items():
        if share == 1.0:
            np.testing.assert_array_equal(episode.action, _clip(env, episode.obs[LABEL]))
            assert not np.array_equal(episode.action, plain[key].action)
        else:
            np.testing.assert_array_equal(episode.action, plain[key].action)


def test_a_labelled_mixed_run_replays_from_state_with_the_same_labels_and_draws(mixed, tmp_path):
    env, episodes = mixed
    run = tmp_path / "run"
    collect(env, forge_gpu.sim.make_policy("random", env), str(run), episodes=4)
    forge_gpu.recording.replay(run, tmp_path / "replayed", batch=4)
    replayed = {(e.env_id, e.episode_id): e for e in read_episodes(tmp_path / "replayed")}
    recorded = {(e.env_id, e.episode_id): e for e in read_episodes(run)}
    assert replayed.keys() == recorded.keys()
    for key, episode in recorded.items():
        assert replayed[key].obs[LABEL].tobytes() == episode.obs[LABEL].tobytes()
        assert replayed[key].params[DRAW] == episode.params[DRAW]


def test_where_selects_the_episodes_the_expert_executed(mixed, tmp_path):
    env, _ = mixed
    run = tmp_path / "run"
    collect(env, forge_gpu.sim.make_policy("random", env), str(run), episodes=8)
    assert main(["select", str(run), str(tmp_path / "expert"), "--where", f"{DRAW} == 1"]) == 0
    chosen = list(read_episodes(tmp_path / "expert"))
    assert chosen and all(float(e.params[DRAW]) == 1.0 for e in chosen)
    windows = forge_gpu.reading.Windows(run, params=True)
    assert set(np.unique(windows.batch(np.arange(len(windows)))[f"params/{DRAW}"])) <= {0.0, 1.0}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"label": "bogus"}, r"label = 'bogus': allowed values are None, 'expert'"),
        ({"expert_mix": 0.5}, r"expert_mix = 0.5 needs label = 'expert'"),
        ({"label": "expert", "expert_mix": 1.5}, r"expert_mix = 1.5: allowed range is \[0.0, 1.0\]"),
    ],
)
def test_bad_options_are_refused_in_one_line(options, message):
    with pytest.raises(ValueError, match=message) as caught:
        forge_gpu.sim.task_config("push", **options)
    assert "\n" not in str(caught.value)


def _without_expert(tmp_path) -> Path:
    """cartpole's task file without its ``[expert]`` table, under another id."""
    text = (CONFIGS / "cartpole.toml").read_text()
    text = re.sub(r"\n\[expert\]\n.*?\n(?=\[randomize\])", "\n", text, flags=re.S)
    assert "[expert]" not in text
    path = tmp_path / "balance.toml"
    path.write_text(text.replace('task = "cartpole"', 'task = "balance_without_expert"'))
    return path


def test_a_task_without_an_expert_is_named_in_one_line(tmp_path, capsys):
    path = _without_expert(tmp_path)
    with pytest.raises(ValueError, match=r"label = 'expert': task 'balance_without_expert' has no expert") as caught:
        forge_gpu.sim.make(str(path), num_envs=1, device="cpu", label="expert")
    assert "\n" not in str(caught.value)
    out = tmp_path / "run"
    assert main(["collect", str(path), "--label", "expert", "--envs", "1", "--steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "task 'balance_without_expert' has no expert" in err and not out.exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mix", "0.5"], "--mix 0.5: needs --label expert"),
        (["--label", "expert", "--mix", "1.5"], "--mix 1.5: must be between 0 and 1"),
        (["--label", "expert", "--mix", "-0.1"], "--mix -0.1: must be between 0 and 1"),
        (["--label", "expert", "--mix", "nan"], "--mix nan: must be between 0 and 1"),
        (["--label", "teacher"], "argument --label: invalid choice: 'teacher'"),
        (["--label", "expert", "--set", "expert_mix=0.5"], "--set expert_mix=...: use the --mix option instead"),
    ],
)
def test_bad_collect_flags_are_refused_in_one_line_before_anything_is_built(flags, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["collect", "push", "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not out.exists()


def test_collect_label_and_mix_flags_record_the_labels_and_the_draws(tmp_path, capsys):
    out = tmp_path / "run"
    flags = [
        "--envs",
        "2",
        "--episodes",
        "2",
        "--device",
        "cpu",
        "--set",
        "max_steps=4",
        "--set",
        "params.render=false",
    ]
    assert main(["collect", "push", "--out", str(out), "--label", "expert", "--mix", "1", *flags]) == 0
    manifest = forge_gpu.formats.read_manifest(out)
    assert manifest["env_spec"]["labels"] == {LABEL: "expert"} and manifest["config"]["expert_mix"] == 1.0
    episodes = list(read_episodes(out))
    assert episodes and all(float(e.params[DRAW]) == 1.0 for e in episodes)


def test_a_torch_learner_is_not_given_its_label_fields(mixed):
    """The learner's inputs are the observation without ``expert_action`` (its training target)."""
    from helpers import torch_policies

    env, _ = mixed
    policy = forge_gpu.sim.TorchPolicy(env, torch_policies.seen(env.spec, "cpu", history=1))
    env.reset()
    policy(env.observation)
    assert LABEL in env.observation and "proprio" in policy.fn.seen[0]
    assert LABEL not in policy.fn.seen[0]


@pytest.fixture(scope="module")
def expert_run(tmp_path_factory):
    """(the frames' states, params, actions and proprio) of 4 expert episodes recorded with their state."""
    env = _make(record_state=True)
    directory = tmp_path_factory.mktemp("expert") / "run"
    collect(env, forge_gpu.sim.make_policy("expert", env), str(directory), episodes=4)
    return list(read_episodes(directory, options=_with_state()))[:4]


def _frames(episodes, t):
    state = {name: np.stack([e.state[name][t] for e in episodes]) for name in episodes[0].state}
    params = {name: np.stack([np.asarray(e.params[name], np.float32) for e in episodes]) for name in episodes[0].params}
    return state, params


@pytest.mark.parametrize("t", [0, 2])
def test_expert_chunks_from_recorded_states_are_the_actions_the_expert_recorded_from_there(expert_run, t):
    """The expert's chunk from a restored frame of its own episode is what it executed from that frame on."""
    from forge_gpu._src.sim.relabel import expert_chunks

    env = _make(num_envs=len(expert_run))
    horizon = 3
    assert all(e.steps >= t + horizon for e in expert_run)
    chunks = expert_chunks(env, *_frames(expert_run, t), horizon, fields=("proprio",))
    assert chunks["action"].shape == (4, horizon, 4) and chunks["valid"].all()
    recorded = np.stack([e.action[t : t + horizon] for e in expert_run])
    np.testing.assert_allclose(chunks["action"], recorded, atol=1e-4)
    proprio = np.stack([e.obs["proprio"][t : t + horizon] for e in expert_run])
    np.testing.assert_allclose(chunks["obs/proprio"], proprio, atol=1e-4)
    assert np.abs(np.diff(recorded, axis=1)).max() > 1e-3  # the actions move: a constant chunk would not tell


def test_expert_chunks_mark_the_steps_after_the_episode_ended_invalid(expert_run):
    """max_steps counts from the restored frame: with 2, the third and fourth actions belong to the next episode."""
    from forge_gpu._src.sim.relabel import expert_chunks

    env = forge_gpu.sim.make("push", num_envs=4, device="cpu", seed=0, max_steps=2, **{"params.render": False})
    chunks = expert_chunks(env, *_frames(expert_run, 1), 4)
    assert chunks["valid"].tolist() == [[True, True, False, False]] * 4


@pytest.mark.parametrize("horizon", [0, -1, 2.5, True])
def test_expert_chunks_refuse_a_bad_horizon_in_one_line(expert_run, horizon):
    from forge_gpu._src.sim.relabel import expert_chunks

    with pytest.raises(ValueError, match=r"^expert_chunks: horizon is .*; expected an integer >= 1$"):
        expert_chunks(_make(), *_frames(expert_run, 0), horizon)
