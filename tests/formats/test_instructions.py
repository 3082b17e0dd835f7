"""Per-episode instructions (docs/FORMAT.md "Instructions"): the template's checks and formatter, recorded once per
episode in both layouts, read back by every reader (episodes, windows, torch), counted by inspect, exported as LeRobot
tasks and robomimic language, kept by convert and repair; older runs keep the run's instruction."""

import dataclasses
import json
import shutil
from collections import Counter

import numpy as np
import pytest
from helpers.synthetic import (
    INSTRUCTION,
    SyntheticSim,
    downgrade_packed_run,
    make_batches,
    record,
    synthetic_description,
)

import forge_gpu
from forge_gpu._src.core.instructions import check_template, episode_instructions, slot_indices
from forge_gpu._src.reading.inspection import format_report
from forge_gpu.cli import main
from forge_gpu.curation import convert_run, repair_run
from forge_gpu.reading import inspect_run
from forge_gpu.recording import NpzRecorder, PackedRecorder

#: The synthetic params are drawn in [0.5, 1.5): two weights by mass_scale, three sides by target_color's component 1.
TEMPLATE = {
    "text": "push the {weight} cube to the {side} square",
    "slots": {
        "weight": {"param": "mass_scale", "edges": [1.0], "names": ["light", "heavy"]},
        "side": {"param": "target_color", "component": 1, "edges": [0.8, 1.2], "names": ["right", "middle", "left"]},
    },
}


def expected(params: dict) -> str:
    """An episode's instruction under TEMPLATE, worked out by hand from its params."""
    weight = "light" if params["params/mass_scale"] < 1.0 else "heavy"
    side = params["params/target_color"][1]
    where = "right" if side < 0.8 else "middle" if side < 1.2 else "left"
    return f"push the {weight} cube to the {where} square"


def template_env(**kwargs):
    env = synthetic_description(num_envs=4, max_steps=6, params=True, **kwargs)
    spec = dict(env.spec, instruction_template=TEMPLATE)
    return dataclasses.replace(env, spec=spec)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One template run recorded in both layouts from the same batches, and the instruction each episode must have."""
    root = tmp_path_factory.mktemp("instructions")
    env = template_env()
    sim = SyntheticSim(env, seed=5, end_prob=0.3)
    batches = make_batches(sim, 40)
    record(root / "packed", env, batches, recorder=PackedRecorder)
    record(root / "npz", env, batches, recorder=NpzRecorder)
    wanted = {key: expected(members) for key, members in sim.completed.items()}
    assert len(set(wanted.values())) >= 3  # several distinct instructions to tell apart
    return root, wanted


def by_id(directory) -> dict:
    return {(e.env_id, e.episode_id): e.instruction for e in forge_gpu.reading.read_episodes(directory)}


# -- the template ------------------------------------------------------------------------------


def test_names_edges_and_components_make_the_instructions():
    """names[round(value)] without edges, names[digitize(value, edges)] with them, reading the slot's component."""
    template = {
        "text": "push the {cube} cube to the {side}",
        "slots": {
            "cube": {"param": "cube_color", "names": ["red", "green", "blue", "yellow"]},
            "side": {"param": "goal", "component": 1, "edges": [-0.1, 0.1], "names": ["right", "middle", "left"]},
        },
    }
    layout = {"cube_color": ((), np.dtype(np.float32)), "goal": ((3,), np.dtype(np.float32))}
    check_template(template, layout)
    params = {
        "cube_color": np.array([0, 1, 2, 3, 2.2], np.float32),
        "goal": np.array([[9, -0.5, 9], [9, 0.0, 9], [9, 0.5, 9], [9, -0.1, 9], [9, 0.1, 9]], np.float32),
    }
    got = episode_instructions(template, params)
    colours, sides = ["red", "green", "blue", "yellow", "blue"], ["right", "middle", "left", "middle", "left"]
    assert got == [f"push the {c} cube to the {s}" for c, s in zip(colours, sides, strict=True)]
    assert episode_instructions({"text": "push it", "slots": {}}, {}, count=2) == ["push it", "push it"]


