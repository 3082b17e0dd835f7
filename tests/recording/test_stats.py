"""Normalization statistics: the accumulator against numpy, the recorders' stats.json, forge-gpu stats."""

import json

import numpy as np
import pytest
from helpers.synthetic import LOSSLESS, SyntheticSim, make_batches, record, synthetic_description

from forge_gpu._src.reading.inspection import format_report
from forge_gpu._src.recording.stats import RELATIVE_ERROR, STATS_FILE, ChannelStats, StatsAccumulator
from forge_gpu.cli import main
from forge_gpu.curation import compute_statistics, run_statistics
from forge_gpu.reading import inspect_run, read_episodes
from forge_gpu.recording import NpzRecorder, PackedRecorder


def expected(values: np.ndarray) -> dict:
    """numpy's figures for ``values`` [rows, channels]."""
    x = values.astype(np.float64)
    return {
        "count": len(x),
        "mean": x.mean(0),
        "std": x.std(0),
        "min": x.min(0),
        "max": x.max(0),
        "q01": np.quantile(x, 0.01, axis=0, method="inverted_cdf"),
        "q99": np.quantile(x, 0.99, axis=0, method="inverted_cdf"),
    }


def assert_matches(got: dict, values: np.ndarray, *, exact_quantiles: bool) -> None:
    want = expected(values)
    assert got["count"] == want["count"]
    for figure in ("mean", "std"):
        np.testing.assert_allclose(got[figure], want[figure], rtol=1e-9, atol=1e-12)
    for figure in ("min", "max"):
        np.testing.assert_array_equal(got[figure], want[figure])
    for figure in ("q01", "q99"):
        if exact_quantiles:
            np.testing.assert_array_equal(got[figure], want[figure])
        else:
            assert np.all(np.abs(np.asarray(got[figure]) - want[figure]) <= RELATIVE_ERROR * np.abs(want[figure]))


def test_float_channels_match_numpy_over_uneven_batches():
    """Per-channel count, mean, std, min, max equal numpy's; q01/q99 are within the stated relative error."""
    rng = np.random.default_rng(0)
    values = (rng.standard_cauchy(size=(20001, 5)) * [1, 1e3, 1e-4, 7, 0.5]).astype(np.float32)
    values[:300, 2] = 0.0  # 1.5% zeros: channel 2's q01 is exactly 0, and must be reported as 0
    stats = ChannelStats(5, "float")
    # A first batch large enough to be counted at once, then small ones gathered before counting.
    for part in np.array_split(values, [14000, 14001, 14002, 14500]):
        stats.update(part)
    assert_matches(stats.summary(), values, exact_quantiles=False)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_byte_channels_are_exact(dtype):
    """One-byte fields keep an exact histogram: every figure, percentiles included, equals numpy's."""
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max + 1, size=(5000, 3)).astype(dtype)
    stats = ChannelStats.for_dtype(3, np.dtype(dtype))
    for part in np.array_split(values, 3):
        stats.update(part)
    assert_matches(stats.summary(), values, exact_quantiles=True)


def test_merged_and_reloaded_statistics_equal_one_pass():
    """Two accumulators merged after a JSON round trip (two runs of a dataset) give one pass's figures."""
    rng = np.random.default_rng(2)
    fields = {"proprio": ((3,), np.float32), "rgb": ((4, 4, 3), np.uint8), "env_id": ((), np.int32)}
    frames = [
        {"proprio": rng.normal(size=(50, 3)).astype(np.float32), "rgb": rng.integers(0, 256, (50, 4, 4, 3), np.uint8)}
        for _ in range(2)
    ]
    actions = [rng.normal(size=(49, 2)).astype(np.float32) for _ in range(2)]
    rewards = [rng.normal(size=49).astype(np.float32) for _ in range(2)]
    parts, whole = [], StatsAccumulator(fields, 2)
    for f, a, r in zip(frames, actions, rewards, strict=True):
        part = StatsAccumulator(fields, 2)
        for acc in (part, whole):
            acc.update_frames(f)
            acc.update_transitions(a, r)
        parts.append(StatsAccumulator.from_json(json.loads(json.dumps(part.to_json("test"))), "part"))
    parts[0].merge(parts[1])
    merged, one = parts[0].summary(), whole.summary()
    assert set(merged) == {"obs/proprio", "obs/rgb", "action", "reward"}
    for key in one:
        for figure in one[key]:
            np.testing.assert_allclose(merged[key][figure], one[key][figure], rtol=1e-12)


