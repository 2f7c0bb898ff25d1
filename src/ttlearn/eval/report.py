"""The arena report: ratings, curves and costs, rebuilt from the run records alone.

`build_report(OUT)` reads the run directories under OUT/runs (config.json and the game records, via `Run.open`) and
OUT/arena.json (the arena config and git commit recorded when it started) — nothing else, so a copied arena folder
can be re-reported offline. Every number is a function of those records and a fixed bootstrap seed, and nothing of
the build itself (time, host, absolute paths) enters the output: rebuilding gives byte-identical report.json and
report.html. The HTML is one file whose plots are inline SVG drawn here, with no external resource; each table cell
links to the games behind it (run directories and the per-method / per-pair sections at the end).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, StrictUndefined
from markupsafe import Markup
from rich.table import Table

from ttlearn.eval.metrics import cumulative_performance, mbb_per_hand, mean_ci, success_at_k
from ttlearn.eval.rating import (
    GameResult,
    battles_from_results,
    bootstrap_ci,
    bradley_terry,
    rank_with_ties,
    win_matrix,
)
from ttlearn.runs import ARENA_FILE, NO_OPPONENT, RUNS_DIR, Run, RunConfig
from ttlearn.types import Episode

REPORT_JSON, REPORT_HTML = "report.json", "report.html"
ELO_SCALE, ELO_ANCHOR = 400.0, 1000.0
N_BOOT, BOOT_SEED = 1000, 0
DIGITS = 4
"""Numbers in the report are rounded to this many decimals: far below any CI, and stable across platforms."""
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


# ---- reading the records ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordedRun:
    """One run of the arena as read back from disk; `dir` is relative to the arena folder (for links)."""

    method: str
    opponent: str
    seed: int
    dir: str
    config: RunConfig
    episodes: tuple[Episode, ...]


def load_runs(out_dir: Path) -> list[RecordedRun]:
    """Every run under OUT/runs/<method>/<opponent>/seed<k>, sorted by (method, opponent, seed)."""
    out_dir = Path(out_dir)
    runs = []
    for config_file in (out_dir / RUNS_DIR).glob("*/*/*/config.json"):
        run = Run.open(config_file.parent, repair=False)
        runs.append(
            RecordedRun(
                method=config_file.parent.parts[-3],
                opponent=run.config.env_options.get("opponent", NO_OPPONENT),
                seed=run.config.seed,
                dir=config_file.parent.relative_to(out_dir).as_posix(),
                config=run.config,
                episodes=tuple(run.episodes),
            )
        )
    if not runs:
        raise FileNotFoundError(f"{out_dir} holds no arena runs ({RUNS_DIR}/<method>/<opponent>/seed<k>/config.json)")
    envs = sorted({r.config.env for r in runs})
    if len(envs) > 1:
        raise ValueError(f"{out_dir} mixes runs of several environments: {envs}")
    return sorted(runs, key=lambda r: (r.method, r.opponent, r.seed))


def _round(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), DIGITS) + 0.0


def game_results(runs: Sequence[RecordedRun]) -> list[GameResult]:
    return [GameResult(r.method, r.opponent, r.seed, e.index, e.score) for r in runs for e in r.episodes]


# ---- sections -----------------------------------------------------------------------------------------------------
def rating_section(runs: Sequence[RecordedRun]) -> dict[str, Any]:
    """Bradley–Terry Elo with block-bootstrap CIs over (opponent, seed) sequences, ranks with ties, the win-rate
    matrix, and per pair the battle points of each sequence (what each win-matrix cell links to)."""
    battles = battles_from_results(game_results(runs))
    methods = sorted({r.method for r in runs})
    section: dict[str, Any] = {
        "scale": ELO_SCALE,
        "anchor": ELO_ANCHOR,
        "n_boot": N_BOOT,
        "bootstrap_seed": BOOT_SEED,
        "block": "sequence",
        "rows": [],
        "note": None,
        "win_matrix": None,
        "pairs": [],
    }
    if len(methods) < 2:
        section["note"] = "only one method: there is nothing to rate"
        return section
    try:
        elo = bradley_terry(battles, scale=ELO_SCALE, anchor=ELO_ANCHOR)
        cis = bootstrap_ci(battles, n_boot=N_BOOT, block="sequence", seed=BOOT_SEED, scale=ELO_SCALE, anchor=ELO_ANCHOR)
    except ValueError as exc:  # no paired games, or a disconnected comparison graph
        section["note"] = f"no ratings: {exc}"
        return section
    counts: dict[str, int] = defaultdict(int)
    points: dict[str, float] = defaultdict(float)
    per_pair: dict[tuple[str, str], dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for b in battles:
        counts[b.a] += 1
        counts[b.b] += 1
        points[b.a] += b.score_a
        points[b.b] += 1 - b.score_a
        per_pair[(b.a, b.b)][b.sequence].append(b.score_a)
    for method, rank in rank_with_ties(elo, cis).items():
        section["rows"].append(
            {
                "method": method,
                "rank": rank,
                "elo": _round(elo[method]),
                "ci_low": _round(cis[method][0]),
                "ci_high": _round(cis[method][1]),
                "battles": counts[method],
                "win_rate": _round(points[method] / counts[method]),
            }
        )
    names, rate, games = win_matrix(battles)
    section["win_matrix"] = {
        "methods": names,
        "rate": [[_round(x) for x in row] for row in rate.tolist()],
        "games": games.tolist(),
    }
    dirs = {(r.method, r.opponent, r.seed): r.dir for r in runs}
    for (a, b), sequences in sorted(per_pair.items()):
        section["pairs"].append(
            {
                "a": a,
                "b": b,
                "sequences": [
                    {
                        "opponent": opp,
                        "seed": seed,
                        "battles": len(s),
                        "points_a": sum(s),
                        "points_b": len(s) - sum(s),
                        "dir_a": dirs[(a, opp, seed)],
                        "dir_b": dirs[(b, opp, seed)],
                    }
                    for (opp, seed), s in sorted(sequences.items())
                ],
            }
        )
    return section


def _hands(episode: Episode) -> int | None:
    """Hands played in a hold'em game, from its last step's info; None for other environments."""
    return episode.steps[-1].info.get("hands_played") if episode.steps else None


def _mean_and_half_width(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    if len(values) < 2:
        return _round(values[0]), None
    mean, half = mean_ci(values)
    return _round(mean), _round(half)


def scores_section(runs: Sequence[RecordedRun]) -> list[dict[str, Any]]:
    """Per (method, opponent): the mean per-game score with a 95 % t-interval over seeds (each seed's games are
    averaged first, since games of a sequence are dependent); for hold'em also mbb/hand = 1000 · bb / hands."""
    cells: dict[tuple[str, str], list[RecordedRun]] = defaultdict(list)
    for r in runs:
        if r.episodes:
            cells[(r.method, r.opponent)].append(r)
    rows = []
    for (method, opponent), cell in sorted(cells.items()):
        mean, half = _mean_and_half_width([float(np.mean([e.score for e in r.episodes])) for r in cell])
        row = {
            "method": method,
            "opponent": opponent,
            "mean": mean,
            "half_width": half,
            "seeds": len(cell),
            "mbb_per_hand": None,
            "mbb_half_width": None,
        }
        hands = [[_hands(e) for e in r.episodes] for r in cell]
        if all(h for per_run in hands for h in per_run):
            row["mbb_per_hand"], row["mbb_half_width"] = _mean_and_half_width(
                [mbb_per_hand(sum(e.score for e in r.episodes), sum(h)) for r, h in zip(cell, hands)]
            )
        rows.append(row)
    return rows


