"""The report's plots, drawn by matplotlib's SVG backend and returned as `<svg>` elements to inline in the page.

Same report, same bytes: each chart starts from matplotlib's default style (a user's matplotlibrc changes nothing),
the ids inside an SVG (clip paths, markers) are hashes salted with the chart's kind (`svg.hashsalt`), so they are
fixed and differ between the charts of one page, the metadata (creation date, creator) is left out, and text stays
text (`svg.fonttype: none`) instead of glyph outlines. Labels are plain text (`text.parse_math: False`): a method
named `$\frac{$` is drawn as those characters, never read as mathtext (which failed the whole report). Each root
carries `data-chart=KIND`, and each line is a group with an id (`curve-<opponent>-<method>`, `success-<method>`), so a
reader or a test can find them.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import matplotlib.style
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
BAND_ALPHA = 0.18
"""Opacity of a 95 % band: light enough that the grid and the grey lines of the other methods show through."""
CONTEXT_GREY = "#c4c4c4"
"""The other methods' lines behind a panel's own: there to compare with, quiet enough not to compete."""
WIDTH_IN = 10.0
"""Figure width in inches: 720 pt, i.e. 960 CSS pixels, the width of the page's text column."""
_RC = {
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.size": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e4e4e4",
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
}
_METADATA = dict.fromkeys(("Creator", "Date", "Format", "Type"))
"""savefig metadata with every default removed: no timestamp, no version string in the page."""
Series = Mapping[str, Sequence[Any]]
"""A curve: t (x values), mean, and low / high of its band (None where there is none)."""


def slug(*parts: Any) -> str:
    """An HTML id from names (method, opponent, …)."""
    return "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", str(p)) for p in parts)