@pytest.mark.parametrize(
    "change, words",
    [
        ({"slots": {**TEMPLATE["slots"], "weight": {"param": "size", "names": ["a"]}}}, "'size' is not a param"),
        ({"slots": {**TEMPLATE["slots"], "side": {**TEMPLATE["slots"]["side"], "component": 3}}}, "out of range"),
        (
            {"slots": {**TEMPLATE["slots"], "weight": {"param": "mass_scale", "edges": [2, 1], "names": list("abc")}}},
            "strictly ascending",
        ),
        (
            {"slots": {**TEMPLATE["slots"], "weight": {"param": "mass_scale", "edges": [1.0], "names": ["a"]}}},
            "names must hold 2",
        ),
        ({"text": "push the {weight} cube to the {colour} square"}, "'colour'"),
        ({"text": "push the {weight} cube"}, "not used in the text"),
        ({"text": "push the {weight!r} cube to the {side}"}, "is not a slot"),
        ({"text": "push the {weight cube"}, "does not parse"),
        ({"slots": {**TEMPLATE["slots"], "weight": {"param": "mass_scale", "names": "light"}}}, "non-empty list"),
        ({"extra": 1}, "allowed and required"),
    ],
)
def test_a_bad_template_is_a_value_error_saying_what_is_allowed(change, words):
    layout = {"mass_scale": ((), np.dtype(np.float32)), "target_color": ((3,), np.dtype(np.float32))}
    with pytest.raises(ValueError, match=words):
        check_template({**TEMPLATE, **change}, layout)


def test_a_value_that_names_no_slot_is_refused_by_the_formatter_and_by_the_recorder(tmp_path):
    """Without edges a value must round to one of the names; the recorder refuses such a batch whole."""
    template = {"text": "the {c} one", "slots": {"c": {"param": "mass_scale", "names": ["red", "green"]}}}
    with pytest.raises(ValueError, match=r"holds 2\.0.*allowed: a value that rounds to 0\.\.1"):
        slot_indices(template, {"mass_scale": np.array([1.0, 2.0])})
    env = synthetic_description(num_envs=4, max_steps=6, params=True)
    env = dataclasses.replace(env, spec=dict(env.spec, instruction_template=template))
    recorder = PackedRecorder(tmp_path / "run", env)
    observation, result = make_batches(SyntheticSim(env, seed=1), 0)[0]  # params drawn in [0.5, 1.5): 2 rounds to 2
    result.params["mass_scale"][:] = 2.0
    with pytest.raises(ValueError, match="names no 'c'"):
        recorder.append(observation, result)
    recorder.close()
    assert forge_gpu.formats.read_manifest(tmp_path / "run")["completed_episodes"] == 0
    with pytest.raises(ValueError, match=r"'size' is not a param of the run"):
        bad = {**template, "slots": {"c": {"param": "size", "names": ["a"]}}}
        PackedRecorder(tmp_path / "other", dataclasses.replace(env, spec=dict(env.spec, instruction_template=bad)))
    assert not (tmp_path / "other").exists()


# -- recorded and read -------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["packed", "npz"])
def test_each_episode_records_its_own_instruction_once(runs, layout):
    """Both layouts read back every episode's instruction; packed holds one per episode in its commit lines,
    schema 1 one line per episode in instructions.jsonl, named by run.json, the contract's files untouched."""
    root, wanted = runs
    assert by_id(root / layout) == wanted
    run = forge_gpu.reading.open_run(root / layout)
    assert Counter(run.instructions()) == Counter(wanted.values())
    if layout == "packed":
        lines = [json.loads(line) for line in (root / layout / "commits.jsonl").read_text().splitlines()]
        for c in lines:  # each line: its episodes' distinct texts, once each, and each episode's index into them
            entry = c["episodes"]
            texts = entry["instruction"]["texts"]
            assert len(set(texts)) == len(texts) and len(entry["instruction"]["index"]) == len(entry["steps"])
            pairs = zip(entry["env_id"], entry["episode_id"], entry["instruction"]["index"], strict=True)
            assert all(texts[i] == wanted[(e, k)] for e, k, i in pairs)
        assert sum(len(c["episodes"]["steps"]) for c in lines) == len(wanted)
    else:
        assert run.manifest["episode_instructions"] == "instructions.jsonl"
        lines = [json.loads(line) for line in (root / layout / "instructions.jsonl").read_text().splitlines()]
        assert {(x["env_id"], x["episode_id"]): x["instruction"] for x in lines} == wanted
        assert "params" not in run.manifest["env_spec"] and run.manifest["env_spec"]["instruction"] == INSTRUCTION
        marker = json.loads(next((root / layout).glob("env*.json")).read_text())
        assert set(marker) == {"schema_version", "complete", "steps", "env_id", "episode_id"}  # the contract's


