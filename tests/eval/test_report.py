"""The arena report from synthetic run records: numbers against hand computations, byte-identical rebuilds, and a
self-contained HTML page with the Elo table, every plot and links to the games."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ttlearn
from ttlearn.cli import app
from ttlearn.eval.report import build_report, write_report
from ttlearn.eval.report.plots import curves_chart, elo_chart, method_styles, plot_range, success_chart
from ttlearn.eval.report.sections import DIGITS
from ttlearn.runs import NO_OPPONENT, Run, RunConfig, arena_run
from ttlearn.types import UNPARSEABLE, Episode, Step


def write_run(
    out: Path,
    method: str,
    opponent: str,
    seed: int,
    scores: list[float],
    *,
    env: str = "rps",
    invalid: int = 0,
    hands: int | None = None,
    success: list | None = None,
) -> None:
    """A finished session of `scores`: one unit of one attempt per game, two steps and two LLM calls (6 tokens and
    0.25 s each) per game; `invalid` of the first game's steps are invalid."""
    config = RunConfig(
        env=env,
        env_options={"opponent": opponent},
        memory="none",
        player="scripted:random",
        units=len(scores),
        attempts=1,
        carry_memory=True,
        seed=seed,
    )
    run = Run.create(out / "runs" / method / opponent / f"seed{seed}", config)
    for i, score in enumerate(scores, start=1):
        steps = tuple(
            Step(
                "obs",
                "a",
                score / 2,
                valid=not (i == 1 and k < invalid),
                info={} if hands is None else {"hands_played": hands},
            )
            for k in range(2)
        )
        solved = success[i - 1] if success else None
        episode = Episode(1, 100 * seed + i, "task", steps, score, solved)
        calls = [
            {
                "type": "call",
                "role": "player",
                "key": f"{i}-{k}",
                "messages": [],
                "params": {},
                "completion": {"text": "a", "prompt_tokens": 5, "completion_tokens": 1, "latency_s": 0.25},
                "wall_s": 0.25,
                "cached": False,
            }
            for k in range(2)
        ]
        record = {
            "index": i,
            "type": "task",
            "epoch": 1,
            "task": i,
            "seed": episode.seed,
            "first_success": 1 if solved else None,
            "score": score,
            "instance": {},
            "attempts": [episode.to_json()],
            "calls": calls,
            "wall_s": 1.0,
        }
        run.finish(record, {"memory": {}, "player": {}})
    run.write_summary({"mean_score": sum(scores) / len(scores)})


METHODS = ("mid", "strong", "weak")


@pytest.fixture()
def tournament(tmp_path) -> Path:
    """Three methods on two opponents × three seeds × four games: strong > mid > weak game by game, except that
    mid ties strong on every game of opponent 'b'."""
    out = tmp_path / "arena"
    for seed in range(3):
        for opponent in ("a", "b"):
            base = [seed, 1, 2, 3]
            write_run(out, "weak", opponent, seed, [x - 5 for x in base], invalid=1)
            write_run(out, "mid", opponent, seed, [x + 5 for x in base])
            write_run(out, "strong", opponent, seed, [x + (10 if opponent == "a" else 5) for x in base])
    return out


def test_plot_range_keeps_the_lines_readable_under_wide_bands():
    assert plot_range([0, 2], [-30, 30]) == (-2, 4)  # spread 2: at most 2 beyond the means
    assert plot_range([0, 1], [-0.5, 1.2]) == (-0.5, 1.2)  # narrow bands are shown whole
    assert plot_range([3, 3], []) == (3, 3)


def test_method_styles_tell_a_hundred_methods_apart():
    styles = method_styles([f"m{i}" for i in range(100)])
    assert styles["m0"] == ("#1f77b4", "o") and styles["m1"] == ("#d62728", "s")
    assert styles["m10"] == ("#1f77b4", "s") and styles["m99"] == ("#17becf", "<")  # marker (99 + 9) % 10 = 8
    assert len(set(styles.values())) == 100