def method_styles(methods: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(colour, marker) per method, in order: ten colours, and a marker that shifts by one every ten methods, so
    no two of the first hundred methods look alike."""
    return {
        m: (PALETTE[i % len(PALETTE)], MARKERS[(i + i // len(PALETTE)) % len(MARKERS)]) for i, m in enumerate(methods)
    }


def plot_range(means: Sequence[float], bands: Sequence[float]) -> tuple[float, float]:
    """The y-range of a line chart: the means' range [a, b] widened by up to s = max(b − a, 1) on each side to
    take in the bands, i.e. [max(min(bands), a − s), min(max(bands), b + s)]. With few seeds a t-band can be
    ten times wider than the differences between methods; it is clipped rather than flattening the lines."""
    a, b = min(means), max(means)
    spread = max(b - a, 1.0)
    return min(a, max(min(bands, default=a), a - spread)), max(b, min(max(bands, default=b), b + spread))


def _to_svg(figure: Figure, kind: str, title: str) -> str:
    """The figure as an inline `<svg>`: without the XML prologue and namespace declarations (HTML supplies them),
    tagged with its kind and labelled with its title. Of its ids it keeps those something points to (clip paths,
    markers) and those set here (the curves'); matplotlib numbers the others (figure_1, axes_1, …) the same in
    every chart, and an id must be unique in the page."""
    buffer = io.StringIO()
    with matplotlib.style.context({"svg.hashsalt": f"ttlearn-{kind}"}):
        figure.savefig(buffer, format="svg", metadata=_METADATA)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]
    kept = set(re.findall(r'(?:url\(#|href="#)([^)"]+)', svg)) | {a.get_gid() for a in figure.findobj() if a.get_gid()}
    svg = re.sub(r' id="([^"]+)"', lambda m: m[0] if m[1] in kept else "", svg)
    head, body = svg.split(">", 1)
    head = re.sub(r'\s+xmlns(?::xlink)?="[^"]*"', "", head)
    return f'{head} class="chart" data-chart="{kind}" role="img" aria-label="{escape(title)}">{body}'


def _y_limits(curves: Sequence[Series]) -> tuple[float, float]:
    """`plot_range` over the curves' means and bands, padded by 6 % so markers at the edge stay whole."""
    means = [v for curve in curves for v in curve["mean"]]
    bands = [v for curve in curves for v in (*curve["low"], *curve["high"]) if v is not None]
    low, high = plot_range(means, bands)
    pad = 0.06 * (high - low) or 0.5
    return low - pad, high + pad


def _draw_curve(axes: Axes, curve: Series, style: tuple[str, str], gid: str) -> None:
    """A line in its method's colour and marker, over its 95 % band where it has one; the line's group gets `gid`."""
    color, marker = style
    low = [math.nan if v is None else v for v in curve["low"]]
    high = [math.nan if v is None else v for v in curve["high"]]
    axes.fill_between(curve["t"], low, high, color=color, alpha=BAND_ALPHA, linewidth=0, zorder=1)
    (line,) = axes.plot(curve["t"], curve["mean"], color=color, marker=marker, zorder=3)
    line.set_gid(gid)


def _finish_axes(axes: Axes, limits: tuple[float, float]) -> None:
    """The y-range, a dashed zero line where it crosses zero, whole numbers on the x axis."""
    axes.set_ylim(*limits)
    if limits[0] < 0 < limits[1]:
        axes.axhline(0, color="#777", linewidth=1, linestyle="--", zorder=2)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


def curves_chart(curves: Mapping[str, Mapping[str, Series]], styles: Mapping[str, tuple[str, str]]) -> str:
    """Small multiples of cumulative performance: a row per method, a column per opponent. A panel shows its
    method's line over its own 95 % band, with the other methods' lines in grey behind it; a column shares one
    y-range, so reading down a column compares the methods against one opponent. (Drawn in one panel, six bands
    that each cover most of the range merge into one block that hides the lines; one band per panel stays legible.)
    """
    opponents = list(curves)
    methods = [m for m in styles if any(m in by_method for by_method in curves.values())]
    title = "Running mean score by game · a column per opponent, a row per method (mean over seeds, 95 % band)"
    with matplotlib.style.context(["default", _RC]):
        figure = Figure(figsize=(WIDTH_IN, 0.8 + 1.25 * len(methods)), layout="constrained")
        grid = figure.subplots(len(methods), len(opponents), squeeze=False, sharex="col")
        for column, opponent in enumerate(opponents):
            by_method = curves[opponent]
            limits = _y_limits(list(by_method.values()))
            for row, method in enumerate(methods):
                axes = grid[row, column]
                for other, curve in by_method.items():
                    if other != method:
                        axes.plot(curve["t"], curve["mean"], color=CONTEXT_GREY, linewidth=1, zorder=2)
                if method in by_method:
                    _draw_curve(axes, by_method[method], styles[method], slug("curve", opponent, method))
                _finish_axes(axes, limits)
                if column == 0:
                    axes.set_ylabel(method, color=styles[method][0], fontweight="bold", rotation=0, ha="right")
            grid[0, column].set_title(opponent, fontsize=9.5)
            grid[-1, column].set_xlabel("game")
        figure.suptitle(title)
        return _to_svg(figure, "cumulative", title)


def success_chart(success_at_k: Mapping[str, Sequence[float]], styles: Mapping[str, tuple[str, str]]) -> str:
    """success@k per method: one line over the attempt budget k on a 0–1 scale, the legend on the right."""
    title = "success@k over sequential attempts"
    with matplotlib.style.context(["default", _RC]):
        figure = Figure(figsize=(WIDTH_IN, 3.6), layout="constrained")
        axes = figure.subplots()
        for method, shares in success_at_k.items():
            color, marker = styles[method]
            (line,) = axes.plot(range(1, len(shares) + 1), shares, color=color, marker=marker, label=method)
            line.set_gid(slug("success", method))
        axes.set_ylim(-0.04, 1.04)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        figure.suptitle(title)
        axes.set_xlabel("attempts k")
        axes.set_ylabel("share of trials solved")
        figure.legend(loc="outside right upper", frameon=False)
        return _to_svg(figure, "success", title)


def elo_chart(rows: Sequence[Mapping[str, Any]], styles: Mapping[str, tuple[str, str]], anchor: float) -> str:
    """A forest plot of the rating rows, best first: per method its Elo as a marker on its 95 % interval, and a
    dashed line at the anchor (the mean rating)."""
    title = "Bradley–Terry Elo with 95 % block-bootstrap intervals"
    with matplotlib.style.context(["default", _RC, {"axes.grid.axis": "x"}]):
        figure = Figure(figsize=(WIDTH_IN, 1.0 + 0.34 * len(rows)), layout="constrained")
        axes = figure.subplots()
        for y, row in enumerate(rows):
            color, marker = styles[row["method"]]
            low, high = row["ci_low"], row["ci_high"]
            spread = None if low is None or high is None else [[row["elo"] - low], [high - row["elo"]]]
            axes.errorbar(row["elo"], y, xerr=spread, color=color, marker=marker, markersize=7, capsize=3, linewidth=2)
        axes.axvline(anchor, color="#777", linewidth=1, linestyle="--")
        axes.set_yticks(range(len(rows)), [row["method"] for row in rows])
        axes.set_ylim(len(rows) - 0.5, -0.5)
        axes.set_title(title)
        axes.set_xlabel("Elo")
        return _to_svg(figure, "elo", title)


def training_chart(metrics: Sequence[Mapping[str, Any]]) -> str:
    """A MemoPilot training run's learning curve from its metrics lines: the mean reward of the notes sampled at
    each step (their 95 % band over the step's sequences), the greedy writer's reward on the fixed development
    sequences every few steps (step 0: before training), and the same sequences with no memory."""
    title = "Reward per round of the games played with the writer's notes (95 % bands)"
    sampled = {
        "t": [m["step"] for m in metrics],
        **dict(zip(("mean", "low", "high"), zip(*(m["note_reward"] for m in metrics)))),
    }
    evals = [m[key] for m in metrics for key in ("eval_start", "eval") if key in m]
    greedy = {
        "t": [e["after_step"] for e in evals],
        **dict(zip(("mean", "low", "high"), zip(*(e["reward"] for e in evals)))),
    }
    with matplotlib.style.context(["default", _RC]):
        figure = Figure(figsize=(WIDTH_IN, 4.0), layout="constrained")
        axes = figure.subplots()
        curves = [sampled] + ([greedy] if evals else [])
        for curve, (color, marker), gid, label in zip(
            curves,
            method_styles(["sampled", "greedy"]).values(),
            ("training-sampled", "training-greedy"),
            ("sampled notes (T = writer temperature), this step's sequences", "greedy writer, development sequences"),
        ):
            _draw_curve(axes, curve, (color, marker), gid)
            axes.lines[-1].set_label(label)
        if evals:
            (none,) = axes.plot(greedy["t"], [e["none"][0] for e in evals], color="#777", linestyle=":", zorder=2)
            none.set_label("no memory, development sequences")
        _finish_axes(axes, _y_limits(curves))
        axes.set_xlabel("training step")
        axes.set_ylabel("reward per round")
        figure.suptitle(title)
        figure.legend(loc="outside lower center", ncols=3, frameon=False)
        return _to_svg(figure, "training", title)
