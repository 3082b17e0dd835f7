"""Checksums of the packed layout (layout_version 3 on, docs/FORMAT.md "Checksums"): readers verify every block, older
runs read unverified, repair cuts a crashed run at its first damaged block or salvages a damaged closed one,
``forge-gpu verify`` lists what is damaged, and 2,000 mutants of a run are each refused or read back exactly."""

import collections
import json
import os
import re
import shutil
import tempfile

import numpy as np
import pytest
from helpers.synthetic import (
    FUZZ_KINDS,
    SyntheticSim,
    downgrade_packed_run,
    integer_paths,
    make_batches,
    mutate_packed_run,
    record,
    run_files,
    standard_read,
    synthetic_description,
    write_run_files,
)

import forge_gpu
from forge_gpu._src.formats.packed.commits import EPISODE_KEYS, append_commit, open_commit_log
from forge_gpu.cli import main
from forge_gpu.curation import repair_run
from forge_gpu.reading import EpisodeReadOptions, Windows
from forge_gpu.recording import PackedRecorder, write_dataset_manifest

LOG = "commits.jsonl"


@pytest.fixture(scope="module")
def recorded(synthetic_run):
    """A closed packed run with cameras, state and params, over several segments and blocks."""
    env = synthetic_description(num_envs=5, max_steps=6, images=True, state=True, params=True)
    directory, _ = synthetic_run(env, 40, seed=3, recorder=PackedRecorder, block_bytes=3000, segment_bytes=12000)
    return directory


def commits(run):
    return [json.loads(line) for line in (run / LOG).read_text().splitlines()]


def copy(recorded, tmp_path, name="run", *, status=None):
    run = tmp_path / name
    shutil.copytree(recorded, run)
    if status:
        manifest = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps(dict(manifest, status=status)))
    return run


def payload(run, k, column="obs/rgb") -> int:
    """The byte of committed block ``k``'s segment where the values of ``column`` begin."""
    import pyarrow as pa

    commit = commits(run)[k]
    whole = pa.memory_map(str(run / f"segment-{commit['segment']:06d}.arrows")).read_buffer()
    reader = pa.ipc.open_stream(pa.BufferReader(whole))
    for _ in range(sum(c["segment"] == commit["segment"] for c in commits(run)[:k]) + 1):
        batch = reader.read_next_batch()
    values = batch.column(column)  # an encoded column's payloads (layout 5), else the raw values
    data = values.buffers()[2] if pa.types.is_binary(values.type) else values.flatten().buffers()[1]
    return data.address - whole.address


def damage(run, k, *, zero=None):
    """Flip a byte in the middle of committed block ``k``'s rgb values (or zero ``zero`` bytes from its middle);
    its commit."""
    commit = commits(run)[k]
    segment = run / f"segment-{commit['segment']:06d}.arrows"
    data = bytearray(segment.read_bytes())
    at = commit["offset"] + commit["length"] // 2 if zero else payload(run, k) + 5
    if zero:
        data[at : at + zero] = bytes(zero)
    else:
        data[at] ^= 0x10
    segment.write_bytes(bytes(data))
    return commit


def read(run, **options):
    return list(forge_gpu.reading.read_episodes(run, options=EpisodeReadOptions(state=True, **options)))


def same(a, b) -> bool:
    """Two episodes are equal bit for bit, dtypes included (ids, steps, instruction, every array, state, params)."""
    if (a.env_id, a.episode_id, a.steps, a.instruction) != (b.env_id, b.episode_id, b.steps, b.instruction):
        return False
    pairs = [(a.action, b.action), (a.reward, b.reward), (a.terminated, b.terminated), (a.truncated, b.truncated)]
    for mine, theirs in ((a.obs, b.obs), (a.next, b.next), (a.state, b.state), (a.params, b.params)):
        if mine.keys() != theirs.keys():
            return False
        pairs += [(mine[k], theirs[k]) for k in mine]
    return all(x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y) for x, y in pairs)


def test_every_commit_line_holds_its_blocks_checksum(recorded):
    """Each line's crc32c is CRC32C of exactly its block's bytes; the run says layout_version 5."""
    import crc32c

    assert forge_gpu.formats.read_manifest(recorded)["layout_version"] == 5
    lines = commits(recorded)
    assert len({c["segment"] for c in lines}) > 1
    for c in lines:
        data = (recorded / f"segment-{c['segment']:06d}.arrows").read_bytes()[c["offset"] : c["offset"] + c["length"]]
        assert c["crc32c"] == crc32c.crc32c(data)


