"""The bench scripts' smoke modes run and write every figure, finite, for every row."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.scripts import BENCH, load_script

import forge_gpu

# figure -> must it be > 0 (else >= 0)
STEPPING = {"num_envs": True, "steps": True, "median_step_ms": True, "env_steps_per_s": True}
TRANSPORT = {
    "num_envs": True,
    "steps": True,
    "bytes_per_step": False,
    "mb_per_step": False,
    "step_median_ms": True,
    "step_p95_ms": True,
    "loop_s": True,
    "overlap": True,
    "copy_steps": False,
    "copy_median_ms": False,
    "copy_p95_ms": False,
    "gb_per_s": False,
    "reference_gb_per_s": True,
    "vs_reference": False,
}
# Figures that are zero on the ``none`` row by definition and must be positive on the others.
TRANSPORT_MOVED = ["bytes_per_step", "mb_per_step", "copy_steps", "copy_median_ms", "copy_p95_ms", "gb_per_s"]
TRANSPORT_MOVED += ["vs_reference"]
PIPELINE = {
    "num_envs": True,
    "steps": True,
    "env_steps_per_s": True,
    "efficiency": True,
    "loop_env_steps_per_s": True,
    "loop_efficiency": True,
    "stall_pct": False,
    "episodes": False,
    "mb_written": False,
}


def run_bench(name: str, out: Path, folder: Path = BENCH) -> dict:
    module = load_script(folder / f"{name}.py", f"{folder.name}_{name}")
    assert module.main(["--smoke", "--out", str(out)]) == 0
    assert (out / f"{name}.md").read_text().strip()
    return json.loads((out / f"{name}.json").read_text())


def check_figures(row: dict, figures: dict) -> None:
    for key, positive in figures.items():
        value = row[key]
        assert isinstance(value, int | float) and not isinstance(value, bool), (key, value)
        assert math.isfinite(value), (key, value)
        assert value > 0 if positive else value >= 0, (key, value, row)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("bench")


def test_stepping_smoke(out):
    """bench/stepping.py --smoke gives steps/s for every task and env count."""
    rows = run_bench("stepping", out)["rows"]
    assert rows
    for row in rows:
        check_figures(row, STEPPING)


def test_transport_smoke(out):
    """bench/transport.py --smoke gives every method's bytes, times, GB/s, reference ratio and overlap."""
    payload = run_bench("transport", out)
    rows = payload["rows"]
    assert {r["method"] for r in rows} == {"none", "sync", "host_snapshot", "torch_pinned"}
    for row in rows:
        check_figures(row, TRANSPORT)
        assert row["reference"] in ("memcpy", "pinned_d2h_peak")
        if row["method"] != "none":
            assert all(row[key] > 0 for key in TRANSPORT_MOVED), row
    assert (out / "transport.png").stat().st_size > 0


def test_pipeline_smoke(out):
    """bench/pipeline.py --smoke gives steps/s, efficiency and stall for each mode, and recordings publish."""
    rows = run_bench("pipeline", out)["rows"]
    modes = {"stepping", "transport", "record_packed", "record_packed_raw", "record_packed_lz4", "record_packed_jpeg"}
    modes |= {"record_npz", "record_npz_deflate1"}
    assert {r["mode"] for r in rows} == modes
    for row in rows:
        check_figures(row, PIPELINE)
        if row["mode"].startswith("record"):
            assert row["episodes"] > 0 and row["mb_written"] > 0, row
    assert (out / "pipeline.png").stat().st_size > 0


def test_codecs_smoke(out):
    """bench/codecs.py --smoke: every candidate codec's bytes, error and rates on real frames; lossless ones exact."""
    rows = run_bench("codecs", out)["rows"]
    assert {r["codec"].split(":")[0] for r in rows} == {"png", "zstd", "lz4", "jpeg", "webp", "quantized"}
    for row in rows:
        check_figures(row, {"bytes_per_frame": True, "ratio": True, "encode_fps": True, "decode_fps": True})
        assert (row["max_abs_error"] == 0) == (row["codec"].split(":")[0] in ("png", "zstd", "lz4")), row


def test_loader_smoke(out):
    """bench/loader.py --smoke: shuffled batches with camera frames through a DataLoader with 0 and 2 workers, every
    batch whole (the samples counted are the batches' rows)."""
    rows = run_bench("loader", out)["rows"]
    assert [r["workers"] for r in rows] == [0, 2]
    for row in rows:
        check_figures(row, {"samples_per_s": True, "vs_0_workers": True, "seconds": True})
        assert row["samples"] == row["batch"] * row["batches"], row


def test_costs_smoke(out):
    """bench/costs.py --smoke: every row of its table, each with forge_gpu's figure and, where it has one, its
    reference and their ratio."""
    rows = run_bench("costs", out)["rows"]
    paths = [r["path"] for r in rows]
    assert paths == ["recorder", "ingest", "pipeline", "read_episodes", "read_episodes", "action_windows"] + [
        "windows_epoch",
        "image_batches",
        "loader",
    ]
    for row in rows:
        figures = {"forge": True} | ({"reference": True, "ratio": True} if row["reference"] != "-" else {})
        check_figures(row, figures)
    assert [r["pass_"] for r in rows if r["path"] == "read_episodes"] == ["first", "warm"]


def test_recorder_smoke(out):
    """bench/recorder.py --smoke gives forge's figure, its reference and their ratio for every row."""
    rows = run_bench("recorder", out)["rows"]
    figures = {r["figure"] for r in rows}
    expected = {"ingest_packed", "ingest_none", "ingest_none_vs_disk", "append_only", "write_bytes", "write_bytes_e2e"}
    expected |= {"write_bytes_vs_publish"}
    expected |= {"pipeline_expert", "pipeline_random", "pipeline_random_vs_disk"}
    expected |= {f"ingest_deflate1_w{w}" for w in (1, 2, 4)} | {f"publish_w{w}" for w in (1, 2, 4)}
    assert figures == expected
    for row in rows:
        check_figures(row, {"writers": True, "forge": True, "reference": True, "ratio": True})


