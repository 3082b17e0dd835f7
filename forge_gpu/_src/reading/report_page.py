"""The report's page: its frame (style, and the script that records the page's own errors and checks its images),
and the sections that show episodes one by one (the gallery) and the stored statistics. numpy and the standard
library (Pillow for the animations, through :mod:`report_charts`).
"""

from __future__ import annotations

import html

import numpy as np

from forge_gpu._src.core.episode import episode_stem
from forge_gpu._src.reading.inspection import no_frames
from forge_gpu._src.reading.report_charts import animation, chart, data_uri, fmt

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


def gallery_section(items: list[dict], episodes: dict) -> str:
    """One card per gallery episode: what it is, and its camera frames animated, or plots of its proprio, action and
    reward where the run has no frames (said once, above the cards)."""
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
        media = _episode_media(episode, run, stem)
        cells.append(f'<div class="episode" data-episode="{stem}">{"<br>".join(facts)}{media}</div>')
    head = cells[:1] if note is not None else []
    return "".join(head) + '<div class="gallery">' + "".join(cells[len(head) :]) + "</div>"


def _value(v) -> str:
    a = np.asarray(v, np.float64)
    return fmt(float(a)) if a.ndim == 0 else "[" + ", ".join(fmt(x) for x in a.ravel()[:6]) + "]"


def _episode_media(episode, run: dict, stem: str) -> str:
    t = episode.obs["time"].astype(np.float64)
    reward = chart([{"x": t, "y": episode.reward}], title="reward", xlabel="time [s]", width=260, height=110)
    if no_frames(episode) is None:
        uri = data_uri(animation(episode, control_dt=run["control_dt"]), "image/webp")
        what = "rgb | depth" if "depth" in episode.obs else "rgb"
        return f'<img alt="{stem} {what}" src="{uri}"><span class="muted">{what}</span>{reward}'
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
