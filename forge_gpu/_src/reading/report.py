"""``forge-gpu report``: one self-contained HTML file about a run or a dataset (no server, no network: every chart is
inline SVG and every image a data URI), written from one read of the episodes' transition columns, the manifests,
``stats.json`` and a bounded gallery of episodes read whole (:mod:`summary` gathers them).

In three parts, top down: the report and its sections of figures; the page (its frame: style, and the script that
records the page's own errors and checks its images; the gallery, which shows episodes one by one; the stored
statistics); and an episode's camera frames as a small animated WebP. The charts, inline SVG, are :mod:`charts`'.
numpy and the standard library (Pillow for the gallery's animations, imported when used).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import time

import numpy as np

from forge_gpu._src.core.cameras import cameras, frame_layout
from forge_gpu._src.core.checks import check_int
from forge_gpu._src.core.episode import episode_stem
from forge_gpu._src.core.files import write_text_atomic
from forge_gpu._src.reading.charts import binned, chart, fmt, histogram
from forge_gpu._src.reading.inspection import no_frames
from forge_gpu._src.reading.summary import GALLERY_EACH, gather, pick_gallery, read_gallery

#: The most randomized components a report plots (a vector param is one per component).
MAX_PARAM_PLOTS = 12
#: The most instructions shown apart (the others are grouped as "other").
MAX_INSTRUCTIONS = 6
#: The most runs a dataset's recording charts draw.
MAX_RUN_LINES = 8
#: An animation's most frames and the longest side of its frames [pixels].
MAX_FRAMES = 24
MAX_SIDE = 64
#: How long an animation holds its first frame, the episode's key frame, before the episode plays [ms].
HOLD_MS = 2000


def report(
    path: str | os.PathLike, out: str | os.PathLike, *, gallery: int = GALLERY_EACH, seed: int = 0, side: int = MAX_SIDE
) -> dict:
    """Write the HTML report of a run directory or a dataset root to ``out`` (replaced whole when it exists).

    ``gallery``: episodes of each kind the gallery shows (best, worst, failed, random; so at most 4 x ``gallery``);
    ``seed``: the random choices; ``side``: the longest side of the gallery's camera frames [pixels] (larger frames
    are shrunk by a whole factor to fit; a larger side shows more of a camera's detail, in a larger page). Returns
    ``{"out", "bytes", "seconds", "episodes", "gallery", "no_frames"}`` (``no_frames``: why the gallery shows no
    camera frames, or None). Raises ValueError for a damaged run (naming it) or a bad argument, ImportError when
    Pillow is needed and missing."""
    check_int("gallery", gallery, minimum=0, maximum=16)
    check_int("side (the gallery frames' longest side)", side, minimum=8, maximum=512)
    start = time.perf_counter()
    facts = gather(path)
    episodes = facts["episodes"]
    items = read_gallery(facts, pick_gallery(episodes, each=gallery, seed=seed)) if gallery else []
    sections = {
        "identity": identity_section(facts),
        "episodes": episodes_section(facts),
        "randomization": randomization_section(facts),
        "recording": recording_section(facts["runs"]),
        "gallery": gallery_section(items, episodes, side=side),
        "statistics": statistics_section(facts["statistics"]),
    }
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    subtitle = f"{html.escape(facts['path'])} · {facts['kind']} · made {when} by forge-gpu report"
    text = page(f"forge_gpu report: {os.path.basename(os.path.abspath(facts['path']))}", subtitle, sections)
    out = os.fspath(out)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_text_atomic(out, text)  # the page appears whole, or not at all; its mode follows the umask
    return {
        "out": out,
        "bytes": os.path.getsize(out),
        "seconds": time.perf_counter() - start,
        "episodes": int(episodes["steps"].size),
        "gallery": len(items),
        "no_frames": gallery_note(items),
    }


def identity_section(facts: dict) -> str:
    runs = facts["runs"]
    total = sum(r["bytes_on_disk"] for r in runs)
    if facts["kind"] == "dataset":
        header = ["run", "task", "status", "format", "device", "seed", "episodes", "transitions", "bytes on disk"]
        rows = [
            [os.path.basename(r["directory"]), r["task"], r["status"], r["format"], r["device"], r["seed"]]
            + [r["episodes"], r["transitions"], r["bytes_on_disk"]]
            for r in runs
        ]
        intro = f"<p>{len(runs)} runs, {total:,} bytes on disk.</p>" + table(rows, header)
        return intro + (_run_table(runs[0], heading="The first run") if runs else "")
    return _run_table(runs[0])


def _run_table(run: dict, heading: str = "") -> str:
    recorder = run["recorder"]
    layout = f"{run['format']}" + (f", layout_version {run['layout_version']}" if run["layout_version"] else "")
    if recorder:
        layout += f", compression {recorder.get('compression', 'none')}, durability {recorder.get('durability', '-')}"
    rows = [
        ["task", run["task"]],
        ["run id", run["run_id"]],
        ["status", run["status"]],
        ["format", layout],
        ["seed", run["seed"]],
        ["device", run["device"]],
        ["envs", run["num_envs"]],
        ["max steps", run["max_steps"]],
        ["step", run["step_mode"]],
        ["transport", run["transport"]],
        ["size on disk", f"{run['bytes_on_disk']:,} bytes in {run['files']} files"],
        ["checksums", run["checksums"]],
        ["incomplete episodes", f"{run['incomplete_episodes']} (never published)"],
        ["python", run["python"]],
        ["packages", ", ".join(f"{k} {v}" for k, v in run["packages"].items())],
    ]
    config = html.escape(json.dumps(run["config"], indent=2))
    title = f"<h3>{html.escape(heading)}</h3>" if heading else ""
    details = f"<details><summary>config</summary><pre>{config}</pre></details>"
    return f"{title}{table([[k, str(v)] for k, v in rows])}{details}"


def _rate(success: np.ndarray, has_success: bool) -> str:
    return f"{success.mean():.1%}" if has_success and success.size else "n/a"


def _instruction_groups(instructions: list[str]) -> dict[str, np.ndarray]:
    """Episode indices by instruction, the most common first; past :data:`MAX_INSTRUCTIONS`, one "other" group."""
    names, inverse, counts = np.unique(np.asarray(instructions, dtype=object), return_inverse=True, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    groups = {str(names[o]): np.flatnonzero(inverse == o) for o in order[:MAX_INSTRUCTIONS]}
    if len(order) > MAX_INSTRUCTIONS:
        groups["other"] = np.flatnonzero(np.isin(inverse, order[MAX_INSTRUCTIONS:]))
    return groups


def episodes_section(facts: dict) -> str:
    e = facts["episodes"]
    n, has_success = e["steps"].size, e["has_success"]
    if not n:
        return '<p class="muted">The run has no published episode.</p>'
    steps, returns = e["steps"].astype(np.float64), e["return"]
    out = cards(
        [
            ("episodes", f"{n:,}"),
            ("transitions", f"{int(e['steps'].sum()):,}"),
            ("success rate", _rate(e["success"], has_success)),
            ("mean return", fmt(returns.mean())),
            ("mean length", fmt(steps.mean())),
        ]
    )
    scopes = [r["success_scope"] for r in facts.get("runs", []) if r.get("success_scope")]
    out += "".join(f'<p class="muted">{html.escape(scope)}</p>' for scope in scopes)
    groups = _instruction_groups(e["instruction"])
    if len(groups) > 1:
        rows = [
            [name, idx.size, _rate(e["success"][idx], has_success), returns[idx].mean(), steps[idx].mean()]
            for name, idx in groups.items()
        ]
        rows = [[f"#{k}", *row] for k, row in enumerate(rows, 1)]
        out += "<h3>Per instruction</h3>" + table(rows, ["#", "instruction", "episodes", "success", "return", "length"])
    else:
        out += f"<p>Instruction: <q>{html.escape(next(iter(groups)))}</q></p>"
    by_group = len(groups) > 1
    charts = [
        histogram({k: returns[v] for k, v in groups.items()}, title="return per episode", xlabel="return",
                  ylabel="episodes", name="return-histogram"),
        histogram({k: steps[v] for k, v in groups.items()}, title="length per episode", xlabel="steps",
                  ylabel="episodes", name="length-histogram"),
    ]  # fmt: skip
    if has_success and by_group:
        rows = np.arange(1, len(groups) + 1)  # each instruction by its row in the table above
        rates = [{"x": rows, "y": [e["success"][v].mean() for v in groups.values()]}]
        charts.append(chart(rates, kind="points", title="success rate per instruction", ylim=(0, 1),
                            xlim=(0.5, len(groups) + 0.5), xticks=[(r, f"#{r}") for r in rows.tolist()],
                            xlabel="instruction (its row # in the table)", ylabel="success rate",
                            name="success-per-instruction"))  # fmt: skip
    return out + f'<div class="charts">{"".join(charts)}</div>'


def _components(params: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """Each randomized scalar: a scalar param, or each component of a vector one, up to :data:`MAX_PARAM_PLOTS`."""
    out = []
    for name, values in params.items():
        flat = values.reshape(values.shape[0], -1)
        for c in range(flat.shape[1]):
            label = name if flat.shape[1] == 1 and values.ndim == 1 else f"{name}[{c}]"
            out.append((label, flat[:, c]))
    return out[:MAX_PARAM_PLOTS]


def randomization_section(facts: dict) -> str:
    e = facts["episodes"]
    params = e["params"]
    if not params or not e["steps"].size:
        return '<p class="muted">No randomized parameters: the run draws none (its config has no [randomize]).</p>'
    components = _components(params)
    varied = [(label, x) for label, x in components if np.ptp(x) > 0]
    rows = [[label, x.min(), x.mean(), x.max()] for label, x in components]
    out = table(rows, ["parameter", "min", "mean", "max"])
    out += '<p class="muted">Episodes binned by each drawn value (8 equal-width bins); a point is a bin\'s mean.</p>'
    charts = []
    for label, x in varied:
        if e["has_success"]:
            centres, rate, counts = binned(x, e["success"])
            charts.append(chart([{"x": centres, "y": rate}], kind="points", title=f"success rate by {label}",
                                xlabel=label, ylim=(0, 1), name=f"success-by-{label}"))  # fmt: skip
        centres, mean, counts = binned(x, e["return"])
        charts.append(chart([{"x": centres, "y": mean}], kind="points", title=f"mean return by {label}",
                            xlabel=label, name=f"return-by-{label}"))  # fmt: skip
    return out + f'<div class="charts">{"".join(charts)}</div>'


def _progress_rows(run: dict) -> np.ndarray | None:
    progress = run.get("progress")
    if not isinstance(progress, dict) or not progress.get("rows"):
        return None
    columns = progress.get("columns", [])
    rows = np.asarray(progress["rows"], np.float64)
    needed = ("seconds", "episodes", "stall_seconds", "backlog", "bytes")
    if rows.ndim != 2 or any(c not in columns for c in needed):
        return None
    return {c: rows[:, columns.index(c)] for c in needed}


def recording_section(runs: list[dict]) -> str:
    """The recording over time, from each run.json's ``progress``: episodes published, the share of time ``append``
    waited for the writers (stall) and the writers' backlog; and the totals."""
    totals, lines = [], {"episodes": [], "stall": [], "backlog": []}
    for n, run in enumerate(runs):
        name = os.path.basename(run["directory"]) if len(runs) > 1 else ""
        p = _progress_rows(run)
        seconds = float(p["seconds"][-1]) if p is not None else None
        stall = run["stall_seconds"]
        totals.append(
            [os.path.basename(run["directory"]), seconds, run["episodes"], run["bytes_written"], stall]
            + [f"{stall / seconds:.1%}" if seconds and stall is not None else "n/a"]
        )
        if p is None or n >= MAX_RUN_LINES:
            continue
        t = p["seconds"]
        dt = np.diff(t, prepend=0.0)
        share = np.divide(np.diff(p["stall_seconds"], prepend=0.0), dt, out=np.zeros_like(t), where=dt > 0)
        lines["episodes"].append({"x": t, "y": p["episodes"], "label": name})
        lines["stall"].append({"x": t, "y": np.clip(share, 0, 1), "label": name})
        lines["backlog"].append({"x": t, "y": p["backlog"], "label": name})
    header = ["run", "seconds recording", "episodes", "bytes written", "stall seconds", "stall share"]
    out = table(totals, header)
    if not lines["episodes"]:
        return out + (
            '<p class="muted">run.json keeps no progress table: the run was recorded before forge_gpu kept one, '
            "or its recorder did not close it (a killed run).</p>"
        )
    out += (
        '<p class="muted">Sampled as the writers published, at most once a second (run.json\'s progress). Stall: '
        "the share of each interval the recorder's append waited for its writers (what holds stepping back).</p>"
    )
    charts = [
        chart(lines["episodes"], title="episodes published", xlabel="seconds", name="progress-episodes"),
        chart(lines["stall"], title="stall share", xlabel="seconds", ylim=(0, 1), name="progress-stall"),
        chart(lines["backlog"], title="writer backlog", xlabel="seconds", name="progress-backlog"),
    ]
    return out + f'<div class="charts">{"".join(charts)}</div>'