def test_windows_action_windows_and_torch_carry_each_episode_instruction(runs):
    root, wanted = runs
    for layout in ("packed", "npz"):
        windows = list(forge_gpu.reading.action_windows(root / layout, history=2, horizon=2))
        assert windows and all(w["instruction"] == wanted[(w["env_id"], w["episode_id"])] for w in windows)
    table = forge_gpu.reading.Windows(root / "packed", 2, 2, pad=True)
    batch = table.batch(np.arange(len(table)))
    pairs = zip(batch["env_id"].tolist(), batch["episode_id"].tolist(), strict=True)
    assert batch["instruction"] == [wanted[p] for p in pairs]
    assert table.instructions == list(dict.fromkeys(batch["instruction"]))  # distinct, first seen first
    one = table[len(table) - 1]
    assert one["instruction"] == wanted[(one["env_id"], one["episode_id"])]
    pytest.importorskip("torch")
    dataset = forge_gpu.reading.WindowMapDataset(root / "npz", history=1, horizon=1)
    items = dataset[list(range(len(dataset)))]
    pairs = zip(items["env_id"].tolist(), items["episode_id"].tolist(), strict=True)
    assert items["instruction"] == [wanted[p] for p in pairs]


def test_inspect_lists_the_distinct_instructions_with_counts(runs, capsys):
    root, wanted = runs
    counts = Counter(wanted.values())
    for layout in ("packed", "npz"):
        report = inspect_run(root / layout, quick=layout == "npz")
        assert report["instructions"] == dict(counts) and list(report["instructions"].values()) == sorted(
            counts.values(), reverse=True
        )
    text = format_report(report)
    assert f"instructions   {len(counts)} distinct" in text
    assert all(f"{n}  {t}" in text for t, n in counts.items())
    assert main(["inspect", str(root / "packed"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["instructions"] == dict(counts)


def test_lerobot_export_writes_one_task_per_instruction_and_each_episode_its_task(runs, tmp_path):
    pytest.importorskip("av")
    import pyarrow.parquet as pq

    root, wanted = runs
    order = [(e.env_id, e.episode_id) for e in forge_gpu.reading.read_episodes(root / "packed")]
    forge_gpu.export.export_lerobot(root / "packed", tmp_path / "lerobot", workers=1)
    tasks = pq.read_table(tmp_path / "lerobot/meta/tasks.parquet").to_pydict()
    assert tasks["task"] == list(dict.fromkeys(wanted[p] for p in order))  # one per instruction, first seen first
    assert tasks["task_index"] == list(range(len(tasks["task"])))
    assert json.loads((tmp_path / "lerobot/meta/info.json").read_text())["total_tasks"] == len(tasks["task"])
    episodes = pq.read_table(tmp_path / "lerobot/meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert [t for [t] in episodes["tasks"]] == [wanted[p] for p in order]
    frames = pq.read_table(tmp_path / "lerobot/data").to_pydict()
    task_of = {index: tasks["task"][t] for index, t in zip(frames["episode_index"], frames["task_index"], strict=True)}
    assert [task_of[k] for k in range(len(order))] == [wanted[p] for p in order]


def test_robomimic_export_gives_each_demo_its_language(runs, tmp_path):
    h5py = pytest.importorskip("h5py")
    root, wanted = runs
    order = [(e.env_id, e.episode_id) for e in forge_gpu.reading.read_episodes(root / "npz")]
    forge_gpu.export.export_robomimic(root / "npz", tmp_path / "demos.hdf5")
    with h5py.File(tmp_path / "demos.hdf5", "r") as f:
        langs = [json.loads(f[f"data/demo_{k}"].attrs["ep_meta"])["lang"] for k in range(len(order))]
    assert langs == [wanted[p] for p in order]


# -- kept by convert and repair; older runs -----------------------------------------------------


def test_convert_keeps_the_instructions_both_ways(runs, tmp_path):
    root, wanted = runs
    convert_run(root / "packed", tmp_path / "npz", to="npz")
    convert_run(tmp_path / "npz", tmp_path / "packed", to="packed")
    assert by_id(tmp_path / "npz") == wanted == by_id(tmp_path / "packed")
    manifest = forge_gpu.formats.read_manifest(tmp_path / "packed")
    assert "episode_instructions" not in manifest and manifest["env_spec"]["instruction_template"] == TEMPLATE


def test_repair_publishes_a_block_with_its_instructions_and_cuts_a_torn_line(runs, tmp_path):
    """A packed run killed between a block and its line: repair publishes the block's episodes with their
    instructions (from the block's copy). A schema-1 run killed mid-line: repair cuts the torn line."""
    root, wanted = runs
    shutil.copytree(root / "packed", tmp_path / "packed")
    log = tmp_path / "packed" / "commits.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-1]))
    manifest = json.loads((tmp_path / "packed" / "run.json").read_text())
    (tmp_path / "packed" / "run.json").write_text(json.dumps(dict(manifest, status="recording")))
    assert repair_run(tmp_path / "packed")["recovered_episodes"] == len(json.loads(lines[-1])["episodes"]["steps"])
    assert by_id(tmp_path / "packed") == wanted
    shutil.copytree(root / "npz", tmp_path / "npz")
    with open(tmp_path / "npz" / "instructions.jsonl", "a") as f:
        f.write('{"env_id": 0, "episode_id": 99, "instr')  # an episode its marker never published
    assert by_id(tmp_path / "npz") == wanted
    report = repair_run(tmp_path / "npz")
    assert any("torn line" in a for a in report["actions"]) and by_id(tmp_path / "npz") == wanted


def test_a_changed_instruction_in_a_commit_line_is_refused(runs, tmp_path):
    root, _ = runs
    shutil.copytree(root / "packed", tmp_path / "run")
    log = tmp_path / "run" / "commits.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    k = next(i for i, c in enumerate(lines) if c["episodes"]["instruction"]["texts"])
    lines[k]["episodes"]["instruction"]["texts"][0] = "push the cube off the table"
    log.write_text("".join(json.dumps(c) + "\n" for c in lines))
    with pytest.raises(ValueError, match="differ from the copy its block holds"):
        list(forge_gpu.reading.read_episodes(tmp_path / "run"))


def test_older_runs_and_runs_without_a_template_keep_the_runs_instruction(runs, tmp_path):
    root, wanted = runs
    shutil.copytree(root / "packed", tmp_path / "packed")
    downgrade_packed_run(tmp_path / "packed", 2)  # no instruction in its lines
    shutil.copytree(root / "npz", tmp_path / "npz")
    manifest = json.loads((tmp_path / "npz" / "run.json").read_text())
    del manifest["episode_instructions"]  # as a schema-1 run written before them, or by another writer
    (tmp_path / "npz" / "run.json").write_text(json.dumps(manifest))
    for layout in ("packed", "npz"):
        assert set(by_id(tmp_path / layout).values()) == {INSTRUCTION}
        assert forge_gpu.reading.open_run(tmp_path / layout).instructions() == [INSTRUCTION] * len(wanted)
    env = synthetic_description(num_envs=3, max_steps=5)  # no template: every episode the run's instruction
    record(tmp_path / "plain", env, make_batches(SyntheticSim(env, seed=2), 20), recorder=PackedRecorder)
    assert set(by_id(tmp_path / "plain").values()) == {INSTRUCTION}


def test_a_bad_template_in_run_json_is_refused_naming_it(runs, tmp_path):
    root, _ = runs
    shutil.copytree(root / "packed", tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    manifest["env_spec"]["instruction_template"]["slots"]["side"]["component"] = 7
    (tmp_path / "run" / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"run.json: env_spec.instruction_template.slots\['side'\].component 7"):
        forge_gpu.reading.open_run(tmp_path / "run")


# -- the simulation side -----------------------------------------------------------------------


def test_a_task_template_reaches_run_json_and_each_collected_episode(tmp_path, monkeypatch):
    """A task's instruction_template goes into env.spec (checked against its params) and collect records each
    episode's instruction from its drawn mass_scale."""
    CartpoleTask = forge_gpu.sim.TASKS["cartpole"]  # a class

    template = {
        "text": "balance a {w} pole",
        "slots": {"w": {"param": "mass_scale", "edges": [1.0], "names": ["light", "heavy"]}},
    }
    monkeypatch.setattr(CartpoleTask, "instruction_template", lambda self: template)
    env = forge_gpu.sim.make(
        "cartpole", num_envs=4, device="cpu", seed=3, max_steps=5, **{"randomize.mass_scale": [0.5, 1.5]}
    )
    assert env.spec["instruction_template"] == template
    forge_gpu.recording.collect(env, forge_gpu.sim.make_policy("random", env), str(tmp_path / "run"), episodes=8)
    episodes = list(forge_gpu.reading.read_episodes(tmp_path / "run"))
    assert len({e.instruction for e in episodes}) == 2
    assert all(
        e.instruction == f"balance a {'light' if e.params['mass_scale'] < 1 else 'heavy'} pole" for e in episodes
    )
    monkeypatch.setattr(CartpoleTask, "instruction_template", lambda self: {**template, "text": "balance a {x}"})
    with pytest.raises(ValueError, match="task 'cartpole': instruction_template.text uses"):
        env._make_spec()
