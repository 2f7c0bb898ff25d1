"""results/: the measured table of docs/results.md is rebuilt from the result folders alone, and every folder says
how it was made."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from ttlearn.eval.metrics import mcnemar_exact
from ttlearn.eval.results import BEGIN, END, p_cell, render, replace_table, row_cells
from ttlearn.eval.summary import RunSummary, summarize
from ttlearn.runs import Run, RunConfig, RunDir

ROOT = Path(__file__).parents[2]


def test_the_results_page_holds_the_table_rebuilt_from_results():
    """The table lives on docs/results.md, whose markers name the command that rebuilds that page; the README
    carries no copy of it to drift."""
    page = (ROOT / "docs" / "results.md").read_text()
    assert "`ttlearn results --write docs/results.md`" in BEGIN
    assert page.split(BEGIN)[1].split(END)[0].strip() == render(ROOT / "results")
    assert BEGIN not in (ROOT / "README.md").read_text()


def test_every_result_folder_says_its_command_commit_date_and_records():
    folders = [p for p in (ROOT / "results").iterdir() if p.is_dir()]
    assert len(folders) > 30
    for folder in folders:
        text = (folder / "README.md").read_text()
        assert all(word in text for word in ("ttlearn ", "Commit: ", "Date: ", "Records: ")), folder


RECORDED = sorted(
    {
        p.parent
        for name in ("tasks", "units")
        for at in ("*", "*/*")
        for suffix in RunDir.PACKED
        for p in (ROOT / "results").glob(f"{at}/{name}.jsonl{suffix}")
    }
)
VARIES = {"run_dir", "config", "done", "total", "wall_s", "wall_s_per_unit"}
"""Summary fields that say where and how fast a run was played."""
OLD_NAMES = {"invalid_rate": "invalid", "wall_s_per_task": "wall_s_per_unit"}
"""Keys of older summary files → the fields they became."""


def as_recorded(committed, recomputed):
    """`recomputed` with what `committed` (an older summary, read back) does not record left out: a section's part
    it lacks, the causes of invalid steps it did not count."""
    if dataclasses.is_dataclass(committed) and dataclasses.is_dataclass(recomputed):
        names = [f.name for f in dataclasses.fields(recomputed)]
        kept = {name: as_recorded(getattr(committed, name), getattr(recomputed, name)) for name in names}
        return dataclasses.replace(recomputed, **kept)
    return None if committed is None else recomputed


@pytest.mark.parametrize("folder", RECORDED, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_a_result_with_records_recomputes_its_summary(folder: Path) -> None:
    run = Run.open(folder)
    recomputed = summarize(run)
    data = json.loads((folder / "summary.json").read_text())
    committed = RunSummary.from_json(data, run.config)
    recorded = {OLD_NAMES.get(key, key) for key in data} & {f.name for f in dataclasses.fields(RunSummary)} - VARIES
    assert len(recorded) >= 9  # the oldest files hold nine of its figures
    for name in sorted(recorded):
        assert as_recorded(getattr(committed, name), getattr(recomputed, name)) == getattr(committed, name), name


def _trial_result(root: Path, name: str, summary: dict) -> None:
    """A result folder holding only a summary.json with these figures (of a sokoban run of attempts)."""
    config = RunConfig(env="sokoban", units=1, attempts=len(summary.get("success_at_k", [0])), player="scripted:random")
    Run.create(root / name, config).close()
    data = {"run_dir": str(root / name), "config": config.model_dump(), "done": 1, "total": 1, **summary}
    (root / name / "summary.json").write_text(json.dumps(data))


def test_row_cells_by_hand(tmp_path):
    # 17 of 43 with memory (interval from the summary), 19 of 43 for the control: Wilson (0.3026, 0.5907)
    _trial_result(
        tmp_path,
        "paired",
        {
            "tasks": 43,
            "success_at_k": [17 / 43],
            "success_at_k_ci95": [[0.2637, 0.5442]],
            "control": {
                "tasks": 43,
                "rows": [{"k": 1, "a": 17 / 43, "b": 19 / 43, "only_a": 5, "only_b": 7, "p_value": 0.7744}],
            },
        },
    )
    cells = row_cells({"kind": "control", "result": "paired"}, tmp_path)
    assert cells == ["43", "0.395 (0.26–0.54)", "0.442 (0.30–0.59)", "5 / 7", "0.77"]
    # the last epoch 20 of 30, the first 15 of 30: Wilson (0.4878, 0.8077) and (0.3315, 0.6685); discordant 7 / 2,
    # exact McNemar 2 · (1 + 9 + 36) / 2⁹ = 0.1797
    learning = {"tasks": 30, "rows": [{"k": 1, "a": 2 / 3, "b": 0.5, "only_a": 7, "only_b": 2, "p_value": 0.1797}]}
    _trial_result(tmp_path, "learned", {"tasks": 90, "learning": {**learning, "first": 1, "last": 3}})
    cells = row_cells({"kind": "learning", "result": "learned"}, tmp_path)
    assert cells == ["30", "0.667 (0.49–0.81)", "0.500 (0.33–0.67)", "7 / 2", "0.18"]
    with pytest.raises(ValueError, match="no learning section"):
        row_cells({"kind": "learning", "result": "paired"}, tmp_path)
    # two runs of 50 tasks at k = 3, discordant 2 / 3 from the row: p = mcnemar_exact(2, 3) = 1
    for name, rate in (("a", 0.28), ("b", 0.30)):
        summary = {"tasks": 50, "success_at_k": [0.1, 0.2, rate], "success_at_k_ci95": [[0, 1]] * 3}
        _trial_result(tmp_path, name, summary)
    spec = {"kind": "runs", "result": "a", "against": "b", "discordant": [2, 3]}
    assert row_cells(spec, tmp_path)[3:] == ["2 / 3", "1.0"] and mcnemar_exact(2, 3) == 1.0
    # pooled: 10/20 vs 8/20 (discordant 3 / 1) and 5/10 vs 5/10 (1 / 1) → 15/30 vs 13/30, 4 / 2,
    # p = 2 · (C(6,0) + C(6,1) + C(6,2)) / 2⁶ = 2 · 22/64 = 0.6875
    for name, (a, b, only_a, only_b, n) in {"x": (10, 8, 3, 1, 20), "y": (5, 5, 1, 1, 10)}.items():
        row = {"k": 1, "a": a / n, "b": b / n, "only_a": only_a, "only_b": only_b, "p_value": 1.0}
        _trial_result(tmp_path, name, {"tasks": 2 * n, "control": {"tasks": n, "rows": [row], "epoch": 2}})
    pooled = row_cells({"kind": "pooled", "results": ["x", "y"]}, tmp_path)
    assert pooled == ["30", "0.500 (0.33–0.67)", "0.433 (0.27–0.61)", "4 / 2", "0.69"] and mcnemar_exact(4, 2) == 0.6875
    # scores: two runs of 2 attempts on 3 tasks; attempt 2 scores 1.0, 2.0, 0.0 vs 0.0, 0.0, 0.0 (the packed run's)
    # → means +1.00 vs +0.00, 2 / 0 higher, sign-flip p = 2 of the 4 sign patterns reach |3.0| = 0.5
    for name, second in (("m", [1.0, 2.0, 0.0]), ("n", [0.0, 0.0, 0.0])):
        _trial_result(tmp_path, name, {"tasks": 3, "success_at_k": [0.0, 0.0], "success_at_k_ci95": [[0, 1]] * 2})
        records = [
            {"epoch": 1, "seed": seed, "first_success": None, "attempts": [{"score": -1.0}, {"score": x}]}
            for seed, x in enumerate(second)
        ]
        lines = "".join(json.dumps(r) + "\n" for r in records).encode()
        if name == "m":
            RunDir(tmp_path / name).units.write_bytes(lines)
        else:
            RunDir(tmp_path / name).units.unlink()
            (tmp_path / name / (RunDir.UNITS + ".gz")).write_bytes(gzip.compress(lines))
    scores = row_cells({"kind": "scores", "result": "m", "against": "n"}, tmp_path)
    assert scores == ["3", "score +1.00 (attempt 2)", "score +0.00", "2 / 0 higher", "0.5"]
    assert row_cells({"kind": "scores", "result": "m", "against": "n", "attempt": 1}, tmp_path)[3:] == [
        "0 / 0 higher",
        "1.0",
    ]
    with pytest.raises(FileNotFoundError, match="holds no unit records"):
        row_cells({"kind": "scores", "result": "a", "against": "n"}, tmp_path)
    with pytest.raises(ValueError, match="unknown row kind"):
        row_cells({"kind": "guess", "result": "a"}, tmp_path)


def test_the_table_goes_between_the_markers_only():
    text = f"before\n{BEGIN}\nold table\n{END}\nafter\n"
    assert replace_table(text, "new") == f"before\n{BEGIN}\nnew\n{END}\nafter\n"
    with pytest.raises(ValueError, match="markers"):
        replace_table("no markers here", "new")


def test_a_p_rounded_to_zero_by_a_report_reads_as_below_its_precision():
    assert [p_cell(p) for p in (0.0, 0.00009, 0.0089, 0.51, 0.999)] == ["< 0.0001", "< 0.0001", "0.0089", "0.51", "1.0"]