# The page: its frame, tables, the gallery and the stored statistics.

#: The page's sections, in order: their ids (what a test looks for) and headings.
SECTIONS = {
    "identity": "Run",
    "episodes": "Episodes",
    "randomization": "Randomized parameters",
    "recording": "Recording",
    "gallery": "Gallery",
    "statistics": "Statistics per field",
}
#: The most channels a statistics row shows.
MAX_CHANNELS = 12

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1180px;padding:16px 24px;color:#222}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:3px;margin-top:26px}
h3{font-size:15px;margin:14px 0 6px}.muted{color:#777}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #e0e0e0;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f4f4f4;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}.card{border:1px solid #ddd;border-radius:6px;
padding:8px 12px;min-width:120px}.card b{display:block;font-size:20px}.charts{display:flex;flex-wrap:wrap;gap:8px}
figure{margin:0}figcaption{font-size:12px;color:#555;text-align:center}
.legend{list-style:none;margin:2px 0 2px 48px;padding:0;font-size:11px;line-height:1.3}
.legend i{display:inline-block;width:8px;height:8px;margin-right:4px}
.gallery{display:grid;grid-template-columns:repeat(auto-fill,minmax(270px,1fr));gap:12px}
.episode{border:1px solid #ddd;border-radius:6px;padding:8px}.episode img{image-rendering:pixelated;width:256px;
max-width:100%;display:block}.kind{font-weight:700;text-transform:uppercase;font-size:12px}
.kind.best{color:#3ca951}.kind.worst{color:#d44}.kind.failed{color:#c60}.kind.random{color:#4269d0}
pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:320px;font-size:12px}
#page-errors{display:none}
"""

# Installed first, in <head>: every error the page raises and every console.error is kept, and written into
# #page-errors once the page is checked.
_ERRORS_SCRIPT = """
window.__reportErrors = [];
window.addEventListener("error", function (e) { window.__reportErrors.push(String(e.message || e.type)); }, true);
(function () {
  var original = console.error;
  console.error = function () {
    window.__reportErrors.push(Array.prototype.slice.call(arguments).join(" "));
    return original.apply(console, arguments);
  };
})();
"""

# At the end of <body>: decode every image, mark each with data-decoded ("yes" once it has pixels), then mark the
# body data-checked with the number of errors and list them in #page-errors (a test reads both from the DOM).
_CHECK_SCRIPT = """
(function () {
  var images = Array.prototype.slice.call(document.images);
  Promise.all(images.map(function (img) {
    return img.decode().then(function () {
      img.setAttribute("data-decoded", img.naturalWidth > 0 && img.naturalHeight > 0 ? "yes" : "empty");
    }, function (err) {
      img.setAttribute("data-decoded", "failed");
      window.__reportErrors.push("image not decoded: " + (img.alt || img.src.slice(0, 40)) + ": " + err);
    });
  })).then(function () {
    document.getElementById("page-errors").textContent = JSON.stringify(window.__reportErrors);
    document.body.setAttribute("data-errors", String(window.__reportErrors.length));
    document.body.setAttribute("data-checked", "yes");
  });
})();
"""


def page(title: str, subtitle: str, sections: dict[str, str]) -> str:
    """The whole self-contained HTML page: ``sections`` maps each id of :data:`SECTIONS` to its body."""
    body = [f"<h1>{html.escape(title)}</h1>", f'<p class="muted">{subtitle}</p>']
    nav = " · ".join(f'<a href="#{key}">{heading}</a>' for key, heading in SECTIONS.items())
    body.append(f"<p>{nav}</p>")
    for key, heading in SECTIONS.items():
        body.append(f'<section id="{key}"><h2>{heading}</h2>{sections[key]}</section>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style><script>{_ERRORS_SCRIPT}</script></head>"
        f'<body>{"".join(body)}<pre id="page-errors"></pre><script>{_CHECK_SCRIPT}</script></body></html>\n'
    )


def table(rows: list[list], header: list[str] | None = None) -> str:
    """An HTML table; cells are escaped text, numbers right-aligned."""
    out = ["<table>"]
    if header:
        out.append("<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header) + "</tr>")
    for row in rows:
        cells = []
        for cell in row:
            number = isinstance(cell, int | float | np.integer | np.floating) and not isinstance(cell, bool)
            text = fmt(cell) if number else html.escape("" if cell is None else str(cell))
            cells.append(f'<td class="n">{text}</td>' if number else f"<td>{text}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def cards(items: list[tuple[str, str]]) -> str:
    inner = "".join(f'<div class="card"><b>{v}</b>{html.escape(k)}</div>' for k, v in items)
    return f'<div class="cards">{inner}</div>'


def gallery_note(items: list[dict]) -> str | None:
    """Why the gallery's episodes show no camera frames (:func:`no_frames` of the first one), or None."""
    return no_frames(items[0]["episode"]) if items else None


def gallery_section(items: list[dict], episodes: dict, *, side: int = MAX_SIDE) -> str:
    """One card per gallery episode: what it is, and its camera frames animated (each opening on its key frame:
    :func:`key_frame`; frames of at most ``side`` pixels a side), or plots of its proprio, action and reward where the
    run has no frames (said once, above the cards)."""
    if not items:
        return '<p class="muted">No published episode to show.</p>'
    note = gallery_note(items)
    cells = [] if note is None else [f'<p class="muted">No frames: {html.escape(note)}.</p>']
    for item in items:
        episode, run, i = item["episode"], item["run"], item["index"]
        stem = episode_stem(episode.env_id, episode.episode_id)
        success = "yes" if episodes["success"][i] else "no"
        facts = [
            f'<span class="kind {item["kind"]}">{item["kind"]}</span> {episode.env_id}:{episode.episode_id}',
            f"{episode.steps} steps · return {fmt(episodes['return'][i])}"
            + (f" · success {success}" if run["has_success"] else ""),
            f'<span class="muted">{html.escape(episodes["instruction"][i])}</span>',
        ]
        if episode.params:
            drawn = ", ".join(f"{name} {_value(v)}" for name, v in episode.params.items())
            facts.append(f'<span class="muted">{html.escape(drawn)}</span>')
        media = _episode_media(episode, run, stem, side)
        cells.append(f'<div class="episode" data-episode="{stem}">{"<br>".join(facts)}{media}</div>')
    head = cells[:1] if note is not None else []
    return "".join(head) + '<div class="gallery">' + "".join(cells[len(head) :]) + "</div>"


def _value(v) -> str:
    a = np.asarray(v, np.float64)
    return fmt(float(a)) if a.ndim == 0 else "[" + ", ".join(fmt(x) for x in a.ravel()[:6]) + "]"


def _episode_media(episode, run: dict, stem: str, side: int) -> str:
    t = episode.obs["time"].astype(np.float64)
    reward = chart([{"x": t, "y": episode.reward}], title="reward", xlabel="time [s]", width=260, height=110)
    if no_frames(episode) is None:
        shown = []
        first = key_frame(episode)
        for name, fields in cameras(frame_layout(episode.obs)).items():
            shot = animation(episode, control_dt=run["control_dt"], camera=name, side=side, first=first)
            uri = data_uri(shot, "image/webp")
            what = " | ".join(f for f in (fields["rgb"], fields["depth"]) if f)
            image = f'<img alt="{stem} {what}" data-frame="{first}" src="{uri}">'
            shown.append(f'{image}<span class="muted">{what}</span>')
        held = f'<span class="muted">held first: frame {first} of {episode.steps}, after the highest reward</span>'
        return "<br>" + held + "<br>" + "<br>".join(shown) + reward
    plots = []
    for name, values in (("proprio", episode.obs.get("proprio")), ("action", episode.action)):
        if values is None:
            continue
        values = values.reshape(values.shape[0], -1)
        series = [{"x": t, "y": values[:, c], "label": f"{name}[{c}]"} for c in range(min(values.shape[1], 8))]
        plots.append(chart(series, title=name, xlabel="time [s]", width=260, height=130))
    return "".join(plots) + reward


def statistics_section(statistics: dict | None) -> str:
    """The stored statistics (stats.json: per field, per channel), as a table."""
    if statistics is None:
        return '<p class="muted">No stats.json (recorded before statistics existed): run forge-gpu stats RUN.</p>'
    rows = []
    for key, s in statistics.items():
        channels = len(np.atleast_1d(s["mean"]))
        for c in range(min(channels, MAX_CHANNELS)):
            figures = [np.atleast_1d(s[f])[c] for f in ("mean", "std", "min", "max", "q01", "q99")]
            rows.append([key if c == 0 else "", c, s["count"] if c == 0 else None, *figures])
        if channels > MAX_CHANNELS:
            rows.append(["", f"... {channels - MAX_CHANNELS} more channels", None, None, None, None, None, None, None])
    header = ["field", "channel", "count", "mean", "std", "min", "max", "q01", "q99"]
    note = '<p class="muted">Per channel, from the run\'s stats.json; q01 and q99 within 0.4%.</p>'
    return note + table(rows, header)


# The pictures: an episode's camera frames as an animated WebP (the charts are :mod:`charts`').


def _downscale(frames: np.ndarray, side: int) -> np.ndarray:
    """Frames ``[F, H, W, ...]`` shrunk by a whole factor (block means) so that neither side exceeds ``side``."""
    factor = math.ceil(max(frames.shape[1], frames.shape[2]) / side)
    if factor <= 1:
        return frames
    f, h, w = frames.shape[0], frames.shape[1] // factor * factor, frames.shape[2] // factor * factor
    cut = frames[:, :h, :w].astype(np.float32)
    shape = (f, h // factor, factor, w // factor, factor, *frames.shape[3:])
    return cut.reshape(shape).mean(axis=(2, 4))


def _gray(depth: np.ndarray) -> np.ndarray:
    """Depth frames [F, H, W] (metres, 0 where nothing is hit) as grey RGB: near bright, nothing black."""
    valid = np.isfinite(depth) & (depth > 0)
    far = float(depth[valid].max()) if valid.any() else 1.0
    near = float(depth[valid].min()) if valid.any() else 0.0
    level = np.where(valid, 255 - 200 * (depth - near) / max(far - near, 1e-6), 0)
    return np.repeat(np.clip(level, 0, 255)[..., None], 3, axis=-1)


def key_frame(episode) -> int:
    """The frame an episode is shown by: the one after its step of highest reward (its frames are 0..T, frame t + 1
    follows step t; the first such step among equals; a reward that is not finite never counts), or 0 where no
    step's reward is finite."""
    reward = np.asarray(episode.reward, np.float64)
    finite = np.isfinite(reward)
    if not finite.any():
        return 0
    return int(np.argmax(np.where(finite, reward, -np.inf))) + 1


def animation(
    episode,
    *,
    control_dt: float | None,
    camera: str | None = None,
    max_frames: int = MAX_FRAMES,
    side: int = MAX_SIDE,
    first: int | None = None,
) -> bytes:
    """A camera's frames of the episode (``camera`` a name of ``core/cameras.py``, by default its first camera:
    ``rgb``, and its depth beside them, grey, where the run has it) as an animated WebP: at most ``max_frames``
    evenly spread over its T + 1 frames, each side at most ``side`` pixels. With ``first`` (a frame in 0..T), that
    frame opens the animation, held :data:`HOLD_MS`, before the episode plays from its start (then at most
    ``max_frames - 1`` of its frames): a still view of the animation (its first frame) shows that moment."""
    from PIL import Image

    steps = episode.steps
    if first is not None and not 0 <= first <= steps:
        raise ValueError(f"first must be a frame of the episode, in [0, {steps}], got {first!r}")
    count = min(steps + 1, max_frames - (first is not None))
    pick = np.unique(np.linspace(0, steps, max(count, 1)).round().astype(np.int64))
    shown = pick if first is None else np.concatenate([[first], pick])

    def frames(field):
        every = np.concatenate([episode.obs[field], episode.next[field][-1:]])
        return _downscale(every[shown], side)

    found = cameras(frame_layout(episode.obs))
    fields = found[camera] if camera is not None else next(iter(found.values()))
    panels = [frames(fields["rgb"]).astype(np.float32)]
    if fields["depth"] is not None:
        panels.append(_gray(frames(fields["depth"])))
    video = np.clip(np.concatenate(panels, axis=2), 0, 255).round().astype(np.uint8)
    gap = steps / max(len(pick) - 1, 1)
    duration = int(np.clip(1000 * (control_dt or 0.05) * gap, 60, 250))
    durations = [duration] * len(shown)
    if first is not None:
        durations[0] = HOLD_MS
    images = [Image.fromarray(f) for f in video]
    buffer = io.BytesIO()
    images[0].save(
        buffer, "WEBP", save_all=True, append_images=images[1:], duration=durations, loop=0, quality=70, method=4
    )
    return buffer.getvalue()


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
