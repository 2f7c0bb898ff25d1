"""The report's two faces: report.json + the self-contained report.html written to the arena folder, and the Elo
table for the terminal."""

from __future__ import annotations

import json
from collections import defaultdict
from importlib.resources import files
from pathlib import Path
from typing import Any

from jinja2 import Environment, StrictUndefined
from markupsafe import Markup
from rich.table import Table

from ttlearn.eval.report.plots import curves_chart, elo_chart, method_styles, slug, success_chart
from ttlearn.eval.report.sections import build_report
from ttlearn.eval.results import p_cell
from ttlearn.runs import REPORT_HTML, REPORT_JSON
from ttlearn.untrusted import write_atomic


def write_report(out_dir: Path) -> dict[str, Any]:
    """Build the report and write OUT/report.json and OUT/report.html; returns the report."""
    report = build_report(out_dir)
    write_atomic(Path(out_dir) / REPORT_JSON, json.dumps(report, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    write_atomic(Path(out_dir) / REPORT_HTML, render_html(report))  # never through a link an arena folder holds
    return report


def _heat(rate: float | None) -> str:
    """Background of a win-rate cell: white at 0.5, shading towards green at 1 and red at 0 (60 % strength)."""
    if rate is None:
        return "#eeeeee"
    base = (44, 160, 44) if rate > 0.5 else (214, 39, 40)
    strength = 0.6 * abs(rate - 0.5) * 2
    return "#" + "".join(f"{round(255 + (c - 255) * strength):02x}" for c in base)


def _fmt(x: float | None, spec: str = "+.2f") -> str:
    return "–" if x is None else format(x, spec)


def _p(p: float | None) -> str:
    return "–" if p is None else p_cell(p)


def _charts(report: dict[str, Any]) -> dict[str, Markup | None]:
    """The inline SVG of each plot the report has data for (None for the others); a method keeps its colour and
    marker in every plot."""
    styles = method_styles(report["methods"])
    rows = report["ratings"]["rows"]
    return {
        "elo": Markup(elo_chart(rows, styles, report["ratings"]["anchor"])) if rows else None,
        "curves": Markup(curves_chart(report["curves"], styles)) if report["curves"] else None,
        "success": Markup(success_chart(report["success_at_k"], styles)) if report["success_at_k"] else None,
    }


def render_html(report: dict[str, Any]) -> str:
    """The self-contained HTML page of a report (no script, no external resource), from template.html."""
    env = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(fmt=_fmt, p=_p, heat=_heat, slug=lambda parts: slug(*parts))
    template = env.from_string(files(__package__).joinpath("template.html").read_text(encoding="utf-8"))
    scores = {(r["method"], r["opponent"]): r for r in report["scores"]}
    runs_by_cell: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in report["runs"]:
        runs_by_cell[(r["method"], r["opponent"])].append(r)
    return template.render(
        r=report,
        p=report["provenance"],
        charts=_charts(report),
        scores=scores,
        runs_by_cell=runs_by_cell,
        arena_json=json.dumps(report["provenance"]["arena_config"], indent=2, sort_keys=True),
        holdem=any(row["mbb_per_hand"] is not None for row in report["scores"]),
    )


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


def paired_table(report: dict[str, Any]) -> Table:
    """The paired differences for the terminal (`sections.paired_section`)."""
    table = Table(title="paired by (opponent, seed) sequence · mean per-game score A − B, exact sign-flip p")
    for column in ("A", "B", "sequences", "A − B", "A better", "B better", "p"):
        named = column in ("A", "B")
        table.add_column(column, justify="left" if named else "right", overflow="fold" if named else "ellipsis")
    for row in report["paired"]:
        table.add_row(
            row["a"],
            row["b"],
            str(row["sequences"]),
            _fmt(row["mean_difference"]),
            str(row["a_better"]),
            str(row["b_better"]),
            _p(row["p"]),
        )
    return table