def test_threads_smoke(out):
    """bench/threads.py --smoke gives publications/s for 1, 2 and 4 threads at every Python cost."""
    rows = run_bench("threads", out)["rows"]
    assert [r["python_us_per_episode"] for r in rows] == [0, 5, 10, 15]
    for row in rows:
        check_figures(row, {f"w{w}_episodes_per_s": True for w in (1, 2, 4)} | {"w2_over_w1": True})


def test_packed_smoke(out):
    """bench/packed.py --smoke gives every figure of the packed layout, finite and positive."""
    rows = {r["figure"]: r for r in run_bench("packed", out)["rows"]}
    codecs = {f"ingest_{shape}_{codec}" for shape in ("short", "long") for codec in ("lz4", "zstd")}
    sections = {"ingest_short", "ingest_long", "files_per_100k", "pipeline_0", "rss", "reader_cartpole", "reader_reach"}
    sections |= {"windows_mmap", "checksum", "ingest_short_checksum", "verify", "pipeline"}
    assert set(rows) == sections | codecs
    for name in codecs:
        check_figures(rows[name], {"rows_per_s": True, "vs_none": True, "size_vs_none": True})
    for name in ("ingest_short", "ingest_long"):
        check_figures(rows[name], {"rows_per_s": True, "vs_raw_write": True, "vs_per_row": True, "vs_npz": True})
    check_figures(rows["files_per_100k"], {"files_per_100k": True})
    pipeline_figures = {"recording": True, "stepping": True, "efficiency": True, "efficiency_no_state": True}
    check_figures(rows["pipeline_0"], pipeline_figures)
    summary = ["efficiency_median", "efficiency_min", "efficiency_no_state_median", "efficiency_no_state_min"]
    check_figures(rows["pipeline"], dict.fromkeys(summary, True))
    check_figures(rows["rss"], {"peak_rss_mb_100": True, "peak_rss_mb_1000": True, "ratio": True})
    for name in ("reader_cartpole", "reader_reach"):
        figures = ["npz_episodes_per_s", "packed_episodes_per_s", "npz_action_windows_per_s"]
        figures += ["packed_batch_in_order_per_s", "packed_batch_shuffled_per_s", "episodes_vs_npz", "windows_vs_npz"]
        figures += ["packed_unverified_episodes_per_s", "verify_cost", "packed_windows_load_unverified_s"]
        figures += ["packed_action_windows_per_s", "action_windows_vs_npz", "action_windows_vs_batch_in_order"]
        check_figures(rows[name], dict.fromkeys(figures, True))
    crc = ["crc32c_gb_per_s", "zlib_crc32_gb_per_s", "isal_crc32_gb_per_s", "crc32c_vs_zlib"]
    check_figures(rows["checksum"], dict.fromkeys(crc, True))
    cost = ["rows_per_s", "rows_per_s_no_checksum", "with_over_without", "checksum_share_of_wall"]
    check_figures(rows["ingest_short_checksum"], dict.fromkeys(cost, True))
    check_figures(
        rows["verify"], dict.fromkeys(["run_mb", "raw_read_mb_per_s", "verify_mb_per_s", "verify_vs_raw"], True)
    )
    rates = [f"{mode}_{figure}" for mode in ("loaded", "mmap") for figure in ("load_s", "batch_shuffled_per_s")]
    held = ["loaded_held_mb", "mmap_held_mb", "held_mmap_vs_loaded"]
    check_figures(
        rows["windows_mmap"],
        dict.fromkeys(rates + ["rate_mmap_vs_loaded", "windows"], True) | dict.fromkeys(held, False),
    )


def test_export_smoke(out):
    """bench/export.py --smoke gives every export rate (both tasks, both codecs, 1 and 2 processes, robomimic),
    every size of the reach run and the pipeline efficiency with and without statistics."""
    pytest.importorskip("av")
    pytest.importorskip("h5py")
    rows = {r["figure"]: r for r in run_bench("export", out)["rows"]}
    rates = {f"rate_{t}_{c}_{p}" for t in ("cartpole", "reach") for c in ("h264", "av1") for p in (1, 2)}
    rates |= {"rate_cartpole_robomimic", "rate_reach_robomimic"}
    sizes = {f"size_{name}" for name in ("forge_gpu_raw", "forge_gpu_zstd", "lerobot_h264", "lerobot_av1", "robomimic")}
    assert set(rows) == rates | sizes | {"stats_cartpole", "stats_reach"}
    for name in rates:
        check_figures(rows[name], {"frames": True, "episodes": True, "frames_per_s": True, "mb": True})
    for name in rates:
        if name.startswith("rate_reach_") and not name.endswith("robomimic"):
            check_figures(rows[name], {"image_mae": False})
    for name in sizes:
        check_figures(rows[name], {"episodes": True, "mb": True, "vs_raw": True})
    for name in ("stats_cartpole", "stats_reach"):
        check_figures(rows[name], {"efficiency_with_stats": True, "efficiency_without_stats": True})


def test_gpu_smoke(out):
    """bench/gpu.py --smoke runs every section in a process of its own on this machine's device and every check
    passes: the transport's copy against its reference, recorded env-steps/s, the camera frames encoded where the
    step ran (fewer bytes moved, nothing overflowed, decoded within the codec's bound), the sync figure."""
    payload = run_bench("gpu", out)
    rows = payload["rows"]
    sections = list(dict.fromkeys(r["section"] for r in rows))
    assert sections == ["machine", "bandwidth", "pipeline_cartpole", "frames", "syncs", "transport", "kernels"], rows
    assert all(r.get("ok", True) for r in rows), rows
    assert not [r for r in rows if r["figure"] in ("error", "timeout")], rows
    for row in rows:
        if "ratio" in row:
            assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
    assert payload["machine"]["device"] and payload["date"]
    assert all((out / "gpu_logs" / f"{name}.log").stat().st_size > 0 for name in sections[:-1])

    def row(start: str) -> dict:
        (found,) = [r for r in rows if r["figure"].startswith(start)]
        return found

    assert "env-steps/s" in row("cartpole: recorded")["value"]
    assert row("bytes moved per step, rgb as jpeg")["ratio"] > 1
    assert row("overflows")["value"] == "0"
    assert row("the last batch decodes with the CPU codec")["ok"] is True
    transport = json.loads((out / "transport-cuda.json").read_text())["rows"]
    assert {(r["layout"], r["method"]) for r in transport} == {
        (layout, method)
        for layout in ("cartpole", "reach_rgbd64")
        for method in ("none", "sync", "host_snapshot", "torch_pinned")
    }
    assert row("cartpole x8, host_snapshot")["ratio"] > 0


