"""``forge-gpu report``: one self-contained HTML file about a run or a dataset (no server, no network: every chart is
inline SVG and every image a data URI), written from one read of the episodes' transition columns, the manifests,
``stats.json`` and a bounded gallery of episodes read whole. numpy and the standard library (Pillow for the
gallery's animations).
"""

from __future__ import annotations

import html
import json
import os
import time

import numpy as np

from forge_gpu._src.core.files import write_text_atomic
from forge_gpu._src.reading.report_charts import binned, chart, fmt, histogram
from forge_gpu._src.reading.report_page import (
    cards,
    gallery_note,
    gallery_section,
    page,
    statistics_section,
    table,
)
from forge_gpu._src.reading.summary import GALLERY_EACH, gather, pick_gallery, read_gallery

#: The most randomized components a report plots (a vector param is one per component).
MAX_PARAM_PLOTS = 12
#: The most instructions shown apart (the others are grouped as "other").
MAX_INSTRUCTIONS = 6
#: The most runs a dataset's recording charts draw.
MAX_RUN_LINES = 8


def report(path: str | os.PathLike, out: str | os.PathLike, *, gallery: int = GALLERY_EACH, seed: int = 0) -> dict:
    """Write the HTML report of a run directory or a dataset root to ``out`` (replaced whole when it exists).

    ``gallery``: episodes of each kind the gallery shows (best, worst, failed, random; so at most 4 x ``gallery``);
    ``seed``: the random choices. Returns ``{"out", "bytes", "seconds", "episodes", "gallery", "no_frames"}``
    (``no_frames``: why the gallery shows no camera frames, or None). Raises ValueError
    for a damaged run (naming it) or a bad argument, ImportError when Pillow is needed and missing."""
    if not isinstance(gallery, int) or isinstance(gallery, bool) or not 0 <= gallery <= 16:
        raise ValueError(f"gallery must be an integer in [0, 16], got {gallery!r}")
    start = time.perf_counter()
    facts = gather(path)
    episodes = facts["episodes"]
    items = read_gallery(facts, pick_gallery(episodes, each=gallery, seed=seed)) if gallery else []
    sections = {
        "identity": identity_section(facts),
        "episodes": episodes_section(facts),
        "randomization": randomization_section(facts),
        "recording": recording_section(facts["runs"]),
        "gallery": gallery_section(items, episodes),
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