def test_a_damaged_block_is_refused_naming_segment_offset_and_line(recorded, tmp_path):
    """One flipped byte in a block: reading, Windows (loaded and mapped) and inspect refuse the run with a
    ValueError naming the segment file, the block's offset and its commit line, before any frame is decoded. With
    verify=False the damaged payload (zstd-encoded rgb) is still refused when decoded, never read as garbage; a mapped
    Windows, which decodes on access, opens."""
    run = copy(recorded, tmp_path)
    commit = damage(run, 3)
    words = f"segment-{commit['segment']:06d}.arrows: the block at offset {commit['offset']} (commit line 4) fails"
    for attempt in (lambda: read(run), lambda: Windows(run, 2, 2), lambda: Windows(run, 2, 2, mmap=True)):
        with pytest.raises(ValueError, match=re.escape(words)):
            attempt()
    with pytest.raises(ValueError, match="a zstd frame does not decode"):
        read(run, verify=False)
    assert len(Windows(run, 2, 2, mmap=True, verify=False)) == len(Windows(recorded, 2, 2))


def test_a_changed_param_in_a_commit_line_is_refused(recorded, tmp_path):
    """The commit log is checked against each block's copy of its episodes: a param changed in a line (which
    no rule of the rows could catch) is refused."""
    run = copy(recorded, tmp_path)
    lines = commits(run)
    k = next(i for i, c in enumerate(lines) if c["episodes"]["steps"])
    lines[k]["episodes"]["params"]["mass_scale"][0] += 0.25
    (run / LOG).write_text("".join(json.dumps(c) + "\n" for c in lines))
    with pytest.raises(ValueError, match=f"commit line {k + 1}.*differ from the copy its block holds"):
        read(run)


@pytest.mark.parametrize("version", [1, 2])
def test_older_runs_read_unverified_and_say_so(recorded, tmp_path, version, capsys):
    """A run of layout_version 1 or 2 (no checksums) reads as before; inspect and verify say it is unverified. (A
    run of layout 1 has neither state nor params.)"""
    # layouts before 5 hold raw images
    env = synthetic_description(num_envs=3, max_steps=5, images=True, state=version > 1, params=version > 1)
    batches = make_batches(SyntheticSim(env, seed=2), 20)
    record(tmp_path / "plain", env, batches, recorder=PackedRecorder, codecs={"*": "none"})
    recorded = tmp_path / "plain"
    run = copy(recorded, tmp_path)
    downgrade_packed_run(run, version)
    original = read(recorded)
    got = read(run)
    assert len(got) == len(original)
    assert all(same(a, b) for a, b in zip(got, original, strict=True))
    report = forge_gpu.reading.verify_run(run)
    assert report["ok"] and report["runs"][0]["checksums"] is False
    assert main(["verify", str(run)]) == 0
    assert "unverified (no checksums" in capsys.readouterr().out
    assert main(["inspect", str(run)]) == 0
    assert f"none (layout_version {version}): read unverified" in capsys.readouterr().out


def test_repair_cuts_a_crashed_run_at_its_first_damaged_block(recorded, tmp_path):
    """A page of zeros inside a committed block of a run left at recording (as a power cut leaves it): repair
    cuts the run there, keeps every episode published before, says what it cut, and changes nothing again."""
    run = copy(recorded, tmp_path, status="recording")
    lines = commits(run)
    k = len(lines) // 2
    damage(run, k, zero=4096)
    report = repair_run(run)
    before = [c for c in lines[:k]]
    kept = sum(len(c["episodes"]["steps"]) for c in before)
    cut = lines[k:]
    assert report["cut"] == {
        "blocks": len(cut),
        "rows": sum(c["rows"] for c in cut),
        "episodes": sum(len(c["episodes"]["steps"]) for c in cut),
    }
    assert len(report["lost_episodes"]) == report["cut"]["episodes"] and report["episodes"] == kept
    original = read(recorded)
    assert all(same(a, b) for a, b in zip(read(run), original[:kept], strict=True)) and len(read(run)) == kept
    assert forge_gpu.reading.verify_run(run)["ok"]
    manifest = forge_gpu.formats.read_manifest(run)
    assert manifest["status"] == "closed" and manifest["repaired"]["lost_episodes"] == report["lost_episodes"]
    state = sorted((p.name, p.read_bytes()) for p in run.iterdir())
    assert repair_run(run)["changed"] is False
    assert sorted((p.name, p.read_bytes()) for p in run.iterdir()) == state