def test_ratings_and_tables_match_hand_computations(tournament):
    report = build_report(tournament)
    ratings = report["ratings"]
    assert [r["method"] for r in ratings["rows"]] == ["strong", "mid", "weak"]
    rows = {r["method"]: r for r in ratings["rows"]}
    # strong vs mid: 12 wins on 'a', 12 ties on 'b' → 18 of 24 points; weak loses all 48 of its battles
    assert rows["weak"]["win_rate"] == 0 and rows["weak"]["battles"] == 48
    assert rows["strong"]["win_rate"] == pytest.approx((24 + 18) / 48, abs=1e-4)
    assert rows["weak"]["rank"] == 3 and rows["weak"]["ci_high"] < rows["mid"]["ci_low"]
    assert sum(r["elo"] for r in rows.values()) / 3 == pytest.approx(1000, abs=1e-3)
    matrix = ratings["win_matrix"]
    assert matrix["methods"] == ["mid", "strong", "weak"]
    assert matrix["rate"][1][0] == 0.75 and matrix["games"][1][0] == 24 and matrix["rate"][0][0] is None
    pair = next(p for p in ratings["pairs"] if (p["a"], p["b"]) == ("mid", "strong"))
    assert [(s["opponent"], s["seed"], s["points_a"]) for s in pair["sequences"]][:4] == [
        ("a", 0, 0.0),
        ("a", 1, 0.0),
        ("a", 2, 0.0),
        ("b", 0, 2.0),
    ]

    # per-seed means of weak: (seed + 6)/4 − 5 → −3.5, −3.25, −3.0; t(0.975, 2) = 4.3027, s = 0.25
    cell = next(r for r in report["scores"] if (r["method"], r["opponent"]) == ("weak", "a"))
    assert cell["mean"] == -3.25 and cell["half_width"] == pytest.approx(4.302653 * 0.25 / math.sqrt(3), abs=1e-4)
    assert cell["mbb_per_hand"] is None  # no hands recorded: not hold'em

    # cumulative performance of mid vs 'a': seeds 0..2 score [5|6|7, 6, 7, 8]; running means at game 3 are
    # 6, 6.333, 6.667
    curve = report["curves"]["a"]["mid"]
    assert curve["t"] == [1, 2, 3, 4] and curve["mean"][:3] == [6.0, 6.0, 6.3333]
    assert curve["high"][0] == pytest.approx(6 + 4.302653 / math.sqrt(3), abs=1e-4)

    # paired by sequence: mid − strong is −5 on each of a's three seeds and 0 on b's: 2 of the 2³ sign flips of
    # (−5, −5, −5) reach |−15|; mid − weak is +10 on all six: 2 of 2⁶
    paired = {(row["a"], row["b"]): row for row in report["paired"]}
    assert list(paired) == [("mid", "strong"), ("mid", "weak"), ("strong", "weak")]
    assert paired[("mid", "strong")] == {
        "a": "mid",
        "b": "strong",
        "sequences": 6,
        "mean_difference": -2.5,
        "a_better": 0,
        "b_better": 3,
        "p": 0.25,
    }
    assert paired[("mid", "weak")]["p"] == 0.0312 and paired[("mid", "weak")]["a_better"] == 6

    costs = {c["method"]: c for c in report["costs"]}
    assert costs["weak"]["invalid"] == {"rate": pytest.approx(6 / 48, abs=1e-4), "causes": {UNPARSEABLE: 6}}
    assert costs["mid"]["invalid"] == {"rate": 0, "causes": {}}
    assert costs["mid"]["tokens"] == 24 * 12 and costs["mid"]["tokens_per_unit"] == 12
    assert costs["mid"]["llm_s"] == 12.0 and costs["mid"]["success_rate"] is None
    assert report["success_at_k"] == {}


def test_two_methods_elo_gap(tmp_path):
    """A wins 3 of 4 paired games: with the fit's prior of 0.1 virtual tied games, the odds are 3.05 : 1.05."""
    write_run(tmp_path, "A", "x", 0, [1, 1, 1, 0])
    write_run(tmp_path, "B", "x", 0, [0, 0, 0, 1])
    rows = {r["method"]: r["elo"] for r in build_report(tmp_path)["ratings"]["rows"]}
    assert rows["A"] - rows["B"] == pytest.approx(400 * math.log10(3.05 / 1.05), abs=1e-3)


def test_holdem_mbb_and_single_method(tmp_path):
    write_run(tmp_path, "m", "maniac", 0, [2.0, -1.0], env="holdem", hands=10, success=[True, False])
    write_run(tmp_path, "m", "maniac", 1, [1.0, 1.0], env="holdem", hands=10, success=[False, True])
    report = build_report(tmp_path)
    cell = report["scores"][0]
    assert cell["mbb_per_hand"] == 75.0  # mean of 1000·1/20 and 1000·2/20
    assert report["costs"][0]["success_rate"] == 0.5
    assert report["success_at_k"] == {}  # units of one attempt
    assert report["ratings"]["rows"] == [] and "only one method" in report["ratings"]["note"]
    html = tmp_path / "report.html"
    write_report(tmp_path)
    text = html.read_text()
    assert "mbb/hand" in text and "only one method" in text


def test_success_at_k_of_units_with_attempts_is_each_runs_summary_pooled(tmp_path):
    """Two runs of a method with 2 attempts a unit: success@k pooled by units, as each run's summary has it."""
    summaries = {}
    for seed, units in ((0, 3), (1, 2)):
        config = RunConfig(env="minesweeper", player="scripted:random", units=units, attempts=2, seed=seed)
        summaries[seed] = ttlearn.run(config, arena_run(tmp_path, "random", NO_OPPONENT, seed))
    pooled = [(3 * summaries[0].success_at_k[k] + 2 * summaries[1].success_at_k[k]) / 5 for k in range(2)]
    assert build_report(tmp_path)["success_at_k"] == {"random": [round(x, DIGITS) for x in pooled]}
    write_report(tmp_path)
    assert 'data-chart="success"' in (tmp_path / "report.html").read_text()