def test_a_failing_section_keeps_its_rows_and_gives_one_error_row(tmp_path):
    """A section whose process raises (here: recording into a folder that does not exist) keeps the rows it gave
    before and adds one error row naming the exception, with the last lines of its log."""
    gpu = load_script(BENCH / "gpu.py", "bench_gpu_failing")
    args = SimpleNamespace(smoke=True, device="cpu", record_dir=str(tmp_path / "missing"))
    (logs := tmp_path / "logs").mkdir()
    rows = gpu.run_child("pipeline_cartpole", args, logs, 600)
    figures = [r["figure"] for r in rows]
    assert len(figures) == 3 and figures[0].endswith("stepping only"), rows
    assert figures[1:] == ["cartpole: with the transport", "error"], rows
    assert "FileNotFoundError" in rows[-1]["value"] and "last output" in rows[-1]["value"], rows[-1]


def test_frames_smoke(out):
    """bench/frames.py --smoke gives every codec's bytes, error and rates, LeRobot's export beside them, the pipeline
    and the windows/s, and the targets (LeRobot's loading left out here: no LeRobot interpreter)."""
    module = load_script(BENCH / "frames.py", "bench_frames")
    assert module.main(["--smoke", "--out", str(out), "--lerobot-python", str(out / "no-python")]) == 0
    payload = json.loads((out / "frames.json").read_text())
    codecs = {(r["field"], r["codec"].split(" ")[0]): r for r in payload["codecs"]}
    assert {("rgb", "png:level=1"), ("rgb", "jpeg:quality=90"), ("depth", "zstd:level=3")} <= set(codecs)
    for (field, codec), row in codecs.items():
        check_figures(row, {"bytes_per_frame": True, "vs_raw": True, "encode_fps_1core": True, "max_abs": False})
        lossless = forge_gpu_codecs()[codec.split(":")[0]].lossless
        assert (row["max_abs"] == 0) == lossless, (field, codec, row)
    assert [r["export"] for r in payload["lerobot"]] == ["lerobot h264", "lerobot av1"]
    assert payload["pipeline"][0]["recording"] == "raw" and payload["pipeline"][0]["efficiency"] > 0
    loaders = [r["loader"] for r in payload["windows"]]
    assert loaders[0] == "forge_gpu Windows rgb-d (loaded, decoded at open), raw" and loaders[-1] == "LeRobotDataset"
    assert all(r["windows_per_s"] > 0 for r in payload["windows"][:-1])
    assert "not measured" in payload["targets"][-1]["value"]
    assert all(isinstance(r["value"], float) for r in payload["targets"][:4])  # bytes: the default, jpeg x2, webp


def forge_gpu_codecs():
    from forge_gpu._src.core.codecs import CODECS

    return CODECS


def test_replay_smoke(out):
    """bench/replay.py --smoke gives replay's frames/s against collection's and the K-successful workflow's times."""
    payload = run_bench("replay", out)
    assert [r["mode"] for r in payload["throughput"]] == ["collect", "replay_state", "replay_actions"]
    for row in payload["throughput"]:
        check_figures(row, {"frames": True, "seconds": True, "frames_per_s": True, "vs_collect": True})
    assert [r["policy"] for r in payload["workflow"]] == ["expert", "expert", "random"]
    for row in payload["workflow"]:
        figures = {
            "max_steps": True,
            "episodes": True,
            "successful_K": False,
            "success_rate": False,
            "render_all_s": True,
        }
        figures |= {"state_only_s": True, "replay_s": True, "state_then_replay_s": True, "speedup": True}
        check_figures(row, figures)


def test_randomize_smoke(out):
    """bench/randomize.py --smoke gives the step time with and without randomization, and their ratio."""
    rows = run_bench("randomize", out)["rows"]
    assert [(r["task"], r["randomize"]) for r in rows] == [
        ("cartpole", "none"), ("cartpole", "physics"), ("reach", "none"), ("reach", "physics"), ("reach", "visual")
    ]  # fmt: skip
    for row in rows:
        check_figures(row, STEPPING | {"vs_none": True})


def test_push_expert_smoke(out):
    """bench/push_expert.py --smoke counts each env's first episode for the expert and the random policy."""
    rows = run_bench("push_expert", out)["rows"]
    assert [r["policy"] for r in rows] == ["expert", "random"]
    for row in rows:
        assert row["episodes"] == row["num_envs"] == 4 and 0 <= row["successes"] <= row["episodes"]
        check_figures(row, {"success_rate": False, "mean_steps": True, "seconds": True})


def test_durability_smoke(out):
    """bench/durability.py --smoke gives rows/s at both durability levels, the syncs made and the ratio."""
    rows = run_bench("durability", out)["rows"]
    assert [(r["shape"], r["durability"]) for r in rows] == [
        ("short", "process"), ("short", "machine"), ("images", "process"), ("images", "machine")
    ]  # fmt: skip
    for row in rows:
        check_figures(row, {"rows_per_s": True, "episodes_per_s": True, "mb_per_s": True, "vs_process": True})
        assert (row["syncs"] > 0) == (row["durability"] == "machine"), row


def test_curate_smoke(out):
    """bench/curate.py --smoke gives every curation call's episodes/s and MB/s and its copy reference."""
    rows = {r["figure"]: r for r in run_bench("curate", out)["rows"]}
    assert set(rows) == {"select_values", "select_index", "select_all", "merge_two", "split_0.1"}
    figures = ["episodes_in", "episodes_out", "seconds", "episodes_per_s", "mb_out", "mb_per_s", "copy_mb_per_s"]
    for row in rows.values():
        check_figures(row, dict.fromkeys([*figures, "vs_copy"], True))
    assert rows["select_all"]["episodes_out"] == rows["select_all"]["episodes_in"]
    assert rows["merge_two"]["episodes_out"] == 2 * rows["select_all"]["episodes_in"]


