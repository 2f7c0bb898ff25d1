"""Does an untrained MemoPilot writer read the game it is shown? How often its note names the opponent's favourite.

    python benchmarks/memopilot_writer_probe.py [--writers smollm2,qwen-coder --transcripts rounds,by-player]
                                                [--form counter|favourite]

For each development opponent with a favourite move (`biased`, `biased-paper`, `biased-scissors`, 60 %) and each move
the player could have kept all game (rock, paper, scissors), one game of 6 rounds is played on the registered probe
game seed (11, docs/data-register.md); the writer is then asked for its note in `--form` after that game exactly as
the trainer asks (`writer_messages`; at most 24 tokens, the pilot's limit), `--samples` times at T = 1 and once
greedily (under `favourite` the note is completed with the counter of the move it names, so a note suggests the
counter exactly when it names the favourite).
Per writer and transcript form it prints the share of sampled notes that
  name the favourite:  "The opponent plays mostly X" with X the move the opponent played most in that game,
  suggest its counter: the move a `--note-at default` player is shown as suggested beats that move,
  suggest own move:    the suggested move is the one the player itself kept all game (an echo of the log),
  have the form:       the note contains "so play",
with chance for the first two at about 1/3, and how many of the 9 greedy notes suggest the counter. A writer that
reads the log names the favourite far above chance; RL then only has to teach it the counter.
"""

from __future__ import annotations

import argparse
import os
import re
from collections import Counter

os.environ.setdefault("OMP_NUM_THREADS", "1")

from ttlearn.envs.rps import TRANSCRIPTS, RPSEnv
from ttlearn.envs.rps_bots import MOVES, beats
from ttlearn.llm.hf import HFPolicy
from ttlearn.memory.memopilot import advice_of, note_source, writer_messages, writer_stop
from ttlearn.players.llm import suggested_action
from ttlearn.types import Episode

OPPONENTS = ("biased", "biased-paper", "biased-scissors")
PROBE_SEED = 11
ROUNDS = 6


def probe_games(transcript: str) -> list[tuple[Episode, str, str]]:
    """(the game, the opponent's most played move, the player's kept move) for every opponent × kept move."""
    games = []
    for opponent in OPPONENTS:
        for kept in MOVES:
            env = RPSEnv(opponent, ROUNDS, seed=0, transcript=transcript)
            env.reset(PROBE_SEED)
            for _ in range(ROUNDS):
                env.step(kept)
            counts = Counter(env.opp_moves)
            favourite = MOVES[max(range(3), key=lambda m: (counts[m], -m))]
            advice = {reading: env.advice(reading) for reading in env.readings}
            info = {"rules": env.describe(), "transcript": env.transcript(), "advice": advice}
            games.append((Episode(1, PROBE_SEED, env.task(), (), env.score(), env.success(), info), favourite, kept))
    return games


def measure(policy: HFPolicy, transcript: str, samples: int, form: str) -> dict[str, float]:
    shares: Counter[str] = Counter()
    greedy_counters = 0
    games = probe_games(transcript)
    for episode, favourite, kept in games:
        rules = episode.info["rules"]
        prompt = writer_messages(rules, "", episode, 15, form)
        counter = MOVES[beats(MOVES.index(favourite))]
        drawn = policy.sample([prompt] * samples, max_new_tokens=24, temperature=1.0, seed=1, stop=writer_stop(form))
        for sample in drawn:
            note = note_source(form, sample.text, advice_of(episode))
            named = re.match(r"The opponent plays mostly (\w+)", note)
            suggested = suggested_action(note, MOVES, 0)
            shares["name the favourite"] += bool(named and named.group(1).lower() == favourite)
            shares["suggest its counter"] += suggested == counter
            shares["suggest own move"] += suggested == kept
            shares["have the form"] += "so play" in note
        greedy = policy.sample([prompt], max_new_tokens=24, temperature=0.0, seed=1, stop=writer_stop(form))[0]
        greedy_counters += suggested_action(note_source(form, greedy.text, advice_of(episode)), MOVES, 0) == counter
    total = samples * len(games)
    return {**{k: v / total for k, v in shares.items()}, "greedy counters": greedy_counters, "prompts": len(games)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", default="smollm2,qwen-coder")
    parser.add_argument("--transcripts", default=",".join(TRANSCRIPTS))
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--form", choices=("counter", "favourite"), default="counter")
    args = parser.parse_args()
    keys = ("name the favourite", "suggest its counter", "suggest own move", "have the form")
    print(f"{'writer':<12} {'transcript':<10} " + " ".join(f"{k:>20}" for k in keys) + "  greedy counters")
    for writer in args.writers.split(","):
        policy = HFPolicy.from_source(writer)
        for transcript in args.transcripts.split(","):
            found = measure(policy, transcript, args.samples, args.form)
            cells = " ".join(f"{found.get(k, 0.0):>20.2f}" for k in keys)
            print(f"{writer:<12} {transcript:<10} {cells}  {found['greedy counters']}/{found['prompts']}", flush=True)


if __name__ == "__main__":
    main()
