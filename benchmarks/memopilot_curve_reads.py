"""What a MemoPilot training run's greedy writer reads, evaluation by evaluation (RPS).

    python benchmarks/memopilot_curve_reads.py RUN_DIR

The trainer's development evaluation plays every training opponent × `eval_seeds` with the greedy writer and records
its games (`episodes.jsonl`, type "evaluation": every sequence's game 1, then every game 2, …, the sequences in the
order opponent by opponent, seed by seed; each game's `info.context` is the note its player was shown). Per
evaluation this prints the score the curve plots (`metrics.jsonl`), how many notes name a move at all and how many
name the opponent's favourite of the game before (ties count), and the moves each opponent's notes name. The order
is checked against the notes `metrics.jsonl` keeps for each opponent's first seed.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter
from pathlib import Path

from memopilot_heldout import favourites
from memopilot_power import evaluations

from ttlearn.envs.rps_bots import MOVES
from ttlearn.memory.memopilot import FORMS, named_reading


def records(path: Path) -> list[dict]:
    """The run's episodes.jsonl, or its gzipped copy (as docs/ keeps them)."""
    plain = path / "episodes.jsonl"
    text = plain.read_text() if plain.exists() else gzip.decompress((path / "episodes.jsonl.gz").read_bytes()).decode()
    return [json.loads(line) for line in text.splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    args = parser.parse_args()
    config = json.loads((args.run / "train.json").read_text())
    form, games = config["writer_form"], config["games"]
    sequences = [(o, s) for o in config["opponents"] for s in config["eval_seeds"]]
    played: dict[int, list[dict]] = {}
    for record in records(args.run):
        if record["type"] == "evaluation" and record["memory"] == "writer":
            played.setdefault(record["after_step"], []).append(record["episode"])

    print("| after step | score a round (games 2..T) | notes | name a move | name the previous game's favourite |"
          " the moves named, by opponent |\n|---|---|---|---|---|---|")  # fmt: skip
    for step, evaluation in sorted(evaluations(args.run).items()):
        episodes = played.get(step, [])
        if len(episodes) != len(sequences) * games:
            raise SystemExit(f"after step {step}: {len(episodes)} evaluation games, expected {len(sequences) * games}")
        named, hits, notes = 0, 0, 0
        by_opponent: dict[str, Counter] = {}
        for k, (opponent, seed) in enumerate(sequences):
            sequence = episodes[k :: len(sequences)]
            shown = [game["info"]["context"] for game in sequence[1:]]
            if seed == config["eval_seeds"][0] and shown != evaluation["notes"][opponent]:
                raise SystemExit(f"after step {step}: the games are not in game × opponent × seed order ({opponent})")
            for before, note in zip(sequence, shown):
                moves = favourites([s["info"]["opponent_move"] for s in before["steps"]])
                reading = named_reading(note.removeprefix(FORMS[form].prefill).strip(), MOVES)
                notes += 1
                named += reading is not None
                hits += reading in moves
                by_opponent.setdefault(opponent, Counter())[reading or "none"] += 1
        named_by = ", ".join(f"{o} {'/'.join(sorted(c))}" for o, c in by_opponent.items())
        print(f"| {step} | {evaluation['reward'][0]:+.3f} | {notes} | {named} | {hits} | {named_by} |")


if __name__ == "__main__":
    main()