def test_report_smoke(out):
    """bench/report.py --smoke gives the report's time, warm and cold, its page size and its gallery for a camera run
    and a many-episode run."""
    rows = run_bench("report", out)["rows"]
    assert [r["run"] for r in rows] == ["camera", "episodes"]
    figures = {"run_mb": True, "episodes": True, "report_s": True, "cold_report_s": True, "html_kb": True}
    for row in rows:
        check_figures(row, figures | {"gallery": True, "episodes_per_s": True})


def test_taskfile_smoke(out):
    """bench/taskfile.py --smoke gives steps/s of every shipped task file, the ant's and cartpole's hooks alone, and
    each robot's policies on its reward, term by term."""
    result = run_bench("taskfile", out)
    assert [row["task"] for row in result["rows"]] == ["ant", "cartpole", "quadruped", "humanoid"]
    for row in result["rows"]:
        check_figures(row, {"env_steps_per_s": True})
    assert [(h["task"], h["num_envs"]) for h in result["hooks"]] == [("ant", 4), ("cartpole", 4)]
    for h in result["hooks"]:
        check_figures(h, {"apply_action_us": True, "reset_worlds_us": True, "observe_us": True, "total_us": True})
    policies = [(p["task"], p["policy"]) for p in result["policies"]]
    assert policies == [("quadruped", "random"), ("quadruped", "expert"), ("quadruped", "hold_pose"),
                        ("humanoid", "random"), ("humanoid", "expert")]  # fmt: skip
    for p in result["policies"]:
        assert math.isfinite(p["reward_per_step"])
        assert p["terms_per_step"].startswith("track_lin_vel_heading" if p["task"] == "quadruped" else "alive")


def test_imitation_smoke(out):
    """bench/imitation.py --smoke: behaviour cloning at two demo counts and a DAgger round from the first, each with
    its expert-labelled steps (the round's: its demos' and its labelled rollouts'), training figures and the success
    of both chunk executions inside its Wilson interval; and the targets' verdict."""
    pytest.importorskip("torch")
    payload = run_bench("imitation", out)
    rows = payload["rows"]
    first = [(r["method"], r["demos"], r["rollouts"]) for r in rows[:3]]
    assert first == [("bc", 4, 0), ("bc", 6, 0), ("dagger", 4, 2)], first
    for row in rows:
        check_figures(row, {"labelled_steps": True, "windows": True, "train_s": True, "final_loss": False})
        assert row["windows"] == row["labelled_steps"], row  # a padded window per labelled transition
        for execution in ("open_loop", "ensemble"):
            rate = row[f"{execution}_success_at_end"]
            assert row[f"{execution}_success_at_end_low"] <= rate <= row[f"{execution}_success_at_end_high"], row
            check_figures(row, {f"{execution}_eval_s": True, f"{execution}_length": True})
    bc, dagger = rows[0], rows[2]
    assert bc["labelled_steps"] < dagger["labelled_steps"] <= bc["labelled_steps"] + 2 * 20  # max_steps 20
    assert isinstance(payload["verdict"]["dagger_won"], bool) and payload["verdict"]["text"]


def test_imitation_smoke_with_the_experts_own_chunks(tmp_path):
    """bench/imitation.py --smoke --label-steps expert: a DAgger round's rollout frames (every second one) labelled
    with the expert's chunk rolled forward from them, each counted as horizon (8) expert calls; with segment windows,
    more windows than the demos' transitions and the labelled frames together."""
    pytest.importorskip("torch")
    module = load_script(BENCH / "imitation.py", "bench_imitation_expert")
    flags = ["--label-steps", "expert", "--label-every", "2", "--segment-windows", "--name", "chunks"]
    assert module.main(["--smoke", "--out", str(tmp_path), *flags]) == 0
    rows = json.loads((tmp_path / "chunks.json").read_text())["rows"]
    bc, dagger = rows[0], rows[2]
    assert (bc["method"], dagger["method"], bc["demos"], dagger["demos"]) == ("bc", "dagger", 4, 4)
    calls = dagger["labelled_steps"] - bc["labelled_steps"]
    frames = calls // 8
    assert calls == 8 * frames and 0 < frames <= 2 * 10, calls  # 2 rollouts of at most 20 steps, t % 2 == 0
    assert dagger["windows"] > bc["windows"] + frames, (bc, dagger)
    check_figures(dagger, {"open_loop_eval_s": True, "train_s": True})


def test_imitation_takeover_gate_hands_the_expert_a_set_number_of_steps_where_the_learner_departs():
    """bench/imitation.py's Takeover: a learner whose action is far from the expert's label in two of four worlds
    (the others copy the label) is replaced by the label in those two for exactly --takeover-steps steps, then acts
    again until its averaged gap crosses the threshold anew; the copying worlds are never taken over."""
    torch = pytest.importorskip("torch")
    import warp as wp

    module = load_script(BENCH / "imitation.py", "bench_imitation_takeover_gate")
    env = forge_gpu.sim.make("push", num_envs=4, device="cpu", label="expert", **{"params.render": False})
    env.reset()
    label = wp.to_torch(env.observation[module.LABEL])
    learner = torch.zeros_like(label)

    def inner(observation=None):
        learner.copy_(label)
        learner[:2] += 1.0  # one action scale off in every joint: a gap of 1 per step
        return wp.from_torch(learner)

    gate = module.Takeover(env, inner, np.ones(4, np.float32), gap=0.5, steps=3)
    acted = []
    for _ in range(12):
        action = wp.to_torch(gate()).clone()
        acted.append((action == label).all(-1).tolist())
        env.step(action.numpy())
    expert_rows = [[a[0], a[1]] for a in acted]
    # the average (weight 0.2) first exceeds 0.5 on the 4th step (0.2, 0.36, 0.49, 0.59), then 3 expert steps,
    # the average restarted at 0: 4 more learner steps, and so on
    expected = [False] * 3 + [True] * 3 + [False] * 3 + [True] * 3
    assert [row[0] for row in expert_rows] == expected and [row[1] for row in expert_rows] == expected, acted
    assert all(a[2] and a[3] for a in acted)  # the copying worlds' actions equal the label, never a takeover


