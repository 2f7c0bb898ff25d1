"""The measured table of docs/results.md, rebuilt from `results/` alone, so no number in it is typed by hand.

`results/table.json` lists the rows in order; each names the result folder(s) it reads and how:

    control      a run with `--control`: success@1 of memory vs its paired control (McNemar from its summary), in
                 the control's epoch (the last one) when the run has several
    pooled       several `control` results pooled (`results`): the paired tasks added up, McNemar on the summed
                 discordant counts
    memory_gain  a run of units with attempts: success@N with memory vs attempt 1 repeated (the greedy control)
    runs         two runs on the same instances: success@N of `result` vs `against`; their discordant counts
                 come from the row (`discordant`, with its `source`) where the unit records were never committed
    arena        an arena report: the Elo of `method` vs `against`, and the sequences each did better on with the exact
                 paired sign-flip p (reports from before the paired section: whether their ranks differ)
    scores       two runs on the same instances whose success is too rare to compare: the mean score of
                 attempt `attempt` (default the last) of `result` vs `against`, the tasks where each scored higher,
                 the exact paired sign-flip p (from the unit records, committed compressed or not)

`ttlearn results` prints the table; `ttlearn results --write docs/results.md` replaces it between the markers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttlearn.eval.metrics import mcnemar_exact, wilson_interval
from ttlearn.eval.paired import compare_trials
from ttlearn.eval.summary import RunSummary
from ttlearn.runs import REPORT_JSON, Run, RunDir, holds_run, read_config
from ttlearn.untrusted import read_json

TABLE = "table.json"
BEGIN = "<!-- results table: rebuilt from results/ by `ttlearn results --write docs/results.md` -->"
END = "<!-- end of results table -->"
HEADER = (
    "| experiment | player | memory vs control | n | with memory | control | only mem / only ctl | p |\n"
    "|---|---|---|---|---|---|---|---|"
)


def rate_cell(rate: float, low: float, high: float) -> str:
    return f"{rate:.3f} ({low:.2f}–{high:.2f})"


def wilson_cell(rate: float, n: int) -> str:
    """A rate over n tasks with its 95 % Wilson interval."""
    return rate_cell(rate, *wilson_interval(round(rate * n), n))


def p_cell(p: float) -> str:
    """Reports store p at four decimals, so a 0 there is a p below 0.0001 (an exact test's p is never 0)."""
    if p < 0.0001:
        return "< 0.0001"
    return "1.0" if p >= 0.995 else f"{p:.2g}"


def _summary(root: Path, name: str) -> RunSummary:
    path = RunDir(root / name).summary
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: results/table.json names a result that is not there")
    return RunSummary.from_json(read_json(path), read_config(root / name))


def _unit_records(folder: Path) -> list[dict[str, Any]]:
    """A committed run's unit records (compressed or not, of any layout `Run` reads)."""
    records = Run.open(folder).records if holds_run(folder) else []
    if not records:
        raise FileNotFoundError(f"{folder} holds no unit records: results/table.json names a result without them")
    return records


def _section(summary: RunSummary, name: str, result: str) -> Any:
    """The summary's section `name` (control, learning, memory_gain), which the row's kind needs."""
    section = getattr(summary, name)
    if section is None:
        raise ValueError(f"results/{result} has no {name} section, which its row in results/{TABLE} reads")
    return section


def player_cell(spec: dict[str, Any], root: Path) -> str:
    """The player of the row's result, as its config names it (with its temperature when it samples)."""
    if spec["kind"] == "arena":
        report = read_json(root / spec["result"] / REPORT_JSON)
        return f"`{report['provenance']['methods'][spec['method']]['player']}`"
    config = read_config(root / (spec["results"][0] if spec["kind"] == "pooled" else spec["result"]))
    return f"`{config.player}`" + (f" (T = {config.temperature:g})" if config.temperature > 0 else "")


def row_cells(spec: dict[str, Any], root: Path) -> list[str]:
    """The numeric cells of one row: n, with memory, control, only mem / only ctl, p."""
    kind = spec["kind"]
    if kind == "arena":
        report = read_json(root / spec["result"] / REPORT_JSON)
        rows = {r["method"]: r for r in report["ratings"]["rows"]}
        a, b = rows[spec["method"]], rows[spec["against"]]
        matrix = report["ratings"]["win_matrix"]
        games = matrix["games"][matrix["methods"].index(a["method"])][matrix["methods"].index(b["method"])]
        elo = [f"Elo {r['elo']:.0f} ({r['ci_low']:.0f}–{r['ci_high']:.0f})" for r in (a, b)]
        pair = next((r for r in report.get("paired", []) if {r["a"], r["b"]} == {a["method"], b["method"]}), None)
        if pair is None:  # a report from before the paired section: the ranks only
            ranks = "one rank" if a["rank"] == b["rank"] else f"rank {a['rank']} / {b['rank']}"
            return [f"{games} games", *elo, ranks, "—"]
        better = (pair["a_better"], pair["b_better"])
        if pair["a"] != a["method"]:
            better = better[::-1]
        return [f"{games} games", *elo, f"{better[0]} / {better[1]} sequences", p_cell(pair["p"])]
    if kind == "pooled":
        controls = [_section(_summary(root, name), "control", name) for name in spec["results"]]
        n = sum(c.tasks for c in controls)
        a = round(sum(c.rows[0].a * c.tasks for c in controls))
        b = round(sum(c.rows[0].b * c.tasks for c in controls))
        only_a, only_b = sum(c.rows[0].only_a for c in controls), sum(c.rows[0].only_b for c in controls)
        cells = [wilson_cell(a / n, n), wilson_cell(b / n, n), f"{only_a} / {only_b}"]
        return [str(n), *cells, p_cell(mcnemar_exact(only_a, only_b))]
    summary = _summary(root, spec["result"])
    n = summary.tasks
    if kind in ("control", "learning"):  # learning: the last epoch in the "with memory" column, the first as "control"
        section = _section(summary, kind, spec["result"])
        paired, n = section.rows[0], section.tasks
        cells = [wilson_cell(paired.a, n), wilson_cell(paired.b, n), f"{paired.only_a} / {paired.only_b}"]
        return [str(n), *cells, p_cell(paired.p_value)]
    if kind == "memory_gain":
        gain = _section(summary, "memory_gain", spec["result"])
        only = f"{gain.solved_only_with_memory} / 0"
        cells = [wilson_cell(gain.with_memory, n), wilson_cell(gain.control, n), only]
        return [str(n), *cells, p_cell(gain.p_value)]
    if kind == "runs":
        other = _summary(root, spec["against"])
        if other.tasks != n:
            raise ValueError(f"{spec['result']} and {spec['against']} played different numbers of tasks")
        cells = [rate_cell(s.success_at_k[-1], *s.success_at_k_ci95[-1]) for s in (summary, other)]
        only_a, only_b = spec["discordant"]
        return [str(n), *cells, f"{only_a} / {only_b}", p_cell(mcnemar_exact(only_a, only_b))]
    if kind == "scores":
        attempts = summary.config.attempts
        records = (_unit_records(root / spec[name]) for name in ("result", "against"))
        comparison = compare_trials(*records, attempts)
        row = comparison.scores[spec.get("attempt", attempts) - 1]
        cells = [f"score {row.a:+.2f} (attempt {row.k})", f"score {row.b:+.2f}"]
        return [str(comparison.tasks), *cells, f"{row.a_higher} / {row.b_higher} higher", p_cell(row.p_value)]
    raise ValueError(
        f"unknown row kind {kind!r} in results/{TABLE}; use control, learning, pooled, memory_gain, runs, scores"
        " or arena"
    )


def render(root: Path) -> str:
    """The whole table, header first, one line per row of `root/table.json`."""
    specs = read_json(Path(root) / TABLE)["rows"]
    lines = [HEADER]
    for spec in specs:
        cells = [spec["experiment"], player_cell(spec, Path(root)), spec["comparison"], *row_cells(spec, Path(root))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def replace_table(text: str, table: str) -> str:
    """`text` with the part between BEGIN and END replaced by `table`."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"the file has no results table markers ({BEGIN} … {END})")
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}"