@pytest.mark.parametrize("kind", ["float", "uint8", "int8"])
def test_subtracting_a_part_leaves_the_statistics_of_the_rest(kind):
    rng = np.random.default_rng(7)
    if kind == "float":
        kept = rng.normal(3.0, 2.0, (5000, 4)).astype(np.float32)
        removed = rng.normal(-1.0, 5.0, (1700, 4)).astype(np.float32)
    else:
        dtype = np.uint8 if kind == "uint8" else np.int8
        info = np.iinfo(dtype)
        kept = rng.integers(info.min, info.max + 1, (5000, 4)).astype(dtype)
        removed = rng.integers(info.min, info.max + 1, (1700, 4)).astype(dtype)
    both = ChannelStats.for_dtype(4, kept.dtype)
    for part in np.array_split(np.concatenate([removed[:900], kept, removed[900:]]), 7):  # interleaved, uneven
        both.update(part)
    part = ChannelStats.for_dtype(4, kept.dtype)
    part.update(removed)
    alone = ChannelStats.for_dtype(4, kept.dtype)
    alone.update(kept)
    alone.flush()
    both.subtract(part)
    both.min, both.max = alone.min, alone.max  # the caller's: min and max cannot be subtracted
    assert both.count == alone.count
    np.testing.assert_array_equal(both.hist, alone.hist)
    for figure in ("mean", "m2"):
        np.testing.assert_allclose(getattr(both, figure), getattr(alone, figure), rtol=1e-9)
    got, want = both.summary(), alone.summary()
    np.testing.assert_allclose(got["std"], want["std"], rtol=1e-9)
    for figure in ("q01", "q99"):
        assert got[figure] == want[figure]


def test_subtracting_everything_or_more_than_was_counted():
    values = np.random.default_rng(3).normal(size=(100, 2))
    whole, more = ChannelStats(2, "float"), ChannelStats(2, "float")
    whole.update(values)
    more.update(np.concatenate([values, values]))
    same = ChannelStats(2, "float")
    same.update(values)
    with pytest.raises(ValueError, match="cannot subtract"):
        whole.subtract(more)
    whole.subtract(same)
    assert whole.count == 0 and not whole.hist.any() and not whole.m2.any()
    with pytest.raises(ValueError, match="cannot subtract"):
        whole.subtract(ChannelStats(2, "uint8"))


def test_accumulators_subtract_field_by_field():
    rng = np.random.default_rng(5)
    fields = {"proprio": ((3,), np.float32), "rgb": ((4, 4, 3), np.uint8)}

    def batch(rows):
        return (
            {
                "proprio": rng.normal(size=(rows, 3)).astype(np.float32),
                "rgb": rng.integers(0, 256, (rows, 4, 4, 3), dtype=np.uint8),
            },
            rng.normal(size=(rows, 2)),
            rng.normal(size=rows),
        )

    (frames_a, action_a, reward_a), (frames_b, action_b, reward_b) = batch(300), batch(120)
    both, part, alone = (StatsAccumulator(fields, 2) for _ in range(3))
    for accumulator, parts in (
        (both, [(frames_a, action_a, reward_a), (frames_b, action_b, reward_b)]),
        (part, [(frames_b, action_b, reward_b)]),
        (alone, [(frames_a, action_a, reward_a)]),
    ):
        for frames, action, reward in parts:
            accumulator.update_frames(frames)
            accumulator.update_transitions(action, reward)
    both.subtract(part)
    for key, stats in both.stats.items():
        want = alone.stats[key]
        want.flush()
        assert stats.count == want.count
        np.testing.assert_array_equal(stats.hist, want.hist)
        np.testing.assert_allclose(stats.mean, want.mean, rtol=1e-9)
        np.testing.assert_allclose(stats.m2, want.m2, rtol=1e-9)