def test_imitation_smoke_with_takeovers(tmp_path):
    """bench/imitation.py --smoke --label-steps takeover: the DAgger round's labelled steps beyond its demos are the
    rollout frames the expert drove (the recorded action equals its clipped label), counted here from the run."""
    pytest.importorskip("torch")
    module = load_script(BENCH / "imitation.py", "bench_imitation_takeover")
    work = tmp_path / "imitation-work"  # --smoke's runs, beside its results
    flags = ["--label-steps", "takeover", "--takeover-gap", "0.05", "--name", "takeover"]
    assert module.main(["--smoke", "--out", str(tmp_path), *flags]) == 0
    rows = json.loads((tmp_path / "takeover.json").read_text())["rows"]
    bc, dagger = rows[0], rows[2]
    spec = forge_gpu.reading.open_run(work / "dagger-1").manifest["env_spec"]
    low, high = np.array(spec["action_low"], np.float32), np.array(spec["action_high"], np.float32)
    driven = sum(
        int(np.all(e.action == np.clip(e.obs[module.LABEL], low, high), -1).sum())
        for e in forge_gpu.reading.read_episodes(work / "dagger-1")
    )
    assert 0 < driven == dagger["labelled_steps"] - bc["labelled_steps"], (driven, bc, dagger)
    assert dagger["windows"] == dagger["labelled_steps"], dagger  # a window at every labelled frame


def test_imitation_smoke_on_lift(tmp_path):
    """bench/imitation.py --task configs/lift.toml --smoke: behaviour cloning alone (lift's expert keeps its phase per
    world, so DAgger is refused in one line), the policy reading lift's float32 vector fields (no reward terms, no
    images), written to imitation-lift.json; push's fields stay the four it always read."""
    torch = pytest.importorskip("torch")
    module = load_script(BENCH / "imitation.py", "bench_imitation_lift")
    lift = str(BENCH.parent / "configs" / "lift.toml")
    with pytest.raises(SystemExit):
        module.main(["--task", lift, "--dagger-rounds", "1", "--out", str(tmp_path)])
    assert not (tmp_path / "imitation-lift.json").exists()
    assert module.main(["--task", lift, "--smoke", "--out", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "imitation-lift.json").read_text())
    assert payload["settings"]["fields"] == ["proprio", "cube_pose"], payload["settings"]
    assert [(r["method"], r["demos"]) for r in payload["rows"]] == [("bc", 4), ("bc", 6)]
    checkpoint = torch.load(payload["rows"][0]["checkpoint"], weights_only=False)
    assert checkpoint["fields"] == ["proprio", "cube_pose"] and checkpoint["inputs"] == 2 * (21 + 7)
    push = {"observation": {"time": {"shape": [], "dtype": "float32"}, "success": {"shape": [], "dtype": "bool"}}}
    for name, size in zip(module.FIELDS, (11, 7, 6, 3), strict=True):
        push["observation"][name] = {"shape": [size], "dtype": "float32"}
    push["observation"]["expert_action"] = {"shape": [4], "dtype": "float32"}
    push["labels"] = {"expert_action": "expert"}
    assert module.policy_fields(push) == module.FIELDS


def test_imitation_mixture_head_holds_two_modes():
    """bench/imitation.py's --head gmm: the padded steps do not enter the likelihood; fit to chunks that are +1 or -1
    at random for the same observation, the policy executes one of the two (the most probable component's mean),
    where the squared-error head averages them to about 0."""
    torch = pytest.importorskip("torch")
    module = load_script(BENCH / "imitation.py", "bench_imitation_gmm")
    horizon, actions, mixtures = 4, 2, 3
    torch.manual_seed(0)
    out = torch.randn(5, module.head_outputs("gmm", horizon * actions, mixtures))
    y, mask = torch.randn(5, horizon, actions), torch.ones(5, horizon, dtype=torch.bool)
    mask[:, 2:] = False
    changed = y.clone()
    changed[:, 2:] += 100.0  # only the padded steps differ
    loss = module.mixture_nll(out, y, mask, mixtures)
    assert torch.isfinite(loss) and torch.equal(loss, module.mixture_nll(out, changed, mask, mixtures))
    assert not torch.equal(loss, module.mixture_nll(out, y, torch.ones_like(mask), mixtures))

    sizes = {"proprio": 3, "cube_pose": 2, "cube_velocity": 1, "goal_position": 1}  # 7 inputs a frame
    x = torch.randn(8, 2 * sum(sizes.values())).repeat(64, 1)  # 8 observations, each seen 64 times
    target = torch.tensor([1.0, -1.0]).repeat_interleave(256).view(512, 1, 1).expand(-1, horizon, actions)
    executed = {}
    for head in ("mse", "gmm"):
        model = module.build_model(x.shape[1], module.head_outputs(head, horizon * actions, mixtures), 32)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(300):
            if head == "gmm":
                loss = module.mixture_nll(model(x), target, torch.ones(512, horizon, dtype=torch.bool), mixtures)
            else:
                loss = (model(x).view(-1, horizon, actions) - target).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        zeros = {"center": torch.zeros(7), "scale": torch.ones(7)}
        checkpoint = {"model": model.state_dict(), "inputs": x.shape[1], "hidden": 32, "history": 2, "head": head,
                      "mixtures": mixtures, "horizon": horizon, "actions": actions, **zeros,
                      "action_center": torch.zeros(actions), "action_scale": torch.ones(actions)}  # fmt: skip
        policy = module.Chunker(checkpoint, "cpu")
        frames = x[:64].view(64, 2, 7)
        observation, at = {}, 0
        for field, size in sizes.items():
            observation[field] = frames[:, :, at : at + size]
            at += size
        executed[head] = policy(observation)
        assert executed[head].shape == (64, horizon, actions)
    assert executed["mse"].abs().mean() < 0.5, executed["mse"]
    assert (executed["gmm"].abs() - 1.0).abs().max() < 0.25, executed["gmm"]


