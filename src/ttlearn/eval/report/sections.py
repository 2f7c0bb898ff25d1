"""The report as plain data: ratings, score tables, curves and costs computed from an arena's run records alone.

`build_report(OUT)` reads the run directories under OUT/runs (their configs and unit records, via `Run.open`) and
OUT/arena.json (the arena config and git commit recorded when it started) — nothing else, so a copied arena folder
can be re-reported offline. Ratings, scores and curves read each unit's score; success, invalid steps and costs are
each run's `RunSummary` (what `ttlearn show` prints), pooled per method. Every number is a function of those records
and a fixed bootstrap seed, rounded to `DIGITS` decimals, and nothing of the build itself (time, host, absolute
paths) enters it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttlearn.eval.metrics import cumulative_performance, mbb_per_hand, mean_ci, paired_sign_flip_p
from ttlearn.eval.rating import (
    GameResult,
    battles_from_results,
    bootstrap_ci,
    bradley_terry,
    rank_with_ties,
    win_matrix,
)
from ttlearn.eval.summary import RunSummary, pooled_invalid, summarize
from ttlearn.runs import ARENA_FILE, NO_OPPONENT, RUNS_DIR, Run, RunConfig, RunDir, arena_runs, run_files
from ttlearn.types import Episode
from ttlearn.untrusted import read_json

ELO_SCALE, ELO_ANCHOR = 400.0, 1000.0
N_BOOT, BOOT_SEED = 1000, 0
DIGITS = 4
"""Numbers in the report are rounded to this many decimals: far below any CI, and stable across platforms."""


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
    summary: RunSummary
    config_file: str
    records_file: str


def unit_episodes(run: Run) -> tuple[Episode, ...]:
    """Each unit of a run as one episode: its last attempt (whose score is the unit's), numbered by unit."""
    return tuple(
        dataclasses.replace(Episode.from_json(record["attempts"][-1]), index=record["index"])
        for record in run.records
        if record["type"] == "task"
    )


def load_runs(out_dir: Path) -> list[RecordedRun]:
    """Every run under OUT/runs/<method>/<opponent>/seed<k>, sorted by (method, opponent, seed)."""
    out_dir = Path(out_dir)
    runs = []
    for path in arena_runs(out_dir):
        run = Run.open(path)
        config_file, records_file = run_files(path)
        runs.append(
            RecordedRun(
                method=path.parts[-3],
                opponent=run.config.env_options.get("opponent", NO_OPPONENT),
                seed=run.config.seed,
                dir=path.relative_to(out_dir).as_posix(),
                config=run.config,
                episodes=unit_episodes(run),
                summary=summarize(run),
                config_file=config_file,
                records_file=records_file,
            )
        )
    if not runs:
        raise FileNotFoundError(f"{out_dir} holds no arena runs ({RUNS_DIR}/<method>/<opponent>/seed<k>/)")
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
    dirs = {(r.method, r.opponent, r.seed): f"{r.dir}/{r.records_file}" for r in runs}
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
                        "records_a": dirs[(a, opp, seed)],
                        "records_b": dirs[(b, opp, seed)],
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


def paired_section(runs: Sequence[RecordedRun]) -> list[dict[str, Any]]:
    """Every pair of methods on the (opponent, seed) sequences both played: per sequence the difference of their mean
    per-game scores (A − B; the games of a sequence are dependent, so the sequence is the unit), how many sequences
    A won, lost and tied, and the exact paired sign-flip p (`paired_sign_flip_p`) — the test an arena's pairing
    allows, where the Elo interval only ranks."""
    means = {(r.method, r.opponent, r.seed): float(np.mean([e.score for e in r.episodes])) for r in runs if r.episodes}
    methods = sorted({method for method, _, _ in means})
    rows = []
    for a, b in ((a, b) for i, a in enumerate(methods) for b in methods[i + 1 :]):
        both = sorted({(o, s) for m, o, s in means if m == a} & {(o, s) for m, o, s in means if m == b})
        differences = [means[(a, o, s)] - means[(b, o, s)] for o, s in both]
        rows.append(
            {
                "a": a,
                "b": b,
                "sequences": len(both),
                "mean_difference": _round(float(np.mean(differences))) if differences else None,
                "a_better": sum(d > 1e-9 for d in differences),
                "b_better": sum(d < -1e-9 for d in differences),
                "p": _round(paired_sign_flip_p(differences)) if differences else None,
            }
        )
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
    """success@k per method whose units have several attempts: each run's (`RunSummary.success_at_k`), pooled over
    its runs by their units (a share of the units, so the pooled share is the weighted mean)."""
    pooled: dict[str, list[RunSummary]] = defaultdict(list)
    for r in runs:
        if r.summary.success_at_k is not None and r.config.attempts and r.config.attempts > 1:
            pooled[r.method].append(r.summary)
    return {
        method: [
            _round(sum(s.success_at_k[k] * s.tasks for s in summaries) / sum(s.tasks for s in summaries))
            for k in range(min(len(s.success_at_k) for s in summaries))
        ]
        for method, summaries in sorted(pooled.items())
    }


def costs_section(runs: Sequence[RecordedRun]) -> list[dict[str, Any]]:
    """Per method, its runs' summaries pooled: units, steps, invalid steps (share and causes), the share of units
    solved (None where the environment defines no success), tokens, LLM calls, LLM and wall time."""
    by_method: dict[str, list[RunSummary]] = defaultdict(list)
    for r in runs:
        by_method[r.method].append(r.summary)
    rows = []
    for method, summaries in sorted(by_method.items()):
        units = [row for s in summaries for row in s.units]
        invalid = pooled_invalid(units, [s.invalid.causes for s in summaries if s.invalid])
        solved = [row.solved for row in units]
        tokens = sum(row.tokens for row in units)
        rows.append(
            {
                "method": method,
                "units": len(units),
                "steps": sum(row.steps for row in units),
                "invalid": None if invalid is None else {"rate": _round(invalid.rate), "causes": invalid.causes},
                "success_rate": _round(sum(map(bool, solved)) / len(solved)) if solved and None not in solved else None,
                "tokens": tokens,
                "tokens_per_unit": _round(tokens / len(units)) if units else None,
                "llm_calls": sum(row.llm_calls for row in units),
                "llm_s": _round(sum(row.llm_s for row in units)),
                "wall_s": _round(sum(row.wall_s for row in units)),
            }
        )
    return rows


def provenance_section(out_dir: Path, runs: Sequence[RecordedRun]) -> dict[str, Any]:
    """What produced the records: the arena config and git commit (from arena.json), the ttlearn versions and model
    specs recorded in the runs, and what each method label stands for."""
    arena_file = Path(out_dir) / ARENA_FILE
    arena = read_json(arena_file) if arena_file.exists() else {}
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
        "paired": paired_section(runs),
        "curves": curves_section(runs),
        "success_at_k": success_section(runs),
        "costs": costs_section(runs),
        "runs": [
            {
                "method": r.method,
                "opponent": r.opponent,
                "seed": r.seed,
                "dir": r.dir,
                "config_file": r.config_file,
                "records_file": r.records_file,
                "units": r.config.units,
                "scores": [_round(e.score) for e in r.episodes],
                "summary": RunDir(Path(out_dir) / r.dir).summary.exists(),
            }
            for r in runs
        ],
    }
