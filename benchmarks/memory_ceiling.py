"""The most a memory can give a model, for every family: success (or score) with no memory, with the oracle memory
(what a perfect memory would show), with a distractor — in each place the LLM player can show a note (`note_at`).

The first check for any family, model or presentation: a model that gains nothing with the oracle memory cannot gain
from any memory that writes or retrieves less. Every arm plays the same development instances with the same decision
seeds as the no-memory control (which all presentations share), so each arm is paired with it: exact McNemar on
success, and for games an exact paired sign-flip test on the scores (`eval.metrics.paired_sign_flip_p`).

The oracle memory per family (`FAMILIES`; docs/ceiling.md says what each saw):

- **sql**: the model's own verified answer to a repeat of the question (Spider paraphrases sharing one gold query,
  `instance_stats()["answer_key"]`), rendered as MemRL's `write=answer` items are; distractor: the verified answer
  of the solved non-repeat sharing the most words. Only instances with a solved repeat are compared.
- **rps / holdem**: the fact that decides the game against the development opponent and its counter-move (rps
  `biased`: rock 60 %; holdem `tight-passive`: folds all but its top 18 % to a raise); distractor: a wrong fact of
  the same form.
- **sokoban / minesweeper / household / tools**: the verified move or call sequence of the *same* instance, played
  by the environment's scripted oracle (solver, safe-cell reasoning, the game's gold walkthrough, BFCL's gold calls),
  one per line; only instances the oracle solves. Distractor: the sequence of another instance. Same-instance is the
  upper bound: a memory reaches it only where instances repeat (exactly, or in structure).
- **code**: HumanEval has no near-repeat, so the "oracle" is the same task's canonical solution — a copy ceiling
  (does the model use a shown solution at all), not a ceiling any memory of other tasks can reach.
- **code-near**: the nearest thing HumanEval has to a repeat — pairs of train-split problems that share their core
  (`NEAR`, picked by hand from the problem texts: the same recurrence, the same helper such as a prime test or a
  palindrome check, the same digit sum): the oracle is the canonical solution of the *other* problem of the pair,
  what a memory of earlier tasks could hold; distractor: an unrelated problem's solution.

Records are JSON lines, one per episode, in OUT/MODEL-FAMILY.jsonl; a rerun skips those already there.

    TTLEARN_THREADS=1 python benchmarks/memory_ceiling.py --llm gemma270m --family rps --n 8 --out results/ceiling
    TTLEARN_THREADS=1 python benchmarks/memory_ceiling.py --llm qwen-coder --family sql -e database=car_1 --n 40
    python benchmarks/memory_ceiling.py --table results/ceiling
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttlearn.envs import Env, make_env
from ttlearn.eval.metrics import mcnemar_exact, paired_sign_flip_p
from ttlearn.llm import make_llm
from ttlearn.memory.memrl import render_answer
from ttlearn.players.basic import OraclePlayer
from ttlearn.players.llm import NOTE_AT
from ttlearn.rollout.loop import play_episode
from ttlearn.rollout.parts import make_player
from ttlearn.seeding import derive_seed

WORD = re.compile(r"[a-z0-9]+")
Notes = dict[int, tuple[str, str]]
"""Instance → (oracle note, distractor note)."""


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


@dataclass(frozen=True)
class Family:
    env: str
    options: dict[str, Any]
    notes: Callable[[Env, list[int], dict[int, dict]], Notes]
    """From the environment, the instances and the control's records (SQL's verified answers)."""
    scored: bool = False
    """A game: the arms are compared on scores (paired sign-flip test), success shown beside."""
    asks: dict[str, frozenset[str]] | None = None
    """A game's moves each note asks for ("oracle": the counter-moves, "distractor": the wrong note's): the table also
    compares the share of decisions that play them with the control's (whether the player follows a note at all,
    without the opponent's dice in the way)."""
    instances: tuple[int, ...] | None = None
    """The instances to play, when only some have a note (else 0, 1, 2, …)."""
    no_oracle: str | None = None
    """Where the oracle memory comes from the control's own records (SQL's verified answers), why a model can have
    none: the table then says so instead of leaving the model out."""


def fact_notes(fact: str, wrong: str) -> Callable[[Env, list[int], dict[int, dict]], Notes]:
    def notes(env: Env, instances: list[int], control: dict[int, dict]) -> Notes:
        return {i: (fact, wrong) for i in instances}

    return notes