def test_salvage_keeps_every_episode_whose_blocks_check(recorded, tmp_path, capsys):
    """A damaged block in the middle of a closed run: plain repair refuses it and changes nothing; --salvage
    empties the block in place, drops exactly the episodes with a row in it (listed), keeps every other one bit
    for bit and leaves every other block's bytes; a second salvage changes nothing; a later damage salvages too."""
    run = copy(recorded, tmp_path)
    lines = commits(run)
    k = len(lines) // 2
    damage(run, k)
    before = sorted((p.name, p.read_bytes()) for p in run.iterdir())
    assert main(["repair", str(run)]) == 1
    assert "repair --salvage" in capsys.readouterr().err
    assert sorted((p.name, p.read_bytes()) for p in run.iterdir()) == before
    original = {(e.env_id, e.episode_id): e for e in read(recorded)}
    start, end = lines[k]["first_row"], lines[k]["first_row"] + lines[k]["rows"]
    hit = set()
    for c in lines:
        entry = c["episodes"]
        for e, i, first, steps, stride in zip(
            *(entry[key] for key in ("env_id", "episode_id", "first_row", "steps", "stride")), strict=True
        ):
            if any(start <= first + j * stride < end for j in range(steps + 1)):
                hit.add(f"{e}:{i}")
    assert main(["repair", "--salvage", str(run)]) == 0
    out = capsys.readouterr().out
    report = forge_gpu.formats.read_manifest(run)["repaired"]
    assert set(report["lost_episodes"]) == hit and hit and all(name in out for name in hit)
    got = read(run)
    assert {f"{e.env_id}:{e.episode_id}" for e in got} == {f"{e}:{i}" for e, i in original} - hit
    assert all(same(e, original[(e.env_id, e.episode_id)]) for e in got)
    after = commits(run)
    for i, (old, new) in enumerate(zip(lines, after, strict=True)):
        assert (new["offset"], new["length"]) == (old["offset"], old["length"])
        if i != k:
            assert new["crc32c"] == old["crc32c"]
    assert forge_gpu.reading.verify_run(run)["ok"] and forge_gpu.formats.read_manifest(run)[
        "completed_episodes"
    ] == len(got)
    state = sorted((p.name, p.read_bytes()) for p in run.iterdir())
    assert repair_run(run, salvage=True)["changed"] is False
    assert sorted((p.name, p.read_bytes()) for p in run.iterdir()) == state
    damage(run, 1)
    again = repair_run(run, salvage=True)
    assert again["cut"]["blocks"] == 1 and forge_gpu.reading.verify_run(run)["ok"]
    assert all(same(e, original[(e.env_id, e.episode_id)]) for e in read(run))