def curves_section(runs: Sequence[RecordedRun]) -> dict[str, dict[str, dict[str, list]]]:
    """Per opponent and method: the cumulative performance c_t (running mean of per-game scores), averaged over
    seeds, with its 95 % t-band over seeds where at least two seeds reached game t."""
    sequences: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.episodes:
            sequences[r.opponent][r.method].append(cumulative_performance([e.score for e in r.episodes]))
    curves: dict[str, dict[str, dict[str, list]]] = {}
    for opponent, by_method in sorted(sequences.items()):
        curves[opponent] = {}
        for method, seqs in sorted(by_method.items()):
            curve: dict[str, list] = {"t": [], "mean": [], "low": [], "high": []}
            for t in range(1, max(len(s) for s in seqs) + 1):
                mean, half = _mean_and_half_width([float(s[t - 1]) for s in seqs if len(s) >= t])
                curve["t"].append(t)
                curve["mean"].append(mean)
                curve["low"].append(None if half is None else _round(mean - half))
                curve["high"].append(None if half is None else _round(mean + half))
            curves[opponent][method] = curve
    return curves


def success_section(runs: Sequence[RecordedRun]) -> dict[str, list[float]]:
    """success@k per method over multi-attempt trials: the share of trials solved within the first k attempts.

    Hook: a trial is the games of one sequence that carry the same `info["instance"]` (with a success flag), in
    game order. The session does not record instances yet, so this is empty until an env or session does; it is
    never built from pass@k, which assumes independent attempts (REFERENCE §6)."""
    trials: dict[str, dict[tuple, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        for e in r.episodes:
            if "instance" in e.info and e.success is not None:
                trials[r.method][(r.opponent, r.seed, e.info["instance"])].append(bool(e.success))
    if not any(len(t) > 1 for by_trial in trials.values() for t in by_trial.values()):
        return {}
    k_max = max(len(t) for by_trial in trials.values() for t in by_trial.values())
    return {
        method: [
            _round(x)
            for x in success_at_k(
                [next((i + 1 for i, ok in enumerate(t) if ok), None) for t in by_trial.values()], k_max
            )
        ]
        for method, by_trial in sorted(trials.items())
    }


def costs_section(runs: Sequence[RecordedRun]) -> list[dict[str, Any]]:
    """Per method: invalid-action rate (invalid steps / steps), success rate, tokens, LLM calls, LLM and wall time."""
    by_method: dict[str, list[Episode]] = defaultdict(list)
    for r in runs:
        by_method[r.method].extend(r.episodes)
    rows = []
    for method, episodes in sorted(by_method.items()):
        steps = sum(len(e.steps) for e in episodes)
        tokens = sum(e.info.get("prompt_tokens", 0) + e.info.get("completion_tokens", 0) for e in episodes)
        flags = [e.success for e in episodes]
        rows.append(
            {
                "method": method,
                "games": len(episodes),
                "steps": steps,
                "invalid_rate": _round(sum(e.invalid_actions for e in episodes) / steps) if steps else None,
                "success_rate": _round(sum(map(bool, flags)) / len(flags)) if flags and None not in flags else None,
                "tokens": tokens,
                "tokens_per_game": _round(tokens / len(episodes)) if episodes else None,
                "llm_calls": sum(e.info.get("llm_calls", 0) for e in episodes),
                "llm_s": _round(sum(e.info.get("llm_s", 0.0) for e in episodes)),
                "wall_s": _round(sum(e.info.get("wall_s", 0.0) for e in episodes)),
            }
        )
    return rows


def provenance_section(out_dir: Path, runs: Sequence[RecordedRun]) -> dict[str, Any]:
    """What produced the records: the arena config and git commit (from arena.json), the ttlearn versions and model
    specs recorded in the runs, and what each method label stands for."""
    arena_file = Path(out_dir) / ARENA_FILE
    arena = json.loads(arena_file.read_text()) if arena_file.exists() else {}
    methods = {}
    for r in runs:
        methods.setdefault(
            r.method,
            {
                "memory": r.config.memory,
                "memory_options": r.config.memory_options,
                "player": r.config.player,
                "writer": r.config.writer,
            },
        )
    return {
        "env": runs[0].config.env,
        "arena_config": arena.get("config"),
        "git_commit": arena.get("git_commit"),
        "ttlearn_versions": sorted({r.config.version for r in runs}),
        "players": sorted({r.config.player for r in runs}),
        "writers": sorted({r.config.writer or "(player's LLM, or the default for scripted players)" for r in runs}),
        "methods": methods,
    }


def build_report(out_dir: Path) -> dict[str, Any]:
    """The whole report as plain data (what report.json holds and report.html shows)."""
    runs = load_runs(out_dir)
    return {
        "provenance": provenance_section(out_dir, runs),
        "methods": sorted({r.method for r in runs}),
        "opponents": sorted({r.opponent for r in runs}),
        "seeds": sorted({r.seed for r in runs}),
        "ratings": rating_section(runs),
        "scores": scores_section(runs),
        "curves": curves_section(runs),
        "success_at_k": success_section(runs),
        "costs": costs_section(runs),
        "runs": [
            {
                "method": r.method,
                "opponent": r.opponent,
                "seed": r.seed,
                "dir": r.dir,
                "games": r.config.games,
                "scores": [_round(e.score) for e in r.episodes],
                "summary": (Path(out_dir) / r.dir / "summary.json").exists(),
            }
            for r in runs
        ],
    }


def write_report(out_dir: Path) -> dict[str, Any]:
    """Build the report and write OUT/report.json and OUT/report.html; returns the report."""
    report = build_report(out_dir)
    (Path(out_dir) / REPORT_JSON).write_text(
        json.dumps(report, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (Path(out_dir) / REPORT_HTML).write_text(render_html(report), encoding="utf-8")
    return report


def elo_table(report: dict[str, Any]) -> Table:
    """The Elo table for the terminal."""
    ratings = report["ratings"]
    table = Table(title=f"{report['provenance']['env']} arena · Bradley–Terry Elo, 95 % CI (sequence bootstrap)")
    for column in ("rank", "method", "Elo", "95 % CI", "battles", "win rate"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for row in ratings["rows"]:
        table.add_row(
            str(row["rank"]),
            row["method"],
            f"{row['elo']:.0f}",
            f"{row['ci_low']:.0f} – {row['ci_high']:.0f}",
            str(row["battles"]),
            f"{row['win_rate']:.0%}",
        )
    if ratings["note"]:
        table.caption = ratings["note"]
    return table


# ---- inline SVG ---------------------------------------------------------------------------------------------------
def nice_ticks(low: float, high: float, count: int = 5, min_step: float = 0.0) -> list[float]:
    """Round axis ticks covering [low, high]: step = the smallest m · 10^e ≥ (high − low) / count with m in
    {1, 2, 2.5, 5, 10}, at least `min_step` (1 keeps game numbers whole); ticks are the multiples of step from
    ⌊low / step⌋ · step to ⌈high / step⌉ · step. A zero-width range is widened to [low − 1, high + 1]."""
    if not (math.isfinite(low) and math.isfinite(high)) or high < low or count < 1:
        raise ValueError(f"need finite low <= high and count >= 1, got {low}, {high}, {count}")
    if high == low:
        low, high = low - 1, high + 1
    raw = (high - low) / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = max(min_step, next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9)))
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(i * step, 10) + 0.0 for i in range(first, last + 1)]


def plot_range(means: Sequence[float], bands: Sequence[float]) -> tuple[float, float]:
    """The y-range of a line chart: the means' range [a, b] widened by up to s = max(b − a, 1) on each side to
    take in the bands, i.e. [max(min(bands), a − s), min(max(bands), b + s)]. With few seeds a t-band can be
    ten times wider than the differences between methods; it is clipped rather than flattening the lines."""
    a, b = min(means), max(means)
    spread = max(b - a, 1.0)
    return min(a, max(min(bands, default=a), a - spread)), max(b, min(max(bands, default=b), b + spread))


@dataclass(frozen=True)
class _Frame:
    """A plot area inside an SVG canvas, mapping data coordinates to pixels."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_ticks: list[float]
    y_ticks: list[float]

    def x(self, v: float) -> float:
        lo, hi = self.x_ticks[0], self.x_ticks[-1]
        return self.left + (v - lo) / (hi - lo) * (self.width - self.left - self.right)

    def y(self, v: float) -> float:
        lo, hi = self.y_ticks[0], self.y_ticks[-1]
        return self.height - self.bottom - (v - lo) / (hi - lo) * (self.height - self.top - self.bottom)

    def axes(self, title: str, x_label: str, y_label: str, kind: str, y_grid: bool = True) -> list[str]:
        """The opening tag, title, grid, tick labels and axis labels (no horizontal grid with y_grid=False)."""
        w, h = self.width, self.height
        parts = [
            (
                f'<svg class="chart" data-chart="{kind}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
                f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>'
            ),
            f'<text class="title" x="{w / 2:.1f}" y="16" text-anchor="middle">{escape(title)}</text>',
        ]
        x0, x1, y0, y1 = self.left, w - self.right, self.top, h - self.bottom
        for v in self.y_ticks if y_grid else ():
            parts.append(
                f'<line class="grid" x1="{x0}" x2="{x1}" y1="{self.y(v):.1f}" y2="{self.y(v):.1f}"/>'
                f'<text x="{x0 - 6}" y="{self.y(v) + 4:.1f}" text-anchor="end">{v:g}</text>'
            )
        for v in self.x_ticks:
            parts.append(
                f'<line class="grid" x1="{self.x(v):.1f}" x2="{self.x(v):.1f}" y1="{y0}" y2="{y1}"/>'
                f'<text x="{self.x(v):.1f}" y="{y1 + 16}" text-anchor="middle">{v:g}</text>'
            )
        parts.append(f'<rect class="frame" x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}"/>')
        parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{h - 6}" text-anchor="middle">{escape(x_label)}</text>')
        parts.append(
            f'<text x="14" y="{(y0 + y1) / 2:.1f}" text-anchor="middle" '
            f'transform="rotate(-90 14 {(y0 + y1) / 2:.1f})">{escape(y_label)}</text>'
        )
        return parts


def _points(frame: _Frame, xs: Sequence[float], ys: Sequence[float]) -> str:
    return " ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in zip(xs, ys))


def line_chart(series: Sequence[dict[str, Any]], title: str, x_label: str, y_label: str, kind: str) -> str:
    """Lines (x, mean) with shaded bands (low, high) where given, clipped to the plot area, and a legend. Each
    series: name, color, x, y, low, high (None entries of low / high have no band)."""
    means = [v for s in series for v in s["y"]]
    bands = [v for s in series for key in ("low", "high") for v in s[key] if v is not None]
    xs = [x for s in series for x in s["x"]]
    frame = _Frame(
        720, 300, 56, 170, 28, 40, nice_ticks(min(xs), max(xs), 8, min_step=1), nice_ticks(*plot_range(means, bands))
    )
    clip = f"clip-{_slug(kind, title)}"
    parts = frame.axes(title, x_label, y_label, kind)
    parts.append(
        f'<clipPath id="{clip}"><rect x="{frame.left}" y="{frame.top}" '
        f'width="{frame.width - frame.left - frame.right}" height="{frame.height - frame.top - frame.bottom}"'
        "/></clipPath>"
    )
    if frame.y_ticks[0] < 0 < frame.y_ticks[-1]:
        parts.append(
            f'<line class="zero" x1="{frame.left}" x2="{frame.width - frame.right}" '
            f'y1="{frame.y(0):.1f}" y2="{frame.y(0):.1f}"/>'
        )
    for i, s in enumerate(series):
        band = [(x, lo, hi) for x, lo, hi in zip(s["x"], s["low"], s["high"]) if lo is not None]
        if band:
            outline = (
                _points(frame, [b[0] for b in band], [b[2] for b in band])
                + " "
                + _points(frame, [b[0] for b in reversed(band)], [b[1] for b in reversed(band)])
            )
            parts.append(f'<polygon class="band" fill="{s["color"]}" clip-path="url(#{clip})" points="{outline}"/>')
        parts.append(f'<polyline class="line" stroke="{s["color"]}" points="{_points(frame, s["x"], s["y"])}"/>')
        legend_y = frame.top + 14 + 18 * i
        legend_x = frame.width - frame.right + 12
        parts.append(
            f'<line class="line" stroke="{s["color"]}" x1="{legend_x}" x2="{legend_x + 18}" '
            f'y1="{legend_y - 4}" y2="{legend_y - 4}"/>'
            f'<text x="{legend_x + 24}" y="{legend_y}">{escape(s["name"])}</text>'
        )
    return "\n".join([*parts, "</svg>"])


def interval_chart(rows: Sequence[dict[str, Any]], title: str, x_label: str, reference: float) -> str:
    """A forest plot: one row per entry (name, color, value, low, high), a dot on a whisker, and a dashed line at
    `reference`."""
    values = [v for r in rows for v in (r["low"], r["high"], r["value"])] + [reference]
    frame = _Frame(
        720, 60 + 26 * len(rows), 150, 30, 28, 40, nice_ticks(min(values), max(values)), [0.0, float(len(rows))]
    )
    parts = frame.axes(title, x_label, "", "elo", y_grid=False)
    parts.append(
        f'<line class="zero" x1="{frame.x(reference):.1f}" x2="{frame.x(reference):.1f}" '
        f'y1="{frame.top}" y2="{frame.height - frame.bottom}"/>'
    )
    for i, r in enumerate(rows):
        y = frame.y(len(rows) - i - 0.5)
        parts.append(
            f'<text x="{frame.left - 8}" y="{y + 4:.1f}" text-anchor="end">{escape(r["name"])}</text>'
            f'<line class="whisker" stroke="{r["color"]}" x1="{frame.x(r["low"]):.1f}" '
            f'x2="{frame.x(r["high"]):.1f}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<circle fill="{r["color"]}" cx="{frame.x(r["value"]):.1f}" cy="{y:.1f}" r="5"/>'
        )
    return "\n".join([*parts, "</svg>"])


# ---- HTML ---------------------------------------------------------------------------------------------------------
def _slug(*parts: Any) -> str:
    """An HTML id from names (method, opponent, …)."""
    return "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", str(p)) for p in parts)


def _heat(rate: float | None) -> str:
    """Background of a win-rate cell: white at 0.5, shading towards green at 1 and red at 0 (60 % strength)."""
    if rate is None:
        return "#eeeeee"
    base = (44, 160, 44) if rate > 0.5 else (214, 39, 40)
    strength = 0.6 * abs(rate - 0.5) * 2
    return "#" + "".join(f"{round(255 + (c - 255) * strength):02x}" for c in base)


def _fmt(x: float | None, spec: str = "+.2f") -> str:
    return "–" if x is None else format(x, spec)


def _charts(report: dict[str, Any]) -> dict[str, Any]:
    colors = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(report["methods"])}
    rows = report["ratings"]["rows"]
    charts: dict[str, Any] = {"elo": None, "curves": {}, "success": None, "colors": colors}
    if rows:
        charts["elo"] = Markup(
            interval_chart(
                [
                    {
                        "name": r["method"],
                        "color": colors[r["method"]],
                        "value": r["elo"],
                        "low": r["ci_low"],
                        "high": r["ci_high"],
                    }
                    for r in rows
                ],
                "Bradley–Terry Elo with 95 % block-bootstrap intervals",
                "Elo",
                ELO_ANCHOR,
            )
        )
    for opponent, by_method in report["curves"].items():
        charts["curves"][opponent] = Markup(
            line_chart(
                [
                    {"name": m, "color": colors[m], "x": c["t"], "y": c["mean"], "low": c["low"], "high": c["high"]}
                    for m, c in by_method.items()
                ],
                f"Cumulative performance vs {opponent}",
                "game",
                "running mean score",
                "cumulative",
            )
        )
    if report["success_at_k"]:
        charts["success"] = Markup(
            line_chart(
                [
                    {
                        "name": m,
                        "color": colors[m],
                        "x": list(range(1, len(v) + 1)),
                        "y": v,
                        "low": [None] * len(v),
                        "high": [None] * len(v),
                    }
                    for m, v in report["success_at_k"].items()
                ],
                "success@k over sequential attempts",
                "attempts k",
                "share of trials solved",
                "success",
            )
        )
    return charts


def render_html(report: dict[str, Any]) -> str:
    """The self-contained HTML page of a report (no script, no external resource)."""
    env = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(fmt=_fmt, heat=_heat, slug=lambda parts: _slug(*parts))
    scores = {(r["method"], r["opponent"]): r for r in report["scores"]}
    runs_by_cell: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in report["runs"]:
        runs_by_cell[(r["method"], r["opponent"])].append(r)
    return env.from_string(_TEMPLATE).render(
        r=report,
        p=report["provenance"],
        charts=_charts(report),
        scores=scores,
        runs_by_cell=runs_by_cell,
        arena_json=json.dumps(report["provenance"]["arena_config"], indent=2, sort_keys=True),
        holdem=any(row["mbb_per_hand"] is not None for row in report["scores"]),
    )


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ttlearn arena · {{ p.env }}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: .5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; }
td.name, th.name { text-align: left; }
a { color: #1f5fa8; text-decoration: none; }
a:hover { text-decoration: underline; }
nav a { margin-right: 1em; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; }
.note { color: #8a5a00; }
svg.chart { display: block; margin: .5em 0 1.5em; font-size: 11px; }
svg .title { font-size: 13px; font-weight: 600; }
svg .grid { stroke: #e4e4e4; }
svg .frame { fill: none; stroke: #999; }
svg .zero { stroke: #777; stroke-dasharray: 4 3; }
svg .line { fill: none; stroke-width: 2; }
svg .band { opacity: .12; stroke: none; }
svg .whisker { stroke-width: 3; }
</style>
</head>
<body>
<h1>ttlearn arena · {{ p.env }}</h1>
<nav><a href="#provenance">setup</a><a href="#elo">Elo</a><a href="#win-matrix">win matrix</a>
<a href="#scores">scores</a><a href="#curves">curves</a>{% if charts.success %}<a href="#success">success@k</a>{% endif %}
<a href="#costs">costs</a><a href="#games">games</a><a href="#pairs">pairs</a></nav>

<h2 id="provenance">Setup</h2>
<table>
<tr><th class="name">environment</th><td class="name">{{ p.env }}</td></tr>
<tr><th class="name">opponents</th><td class="name">{{ r.opponents | join(", ") }}</td></tr>
<tr><th class="name">seeds</th><td class="name">{{ r.seeds | join(", ") }}</td></tr>
<tr><th class="name">players</th><td class="name">{{ p.players | join(", ") }}</td></tr>
<tr><th class="name">memory writers</th><td class="name">{{ p.writers | join(", ") }}</td></tr>
<tr><th class="name">ttlearn version</th><td class="name">{{ p.ttlearn_versions | join(", ") }}</td></tr>
<tr><th class="name">git commit</th><td class="name">{{ p.git_commit or "unknown" }}</td></tr>
</table>
<table>
<tr><th class="name">method</th><th class="name">memory</th><th class="name">options</th><th class="name">player</th></tr>
{% for name, m in p.methods.items() %}
<tr><td class="name"><a href="#{{ ['method', name] | slug }}">{{ name }}</a></td><td class="name">{{ m.memory }}</td>
<td class="name">{{ m.memory_options | tojson }}</td><td class="name">{{ m.player }}</td></tr>
{% endfor %}
</table>
<details><summary>arena config</summary><pre>{{ arena_json }}</pre></details>

<h2 id="elo">Elo ratings</h2>
<p>Bradley–Terry fitted by maximum likelihood on paired games (same opponent, seed and game; the higher score wins,
ties count half), Elo scale {{ r.ratings.scale | fmt(".0f") }} with mean {{ r.ratings.anchor | fmt(".0f") }}. 95 %
intervals: {{ r.ratings.n_boot }} bootstrap replicates resampling whole (opponent, seed) sequences (seed
{{ r.ratings.bootstrap_seed }}). Rank = 1 + number of methods whose interval lies entirely above.</p>
{% if r.ratings.note %}<p class="note">{{ r.ratings.note }}</p>{% endif %}
{% if r.ratings.rows %}
<table>
<tr><th>rank</th><th class="name">method</th><th>Elo</th><th>95 % CI</th><th>battles</th><th>win rate</th></tr>
{% for row in r.ratings.rows %}
<tr><td>{{ row.rank }}</td><td class="name"><a href="#{{ ['method', row.method] | slug }}">{{ row.method }}</a></td>
<td>{{ row.elo | fmt(".0f") }}</td><td>{{ row.ci_low | fmt(".0f") }} – {{ row.ci_high | fmt(".0f") }}</td>
<td>{{ row.battles }}</td><td>{{ row.win_rate | fmt(".0%") }}</td></tr>
{% endfor %}
</table>
{{ charts.elo }}
{% endif %}

<h2 id="win-matrix">Win-rate matrix</h2>
{% if r.ratings.win_matrix %}
{% set wm = r.ratings.win_matrix %}
<p>Row method's share of points against the column method over their paired games (ties half); a cell links to the
sequences behind it.</p>
<table>
<tr><th class="name">vs</th>{% for m in wm.methods %}<th>{{ m }}</th>{% endfor %}</tr>
{% for a in wm.methods %}
{% set i = loop.index0 %}
<tr><th class="name">{{ a }}</th>
{% for b in wm.methods %}
{% set rate = wm.rate[i][loop.index0] %}
{% if rate is none %}<td style="background:{{ rate | heat }}">–</td>
{% else %}<td style="background:{{ rate | heat }}"><a href="#{{ (['pair'] + ([a, b] | sort)) | slug }}">{{ rate | fmt(".0%") }}</a>
<small>({{ wm.games[i][loop.index0] }})</small></td>{% endif %}
{% endfor %}
</tr>
{% endfor %}
</table>
{% else %}<p class="note">no paired games between methods</p>{% endif %}

<h2 id="scores">Mean score per game</h2>
<p>Mean per-game score ± half-width of the 95 % t-interval over seeds (each seed's games averaged first).</p>
<table>
<tr><th class="name">method</th>{% for o in r.opponents %}<th>{{ o }}</th>{% endfor %}</tr>
{% for m in r.methods %}
<tr><td class="name">{{ m }}</td>
{% for o in r.opponents %}
{% set cell = scores.get((m, o)) %}
<td>{% if cell %}<a href="#{{ ['games', m, o] | slug }}">{{ cell.mean | fmt }}{% if cell.half_width is not none %} ± {{ cell.half_width | fmt(".2f") }}{% endif %}</a>{% else %}–{% endif %}</td>
{% endfor %}
</tr>
{% endfor %}
</table>
{% if holdem %}
<h3 id="mbb">Hold'em win rate (mbb/hand)</h3>
<p>1000 · big blinds won / hands per seed, mean ± 95 % t half-width over seeds.</p>
<table>
<tr><th class="name">method</th>{% for o in r.opponents %}<th>{{ o }}</th>{% endfor %}</tr>
{% for m in r.methods %}
<tr><td class="name">{{ m }}</td>
{% for o in r.opponents %}
{% set cell = scores.get((m, o)) %}
<td>{% if cell and cell.mbb_per_hand is not none %}<a href="#{{ ['games', m, o] | slug }}">{{ cell.mbb_per_hand | fmt("+.0f") }}{% if cell.mbb_half_width is not none %} ± {{ cell.mbb_half_width | fmt(".0f") }}{% endif %}</a>{% else %}–{% endif %}</td>
{% endfor %}
</tr>
{% endfor %}
</table>
{% endif %}

<h2 id="curves">Cumulative performance</h2>
<p>Running mean of per-game scores, averaged over seeds; the band is the 95 % t-interval over seeds.</p>
{% for opponent, chart in charts.curves.items() %}
{{ chart }}
{% endfor %}
{% if charts.success %}
<h2 id="success">success@k</h2>
{{ charts.success }}
{% endif %}

<h2 id="costs">Validity and costs</h2>
<table>
<tr><th class="name">method</th><th>games</th><th>steps</th><th>invalid actions</th><th>success rate</th><th>tokens</th>
<th>tokens / game</th><th>LLM calls</th><th>LLM s</th><th>wall s</th></tr>
{% for c in r.costs %}
<tr><td class="name"><a href="#{{ ['method', c.method] | slug }}">{{ c.method }}</a></td><td>{{ c.games }}</td>
<td>{{ c.steps }}</td><td>{{ c.invalid_rate | fmt(".1%") }}</td><td>{{ c.success_rate | fmt(".0%") }}</td>
<td>{{ c.tokens }}</td><td>{{ c.tokens_per_game | fmt(".0f") }}</td><td>{{ c.llm_calls }}</td>
<td>{{ c.llm_s | fmt(".1f") }}</td><td>{{ c.wall_s | fmt(".1f") }}</td></tr>
{% endfor %}
</table>

<h2 id="games">Games</h2>
{% for m in r.methods %}
<h3 id="{{ ['method', m] | slug }}">{{ m }}</h3>
{% for o in r.opponents if runs_by_cell[(m, o)] %}
<h4 id="{{ ['games', m, o] | slug }}">{{ m }} vs {{ o }}</h4>
<table>
<tr><th>seed</th><th>games</th><th class="name">scores</th><th class="name">records</th></tr>
{% for run in runs_by_cell[(m, o)] %}
<tr><td>{{ run.seed }}</td><td>{{ run.scores | length }} / {{ run.games }}</td>
<td class="name">{% for s in run.scores %}{{ s | fmt("+g") }} {% endfor %}</td>
<td class="name"><a href="{{ run.dir }}/config.json">config</a> · <a href="{{ run.dir }}/events.jsonl">events</a>{% if run.summary %} · <a href="{{ run.dir }}/summary.json">summary</a>{% endif %}</td></tr>
{% endfor %}
</table>
{% endfor %}
{% endfor %}

<h2 id="pairs">Pairs</h2>
{% for pair in r.ratings.pairs %}
<h3 id="{{ ['pair', pair.a, pair.b] | slug }}">{{ pair.a }} vs {{ pair.b }}</h3>
<table>
<tr><th class="name">opponent</th><th>seed</th><th>battles</th><th>{{ pair.a }} points</th><th>{{ pair.b }} points</th>
<th class="name">runs</th></tr>
{% for s in pair.sequences %}
<tr><td class="name">{{ s.opponent }}</td><td>{{ s.seed }}</td><td>{{ s.battles }}</td><td>{{ s.points_a | fmt("g") }}</td>
<td>{{ s.points_b | fmt("g") }}</td><td class="name"><a href="{{ s.dir_a }}/events.jsonl">{{ pair.a }}</a> ·
<a href="{{ s.dir_b }}/events.jsonl">{{ pair.b }}</a></td></tr>
{% endfor %}
</table>
{% endfor %}
</body>
</html>
"""