def test_grasp_smoke(out):
    """bench/grasp.py --smoke: lift's rates state only and with both cameras, random and expert, each from a
    recorded collection; and the overflow counts over whole episodes, none dropped at the shipped settings."""
    payload = run_bench("grasp", out)
    rows = payload["rows"]
    assert {(r["policy"], r["mode"]) for r in rows} == {(p, m) for p in ("random", "expert") for m in ("state", "rgbd")}
    for row in rows:
        check_figures(row, {"num_envs": True, "steps": True, "env_steps_per_s": True, "loop_env_steps_per_s": True})
        check_figures(row, {"vs_state": True, "mb_written": True, "dropped_steps": False})
        assert row["cameras"] == (2 if row["mode"] == "rgbd" else 0), row
    for o in payload["overflow"]:
        assert o["episodes"] == o["num_envs"] and o["env_steps"] > 0 and o["dropped_env_steps"] == 0, o
        assert o["nconmax"] == 128 and o["njmax"] == 512, o
    assert {o["policy"] for o in payload["overflow"]} == {"random", "expert"}


def test_ppo_smoke(tmp_path):
    """bench/ppo.py --smoke: two PPO iterations a task through rsl_rl, bare stepping and a recorded training measured
    beside it, the saved policy scored through the policy loader against the task's expert; every rate finite and
    positive, the recorded run verified."""
    pytest.importorskip("rsl_rl", reason="bench/ppo.py needs the rl extra (rsl-rl-lib)")
    module = load_script(BENCH / "ppo.py", "bench_ppo")
    assert module.main(["--smoke", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "ppo_smoke.json").read_text())["rows"]
    assert [row["task"] for row in rows] == ["cartpole", "ant"]
    rates = ["train_env_steps_per_s", "rollout_env_steps_per_s", "bare_env_steps_per_s", "train_seconds"]
    for row in rows:
        check_figures(row, {key: True for key in rates} | {"iterations": True, "env_steps": True})
        check_figures(row, {"eval_length_ppo": True, "eval_length_expert": True, "recorded_episodes": True})
        assert row["iterations"] == 2 and row["env_steps"] % (row["envs"] * row["iterations"]) == 0
        assert math.isfinite(row["return_reached"]) and math.isfinite(row["eval_return_ppo"])
        assert row["recorded_verify"] == "ok"


def test_task_file_ratio_smokes(out):
    """bench/arm_files.py and bench/robotfiles.py --smoke: each file task against the task it replaced (reach and
    push against the frozen code references, the quadruped and humanoid on robot files against one file), every
    rate finite and positive and the ratio theirs."""
    arm = run_bench("arm_files", out)["rows"]
    assert [(r["task"], r["render"]) for r in arm] == [("reach", False), ("reach", True), ("push", False),
                                                       ("push", True)]  # fmt: skip
    for row in arm:
        check_figures(row, {"code_steps_per_s": True, "file_steps_per_s": True, "ratio": True})
        assert row["ratio"] == pytest.approx(row["file_steps_per_s"] / row["code_steps_per_s"])
    robots = run_bench("robotfiles", out)["rows"]
    assert {r["task"] for r in robots} == {"quadruped", "humanoid"}
    for row in robots:
        check_figures(row, {"split_env_steps_per_s": True, "single_env_steps_per_s": True, "ratio": True})
        assert row["ratio"] == pytest.approx(row["split_env_steps_per_s"] / row["single_env_steps_per_s"])


def test_container_smoke(out):
    """bench/container.py --smoke: every layout in every container and compression, its write and read rates, bytes
    on disk against the uncompressed bytes (a compression smaller than its container without), and the raw container
    as each layout's reference (ratio 1)."""
    rows = run_bench("container", out)["rows"]
    assert {r["layout"] for r in rows} == {"cartpole", "reach64"}
    for row in rows:
        check_figures(row, {"rows_per_s": True, "read_rows_per_s": True, "bytes_on_disk": True, "size_ratio": True})
        assert row["bytes_on_disk"] == pytest.approx(row["size_ratio"] * row["uncompressed_bytes"]), row
        if row["container"] == "raw":
            assert row["vs_raw"] == 1.0 and row["size_ratio"] == 1.0, row
        if row["compression"] != "none":  # smaller than the same container uncompressed
            plain = next(
                r
                for r in rows
                if (r["layout"], r["container"], r["compression"]) == (row["layout"], row["container"], "none")
            )
            assert row["bytes_on_disk"] < plain["bytes_on_disk"], (row, plain)


def test_evaluate_smoke(out):
    """bench/evaluate.py --smoke: evaluate's loop against plain stepping, per task, with the share of its steps that
    advanced a counted episode."""
    rows = run_bench("evaluate", out)["rows"]
    assert [r["task"] for r in rows] == ["reach", "push"]
    for row in rows:
        check_figures(row, {"plain_env_steps_per_s": True, "evaluate_env_steps_per_s": True, "ratio": True})
        assert 0.0 < row["useful_share"] <= 1.0, row
        assert row["ratio"] == pytest.approx(row["evaluate_env_steps_per_s"] / row["plain_env_steps_per_s"]), row


def test_grasp_condim_smoke(out):
    """bench/grasp_condim.py --smoke: lift stepped with the pads' contact dimension 3, 4 and 6, each against 3."""
    rows = run_bench("grasp_condim", out)["rows"]
    assert [(r["pad_condim"], r["solver_condim"]) for r in rows] == [(3, 3), (4, 4), (6, 6)]
    assert rows[0]["ratio"] == 1.0
    for row in rows:
        check_figures(row, {"env_steps_per_s": True, "ratio": True, "steps": True})


def test_relabel_smoke(out):
    """bench/relabel.py --smoke: push stepped plain, with the expert's labels, and with labels and the per-episode
    mix, each unrecorded and recorded, against the plain row of its mode."""
    payload = run_bench("relabel", out)
    rows = payload["rows"]
    (share,) = payload["own_share"]
    check_figures(share, dict.fromkeys(["own_share", "plain_step_ms", "label_step_ms", "label_step_ratio"], True))
    assert [(r["mode"], r["variant"]) for r in rows] == [
        (mode, variant) for mode in ("no recording", "recorded") for variant in ("plain", "label", "label+mix")
    ]
    for row in rows:
        check_figures(row, {"env_steps_per_s": True, "ratio": True, "ratio_median": True})
        plain = next(r for r in rows if r["mode"] == row["mode"] and r["variant"] == "plain")
        assert row["ratio"] == pytest.approx(row["env_steps_per_s"] / plain["env_steps_per_s"]), row
        assert row["ratio_low"] <= row["ratio_median"] <= row["ratio_high"], row


