"""The ceiling of MemoPilot's notes on the development opponents: writers that know the answer, against the untrained
writer, per opponent family.

    flock /work/coord/cpu-long.lock python benchmarks/memopilot_ceiling.py [--seeds 300,301] [--threads 2]
    python benchmarks/memopilot_ceiling.py --table docs/memopilot-ceiling/records.json     # the tables again

Every contestant plays the same sequences (a development opponent × a registered seed, docs/data-register.md): 3 games
of 6 rounds, the `by-player` transcript, the frozen player `gemma270m` greedy with `--note-at default`, as mp-dev6 and
the held-out test played. Game 1 has no note; after games 1 and 2 each contestant writes the note the player reads in
the next game:

  none                 no note;
  untrained            the untrained SmolLM2 writer in the `favourite` form (notes of at most 8 tokens, 120
                       characters: the held-out test's `memopilot-untrained`);
  true-favourite       the `favourite` form's note naming the reading whose counter scores most over the next game,
                       from the bot's definition (`Bot.schedule`, `game_favourite`): the form's ceiling;
  previous-favourite   the move the opponent played most in the previous game (ties: the lower move): what the
                       trained writer reads;
  last-move            the opponent's last move of the previous game;
  recent-favourite     the move it played most in the previous game's last 3 rounds (a switcher's current lean);
  opening-favourite    the move it played most in the previous game's first 3 rounds (a switcher's first lean,
                       which it leans towards again when the next game starts);
  true-sequence        one move per line, the best response to each round of the next game (`Bot.schedule`): a
                       per-round note, which no writer form writes yet;
  replay-counters      one move per line, the counter of the opponent's move in the same round of the previous game.

The five readings are written through the same completion as the untrained writer's reply (`note_source`, then
`bound_memory`), so they differ from it only in the move named. The player's greedy decisions are a function of their
prompt, so a game another contestant already played with the same suggestions comes from the reply cache.

Printed per family (biased / cycle / switch) and overall: each contestant's mean score a game in games 2–3, its paired
difference from the untrained writer over the sequences (mean, standard deviation, range, sequences better / worse,
exact sign-flip p), what its notes would score if the player played every suggested move (the expected score against
the bot's known distributions: the note's own ceiling), and the share of decisions that played the suggestion. The
per-sequence records go to `--out` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from statistics import mean, stdev

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from ttlearn.envs.base import make_env
from ttlearn.envs.rps_bots import MOVES, beats, expected_payoffs, game_favourite, make_bot, most_common
from ttlearn.eval.metrics import paired_sign_flip_p
from ttlearn.llm.base import make_llm
from ttlearn.memory.memopilot import MemoPilotMemory, advice_of, note_source
from ttlearn.memory.text import bound_memory
from ttlearn.players.llm import suggested_action
from ttlearn.rollout.loop import play_sequence_game
from ttlearn.rollout.parts import make_player
from ttlearn.types import Episode

DEVELOPMENT = (
    "biased",
    "biased-paper",
    "biased-scissors",
    "cycle-rrps",
    "cycle-ppsr",
    "cycle-ssrp",
    "switch-rock-paper",
    "switch-paper-scissors",
    "switch-scissors-rock",
)
SEEDS = (300, 301)
"""Registered in docs/data-register.md as development seeds of this benchmark (never played before it)."""
GAMES, NOTE_CHARS, NOTE_TOKENS, RECENT = 3, 120, 8, 3
BASELINE = "untrained"

Schedule = list[np.ndarray]
Writer = Callable[[Episode, Schedule], str]
"""(the game just played, the next game's per-round distributions) → the note the player reads next."""


def favourite_note(reading: int, game: Episode) -> str:
    """The `favourite` form's note naming `reading`, completed and bounded as a writer's reply naming it would be."""
    return bound_memory(note_source("favourite", f" {MOVES[reading]}", advice_of(game)), NOTE_CHARS)


def opponent_moves(episode: Episode) -> list[int]:
    return [MOVES.index(step.info["opponent_move"]) for step in episode.steps]


def sequence_note(moves: list[int]) -> str:
    """One move per line: the `default` player is shown line k as its k-th decision's suggestion."""
    return "\n".join(MOVES[move] for move in moves)


READERS: dict[str, Writer] = {
    "true-favourite": lambda game, nxt: favourite_note(game_favourite(nxt), game),
    "previous-favourite": lambda game, nxt: favourite_note(most_common(opponent_moves(game)), game),
    "last-move": lambda game, nxt: favourite_note(opponent_moves(game)[-1], game),
    "recent-favourite": lambda game, nxt: favourite_note(most_common(opponent_moves(game)[-RECENT:]), game),
    "opening-favourite": lambda game, nxt: favourite_note(most_common(opponent_moves(game)[:RECENT]), game),
    "true-sequence": lambda game, nxt: sequence_note([int(np.argmax(expected_payoffs(d))) for d in nxt]),
    "replay-counters": lambda game, nxt: sequence_note([beats(m) for m in opponent_moves(game)]),
}


def family(opponent: str) -> str:
    return opponent.split("-")[0]


def if_followed(note: str, schedule: Schedule) -> float | None:
    """Expected score of a game in which the player plays every move `note` suggests (None: it suggests none)."""
    moves = [suggested_action(note, MOVES, r) for r in range(len(schedule))]
    if any(move is None for move in moves):
        return None
    return float(sum(expected_payoffs(d)[MOVES.index(m)] for d, m in zip(schedule, moves)))


def play_contestant(env, player, writer, schedule: Schedule, seed: int) -> dict:
    """Games 1..GAMES of one sequence, the note after game t written by `writer` (None: no note)."""
    note, games, notes, followed, ceilings = "", [], [], [], []
    for index in range(1, GAMES + 1):
        game = play_sequence_game(env, player, lambda query, shown=note: shown, seed, index)
        games.append(game.score)
        if index > 1 and note:
            suggested = [suggested_action(note, MOVES, r) for r in range(len(game.steps))]
            followed += [step.action == move for step, move in zip(game.steps, suggested)]
            ceilings.append(if_followed(note, schedule))
        if index < GAMES and writer is not None:
            note = writer(game, schedule)
            notes.append(note)
    return {"games": games, "notes": notes, "followed": followed, "if_followed": ceilings}


def summarise(records: list[dict], contestants: list[str]) -> str:
    """One table per family and overall; a contestant's sequence value is its mean score a game in games 2–3."""
    lines = []
    for name in [*sorted({r["family"] for r in records}), "all"]:
        chosen = [r for r in records if name in ("all", r["family"])]
        lines += [
            f"\n{name} ({len(chosen)} sequences): mean score a game in games 2-3",
            "| contestant | games 2-3 | − untrained (mean, SD, min..max) | better / worse | p | if followed | "
            "followed |",
            "|---|---|---|---|---|---|---|",
        ]
        base = [mean(r["by"][BASELINE]["games"][1:]) for r in chosen]
        for contestant in contestants:
            runs = [r["by"][contestant] for r in chosen]
            values = [mean(run["games"][1:]) for run in runs]
            diffs = [v - b for v, b in zip(values, base)]
            spread = stdev(diffs) if len(diffs) > 1 else 0.0
            ceilings = [c for run in runs for c in run["if_followed"] if c is not None]
            follows = [f for run in runs for f in run["followed"]]
            lines.append(
                f"| {contestant} | {mean(values):+.2f} | {mean(diffs):+.2f} ({spread:.2f}, {min(diffs):+.1f}.."
                f"{max(diffs):+.1f}) | {sum(d > 0 for d in diffs)} / {sum(d < 0 for d in diffs)} | "
                f"{paired_sign_flip_p(diffs):.3f} | {f'{mean(ceilings):+.2f}' if ceilings else '—'} | "
                f"{f'{mean(follows):.2f}' if follows else '—'} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--opponents", default=",".join(DEVELOPMENT))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--player", default="gemma270m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/memopilot-ceiling/records.json"))
    parser.add_argument("--table", type=Path, help="print the tables of these records instead of playing")
    args = parser.parse_args()
    if args.table:
        records = json.loads(args.table.read_text())
        print(summarise(records, list(records[0]["by"])))
        return
    os.environ.setdefault("TTLEARN_THREADS", str(args.threads))
    seeds = [int(s) for s in args.seeds.split(",")]
    opponents = args.opponents.split(",")
    if set(opponents) - set(DEVELOPMENT) or any(s >= 9100 for s in seeds):
        raise SystemExit("this benchmark plays development opponents and seeds only (docs/data-register.md)")
    start = time.time()
    backends: dict[str, object] = {}

    def llm(spec: str):
        return backends.setdefault(spec, make_llm(spec))

    writer_llm = make_llm("hf:smollm2")
    records = []
    for opponent in opponents:
        for seed in seeds:
            env = make_env("rps", opponent=opponent, rounds=args.rounds, seed=seed, transcript="by-player")
            player, _ = make_player(args.player, llm, 0.0, env, note_at="default")
            schedule = make_bot(opponent, seed).schedule(args.rounds)
            untrained = MemoPilotMemory(writer_llm, max_chars=NOTE_CHARS, max_tokens=NOTE_TOKENS, form="favourite")

            def untrained_note(game: Episode, nxt: Schedule, memory: MemoPilotMemory = untrained) -> str:
                memory.observe(game)
                return memory.context("")

            writers: dict[str, Writer | None] = {"none": None, BASELINE: untrained_note, **READERS}
            by = {name: play_contestant(env, player, writer, schedule, seed) for name, writer in writers.items()}
            records.append({"opponent": opponent, "family": family(opponent), "seed": seed, "by": by})
            print(f"{opponent} seed {seed}: {time.time() - start:.0f} s", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(records, indent=1))
    print(summarise(records, list(writers)))
    print(f"\n{len(records)} sequences in {time.time() - start:.0f} s; records: {args.out}")


if __name__ == "__main__":
    main()