def test_a_malformed_statistics_file_is_refused_naming_it(tmp_path):
    """A stats.json whose sketch does not add up raises ValueError naming the file."""
    acc = StatsAccumulator({"proprio": ((2,), np.float32)}, 1)
    acc.update_frames({"proprio": np.ones((3, 2), np.float32)})
    acc.update_transitions(np.ones((2, 1), np.float32), np.ones(2, np.float32))
    content = acc.to_json("test")
    content["fields"]["obs/proprio"]["count"] = 4
    (tmp_path / STATS_FILE).write_text(json.dumps(content))
    (tmp_path / "run.json").write_text("{}")
    from forge_gpu._src.recording.stats import load_statistics

    with pytest.raises(ValueError, match="stats.json"):
        load_statistics(tmp_path)


def published_statistics(run) -> dict:
    """numpy's figures over the published episodes of ``run``: every frame of each, every transition."""
    episodes = list(read_episodes(run))
    assert episodes
    fields = episodes[0].obs
    frames = {f: np.concatenate([np.concatenate([e.obs[f], e.next[f][-1:]]) for e in episodes]) for f in fields}
    return {
        "obs/proprio": frames["proprio"],
        "obs/rgb": frames["rgb"].reshape(-1, 3),
        "obs/depth": frames["depth"].reshape(-1, 1),
        "action": np.concatenate([e.action for e in episodes]),
        "reward": np.concatenate([e.reward for e in episodes]).reshape(-1, 1),
    }


def assert_published_statistics(run) -> None:
    """stats.json equals numpy over the published episodes and compute_statistics over them, and counts fewer
    frames than the run's rows when episodes were left running."""
    stats = run_statistics(run)
    values = published_statistics(run)
    assert set(stats) == set(values)
    for key, data in values.items():
        assert_matches(stats[key], data, exact_quantiles=key == "obs/rgb")
    computed = compute_statistics(run, write=False).summary()
    for key, figures in computed.items():
        assert stats[key]["count"] == figures["count"], key
        for name in ("mean", "std"):
            np.testing.assert_allclose(stats[key][name], figures[name], rtol=1e-12, atol=1e-12, err_msg=key)
        for name in ("min", "max", "q01", "q99"):
            np.testing.assert_array_equal(stats[key][name], figures[name], err_msg=key)


@pytest.mark.parametrize("recorder", [PackedRecorder, NpzRecorder])
def test_recorded_statistics_count_the_published_episodes_only(tmp_path, recorder):
    """Both recorders write stats.json at close over the published episodes alone: the frames of the episodes still
    running when the run stopped (every env has one) are not counted, so the file equals numpy over the published
    episodes and what forge-gpu stats computes from them."""
    env = synthetic_description(num_envs=4, max_steps=6, images=True)
    batches = make_batches(SyntheticSim(env, seed=3), 33)
    record(tmp_path / "run", env, batches, recorder=recorder)
    rows = sum(len(b[0]["proprio"]) for b in batches)
    assert run_statistics(tmp_path / "run")["obs/proprio"]["count"] < rows
    assert json.loads((tmp_path / "run" / "run.json").read_text())["incomplete_episodes"]
    assert_published_statistics(tmp_path / "run")


def test_packed_statistics_over_segments_small_blocks_and_handed_frames(tmp_path):
    """The packed recorder counts each block as it writes it and subtracts the unpublished episodes' rows at close,
    read back from whichever segments hold them; frames a producer handed encoded are counted decoded."""
    from forge_gpu._src.core.codecs import CodecSpec, encode_frames
    from forge_gpu._src.formats.packed.identity import segment_name

    env = synthetic_description(num_envs=5, max_steps=7, images=True)
    codecs = {"rgb": CodecSpec("png"), "depth": CodecSpec("zstd")}
    recorder = PackedRecorder(tmp_path / "run", env, codecs=codecs, block_bytes=1, segment_bytes=1 << 14)
    for k, (observation, result) in enumerate(make_batches(SyntheticSim(env, seed=9), 41, resets_at=(17,))):
        if k % 2:
            observation = {**observation, **{f: encode_frames(s, observation[f]) for f, s in codecs.items()}}
        recorder.append(observation, result)
    recorder.close()
    assert (tmp_path / "run" / segment_name(1)).exists()  # more than one segment
    assert_published_statistics(tmp_path / "run")