def test_imitation_smoke_from_pixels(tmp_path):
    """bench/imitation.py --smoke --obs rgb: a visuomotor policy (front camera and proprio, no object or goal state)
    trained a few steps from WindowMapDataset batches decoded in a DataLoader worker, with the loader's wait share
    and windows/s, and scored again under a --shift (held-out cube colours); a DAgger round from pixels trains on the
    demos' actions and the rollouts' expert labels together (each batch gathers each run's windows with its own
    target); its checkpoint is a MODULE:FACTORY policy that acts through evaluate at 2 envs rendering the camera; a
    camera the task does not render is refused in one line before anything runs."""
    torch = pytest.importorskip("torch")
    module = load_script(BENCH / "imitation.py", "bench_imitation_pixels")
    with pytest.raises(SystemExit) as refused:
        module.main(["--smoke", "--obs", "rgb", "--cameras", "wrist", "--out", str(tmp_path), "--name", "pixels"])
    assert refused.value.code == 2 and not (tmp_path / "pixels.json").exists()
    held_out = ["--shift", "held_out", 'randomize.cube_color={low = 2, high = 3, dist = "integer"}']
    with pytest.raises(SystemExit) as refused:  # the auxiliary loss reads the cameras' keypoints
        module.main(["--smoke", "--aux", "1", "--out", str(tmp_path), "--name", "pixels"])
    assert refused.value.code == 2 and not (tmp_path / "pixels.json").exists()
    args = ["--smoke", "--obs", "rgb", "--aux", "1", "--out", str(tmp_path), "--name", "pixels", *held_out]
    assert module.main(args) == 0
    payload = json.loads((tmp_path / "pixels.json").read_text())
    assert payload["settings"]["shift"] == {
        "held_out": {"randomize.cube_color": {"low": 2, "high": 3, "dist": "integer"}}
    }
    assert payload["settings"]["fields"] == ["proprio"] and payload["settings"]["cameras"] == ["front"]
    assert [(r["method"], r["demos"]) for r in payload["rows"]] == [("bc", 4), ("bc", 6), ("dagger", 4)]
    work = tmp_path / "imitation-work"
    window = {"history": 2, "horizon": 8, "pad": True, "observation_keys": ["proprio", "rgb"]}
    demos = forge_gpu.reading.WindowMapDataset(work / "demos-4", **window)
    rollouts = forge_gpu.reading.WindowMapDataset(work / "dagger-1", target="expert_action", **window)
    assert payload["rows"][2]["windows"] == len(demos) + len(rollouts) == payload["rows"][0]["windows"] + len(rollouts)
    both = module.RunWindows([demos, rollouts])[[len(demos) + 1, 0, len(demos)]]  # run by run, in order within each
    for key in ("action", "action_is_pad", "obs/rgb", "obs/proprio"):
        assert torch.equal(both[key], torch.cat([demos[[0]][key], rollouts[[1, 0]][key]])), key
    executed = forge_gpu.reading.WindowMapDataset(work / "dagger-1", **window)  # the learner's own actions
    assert not torch.equal(rollouts[[0, 1]]["action"], executed[[0, 1]]["action"])
    for row in payload["rows"]:
        check_figures(row, {"windows": True, "train_s": True, "windows_per_s": True, "first_batch_s": True})
        assert 0.0 <= row["wait_share"] <= 1.0 and row["workers"] == 1, row
        located = [f"located_{f}_m" for f in ("cube_pose", "cube_velocity", "goal_position")]  # push's object state
        assert row["aux"] == 1.0 and all(0.0 < row[k] < 1.0 for k in located), row
        assert row["windows"] == row["labelled_steps"], row  # a padded window per demo transition
        low, high = row["held_out_success_at_end_low"], row["held_out_success_at_end_high"]
        assert low <= row["held_out_success_at_end"] <= high and row["held_out_eval_s"] > 0, row
    path = payload["rows"][0]["checkpoint"]
    checkpoint = torch.load(path, weights_only=False)
    assert checkpoint["cameras"] == {"front": ["rgb"]} and checkpoint["image_size"] == 32, checkpoint["cameras"]
    assert not [k for k in checkpoint["model"] if k.startswith("aux.")]  # the auxiliary head stays in training
    env = forge_gpu.sim.make("push", num_envs=2, device="cpu", max_steps=10, **{"params.image_size": 32})
    policy = forge_gpu.sim.load_policy("imitation:make_policy", env, {"checkpoint": path}, steps_per_chunk=4)
    evaluation = forge_gpu.recording.evaluate(env, policy, episodes=2)
    assert evaluation.episodes == 2 and ((evaluation.lengths > 0) & (evaluation.lengths <= 10)).all(), evaluation
    # --demos-from: the demos copied, not recorded again, where their config is this run's; refused where not
    copied = ["--smoke", "--obs", "rgb", "--demos-from", str(work / "demos")]
    copied += ["--out", str(tmp_path / "copied"), "--name", "copied"]  # --smoke works in OUT/imitation-work
    with pytest.raises(SystemExit) as refused:
        module.main([*copied, "--set", "max_steps=21"])
    assert refused.value.code == 2 and not (tmp_path / "copied" / "copied.json").exists()
    assert module.main(copied) == 0
    again = json.loads((tmp_path / "copied" / "copied.json").read_text())
    assert again["collection"] == {"demos_from": str(work / "demos")}
    assert [r["windows"] for r in again["rows"]] == [r["windows"] for r in payload["rows"]]  # the same demos
    loaded = ["--smoke", "--obs", "rgb", "--demos-from", str(work / "demos"), "--loader", "loaded"]
    assert module.main([*loaded, "--out", str(tmp_path / "loaded"), "--name", "loaded"]) == 0
    rows = json.loads((tmp_path / "loaded" / "loaded.json").read_text())["rows"]  # every frame decoded at open
    assert [r["loader"] for r in rows] == ["loaded"] * 3 and [r["loader"] for r in again["rows"]] == ["mapped"] * 3
    for mapped, row in zip(again["rows"], rows, strict=True):  # the same batches: the same training
        assert (row["windows"], row["final_loss"]) == (mapped["windows"], mapped["final_loss"]), row
    state = ["--smoke", "--demos-from", str(work / "demos"), "--out", str(tmp_path / "state"), "--name", "state"]
    assert module.main([*state, "--set", "params.image_size=32"]) == 0  # the rendered demos' state columns
    beside = json.loads((tmp_path / "state" / "state.json").read_text())
    assert beside["settings"]["fields"] == ["proprio", "cube_pose", "cube_velocity", "goal_position"]
    assert [r["windows"] for r in beside["rows"]] == [r["windows"] for r in payload["rows"]]