def oracle_moves(env: Env, i: int) -> list[str] | None:
    """The scripted oracle's moves on instance `i`, one move each (a Sokoban turn split), or None unless it solves."""
    episode = play_episode(env, OraclePlayer(), lambda _task: "", index=1, seed=i, act_seed=lambda step: step)
    if not episode.success:
        return None
    if env.actions_per_turn == 1:
        return [step.action for step in episode.steps]
    return [move.strip() for step in episode.steps for move in step.action.split(", ") if move.strip()]


def sequence_notes(header: str) -> Callable[[Env, list[int], dict[int, dict]], Notes]:
    def notes(env: Env, instances: list[int], control: dict[int, dict]) -> Notes:
        solved = {i: moves for i in instances if (moves := oracle_moves(env, i))}
        order = sorted(solved)
        text = {i: f"{header}\n" + "\n".join(solved[i]) for i in order}
        return {i: (text[i], text[order[(k + 1) % len(order)]]) for k, i in enumerate(order)} if len(order) > 1 else {}

    return notes


def code_notes(env: Env, instances: list[int], control: dict[int, dict]) -> Notes:
    solutions = {}
    for i in instances:
        env.reset(i)
        solutions[i] = f"A verified solution of this task:\n```python\n{env.oracle_action()}```"
    return {i: (solutions[i], solutions[instances[(k + 1) % len(instances)]]) for k, i in enumerate(instances)}


NEAR: dict[int, int] = {
    28: 23,
    23: 28,  # fib ← fib4 and back: the same recurrence
    20: 40,  # prime_fib ← prime_length: a prime test
    37: 10,  # is_multiply_prime ← factorize: prime factors
    40: 50,
    50: 40,  # prime_length ← count_up_to and back: a prime test
    25: 55,
    55: 25,  # is_palindrome ← even_odd_palindrome and back
    15: 19,
    19: 15,  # sort_third ← sort_even and back: sort a slice, put it back
    56: 75,
    75: 56,  # count_nums ← order_by_points and back: the signed digit sum
    22: 34,  # triangle_area(a, h) ← triangle_area(a, b, c)
    30: 0,  # correct_bracketing ← separate_paren_groups: a depth counter
}
"""Train-split index (`task_ids("train")`) → the index of a problem sharing its core, whose solution a memory of
earlier tasks could show."""


def near_code_notes(env: Env, instances: list[int], control: dict[int, dict]) -> Notes:
    def solution(i: int) -> str:
        env.reset(i)
        return f"A verified solution of a similar task:\n```python\n{env.oracle_action()}```"

    def unrelated(k: int) -> int:
        """The source of a later pair that is neither this problem nor its partner."""
        i = order[k]
        later = order[k + 1 :] + order[:k]
        return next(NEAR[j] for j in later if {j, NEAR[j]}.isdisjoint({i, NEAR[i]}))

    order = sorted(instances)
    return {i: (solution(NEAR[i]), solution(unrelated(k))) for k, i in enumerate(order)}


def repeat_notes(env: Env, instances: list[int], control: dict[int, dict]) -> Notes:
    """SQL: the verified answer of a repeat, and of the solved non-repeat sharing the most words."""
    keys, tasks = {}, {}
    for i in instances:
        env.reset(i)
        keys[i], tasks[i] = env.instance_stats()["answer_key"], env.task()
    answers = {i: control[i]["answer"] for i in instances if control[i]["success"]}
    notes = {}
    for i in instances:
        repeats = [j for j in answers if j != i and keys[j] == keys[i]]
        others = [j for j in answers if keys[j] != keys[i]]
        if repeats and others:
            near = max(others, key=lambda j: (len(words(tasks[j]) & words(tasks[i])), -j))
            notes[i] = tuple(render_answer(tasks[j], answers[j], True) for j in (repeats[0], near))
    return notes