def test_packed_statistics_of_a_run_that_published_no_episode_count_nothing(tmp_path):
    """Every row counted as written is subtracted at close when no episode was published."""
    env = synthetic_description(num_envs=3, max_steps=9, images=True)
    record(tmp_path / "run", env, make_batches(SyntheticSim(env, seed=1, end_prob=0.0), 6), recorder=PackedRecorder)
    stats = run_statistics(tmp_path / "run")
    assert {key: figures["count"] for key, figures in stats.items()} == dict.fromkeys(stats, 0)


@pytest.mark.parametrize("codecs", [{}, {"rgb": "jpeg:80", "depth": "quantized"}, {"rgb": "webp:70"}])
def test_packed_statistics_count_what_lossy_codecs_store(tmp_path, codecs):
    """With the default codecs (depth quantized) and lossy ones, the packed recorder counts the values a reader
    decodes, so stats.json still equals what forge-gpu stats computes from the run."""
    env = synthetic_description(num_envs=4, max_steps=6, images=True, image_shape=(8, 8))
    record(tmp_path / "run", env, make_batches(SyntheticSim(env, seed=6), 29), recorder=PackedRecorder, codecs=codecs)
    assert_published_statistics(tmp_path / "run")


@pytest.mark.parametrize("fmt", ["npz", "packed", "packed-handed"])
def test_statistics_leave_out_the_episodes_a_write_failure_dropped(tmp_path, monkeypatch, fmt):
    """A write that fails drops the episodes it held (and every later one): the failed run's stats.json counts the
    episodes it published, no more."""
    import forge_gpu._src.formats.npz.write as npz_module
    import forge_gpu._src.formats.packed.write as packed_module
    from forge_gpu._src.core.codecs import CodecSpec, encode_frames

    zstd = CodecSpec("zstd")
    owner, name = (npz_module, "write_episode_file") if fmt == "npz" else (packed_module.PackedWriter, "write")
    real, calls = getattr(owner, name), []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise OSError("the disk went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)
    env = synthetic_description(num_envs=4, max_steps=6, images=True)
    recorder = NpzRecorder if fmt == "npz" else PackedRecorder
    options = {"writers": 1} if fmt == "npz" else {"block_bytes": 1}
    if fmt != "npz":
        options["codecs"] = LOSSLESS
    opened = recorder(tmp_path / "run", env, **options)
    with pytest.raises(RuntimeError, match="disk went away"):
        try:
            for observation, result in make_batches(SyntheticSim(env, seed=5), 33):
                if fmt == "packed-handed":  # the frames of the failed block come back from the ring, decoded
                    observation = {**observation, **{f: encode_frames(zstd, observation[f]) for f in ("rgb", "depth")}}
                opened.append(observation, result)
        finally:
            opened.close()
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["incomplete_episodes"]
    assert_published_statistics(tmp_path / "run")


def test_statistics_switched_off_write_no_file(tmp_path):
    """statistics=False records the same run without stats.json, and run_statistics says how to get them."""
    env = synthetic_description(num_envs=3, max_steps=4)
    record(tmp_path / "run", env, make_batches(SyntheticSim(env), 12), recorder=PackedRecorder, statistics=False)
    assert not (tmp_path / "run" / STATS_FILE).exists()
    with pytest.raises(LookupError, match="forge-gpu stats"):
        run_statistics(tmp_path / "run")


def test_stats_command_computes_them_from_the_published_episodes(tmp_path, capsys):
    """forge-gpu stats on a run without statistics writes stats.json equal to numpy over its published
    episodes (every frame; every transition); inspect then shows them."""
    env = synthetic_description(num_envs=3, max_steps=5)
    record(
        tmp_path / "run", env, make_batches(SyntheticSim(env, seed=4), 20), recorder=PackedRecorder, statistics=False
    )
    assert main(["stats", str(tmp_path / "run")]) == 0
    assert "computed and written" in capsys.readouterr().out
    episodes = list(read_episodes(tmp_path / "run"))
    frames = np.concatenate([np.concatenate([e.obs["proprio"], e.next["proprio"][-1:]]) for e in episodes])
    stats = run_statistics(tmp_path / "run")
    assert_matches(stats["obs/proprio"], frames, exact_quantiles=False)
    assert_matches(stats["action"], np.concatenate([e.action for e in episodes]), exact_quantiles=False)
    report = inspect_run(tmp_path / "run")
    assert report["statistics"]["obs/proprio"]["count"] == len(frames)
    assert "obs/proprio" in format_report(report)
    again = compute_statistics(tmp_path / "run", write=False).summary()
    np.testing.assert_array_equal(again["obs/proprio"]["mean"], stats["obs/proprio"]["mean"])


def counted(observation: dict, fields: dict) -> dict:
    """``observation`` with ``fields`` (field -> codec) handed as a device encoder hands them: the payloads, and each
    frame's byte histogram counted before the encode (``count_frames`` on Warp's CPU device), no values."""
    import warp as wp

    from forge_gpu._src.core.codecs import encode_frames
    from forge_gpu._src.sim.camera import count_frames

    out = dict(observation)
    for field, spec in fields.items():
        payloads = encode_frames(spec, observation[field])
        counts = count_frames(wp.array(observation[field], dtype=wp.uint8, device="cpu")).numpy().copy()
        out[field] = type(payloads)(payloads.spec, payloads.payload, payloads.offsets, counts=counts)
    return out


@pytest.mark.parametrize("shape", [(5, 6, 3), (4, 7)])
def test_count_frames_counts_each_frames_channels(shape):
    """The device counter gives each frame's per-channel histogram of its bytes, as numpy counts it."""
    import warp as wp

    from forge_gpu._src.sim.camera import count_frames

    frames = np.random.default_rng(2).integers(0, 256, (3, *shape), dtype=np.uint8)
    counts = count_frames(wp.array(frames, dtype=wp.uint8, device="cpu")).numpy()
    channels = frames.reshape(3, -1, 1 if len(shape) == 2 else 3)
    want = [[np.bincount(channels[i, :, c], minlength=256) for c in range(channels.shape[2])] for i in range(3)]
    np.testing.assert_array_equal(counts, np.array(want))


@pytest.mark.parametrize("fail", [False, True])
def test_frames_handed_with_counts_are_counted_as_rendered(tmp_path, monkeypatch, fail):
    """Frames a producer encoded where they were rendered come with their histograms: the run's statistics count
    those (the frames before the JPEG loss), nothing is decoded to count them, and the rows of the episodes never
    published (left running, abandoned by a reset, lost to a write failure) come off from each env's counts, not
    read back decoded. So the JPEG run's statistics equal those of the same frames recorded lossless, field by
    field, exactly (mean and std to float64 rounding)."""
    import forge_gpu._src.core.codecs as codecs_module
    import forge_gpu._src.formats.packed.write as packed_module
    from forge_gpu._src.core.codecs import CodecSpec

    env = synthetic_description(num_envs=5, max_steps=7, images=True)
    batches = make_batches(SyntheticSim(env, seed=11), 41, resets_at=(17,))
    runs = {}
    for name, codecs in (("lossless", LOSSLESS), ("jpeg", {"rgb": "jpeg:75", "depth": "zstd"})):
        if fail:  # the fourth block's write fails: its episodes and every later one are dropped
            real, calls = packed_module.PackedWriter.write, []

            def failing(*args, real=real, calls=calls, **kwargs):
                calls.append(1)
                if len(calls) == 4:
                    raise OSError("the disk went away")
                return real(*args, **kwargs)

            monkeypatch.setattr(packed_module.PackedWriter, "write", failing)
        recorder = PackedRecorder(tmp_path / name, env, codecs=codecs, block_bytes=1, segment_bytes=1 << 14)
        if name == "jpeg":  # nothing decodes a payload to count it
            monkeypatch.setattr(codecs_module, "decode_frames", lambda *a, **k: pytest.fail("decoded to count"))
        try:
            for observation, result in batches:
                if name == "jpeg":
                    observation = counted(observation, {"rgb": CodecSpec.parse("jpeg:75")})
                recorder.append(observation, result)
        except RuntimeError as exc:
            assert fail and "disk went away" in str(exc)
        try:
            recorder.close()
        except RuntimeError as exc:
            assert fail and "disk went away" in str(exc)
        monkeypatch.undo()
        assert json.loads((tmp_path / name / "run.json").read_text())["status"] == ("failed" if fail else "closed")
        runs[name] = run_statistics(tmp_path / name)
    assert runs["jpeg"]["obs/rgb"]["count"] < sum(b[0]["rgb"][..., 0].size for b in batches)  # some left out
    for key, figures in runs["lossless"].items():
        for figure, value in figures.items():  # mean and std up to float64 rounding (merged in another order)
            check = np.testing.assert_allclose if figure in ("mean", "std") else np.testing.assert_array_equal
            check(
                runs["jpeg"][key][figure],
                value,
                err_msg=f"{key} {figure}",
                **({"rtol": 1e-12} if figure in ("mean", "std") else {}),
            )
    assert_published_statistics(tmp_path / "lossless")


def test_a_field_is_handed_with_counts_in_every_batch_or_none(tmp_path):
    """The first batch decides; a batch that hands a field the other way, or counts of the wrong shape or sum, is
    refused in one line and changes nothing."""
    from forge_gpu._src.core.codecs import CodecSpec, encode_frames

    env = synthetic_description(num_envs=3, max_steps=6, images=True)
    batches = make_batches(SyntheticSim(env, seed=4), 4)
    jpeg = CodecSpec.parse("jpeg:80")
    recorder = PackedRecorder(tmp_path / "run", env, codecs={"rgb": "jpeg:80", "depth": "zstd"})
    recorder.append(counted(batches[0][0], {"rgb": jpeg}), batches[0][1])
    plain = {**batches[1][0], "rgb": encode_frames(jpeg, batches[1][0]["rgb"])}
    with pytest.raises(ValueError, match=r"observation\['rgb'\]: the run's first batch handed its frames with counts"):
        recorder.append(plain, batches[1][1])
    wrong = counted(batches[1][0], {"rgb": jpeg})
    bad = type(wrong["rgb"])(
        wrong["rgb"].spec, wrong["rgb"].payload, wrong["rgb"].offsets, counts=wrong["rgb"].counts[:, :2]
    )
    with pytest.raises(ValueError, match=r"counts must be an integer array \[3, 3, 256\]"):
        recorder.append({**wrong, "rgb": bad}, batches[1][1])
    bad = type(bad)(bad.spec, bad.payload, bad.offsets, counts=wrong["rgb"].counts * 2)
    with pytest.raises(ValueError, match="each frame's channel must count its 20 pixels once"):
        recorder.append({**wrong, "rgb": bad}, batches[1][1])
    for observation, result in batches[1:]:
        recorder.append(counted(observation, {"rgb": jpeg}), result)
    recorder.close()
    record(
        tmp_path / "same",
        env,
        [(counted(o, {"rgb": jpeg}), r) for o, r in batches],
        recorder=PackedRecorder,
        codecs={"rgb": "jpeg:80", "depth": "zstd"},
    )  # the refused batches changed nothing
    assert (tmp_path / "run" / STATS_FILE).read_text() == (tmp_path / "same" / STATS_FILE).read_text()
    assert [e.obs["proprio"].tolist() for e in read_episodes(tmp_path / "run")] == [
        e.obs["proprio"].tolist() for e in read_episodes(tmp_path / "same")
    ]
