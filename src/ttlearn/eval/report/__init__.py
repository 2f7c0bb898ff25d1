"""The arena report: ratings, curves and costs, rebuilt from the run records alone.

Three rooms: `sections` turns the records of an arena folder into plain data (what report.json holds), `plots` draws
that data with matplotlib's SVG backend, and `render` writes report.json and the one-file report.html (template.html,
the plots inline, no script and no external resource; each table cell links to the games behind it). Rebuilding
from the same records gives byte-identical files, wherever the folder lies.
"""

from ttlearn.eval.report.render import elo_table, paired_table, render_html, write_report
from ttlearn.eval.report.sections import build_report

__all__ = [
    "build_report",
    "elo_table",
    "paired_table",
    "render_html",
    "write_report",
]
