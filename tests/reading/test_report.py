"""forge-gpu report: the page's figures against the recorded episodes, its pictures bounded, the page rendered in a
real browser (headless Chromium: every section, every image decoded, no error), a dataset's instructions apart; and
the recorder's progress table in run.json that the page draws."""

import base64
import io
import json
import re
import time
import types

import numpy as np
import pytest
from helpers.scripts import TOOLS, load_script
from helpers.synthetic import LOSSLESS, SyntheticSim, make_batches, record, synthetic_description

import forge_gpu
from forge_gpu._src.core.episode import episode_stem
from forge_gpu._src.reading.charts import chart, histogram
from forge_gpu._src.reading.inspection import format_report
from forge_gpu._src.reading.report import HOLD_MS, MAX_FRAMES, MAX_SIDE, SECTIONS, animation, key_frame
from forge_gpu._src.recording.progress import PROGRESS_COLUMNS, ProgressSeries
from forge_gpu.cli import main
from forge_gpu.recording import PackedRecorder, write_dataset_manifest

browser = load_script(TOOLS / "browser.py", "tools_browser")  # headless Chromium (tools/browser.py)
chromium, load = browser.chromium, browser.load
needs_chromium = pytest.mark.skipif(chromium() is None, reason="no chromium: .ci/run installs it (apt-get)")


def camera_env(instruction=None):
    env = synthetic_description(num_envs=4, max_steps=12, images=True, state=True, params=True)
    env.spec["has_success"] = True
    env.spec["observation"]["rgb"]["shape"] = [16, 16, 3]
    env.spec["observation"]["depth"]["shape"] = [16, 16]
    if instruction:
        env.spec["instruction"] = instruction
    return env


@pytest.fixture(scope="module")
def camera_run(synthetic_run):
    """A packed run with a camera, state, params and success: its directory and the episodes it holds."""
    directory, sim = synthetic_run(camera_env(), 60, seed=3, end_prob=0.15, recorder=PackedRecorder)
    return directory, sim.completed


