"""Where a MemoPilot held-out arena's difference comes from, and what the writers read.

    python benchmarks/memopilot_heldout.py ARENA_DIR [--a memopilot-trained] [--b memopilot-untrained]

The arena report (`ttlearn report`) gives one paired difference per pair of methods over all (opponent, seed)
sequences. A registered test is decided by that number, but says nothing of which opponents carry it or whether the
writer's notes changed the way training meant them to. This splits the same difference (`paired_section`: mean
per-game score A − B, a game's score the sum of its rounds, sequences each method won, exact sign-flip p) by opponent
family (the name before its first '-') and by opponent, checks the overall row against report.json, and reads each
method's notes: the note after game t is what the player saw in game t + 1, and it "reads the opponent" when the move
it names (`named_reading`, after the form's prefill) is one the opponent played most in game t (ties count).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ttlearn.envs.rps_bots import MOVES
from ttlearn.eval.report.sections import DIGITS, RecordedRun, load_runs, paired_section
from ttlearn.eval.results import p_cell
from ttlearn.memory.memopilot import FORMS, named_reading
from ttlearn.runs import Run


def family(opponent: str) -> str:
    return opponent.split("-")[0]


def paired_row(runs: Sequence[RecordedRun], a: str, b: str) -> dict:
    """The report's paired row of A − B on these runs, oriented A − B whatever the methods' alphabetical order."""
    (row,) = paired_section([r for r in runs if r.method in (a, b)])
    if row["a"] == a:
        return row
    return {**row, "mean_difference": -row["mean_difference"], "a_better": row["b_better"], "b_better": row["a_better"]}


def favourites(moves: Sequence[str]) -> set[str]:
    """The moves played most often (all of them on a tie)."""
    counts = Counter(moves)
    return {move for move, count in counts.items() if count == max(counts.values())}


def notes_read(arena: Path, run: RecordedRun) -> list[tuple[str, set[str]]]:
    """(the note after game t, the opponent's favourites in game t) for every game but the last."""
    recorded = Run.open(arena / run.dir)
    return [
        (recorded.state_after(t)["memory"]["text"], favourites([s.info["opponent_move"] for s in game.steps]))
        for t, game in enumerate(run.episodes[:-1], start=1)
    ]


def reads_favourite(note: str, form: str, moves: set[str]) -> bool:
    prefill = FORMS[form].prefill
    return named_reading(note.removeprefix(prefill).strip(), MOVES) in moves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arena", type=Path)
    parser.add_argument("--a", default="memopilot-trained")
    parser.add_argument("--b", default="memopilot-untrained")
    args = parser.parse_args()
    runs = [r for r in load_runs(args.arena) if r.method in (args.a, args.b)]
    if {r.method for r in runs if r.config.memory == "memopilot"} != {args.a, args.b}:
        raise SystemExit(f"{args.arena} lacks MemoPilot runs of {args.a} or {args.b}: name two with --a / --b")

    print(f"A = {args.a}, B = {args.b}: paired by (opponent, seed) sequence, mean per-game score A − B")
    print("| opponent | sequences | A − B a game | A better / B better | sign-flip p |\n|---|---|---|---|---|")
    groups: dict[str, list[RecordedRun]] = {}
    for opponent in sorted({r.opponent for r in runs}):
        groups.setdefault(f"**{family(opponent)}**", []).extend(r for r in runs if r.opponent == opponent)
        groups[opponent] = [r for r in runs if r.opponent == opponent]
    groups["**all**"] = runs
    rows = {name: paired_row(group, args.a, args.b) for name, group in groups.items()}
    for name, row in rows.items():
        print(f"| {name} | {row['sequences']} | {row['mean_difference']:+.3f} | {row['a_better']} / {row['b_better']} "
              f"| {p_cell(row['p'])} |")  # fmt: skip

    report = json.loads((args.arena / "report.json").read_text())
    recorded = next(p for p in report["paired"] if {p["a"], p["b"]} == {args.a, args.b})
    sign = 1 if recorded["a"] == args.a else -1
    if round(rows["**all**"]["mean_difference"], DIGITS) != round(sign * recorded["mean_difference"], DIGITS):
        raise SystemExit(
            f"report.json's paired difference is {recorded['mean_difference']}: rebuild it (ttlearn report)"
        )
    print(f"report.json's paired A − B: {sign * recorded['mean_difference']:+.4f} (the same)")

    print("\n| method | notes read (games 2..T) | name the previous game's favourite (ties count) | distinct notes |")
    print("|---|---|---|---|")
    for method in (args.a, args.b):
        read = [(note, r.config.memory_options["form"], moves)
                for r in runs if r.method == method for note, moves in notes_read(args.arena, r)]  # fmt: skip
        hits = sum(reads_favourite(note, form, moves) for note, form, moves in read)
        print(f"| {method} | {len(read)} | {hits} | {len({note for note, _, _ in read})} |")


if __name__ == "__main__":
    main()