FAMILIES: dict[str, Family] = {
    "sql": Family(
        "sql",
        {"split": "train", "database": "singer"},
        repeat_notes,
        no_oracle="the model verified no answer (solved no repeat), so a memory of its own answers has none to show",
    ),
    "code": Family("code", {"split": "train"}, code_notes),
    "code-near": Family("code", {"split": "train"}, near_code_notes, instances=tuple(NEAR)),
    "rps": Family(
        "rps",
        {"opponent": "biased", "rounds": 6},
        fact_notes(
            "Your opponent plays rock most of the time. Play paper every round.",
            "Your opponent plays scissors most of the time. Play rock every round.",
        ),
        scored=True,
        asks={"oracle": frozenset({"paper"}), "distractor": frozenset({"rock"})},
    ),
    "holdem": Family(
        "holdem",
        {"opponent": "tight-passive", "hands": 3},
        fact_notes(
            "This opponent folds most hands when you raise. Always raise (bet when no one has bet yet).",
            "This opponent bluffs all the time and folds nothing. Never raise: just call.",
        ),
        scored=True,
        asks={"oracle": frozenset({"raise", "bet"}), "distractor": frozenset({"call"})},
    ),
    "sokoban": Family("sokoban", {}, sequence_notes("A verified solution of this level, one move per line:")),
    "minesweeper": Family("minesweeper", {}, sequence_notes("A verified safe sequence on this board, one per line:")),
    "household": Family(
        "household",
        {"split": "train", "step_limit": 20},
        sequence_notes("A verified walkthrough of this game, one per line:"),
    ),
    "tools": Family("tools", {"split": "train"}, sequence_notes("The verified calls for this task, one per line:")),
}


def play(env: Env, player: Any, i: int, note: str, seed: int) -> dict:
    start = time.perf_counter()
    episode = play_episode(
        env, player, lambda _task: note, index=1, seed=i, act_seed=lambda step: derive_seed(seed, "ceiling", i, step)
    )
    return {
        "success": bool(episode.success),
        "score": float(episode.score),
        "steps": len(episode.steps),
        "seconds": round(time.perf_counter() - start, 2),
        "answer": episode.info["answer"],
    }