@pytest.fixture(scope="module")
def camera_report(camera_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "report.html"
    return forge_gpu.reading.report(camera_run[0], out), out


def images(text: str) -> list:
    from PIL import Image

    uris = re.findall(r'src="data:image/webp;base64,([^"]+)"', text)
    return [Image.open(io.BytesIO(base64.b64decode(u))) for u in uris]


def test_report_figures_are_the_runs(camera_run, camera_report):
    """The page's counts, success rate and mean return are the recorded episodes'; the gallery holds the best and
    worst by return, none twice; every section is there."""
    directory, completed = camera_run
    result, out = camera_report
    text = out.read_text()
    returns = {key: float(m["reward"].astype(np.float64).sum()) for key, m in completed.items()}
    success = np.mean([m["terminated"][-1] for m in completed.values()])
    assert result["episodes"] == len(completed) and result["bytes"] == out.stat().st_size
    assert f"<b>{len(completed):,}</b>episodes" in text
    assert f"<b>{success:.1%}</b>success rate" in text
    assert f"<b>{np.mean(list(returns.values())):.4g}</b>mean return" in text
    assert all(f'<section id="{key}">' in text for key in SECTIONS)
    shown = re.findall(r'data-episode="env(\d+)-episode(\d+)"', text)
    assert len(shown) == len(set(shown)) == result["gallery"] == 8
    best = max(returns, key=returns.get)
    worst = min(returns, key=returns.get)
    kinds = re.findall(r'<span class="kind (\w+)">\w+</span> (\d+):(\d+)', text)
    assert ("best", str(best[0]), str(best[1])) in kinds and ("worst", str(worst[0]), str(worst[1])) in kinds
    failed = [(int(e), int(k)) for kind, e, k in kinds if kind == "failed"]
    assert failed and all(not completed[key]["terminated"][-1] for key in failed)
    assert "mass_scale" in text and 'data-chart="success-by-mass_scale"' in text  # the randomized values, binned
    assert 'data-chart="progress-episodes"' in text  # the recording over time, from run.json's progress


def test_report_pictures_are_bounded(camera_report):
    """Each gallery animation has at most MAX_FRAMES frames of at most MAX_SIDE pixels a side per panel (rgb beside
    depth): a long episode of large frames is cut down to that; and the page stays small."""
    result, out = camera_report
    shots = images(out.read_text())
    assert len(shots) == result["gallery"]
    for shot in shots:
        assert 2 <= shot.n_frames <= MAX_FRAMES
        assert shot.size == (2 * 16, 16)  # 16x16 frames are not shrunk
    assert result["bytes"] < 400_000
    from PIL import Image

    rng = np.random.default_rng(0)
    steps, side = 300, 150
    frames = {"rgb": rng.integers(0, 256, (steps + 1, side, side, 3), dtype=np.uint8)}
    frames["depth"] = rng.uniform(0.5, 2.0, (steps + 1, side, side)).astype(np.float32)
    episode = types.SimpleNamespace(
        steps=steps, obs={k: v[:-1] for k, v in frames.items()}, next={k: v[1:] for k, v in frames.items()}
    )
    factor = -(-side // MAX_SIDE)  # the smallest whole factor that brings 150 pixels within MAX_SIDE
    with Image.open(io.BytesIO(animation(episode, control_dt=0.02))) as shot:
        assert shot.n_frames == MAX_FRAMES and shot.size == (2 * (side // factor), side // factor)
        assert side // factor <= MAX_SIDE < side // (factor - 1)


@needs_chromium
def test_report_renders_in_chromium(camera_report, tmp_path_factory):
    """Headless Chromium loads the file from disk: the page's own check ran, no error and no console message, every
    section in order, every image decoded; a screenshot is kept for a person to look at."""
    _, out = camera_report
    shot = tmp_path_factory.mktemp("screenshot") / "report.png"
    page = load(out, screenshot=shot)
    assert page.checked and page.errors == [] and page.console == []
    assert page.sections == list(SECTIONS)
    assert len(page.images) == 8 and set(page.images.values()) == {"yes"}
    from PIL import Image

    with Image.open(shot) as picture:
        assert picture.size == (1200, 2400)
        assert np.asarray(picture.convert("L")).std() > 10  # not a blank page
    print(f"screenshot: {shot}")


@needs_chromium
def test_the_browser_check_catches_errors_and_broken_images(camera_report, tmp_path):
    """The same page with a failing script and an image that does not decode is caught: the check can fail."""
    _, out = camera_report
    broken = out.read_text().replace(
        '<pre id="page-errors">',
        '<script>notDefinedAnywhere();</script><img alt="broken" src="data:image/webp;base64,AAAA">'
        '<pre id="page-errors">',
    )
    (tmp_path / "broken.html").write_text(broken)
    page = load(tmp_path / "broken.html")
    assert page.checked and page.images["broken"] == "failed"
    assert any("notDefinedAnywhere" in e for e in page.errors) and any("broken" in e for e in page.errors)
    assert any("notDefinedAnywhere" in m for m in page.console)


def gallery_images(dom: str) -> list[dict]:
    """Each ``<img>`` of a page's gallery: its attributes (``alt``, ``data-frame``, ``src`` ...)."""
    gallery = re.search(r'<section id="gallery">(.*?)</section>', dom, re.S).group(1)
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', tag)) for tag in re.findall(r"<img [^>]*>", gallery)]


def nearest_frame(picture: np.ndarray, frames: np.ndarray) -> int:
    """The index of the frame of ``frames`` [F, H, W, 3] nearest ``picture`` [H, W, 3] (mean absolute difference)."""
    return int(np.abs(frames.astype(np.float64) - picture.astype(np.float64)).mean(axis=(1, 2, 3)).argmin())


@needs_chromium
def test_each_gallery_animation_opens_on_its_frame_of_highest_reward(camera_run, camera_report):
    """The page as Chromium rendered it: every gallery image names the frame it opens on, the one after its episode's
    step of highest reward (read from the run), and its first frame, held HOLD_MS, is that frame of the episode (the
    nearest of all its frames), then the episode plays from its start: what a still view of the page shows."""
    from PIL import Image

    directory, _ = camera_run
    _, out = camera_report
    page = load(out)
    assert page.checked and page.errors == [] and set(page.images.values()) == {"yes"}
    episodes = {episode_stem(e.env_id, e.episode_id): e for e in forge_gpu.reading.read_episodes(directory)}
    shown = gallery_images(page.dom)
    assert len(shown) == 8
    for image in shown:
        episode = episodes[image["alt"].split()[0]]
        frames = np.concatenate([episode.obs["rgb"], episode.next["rgb"][-1:]])  # frames 0..T
        key = int(np.argmax(episode.reward)) + 1
        assert int(image["data-frame"]) == key and image["data-decoded"] == "yes"
        with Image.open(io.BytesIO(base64.b64decode(image["src"].split(",", 1)[1]))) as shot:
            first = np.asarray(shot.convert("RGB"))[:, :16]  # the rgb panel (depth beside it)
            assert shot.info["duration"] == HOLD_MS  # (known once the frame is decoded)
            shot.seek(1)
            second = np.asarray(shot.convert("RGB"))[:, :16]
        assert nearest_frame(first, frames) == key
        assert nearest_frame(second, frames) == 0


def test_the_key_frame_and_the_gallery_frames_side(camera_run, tmp_path):
    """key_frame: the frame after the first step of highest reward, not-finite rewards never counted; animation
    refuses a first frame outside the episode; report's side sets the gallery frames' size and a bad one is refused
    in one line, nothing written."""
    assert key_frame(types.SimpleNamespace(reward=np.array([0.5, 2.0, 2.0, -1.0]))) == 2
    assert key_frame(types.SimpleNamespace(reward=np.array([1.0, np.nan, np.inf, 3.0]))) == 4
    assert key_frame(types.SimpleNamespace(reward=np.array([np.nan, np.nan]))) == 0
    frames = np.zeros((5, 16, 16, 3), np.uint8)
    episode = types.SimpleNamespace(steps=4, reward=np.zeros(4), obs={"rgb": frames[:-1]}, next={"rgb": frames[1:]})
    with pytest.raises(ValueError, match=r"first must be a frame of the episode, in \[0, 4\], got 5"):
        animation(episode, control_dt=0.02, first=5)
    directory, _ = camera_run
    forge_gpu.reading.report(directory, tmp_path / "small.html", gallery=1, side=8)
    with images((tmp_path / "small.html").read_text())[0] as shot:
        assert shot.size == (2 * 8, 8)  # 16-pixel frames halved
    for bad in (4, 600, 64.0, True):
        with pytest.raises(
            ValueError, match=f"side .* must be an integer in \\[8, 512\\], got {re.escape(repr(bad))}$"
        ):
            forge_gpu.reading.report(directory, tmp_path / "bad.html", side=bad)
    assert not (tmp_path / "bad.html").exists()


def test_report_side_on_the_command_line(camera_run, tmp_path, capsys):
    """forge-gpu report --side sets the gallery frames' size; a side outside [8, 512] exits 2 in one line naming
    the flag and writes nothing."""
    directory, _ = camera_run
    assert main(["report", str(directory), "--out", str(tmp_path / "small.html"), "--gallery", "1", "--side", "8"]) == 0
    with images((tmp_path / "small.html").read_text())[0] as shot:
        assert shot.size == (2 * 8, 8)  # 16-pixel frames halved
    capsys.readouterr()
    for bad in ("4", "600"):
        assert main(["report", str(directory), "--out", str(tmp_path / "bad.html"), "--side", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--side {bad}: must be in [8, 512]" in err[0], err
    assert not (tmp_path / "bad.html").exists()


def test_a_dataset_report_shows_each_instruction(tmp_path):
    """A dataset of two runs with different instructions and no camera: one row per instruction with its episodes,
    one identity row per run, and the gallery drawn as plots of proprio, action and reward."""
    counts = {}
    results = []
    for worker, instruction in enumerate(("open the drawer", "close the drawer")):
        env = synthetic_description(num_envs=3, max_steps=6)
        env.spec["instruction"] = instruction
        sim = SyntheticSim(env, seed=worker, end_prob=0.3)
        name = f"worker-{worker:03d}"
        record(tmp_path / "data" / name, env, make_batches(sim, 20 + 10 * worker), recorder=PackedRecorder)
        counts[instruction] = len(sim.completed)
        results.append(
            {"path": name, "run_id": name, "worker": worker, "device": "cpu", "status": "closed"}
            | {"episodes": len(sim.completed), "seed": worker, "error": None}
        )
    write_dataset_manifest(tmp_path / "data", results)
    result = forge_gpu.reading.report(tmp_path / "data", tmp_path / "data.html", gallery=1)
    text = (tmp_path / "data.html").read_text()
    assert result["episodes"] == sum(counts.values())
    for instruction, count in counts.items():
        assert re.search(f'<tr><td>#[12]</td><td>{instruction}</td><td class="n">{count}</td>', text)
    identity = re.search(r'<section id="identity">(.*?)</section>', text, re.S).group(1)
    assert identity.count("<td>worker-00") == 2
    assert "<img" not in text and 'data-chart="proprio"' in text and 'data-chart="action"' in text
    assert "No randomized parameters" in text and "No stats.json" not in text


def test_cli_report_and_its_bad_input(camera_run, tmp_path, capsys):
    """forge-gpu report writes the file and says its size; a bad --gallery or a path without a run is exit 2."""
    directory, _ = camera_run
    assert main(["report", str(directory), "--out", str(tmp_path / "r.html"), "--gallery", "1"]) == 0
    assert "wrote" in capsys.readouterr().out and (tmp_path / "r.html").stat().st_size > 0
    assert main(["report", str(directory), "--gallery", "99", "--out", str(tmp_path / "x.html")]) == 2
    assert "--gallery 99" in capsys.readouterr().err and not (tmp_path / "x.html").exists()
    assert main(["report", str(tmp_path / "none")]) == 2
    assert "not a run directory or dataset root" in capsys.readouterr().err


def test_run_json_keeps_the_recordings_progress(camera_run):
    """run.json's progress: the documented columns, time and counters never decreasing, the last row the totals
    that run.json states."""
    directory, completed = camera_run
    manifest = json.loads((directory / "run.json").read_text())
    progress = manifest["progress"]
    assert progress["columns"] == list(PROGRESS_COLUMNS) and progress["every_seconds"] >= 1.0
    rows = np.asarray(progress["rows"], np.float64)
    assert rows.shape[1] == len(PROGRESS_COLUMNS) and len(rows) >= 2
    assert (np.diff(rows[:, :5], axis=0) >= 0).all()
    last = dict(zip(PROGRESS_COLUMNS, progress["rows"][-1], strict=True))
    assert last["episodes"] == manifest["completed_episodes"] == len(completed)
    assert last["bytes"] == manifest["bytes_written"] and last["transitions"] == manifest["transitions"]
    assert last["backlog"] == 0


def test_progress_stays_bounded_and_even(monkeypatch):
    """A long recording keeps at most max_rows samples (and the one at close), evenly spread: when full, every other
    sample goes and the interval doubles."""
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    series = ProgressSeries(every=1.0, max_rows=8)
    for second in range(1000):
        for _ in range(3):  # several publishes a second: one sample
            clock[0] = second + 0.1
            series.sample(second, 10 * second, 100 * second, 0.5 * second, second % 4)
    clock[0] = 1000.1
    table = series.to_json(final=(1000, 10000, 100000, 500.0, 0))
    rows = np.asarray(table["rows"])
    assert len(rows) <= 9 and table["every_seconds"] > 100
    gaps = np.diff(rows[:-1, 0])
    assert gaps.max() <= 2 * gaps.min()  # evenly spread
    assert rows[-1].tolist() == [1000.1, 1000, 10000, 100000, 500.0, 0]
    with pytest.raises(ValueError, match="every"):
        ProgressSeries(every=0)


def test_a_run_without_episodes_still_reports(tmp_path):
    """A run that published no episode gets every section, each saying what it lacks."""
    env = synthetic_description(num_envs=2, max_steps=50)
    record(tmp_path / "empty", env, make_batches(SyntheticSim(env, seed=0, end_prob=0.0), 3), recorder=PackedRecorder)
    result = forge_gpu.reading.report(tmp_path / "empty", tmp_path / "empty.html")
    text = (tmp_path / "empty.html").read_text()
    assert result["episodes"] == 0 and result["gallery"] == 0
    assert all(f'<section id="{key}">' in text for key in SECTIONS)
    assert "no published episode" in text and "No published episode to show" in text


def test_chart_legends_hold_each_label_whole_below_the_plot():
    """Push's instructions are long and differ at their ends: each legend entry holds its whole label (they were cut to
    18 characters, so several read the same) in a list below the SVG, where it cannot cover a bar."""
    labels = [f"push the green cube to the blue square on the {side}" for side in ("left", "right", "middle")]
    figure = histogram({label: np.arange(5.0) + k for k, label in enumerate(labels)}, title="return per episode")
    svg, legend = figure.split("</svg>")
    assert not any(label in svg for label in labels)
    entries = re.findall(r"<li><i [^>]*></i>([^<]*)</li>", legend)
    assert entries == labels and legend.startswith('<ul class="legend"')


def test_an_all_zero_series_has_an_axis_from_zero():
    """A backlog that stays 0 was drawn on an axis from -1 to 1; values that are never negative start at 0."""
    ticks = re.findall(r'text-anchor="end">([^<]*)</text>', chart([{"x": [0.0, 1.0, 2.0], "y": [0, 0, 0]}]))
    assert ticks[0] == "0" and float(ticks[-1]) == 1.0 and not any(t.startswith("-") for t in ticks)
    ticks = re.findall(r'text-anchor="end">([^<]*)</text>', chart([{"x": [0.0, 1.0], "y": [-2.0, -2.0]}]))
    assert float(ticks[0]) < -2.0 < float(ticks[-1])  # a negative constant keeps an axis around it


def test_success_per_instruction_names_each_instructions_row():
    """The points stand at #1, #2, ... , the rows of the per-instruction table (the axis was a bare index)."""
    from forge_gpu._src.reading.report import episodes_section

    texts = ["pick the red block", "pick the blue block", "pick the green block"]
    instructions = np.array([texts[0]] * 6 + [texts[1]] * 4 + [texts[2]] * 2, dtype=object)  # the most common first
    episodes = {"steps": np.full(12, 5), "return": np.arange(12.0), "success": np.arange(12) % 2 == 0,
                "instruction": instructions.tolist(), "has_success": True}  # fmt: skip
    page = episodes_section({"episodes": episodes})
    figure = page[page.index('data-chart="success-per-instruction"') :]
    figure = figure[: figure.index("</figure>")]
    assert [f"#{k}" for k in (1, 2, 3)] == re.findall(r">(#\d)</text>", figure)
    assert "instruction (its row # in the table)" in figure
    for k, text in enumerate(texts, 1):
        assert f"<td>#{k}</td><td>{text}</td>" in page.replace(' class="n"', "")


@pytest.mark.parametrize("target", [None, 9])
def test_a_run_stopped_at_a_number_of_episodes_says_its_success_rate_counts_published_ones(tmp_path, target):
    """A run collect stopped at ``--episodes`` (run.json's episodes_target) that left episodes running: inspect and
    the report say its success rate counts the published episodes only, with the share left running, and name the
    evaluate command; a run stopped at a number of steps says nothing of it."""
    env = camera_env()
    recorder = PackedRecorder(tmp_path / "run", env, codecs=LOSSLESS)
    for observation, result in make_batches(SyntheticSim(env, seed=3, end_prob=0.15), 40):
        recorder.append(observation, result)
    if target is not None:
        recorder.note("episodes_target", target)
    recorder.close()
    published = len(forge_gpu.reading.open_run(tmp_path / "run"))
    running = len(recorder.incomplete_episodes)
    assert published and running
    text = format_report(forge_gpu.reading.inspect_run(tmp_path / "run"))
    forge_gpu.reading.report(tmp_path / "run", tmp_path / "report.html", gallery=0)
    page = (tmp_path / "report.html").read_text()
    line = (
        f"the success rate counts the {published} published episodes only: collection stopped once {target} had "
        f"ended and left {running} running ({running / (published + running):.1%} of the episodes begun)"
    )
    if target is None:
        assert "published episodes only" not in text and "published episodes only" not in page
        return
    assert line in text and line in page
    assert f"forge-gpu evaluate {env.task} --policy POLICY --episodes {target}" in text