def test_rebuild_is_byte_identical_and_independent_of_location(tournament, tmp_path):
    first = write_report(tournament)
    html, data = (tournament / "report.html").read_bytes(), (tournament / "report.json").read_bytes()
    copy = tmp_path / "elsewhere"
    shutil.copytree(tournament, copy)
    (copy / "report.html").unlink()
    assert write_report(copy) == first
    assert (copy / "report.html").read_bytes() == html and (copy / "report.json").read_bytes() == data


def test_html_is_self_contained_with_the_elo_table_every_plot_and_links(tournament):
    write_report(tournament)
    html = (tournament / "report.html").read_text()
    assert not re.search(r"https?://|<script|<link|<img|@import|src=", html)
    for heading in (
        "Elo ratings",
        "Win-rate matrix",
        "Mean score per game",
        "Cumulative performance",
        "Validity and costs",
        "Games",
        "Pairs",
    ):
        assert f">{heading}</h2>" in html
    elo_table = html[html.index('<h2 id="elo">') : html.index('<h2 id="win-matrix">')]
    assert elo_table.index(">strong</a>") < elo_table.index(">mid</a>") < elo_table.index(">weak</a>")
    assert html.count('data-chart="elo"') == 1
    assert html.count('data-chart="cumulative"') == 1  # one panel per opponent, three methods on each
    assert sorted(re.findall(r'<g id="curve-([^"]+)"', html)) == [f"{o}-{m}" for o in "ab" for m in METHODS]
    ids = re.findall(r'\bid="([^"]+)"', html)
    anchors = set(ids)
    assert len(anchors) == len(ids)  # no id twice, though every chart comes from matplotlib
    internal = re.findall(r'href="#([^"]+)"', html)
    assert internal and set(internal) <= anchors  # every in-page link lands
    files = re.findall(r'href="(runs/[^"#]+)"', html)
    assert len(files) >= 3 * 12 and all((tournament / f).is_file() for f in files)


def test_report_command(tournament, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(tournament)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "strong" in result.output and "Elo" in result.output and (tournament / "report.json").exists()
    result = runner.invoke(app, ["report", str(tmp_path / "empty")], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "holds no arena runs" in result.output


def test_curves_plot_draws_one_line_per_method_per_opponent_with_deterministic_bytes(tournament):
    report = build_report(tournament)
    styles = method_styles(report["methods"])
    svg = curves_chart(report["curves"], styles)
    assert curves_chart(report["curves"], styles) == svg  # the page as a whole: test_rebuild_is_byte_identical…
    assert not re.search(r"<\?xml|<!DOCTYPE|<metadata|xmlns", svg)  # inline in HTML: no prologue, no dates
    for opponent in "ab":
        for method in METHODS:
            group = re.search(rf'<g id="curve-{opponent}-{method}">(.*?)</g>', svg, re.S).group(1)
            line = re.search(r'<path d="M ([^"]+)"', group).group(1)
            assert line.count("\nL ") == 3  # four games, one vertex each
            assert f"stroke: {styles[method][0]}" in group


def test_names_with_dollars_are_drawn_as_plain_text():
    """A method named `$\\frac{$` made `ttlearn report` fail (matplotlib read it as mathtext); every label is text."""
    names = ["$\\frac{$", "$x^2$", "plain"]
    styles = method_styles(names)
    series = {"t": [1, 2], "mean": [0.0, 1.0], "low": [None, None], "high": [None, None]}
    svgs = [
        curves_chart({"$opp$": {name: series for name in names}}, styles),
        success_chart({name: [0.5, 1.0] for name in names}, styles),
        elo_chart(
            [{"method": name, "elo": 1000.0 + i, "ci_low": None, "ci_high": None} for i, name in enumerate(names)],
            styles,
            1000.0,
        ),
    ]
    for svg in svgs:
        assert "$\\frac{$" in svg and "$x^2$" in svg


def test_paired_p_reads_as_the_results_table_writes_it():
    """Reports keep p at four decimals: a stored 0 is p < 0.0001 (an exact test's p is never 0), as docs/results.md
    says it, not "0" in the terminal."""
    from rich.console import Console

    from ttlearn.eval.report.render import paired_table

    row = {"a": "x", "b": "y", "sequences": 297, "mean_difference": 0.77, "a_better": 119, "b_better": 46}
    report = {"paired": [{**row, "p": 0.0}, {**row, "b": "z", "p": 0.0312}, {**row, "b": "w", "p": None}]}
    console = Console(width=200, record=True)
    console.print(paired_table(report))
    lines = {line.split("│")[2].strip(): line for line in console.export_text().splitlines() if line.count("│") > 3}
    assert lines["y"].rstrip(" │").endswith("< 0.0001")
    assert lines["z"].rstrip(" │").endswith("0.031")
    assert lines["w"].rstrip(" │").endswith("–")