def parse_options(pairs: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq:
            raise SystemExit(f"-e takes KEY=VALUE, got {pair!r}")
        options[key] = int(value) if value.lstrip("-").isdigit() else value
    return options


def measure(args: argparse.Namespace) -> None:
    family = FAMILIES[args.family]
    changed = parse_options(args.env_opt)
    options = {**family.options, **changed}
    env = make_env(family.env, **options)
    count = env.instance_count()
    if family.instances is not None:
        instances = list(family.instances[args.first : args.first + args.n])
    else:
        instances = list(range(args.first, args.first + (args.n if count is None else min(args.n, count))))
    label = args.family + "".join(f"-{k}={v}" for k, v in sorted(changed.items()))
    out = Path(args.out) / f"{args.llm}-{label}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if out.exists():
        for line in out.read_text().splitlines():
            record = json.loads(line)
            done[(record["arm"], record["note_at"], record["instance"])] = record
    backend = make_llm(args.llm)
    presentations = [p for p in args.note_at.split(",") if p]
    unknown = [p for p in presentations if p not in NOTE_AT]
    if unknown:
        raise SystemExit(f"--note-at takes some of {', '.join(NOTE_AT)}, got {', '.join(unknown)}")
    players = {
        p: make_player(args.llm, lambda _spec: backend, 0.0, env, retries=0, note_at=p)[0]
        for p in ["system", *presentations]
    }

    def record(arm: str, note_at: str | None, i: int, note: str) -> dict:
        key = (arm, note_at, i)
        if key not in done:
            result = play(env, players[note_at or "system"], i, note, args.seed)
            done[key] = {
                "family": args.family,
                "model": args.llm,
                "arm": arm,
                "note_at": note_at,
                "instance": i,
                "seed": args.seed,
                "options": options,
                "changed": changed,
                **result,
            }
            with out.open("a") as f:  # one line per episode, flushed: a killed run keeps what it played
                f.write(json.dumps(done[key]) + "\n")
            print(
                f"{args.llm} {label} {arm:10s} {note_at or '-':8s} #{i}: success={result['success']} "
                f"score={result['score']:+.2f} {result['seconds']:.0f}s",
                flush=True,
            )
        return done[key]

    control = {i: record("control", None, i, "") for i in instances}
    notes = family.notes(env, instances, control)
    if not notes:
        print(f"{args.family}: no instance has an oracle memory (more instances)")
    for note_at in presentations:
        for i, (oracle, distractor) in notes.items():
            record("oracle", note_at, i, oracle)
            if note_at in args.distractor_at.split(","):
                record("distractor", note_at, i, distractor)
    env.close()
    table(out.parent)


def table(folder: Path) -> None:
    """The markdown table of every record in `folder`: one row per family × model × presentation."""
    cells: dict[tuple[str, str, str], dict[tuple[str, str | None], dict[int, dict]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            changed = "".join(f" {k}={v}" for k, v in sorted(r.get("changed", {}).items()))
            cells[(r["family"], r["model"], changed)][(r["arm"], r["note_at"])][r["instance"]] = r
    print(
        "| family | model | note at | n | control | oracle | gain | p | distractor | gain | p | plays the oracle's "
        "move: ctl → oracle (p) | the distractor's: ctl → distractor (p) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, model, changed), arms in sorted(cells.items()):
        family = FAMILIES[name]
        control = arms.get(("control", None), {})
        if family.no_oracle and not any(arm == "oracle" for arm, _ in arms):  # nothing of its own to show
            base = summary(family.scored, list(control.values()))
            print(
                f"| {name}{changed} | {model} | — | 0 | {base} | no oracle memory: {family.no_oracle} | | | | | | | |"
            )
            continue
        for note_at in NOTE_AT:
            oracle = arms.get(("oracle", note_at), {})
            paired = sorted(i for i in oracle if i in control)
            if not paired:
                continue
            columns = []
            for arm in ("oracle", "distractor"):
                shown = arms.get((arm, note_at), {})
                both = [i for i in paired if i in shown]
                columns.append(compare(family.scored, [control[i] for i in both], [shown[i] for i in both]))
            base = summary(family.scored, [control[i] for i in paired])
            follows = [followed(family, arm, control, arms.get((arm, note_at), {})) for arm in ("oracle", "distractor")]
            print(
                f"| {name}{changed} | {model} | {note_at} | {len(paired)} | {base} | "
                f"{' | '.join(columns)} | {' | '.join(follows)} |"
            )


def followed(family: Family, arm: str, control: dict[int, dict], shown: dict[int, dict]) -> str:
    """'control share → arm share (p)' of decisions playing the moves the arm's note asks for; '' where not a game."""
    both = sorted(i for i in shown if i in control)
    if not family.asks or not both:
        return ""
    before = [share(control[i], family.asks[arm]) for i in both]
    after = [share(shown[i], family.asks[arm]) for i in both]
    p = paired_sign_flip_p([a - b for a, b in zip(after, before)])
    return f"{sum(before) / len(both):.2f} → {sum(after) / len(both):.2f} ({p:.3g})"


def share(record: dict, moves: frozenset[str]) -> float:
    """The share of an episode's actions (its `answer`, one per line) that are among `moves`."""
    actions = record["answer"].splitlines()
    return sum(a in moves for a in actions) / len(actions) if actions else 0.0


def summary(scored: bool, records: list[dict]) -> str:
    wins = sum(r["success"] for r in records)
    if scored:
        return f"{sum(r['score'] for r in records) / len(records):+.2f} ({wins}/{len(records)})"
    return f"{wins}/{len(records)}"


def compare(scored: bool, control: list[dict], arm: list[dict]) -> str:
    """'arm | gain | p' against the control on the same instances; '— | | ' when the arm was not played."""
    if not arm:
        return "— | | "
    if scored:
        diffs = [a["score"] - c["score"] for a, c in zip(arm, control)]
        return f"{summary(True, arm)} | {sum(diffs) / len(diffs):+.2f} | {paired_sign_flip_p(diffs):.3g}"
    only_arm = sum(a["success"] and not c["success"] for a, c in zip(arm, control))
    only_ctl = sum(c["success"] and not a["success"] for a, c in zip(arm, control))
    gain = sum(a["success"] for a in arm) - sum(c["success"] for c in control)
    return f"{summary(False, arm)} | {gain:+d} | {mcnemar_exact(only_arm, only_ctl):.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="qwen-coder")
    parser.add_argument("--family", "--env", choices=sorted(FAMILIES), default="sql")
    parser.add_argument("-e", "--env-opt", action="append", default=[], help="change a family's option: KEY=VALUE")
    parser.add_argument("--n", type=int, default=8, help="instances (seeds 0..n-1 where instances are generated)")
    parser.add_argument("--first", type=int, default=0, help="the first instance")
    parser.add_argument("--note-at", default=",".join(NOTE_AT), help="presentations, comma-separated")
    parser.add_argument(
        "--distractor-at", default=",".join(NOTE_AT), help="presentations that also play the distractor"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/ceiling")
    parser.add_argument("--table", type=Path, help="print the table of the records in this folder and stop")
    args = parser.parse_args()
    if args.table:
        table(args.table)
    else:
        measure(args)


if __name__ == "__main__":
    main()