def test_imitation_random_crop_takes_each_windows_own_offset():
    """bench/imitation.py's pixel_input: rgb and depth normalized per channel and cropped at each window's own
    offset (the same in each of its frames), against numpy slicing; no offsets: the centre crop."""
    torch = pytest.importorskip("torch")
    module = load_script(BENCH / "imitation.py", "bench_imitation_crop")
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (3, 2, 8, 8, 3), dtype=np.uint8)
    depth = rng.random((3, 2, 8, 8), dtype=np.float32)
    center, scale = np.array([1, 2, 3, 0.5], np.float32), np.array([2, 4, 8, 0.25], np.float32)
    expected = (np.concatenate([rgb, depth[..., None]], -1) - center) / scale  # [B, T, H, W, C]
    frames = [torch.from_numpy(rgb), torch.from_numpy(depth)]
    rows, cols = np.array([0, 1, 2]), np.array([2, 0, 1])
    offsets = (torch.from_numpy(rows), torch.from_numpy(cols))
    got = module.pixel_input(frames, torch.from_numpy(center), torch.from_numpy(scale), 6, offsets).numpy()
    assert got.shape == (3, 2, 4, 6, 6)
    for b in range(3):
        window = expected[b, :, rows[b] : rows[b] + 6, cols[b] : cols[b] + 6].transpose(0, 3, 1, 2)
        np.testing.assert_allclose(got[b], window, rtol=1e-6)
    centred = module.pixel_input(frames, torch.from_numpy(center), torch.from_numpy(scale), 6).numpy()
    np.testing.assert_allclose(centred, expected[:, :, 1:7, 1:7].transpose(0, 1, 4, 2, 3), rtol=1e-6)


def test_generate_smoke(tmp_path):
    """bench/generate.py --smoke on place: a generation row (the yield of its attempts, per subtask the attempts that
    reached it) made without the held body's correction, and behaviour cloning on the generated run alone (the mixture
    head floored at -3; a floor out of bounds refused)."""
    module = load_script(BENCH / "generate.py", "bench_generate")
    assert module.without_held("place")["params.subtasks"][1] == {"name": "carry_and_release", "object": "region"}
    args = ["--smoke", "--tasks", "place", "--without-held", "--bc-runs", "generated", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as refused:  # the mixture's floor outside bench/imitation.py's bounds
        module.main([*args, "--bc-log-std-min", "2"])
    assert refused.value.code == 2 and not (tmp_path / "generate.json").exists()
    assert module.main(args) == 0
    payload = json.loads((tmp_path / "generate.json").read_text())
    assert (payload["bc_head"], payload["bc_log_std_min"]) == ("gmm", -3.0)
    (row,) = payload["rows"]
    assert row["task"] == "place" and row["held"] is False and row["episodes"] == 4, row
    assert 0.0 < row["yield"] <= 1.0 and row["attempts"] >= 4 and row["yield"] == pytest.approx(4 / row["attempts"])
    assert row["reached_grasp"] >= row["reached_carry_and_release"] == pytest.approx(row["yield"])
    assert [(r["trained_on"], r["seed"]) for r in payload["bc_rows"]] == [("generated", 0)]


def test_imitation_feed_located_puts_the_detached_positions_into_the_policy(tmp_path):
    """bench/imitation.py --feed-located: the aux head's positions go into the policy's MLP (changing them changes
    the actions), the actions' loss gives the head no gradient (the auxiliary loss alone trains it), and the saved
    policy keeps the head: ImageChunker rebuilt from the checkpoint acts as the trained network. Without --aux it is
    refused in one line before anything runs."""
    torch = pytest.importorskip("torch")
    module = load_script(BENCH / "imitation.py", "bench_imitation_feed")
    with pytest.raises(SystemExit) as refused:
        module.main(["--smoke", "--obs", "rgb", "--feed-located", "--out", str(tmp_path), "--name", "feed"])
    assert refused.value.code == 2 and not (tmp_path / "feed.json").exists()
    torch.manual_seed(0)
    model = module.build_visual_model(1, 3, 5, 2, 8 * 4, 16, aux=9, feed=True)
    pixels, state = [torch.randn(4, 2, 3, 16, 16)], torch.randn(4, 2, 5)
    out, guess = model(pixels, state, aux=True)
    assert out.shape == (4, 32) and guess.shape == (4, 2, 9)
    out.square().sum().backward()  # the actions' loss alone
    assert all(p.grad is None or not p.grad.any() for p in model.aux.parameters())
    assert any(p.grad is not None and p.grad.any() for p in model.encoders.parameters())
    with torch.no_grad():  # the positions are an input of the MLP: moving the head's output moves the actions
        model.aux[-1].bias += 1.0
        assert not torch.allclose(model(pixels, state), out)
    checkpoint = {
        "model": model.state_dict(), "located": 9, "history": 2, "horizon": 8, "actions": 4, "proprio": 5,
        "hidden": 16, "fields": ["proprio"], "cameras": {"front": ["rgb"]}, "crop": 16,
        "center": np.zeros(5, np.float32), "scale": np.ones(5, np.float32),
        "action_center": np.zeros(4, np.float32), "action_scale": np.ones(4, np.float32),
        "pixel_center": [np.zeros(3, np.float32)], "pixel_scale": [np.ones(3, np.float32)],
    }  # fmt: skip
    chunker = module.ImageChunker(checkpoint, "cpu")
    frames = torch.randint(0, 256, (4, 2, 16, 16, 3), dtype=torch.uint8)
    acted = chunker({"proprio": state, "rgb": frames})
    with torch.no_grad():
        expected = model([frames.float().permute(0, 1, 4, 2, 3)], state).view(4, 8, 4)
    torch.testing.assert_close(acted, expected)
