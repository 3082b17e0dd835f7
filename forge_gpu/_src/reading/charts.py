"""The report's charts: inline SVG line, point and bar charts (histograms), each a ``<figure>`` with an HTML legend,
and the binned means the report plots as rates; :func:`fmt`, a number as the report shows it.

Written here rather than with a plotting library: a chart is one short SVG string (about 3 KB for a 20-bin histogram,
against about 10 KB from matplotlib's SVG backend with its text left as text, whose import alone takes about 0.6 s on
a 2-vCPU VM), numpy and the standard library suffice (matplotlib is in the ``cli`` extra only, the data side stays
numpy), and the legend is HTML under the plot, so it wraps a long label whole and never covers the data.
"""

from __future__ import annotations

import html
import math

import numpy as np

PALETTE = ("#4269d0", "#efb118", "#ff725c", "#6cc5b0", "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5")
#: The most points a line keeps (a longer series is taken at evenly spaced points).
MAX_POINTS = 400


def fmt(value) -> str:
    """A number as a report shows it: 4 significant digits, integers whole."""
    if value is None:
        return "n/a"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / max(count - 1, 1)
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if m * step >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _span(values: list[np.ndarray], given: tuple[float, float] | None) -> tuple[float, float]:
    if given is not None:
        return given
    finite = [v[np.isfinite(v)] for v in values if v.size]
    finite = [v for v in finite if v.size]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(float(v.min()) for v in finite), max(float(v.max()) for v in finite)
    if hi == lo:  # one value: around it, never below 0 for values that are not (a backlog of 0 runs 0 to 1)
        pad = abs(lo) * 0.1 or 1.0
        return (lo - pad if lo < 0 else max(lo - pad, 0.0)), hi + pad
    return lo, hi


def chart(
    series: list[dict],
    *,
    kind: str = "line",
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    ylim: tuple[float, float] | None = None,
    xlim: tuple[float, float] | None = None,
    xticks: list[tuple[float, str]] | None = None,
    width: int = 340,
    height: int = 180,
    name: str = "",
) -> str:
    """A ``<figure>`` with one inline SVG chart of ``series`` (each ``{"x", "y", "label"}``; ``color`` optional).

    ``kind``: ``line``; ``points``; ``bars`` (``x`` holds the bins' edges, one more than ``y``: a histogram, drawn
    as bars for one series and as outlines over each other for several). ``xticks``: ``(value, label)`` pairs in place
    of round numbers (e.g. categories). The series' labels make a legend below the chart, each label whole."""
    if kind not in ("line", "points", "bars"):
        raise ValueError(f"kind must be line, points or bars, got {kind!r}")
    left, right, top, bottom = 48, 10, 10, 34
    pw, ph = width - left - right, height - top - bottom
    xs = [np.asarray(s["x"], np.float64) for s in series]
    ys = [np.asarray(s["y"], np.float64) for s in series]
    x0, x1 = _span(xs, xlim)
    y0, y1 = _span(ys + ([np.zeros(1)] if kind == "bars" else []), ylim)

    def px(v):
        return left + (v - x0) / (x1 - x0) * pw

    def py(v):
        return top + ph - (v - y0) / (y1 - y0) * ph

    parts = [f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>']
    for t in _ticks(y0, y1):
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 4}" y="{py(t) + 3:.1f}" text-anchor="end">{fmt(t)}</text>')
    for t, text in xticks if xticks is not None else [(t, fmt(t)) for t in _ticks(x0, x1)]:
        parts.append(f'<text x="{px(t):.1f}" y="{top + ph + 13}" text-anchor="middle">{html.escape(text)}</text>')
    for n, (s, x, y) in enumerate(zip(series, xs, ys, strict=True)):
        color = s.get("color", PALETTE[n % len(PALETTE)])
        if kind == "bars" and len(series) == 1:
            for a, b, v in zip(x[:-1], x[1:], y, strict=True):
                h = py(y0) - py(v)
                parts.append(
                    f'<rect x="{px(a):.1f}" y="{py(v):.1f}" width="{max(px(b) - px(a) - 1, 0.5):.1f}" '
                    f'height="{max(h, 0):.1f}" fill="{color}"><title>[{fmt(a)}, {fmt(b)}): {fmt(v)}</title></rect>'
                )
            continue
        if kind == "bars":  # several histograms: outlines of their steps
            sx, sy = np.repeat(x, 2)[1:-1], np.repeat(y, 2)
            points = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(sx, sy, strict=True))
            parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.5"/>')
            continue
        keep = np.isfinite(x) & np.isfinite(y)
        x, y = x[keep], y[keep]
        if x.size > MAX_POINTS:
            pick = np.linspace(0, x.size - 1, MAX_POINTS).round().astype(np.int64)
            x, y = x[pick], y[pick]
        if kind == "line":
            points = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(x, y, strict=True))
            parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        else:
            parts += [
                f'<circle cx="{px(a):.1f}" cy="{py(b):.1f}" r="3" fill="{color}"><title>{fmt(a)}: {fmt(b)}</title>'
                "</circle>"
                for a, b in zip(x, y, strict=True)
            ]
    keys = [  # the legend: HTML below the plot, so that it never covers the data and wraps a long label whole
        f'<li><i style="background:{s.get("color", PALETTE[n % len(PALETTE)])}"></i>{html.escape(str(s["label"]))}</li>'
        for n, s in enumerate(series)
        if s.get("label")
    ]
    parts.append(f'<text x="{left + pw / 2:.0f}" y="{height - 4}" text-anchor="middle">{html.escape(xlabel)}</text>')
    parts.append(
        f'<text x="11" y="{top + ph / 2:.0f}" text-anchor="middle" transform="rotate(-90 11 {top + ph / 2:.0f})">'
        f"{html.escape(ylabel)}</text>"
    )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-size="10" font-family="sans-serif">{"".join(parts)}</svg>'
    )
    legend = f'<ul class="legend" style="max-width:{width}px">{"".join(keys)}</ul>' if keys else ""
    caption = f"<figcaption>{html.escape(title)}</figcaption>" if title else ""
    return f'<figure class="chart" data-chart="{html.escape(name or title)}">{svg}{legend}{caption}</figure>'


def histogram(values_by_label: dict[str, np.ndarray], *, bins: int = 20, **labels) -> str:
    """A histogram of one or several groups of values over the same bins."""
    groups = {k: np.asarray(v, np.float64) for k, v in values_by_label.items()}
    everything = np.concatenate([v for v in groups.values() if v.size] or [np.zeros(1)])
    lo, hi = float(everything.min()), float(everything.max())
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, bins + 1)
    series = [
        {"x": edges, "y": np.histogram(v, edges)[0], "label": label if len(groups) > 1 else ""}
        for label, v in groups.items()
    ]
    return chart(series, kind="bars", **labels)


def binned(x: np.ndarray, y: np.ndarray, *, bins: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``y``'s mean in equal-width bins of ``x``: the bins' centres, the means and the counts (empty bins left out)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    lo, hi = float(x.min()), float(x.max())
    if hi == lo:
        return np.array([lo]), np.array([y.mean()]), np.array([y.size])
    edges = np.linspace(lo, hi, bins + 1)
    which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
    counts = np.bincount(which, minlength=bins)
    sums = np.bincount(which, weights=y, minlength=bins)
    keep = counts > 0
    centres = (edges[:-1] + edges[1:]) / 2
    return centres[keep], sums[keep] / counts[keep], counts[keep]