def test_verify_lists_bad_blocks_and_episodes_and_exits_1(recorded, tmp_path, capsys):
    """forge-gpu verify: one line per run, then each bad block and episode; exit 1 on any, 0 on a sound run; a
    dataset root is checked run by run; a NaN in a column is a bad episode."""
    assert main(["verify", str(recorded)]) == 0
    assert capsys.readouterr().out.startswith(f"{recorded}: ok (")
    run = copy(recorded, tmp_path)
    commit = damage(run, 2)
    report = forge_gpu.reading.verify_run(run)["runs"][0]
    assert [(b["offset"], b["line"]) for b in report["bad_blocks"]] == [(commit["offset"], 3)]
    assert report["bad_episodes"] and all(e["error"] == "it has rows in a bad block" for e in report["bad_episodes"])
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{run}: 1 bad block, {len(report['bad_episodes'])} bad episode")
    assert f"  bad block segment-{commit['segment']:06d}.arrows:{commit['offset']} (commit line 3)" in out[1]
    assert len(out) == 3 + len(report["bad_episodes"])
    assert out[-1] == f"  forge-gpu repair --salvage {run} keeps every episode that checks and drops these"
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    for name, source in (("worker-000", recorded), ("worker-001", run)):
        shutil.copytree(source, dataset / name)
    keys = {"run_id": "r", "device": "cpu", "status": "closed", "episodes": 0, "seed": 0, "error": None}
    write_dataset_manifest(dataset, [dict(keys, path=f"worker-00{i}", worker=i) for i in (0, 1)])
    assert main(["verify", str(dataset)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(")") and ": ok (" in lines[0] and ": 1 bad block" in lines[1]


def test_verify_finds_episodes_that_break_the_rules(recorded, tmp_path, capsys):
    """A run whose blocks check but whose values break the rules (as a faulty writer would leave it: a NaN in a
    field, a clock going back): verify names exactly those episodes, reads on, and exits 1."""
    from forge_gpu._src.formats.packed.layout import binary_frames, column_to_numpy, schema_codecs, schema_columns
    from forge_gpu._src.formats.packed.write import PackedWriter

    lines, table = standard_read(recorded)
    layout, codecs = schema_columns(table.schema, name="run"), schema_codecs(table.schema, name="run")
    columns = {  # the encoded columns' payloads as they are
        n: binary_frames(table.column(n).combine_chunks(), codecs[n])
        if n in codecs
        else column_to_numpy(table.column(n).combine_chunks(), *layout[n], name=n).copy()
        for n in layout
    }
    entries = [c["episodes"] for c in lines if c["episodes"]["steps"]]
    first, second = entries[0], entries[1]
    columns["obs/proprio"][first["first_row"][0] + first["stride"][0], 0] = np.nan
    columns["obs/time"][second["first_row"][0] + 2 * second["stride"][0]] = -1.0
    episodes = {k: np.concatenate([np.asarray(c["episodes"][k], np.int64) for c in lines]) for k in EPISODE_KEYS}
    texts = [
        np.array(c["episodes"]["instruction"]["texts"], object)[c["episodes"]["instruction"]["index"]] for c in lines
    ]
    episodes["instruction"] = np.concatenate([t.astype(object) for t in texts])
    for name in lines[0]["episodes"]["params"]:
        episodes[f"params/{name}"] = np.concatenate(
            [
                np.asarray(c["episodes"]["params"][name], np.float32).reshape(len(c["episodes"]["steps"]), -1)
                for c in lines
                if c["episodes"]["steps"]  # a line can publish a block with no episode ended in it
            ]
        ).reshape(len(episodes["steps"]), *np.asarray(first["params"][name][0]).shape)
    run = tmp_path / "run"
    run.mkdir()
    writer = PackedWriter(str(run), table.schema)
    writer.write(columns, episodes)
    writer.close()
    shutil.copy(recorded / "run.json", run / "run.json")
    report = forge_gpu.reading.verify_run(run)["runs"][0]
    expected = {f"{first['env_id'][0]}:{first['episode_id'][0]}", f"{second['env_id'][0]}:{second['episode_id'][0]}"}
    assert not report["bad_blocks"] and {e["episode"] for e in report["bad_episodes"]} == expected
    errors = " ".join(e["error"] for e in report["bad_episodes"])
    assert "obs/proprio holds a non-finite value" in errors and "time must increase" in errors
    assert main(["verify", str(run)]) == 1
    assert "2 bad episodes" in capsys.readouterr().out


def test_2000_mutants_are_refused_or_read_back_exactly(tmp_path, capsys):
    """2,000 mutants of a tiny run with state and params (every kind of FUZZ_KINDS): each is refused with a
    ValueError or read back exactly as the original (or a prefix of it); never served with changed values, never
    another exception. Every 20th is also read as mapped windows; every 10th is verified too (forge-gpu verify),
    which must find a problem where the read refused the run, no bad episode where it did not, and raise
    nothing; every 20th is salvaged (repair --salvage), after which every episode read is an original one, exactly
    (or the salvage is refused with a ValueError)."""
    env = synthetic_description(num_envs=3, max_steps=4, state=True, params=True)
    original_dir = tmp_path / "original"
    record(original_dir, env, make_batches(SyntheticSim(env, seed=5), 14), recorder=PackedRecorder, block_bytes=600)
    files = run_files(original_dir)
    original = read(original_dir)
    windows = Windows(original_dir, 1, 1, mmap=True, state=True, params=True)
    assert len(commits(original_dir)) >= 4 and len(original) >= 4
    outcomes, kinds = collections.Counter(), collections.defaultdict(collections.Counter)
    bad = []
    run = tmp_path / "mutant"
    for seed in range(2000):
        kind = FUZZ_KINDS[seed % len(FUZZ_KINDS)]
        write_run_files(run, mutate_packed_run(files, kind, np.random.default_rng(seed)))
        try:
            got = read(run)
            if seed % 20 == 0:
                mapped = Windows(run, 1, 1, mmap=True, state=True, params=True)
                theirs, mine = mapped[np.arange(len(mapped))], windows[np.arange(len(mapped))]
                assert all(np.array_equal(theirs[k], mine[k]) for k in mine if k != "instruction")
            outcome = "read back exactly" if len(got) == len(original) else "read back as a prefix"
            if len(got) > len(original) or not all(same(a, b) for a, b in zip(got, original, strict=False)):
                outcome = "served with changed values"
        except ValueError:
            outcome = "refused"
        except Exception as exc:  # an escape
            outcome = f"escaped: {type(exc).__name__}: {exc}"
        if seed % 10 == 0 and not outcome.startswith("escaped"):  # verify agrees, and raises nothing
            try:
                found = forge_gpu.reading.verify_run(run)["runs"][0]
                # refused: verify finds something; read: none of its episodes is bad (a damaged block after the
                # last episode's, which readers never reach, is verify's alone)
                if found["ok"] if outcome == "refused" else (found["bad_episodes"] or found["error"]):
                    outcome = f"verify disagrees: the read was {outcome}"
            except Exception as exc:
                outcome = f"escaped from verify: {type(exc).__name__}: {exc}"
        if seed % 20 == 10 and not outcome.startswith(("escaped", "verify")):  # salvage keeps only exact episodes
            try:
                repair_run(run, salvage=True)
                salvaged = read(run)
                by_id = {(e.env_id, e.episode_id): e for e in original}
                if not all(
                    (e.env_id, e.episode_id) in by_id and same(e, by_id[e.env_id, e.episode_id]) for e in salvaged
                ):
                    outcome = "salvage served changed values"
                kinds["salvaged, then read"][f"{len(salvaged)} of {len(original)} episodes"] += 1
            except ValueError:
                kinds["salvaged, then read"]["refused"] += 1
            except Exception as exc:
                outcome = f"escaped from salvage: {type(exc).__name__}: {exc}"
        outcomes[outcome.split(":")[0]] += 1
        kinds[kind][outcome.split(":")[0]] += 1
        if outcome not in ("refused", "read back exactly", "read back as a prefix"):
            bad.append((seed, kind, outcome))
    with capsys.disabled():
        print(f"\n2000 mutants: {dict(outcomes)}")
        for kind, counts in kinds.items():
            print(f"  {kind}: {dict(counts)}")
    assert not bad, bad[:10]
    assert outcomes["refused"] > 1000 and outcomes["read back exactly"] > 0


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A real run: ``collect`` of cartpole on the CPU (8 envs, 12-step episodes, random policy), its run.json,
    stats.json, commit log and segments as collect writes them, its blocks and segments made small (the packed
    recorder's ``block_bytes`` and ``segment_bytes``) so that the log has many lines over several segments."""
    from forge_gpu._src.collect import collector
    from forge_gpu._src.core.manifest import check_description

    def small_blocks(directory, run, options=None):
        return PackedRecorder(directory, check_description(run), block_bytes=1500, segment_bytes=24000)

    run = tmp_path_factory.mktemp("fuzz") / "cartpole"
    env = forge_gpu.sim.make("cartpole", num_envs=8, device="cpu", seed=2, max_steps=12)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collector, "make_recorder", small_blocks)
        forge_gpu.recording.collect(env, forge_gpu.sim.make_policy("random", env), str(run), steps=40)
    return run


def test_mutants_of_a_real_run_are_refused_or_read_back_exactly(cartpole_run, tmp_path, capsys):
    """A seeded fuzz over a real run's files (every kind of FUZZ_KINDS: segments, commit log, run.json, stats.json;
    bit flips, truncation, zeroed ranges, each integer of a line set to 0, -1, 2**40, 2**63 or one off, lines dropped,
    duplicated and swapped), 12 mutants a kind: for each, reading refuses with a ValueError or gives exactly the
    original episodes (a subset of them, each exact); the statistics read back as they were or are refused; verify
    raises nothing and finds a problem exactly where the read refused (or beyond the last episode); repair and
    repair --salvage (each on a copy) refuse with a ValueError or leave a run that reads exactly the original
    episodes or a subset of them. The count of mutants per kind and what became of them is printed."""
    files = run_files(cartpole_run)
    assert {"run.json", "stats.json", "commits.jsonl"} <= set(files) and len(commits(cartpole_run)) >= 10
    assert len([name for name in files if name.startswith("segment-")]) >= 3
    original = read(cartpole_run)
    statistics = forge_gpu.curation.run_statistics(cartpole_run)
    assert len(original) >= 16
    outcomes = collections.defaultdict(collections.Counter)
    bad = []
    run, copy_ = tmp_path / "mutant", tmp_path / "repaired"
    write_run_files(run, files)
    held = files  # what ``run`` holds: the readers do not write, so only a mutant's changed files are written
    for seed in range(12 * len(FUZZ_KINDS)):
        kind = FUZZ_KINDS[seed % len(FUZZ_KINDS)]
        mutant = mutate_packed_run(files, kind, np.random.default_rng([7, seed]))
        write_run_files(run, mutant, held=held)
        held = mutant
        judged = judge(run, original, copy_, mutant)
        kept = mutant.get("stats.json") == files["stats.json"]
        judged["statistics"] = stats_outcome(run, statistics if kept else None)
        for step, outcome in judged.items():
            outcomes[kind][f"{step} {outcome.split(':')[0]}"] += 1
            if outcome.startswith(("escaped", "changed", "served", "disagrees")):
                bad.append((seed, kind, step, outcome))
    with capsys.disabled():
        total = sum(
            counts["read refused"] + counts["read exact"] + counts["read subset"] for counts in outcomes.values()
        )
        print(f"\n{total} mutants of a cartpole run ({len(commits(cartpole_run))} commit lines), per kind:")
        for kind, counts in outcomes.items():
            print(f"  {kind}: {dict(sorted(counts.items()))}")
    assert not bad, bad[:10]
    assert sum(c["read refused"] for c in outcomes.values()) > 100
    assert sum(c["read exact"] for c in outcomes.values()) > 10


def judge(run, original, copy_, files) -> dict[str, str]:
    """What each reader makes of the mutant ``run`` (its ``files``): ``read`` (refused, exact, subset, or changed
    values served), ``verify`` (agrees, or disagrees with the read), ``repair`` and ``salvage`` (each on ``copy_``:
    refused, or what the run reads after it); an outcome starting ``escaped`` names an exception other than
    ValueError."""
    judged = {"read": episodes_outcome(run, original)}
    try:
        found = forge_gpu.reading.verify_run(run)["runs"][0]
        # refused: verify finds something; read: none of its episodes is bad (a damaged block after the last
        # episode's, which readers never reach, is verify's alone)
        refused = judged["read"] == "refused"
        disagrees = found["ok"] if refused else (found["bad_episodes"] or found["error"])
        judged["verify"] = f"disagrees: the read was {judged['read']}" if disagrees else "agrees"
    except Exception as exc:
        judged["verify"] = f"escaped: {type(exc).__name__}: {exc}"
    for step, salvage in (("repair", False), ("salvage", True)):
        write_run_files(copy_, files)
        try:
            repair_run(copy_, salvage=salvage)
            judged[step] = episodes_outcome(copy_, original)
        except ValueError:
            judged[step] = "refused"
        except Exception as exc:
            judged[step] = f"escaped: {type(exc).__name__}: {exc}"
    return judged


def episodes_outcome(run, original) -> str:
    """``refused`` (a ValueError), ``exact`` (the original episodes), ``subset`` (some of them, each exactly, none
    twice), ``served changed values``, or ``escaped: ...`` (any other exception)."""
    try:
        got = read(run)
    except ValueError:
        return "refused"
    except Exception as exc:
        return f"escaped: {type(exc).__name__}: {exc}"
    if len(got) == len(original) and all(same(a, b) for a, b in zip(got, original, strict=True)):
        return "exact"
    by_id = {(e.env_id, e.episode_id): e for e in original}
    ids = [(e.env_id, e.episode_id) for e in got]
    if len(set(ids)) == len(ids) and all(k in by_id and same(e, by_id[k]) for k, e in zip(ids, got, strict=True)):
        return "subset"
    return "served changed values"


def stats_outcome(run, expected=None) -> str:
    """A run's statistics read back (``read``; ``changed`` where they differ from ``expected``, the original's,
    given where its stats.json is the original's) or refused (ValueError; LookupError: no file), else ``escaped``."""
    try:
        got = forge_gpu.curation.run_statistics(run)
    except (ValueError, LookupError):
        return "refused"
    except Exception as exc:
        return f"escaped: {type(exc).__name__}: {exc}"
    return "changed" if expected is not None and not same_statistics(got, expected) else "read"


def same_statistics(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].keys() == b[k].keys() and all(np.array_equal(a[k][s], b[k][s]) for s in a[k]) for k in a
    )


def test_verify_reads_a_schema_1_run_episode_by_episode(recorded, tmp_path, capsys):
    """An npz run: verify reads each episode (its members' zip CRC-32 and the rules) and names a damaged one."""
    import zipfile

    forge_gpu.curation.convert_run(recorded, tmp_path / "npz", to="npz")
    assert forge_gpu.reading.verify_run(tmp_path / "npz")["ok"]
    victim = sorted((tmp_path / "npz").glob("*.npz"))[2]
    info = zipfile.ZipFile(victim).getinfo("action.npy")
    data = bytearray(victim.read_bytes())
    data[info.header_offset + 30 + len(info.filename) + info.compress_size - 1] ^= 1  # its last byte
    victim.write_bytes(bytes(data))
    assert main(["verify", str(tmp_path / "npz")]) == 1
    out = capsys.readouterr().out
    assert "1 bad episode" in out and victim.name in out and "CRC-32" in out


def test_a_damaged_schema_costs_its_block_only(recorded, tmp_path):
    """A segment's first block damaged in its schema message: verify reads the segment's later blocks after the
    run's schema and lists that block alone; salvage rewrites it (schema included) and keeps the rest."""
    run = copy(recorded, tmp_path)
    lines = commits(run)
    k = next(i for i, c in enumerate(lines) if c["segment"] == 1)
    assert k + 1 < len(lines) and lines[k + 1]["segment"] == 1
    segment = run / "segment-000001.arrows"
    data = bytearray(segment.read_bytes())
    data[40] ^= 0xFF  # inside the schema message's flatbuffer
    segment.write_bytes(bytes(data))
    report = forge_gpu.reading.verify_run(run)["runs"][0]
    assert [b["line"] for b in report["bad_blocks"]] == [k + 1]
    lost = {e["episode"] for e in report["bad_episodes"]}
    repair_run(run, salvage=True)
    assert forge_gpu.reading.verify_run(run)["ok"]
    original = {(e.env_id, e.episode_id): e for e in read(recorded)}
    got = read(run)
    assert {f"{e.env_id}:{e.episode_id}" for e in got} == {f"{e}:{i}" for e, i in original} - lost
    assert all(same(e, original[(e.env_id, e.episode_id)]) for e in got)


def test_the_checksum_is_crc32c_without_the_packages_command_line():
    """forge_gpu's CRC32C gives the standard check value and the package's own results on any buffer, and in a new
    process reading a run's checksums loads neither the package's ``__init__`` (its argparse command line) nor
    ``importlib.metadata``."""
    import subprocess
    import sys

    import crc32c

    from forge_gpu._src.formats.packed.layout import crc32c as checksum

    assert checksum(b"123456789") == 0xE3069283  # the CRC-32C check value
    data = np.random.default_rng(0).integers(0, 256, 100_003, dtype=np.uint8)
    for view in (data.tobytes(), memoryview(data)[7:], data[:1]):
        assert checksum(view) == crc32c.crc32c(view)
    code = (
        "import sys; from forge_gpu._src.formats.packed.layout import crc32c; crc32c(b'x'); "
        "print(sorted(m for m in ('crc32c', 'crc32c._cli', 'argparse', 'importlib.metadata') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def written_line() -> dict:
    """A commit line as the one encoder of lines writes it, for a block that published an episode with an
    instruction and a param."""
    with tempfile.TemporaryDirectory() as directory:
        log = open_commit_log(directory, create=True)
        episodes = {key: [1] for key in EPISODE_KEYS} | {"instruction": ["reach"], "params/mass": [1.0]}
        append_commit(log, segment=1, offset=8, length=8, first_row=1, rows=1, episodes=episodes, crc32c=1)
        os.close(log)
        return json.loads(open(os.path.join(directory, LOG)).read())


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A small closed packed run with state and params, its commit log cut after the last line that publishes an
    episode (a crashed run's prefix: nothing follows that line to pin its rows and length)."""
    env = synthetic_description(num_envs=3, max_steps=4, state=True, params=True)
    run = tmp_path_factory.mktemp("bounds") / "run"
    record(run, env, make_batches(SyntheticSim(env, seed=5), 14), recorder=PackedRecorder, block_bytes=600)
    lines = (run / LOG).read_text().splitlines()
    while not json.loads(lines[-1])["episodes"]["steps"]:
        lines.pop()
    (run / LOG).write_text("\n".join(lines) + "\n")
    return run


@pytest.mark.parametrize("length", [-1, 1 << 40])
def test_a_segments_first_block_is_read_no_further_than_its_file(tmp_path, monkeypatch, length):
    """A run whose log is one line, its length past the segment's size (or negative): refused before the read (a
    read of 2**40 bytes allocates them first: a MemoryError where memory is not overcommitted). Every read of the
    segment is watched: none asks for more than the file holds."""
    from forge_gpu._src.formats.packed import read as packed_read

    env = synthetic_description(num_envs=3, max_steps=4, state=True, params=True)
    run = tmp_path / "run"
    record(run, env, make_batches(SyntheticSim(env, seed=5), 14), recorder=PackedRecorder, block_bytes=1 << 20)
    (line,) = (run / LOG).read_text().splitlines()  # one block: no next line's offset bounds its length
    first = json.loads(line)
    first["length"] = length
    (run / LOG).write_text(json.dumps(first, separators=(",", ":")) + "\n")
    asked = []

    class Watched:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def fileno(self):
            return self.f.fileno()

        def read(self, n=-1):
            asked.append((n, os.fstat(self.f.fileno()).st_size))
            return self.f.read(n)

    monkeypatch.setattr(packed_read, "open", lambda *a, **k: Watched(open(*a, **k)), raising=False)
    with pytest.raises(ValueError, match=re.escape(str(run))):
        forge_gpu.reading.open_run(run)
        list(forge_gpu.reading.read_episodes(run))
    assert all(0 <= n <= size for n, size in asked), asked


@pytest.mark.parametrize("key", ["segment", "offset", "length", "first_row", "rows"])
def test_a_block_field_past_a_file_offset_is_refused_by_every_reader(recorded, tmp_path, key):
    """A block field of a segment's last line set to 2**63 (past a C long: a file offset, a read-ahead hint; the
    next line begins a segment, so no offset after it contradicts the length): opening the run refuses it naming
    the line, verify reports it, repair and salvage refuse it; no OverflowError anywhere."""
    run = copy(recorded, tmp_path)
    lines = (run / LOG).read_text().splitlines()
    k = next(i for i, c in enumerate(commits(run)) if c["segment"] == 1) - 1
    line = json.loads(lines[k])
    line[key] = 1 << 63
    lines[k] = json.dumps(line, separators=(",", ":"))
    (run / LOG).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"{re.escape(LOG)}:{k + 1}: {key} must be an integer in"):
        forge_gpu.reading.open_run(run)
    report = forge_gpu.reading.verify_run(run)["runs"][0]
    assert not report["ok"] and f"{key} must be an integer" in report["error"]
    for salvage in (False, True):
        with pytest.raises(ValueError, match=key):
            repair_run(run, salvage=salvage)


def line_id(x) -> str:
    """A test id: a field's path, or which line (0: the first, -1: the last)."""
    return ".".join(map(str, x)) if isinstance(x, tuple) else ("first" if x == 0 else "last")


# The last line's every integer; the first line's block fields (it publishes no episode here: a segment's first block).
LINE_FIELDS = [(path, -1) for path in integer_paths(written_line())]
LINE_FIELDS += [(path, 0) for path, _ in LINE_FIELDS if path[0] != "episodes"]


@pytest.mark.parametrize("value", [0, -1, 1 << 40])
@pytest.mark.parametrize(("field", "which"), LINE_FIELDS, ids=line_id)
def test_every_count_and_offset_of_a_commit_line_is_checked_before_allocation(small_run, tmp_path, field, value, which):
    """Each integer of the first or the last commit line (a block's segment, offset, length, checksum, first row
    and rows; an episode's ids, steps, first row and stride; an instruction's index) set to 0, -1 or 2**40: opening
    the run refuses it or reading it does, and verify reports it, each with a ValueError or a report, never a
    MemoryError or another exception; salvage empties the block or refuses. The first line is its segment's first
    block, whose checksum opening the run reads from the file."""
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    lines = (run / LOG).read_text().splitlines()
    line = json.loads(lines[which])
    *parents, key = field
    parent = line
    for step in parents:
        parent = parent[step]
    if parent[key] == value:
        pytest.skip(f"the line already holds {value} there")
    parent[key] = value
    lines[which] = json.dumps(line, separators=(",", ":"))
    (run / LOG).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=re.escape(str(run))):
        forge_gpu.reading.open_run(run)
        list(forge_gpu.reading.read_episodes(run))
    report = forge_gpu.reading.verify_run(run)["runs"][0]
    assert not report["ok"] and (report["error"] or report["bad_blocks"] or report["bad_episodes"])
    try:
        repair_run(run, salvage=True)
    except ValueError:
        pass
