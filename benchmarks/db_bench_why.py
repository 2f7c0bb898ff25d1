"""Why a small model keeps sending operations in `db_bench`: after its first operation's answer, how likely is its
next reply to begin "Action: Answer" rather than "Action: Operation", as the runner's chat stands and with one part
of the chat changed at a time.

    python benchmarks/db_bench_why.py RUN_DIR [--llm qwen-coder]

RUN_DIR: a run without memory (`ttlearn run db_bench …`). For every task whose first reply was an operation that
ran, the chat after it is rebuilt (`DBBench.conversation`) and the two openings scored by the model
(`LlamaCpp.score_paths`, greedy decoding follows the likelier one), in these variants:

- `as sent`: the runner's chat (system prompt, format block, the benchmark's instruction turn, question, reply,
  the server's answer);
- `no format block`: without the runner's closing STRICT OUTPUT FORMAT block (the benchmark's own chat);
- `one-line SQL`: the model's first reply with its SQL written on one line, as both prompts ask;
- `told` (a probe, not a protocol candidate): the server's answer followed by "If this result answers the
  question, reply with Action: Answer and Final Answer: the result.".

It prints P(Answer) per variant: over all such tasks, and over those whose first result was already the expected
answer (answering it verbatim would have been judged right).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from db_bench_replies import run_config, unit_records  # noqa: E402

from ttlearn.envs import make_env  # noqa: E402
from ttlearn.envs._db_bench_prompts import OUTPUT_FORMAT  # noqa: E402
from ttlearn.envs._db_bench_reply import read_reply  # noqa: E402
from ttlearn.envs._llb_verdict import answer_matches  # noqa: E402
from ttlearn.llm import make_llm  # noqa: E402

TOLD = "\nIf this result answers the question, reply with Action: Answer and Final Answer: the result."
VARIANTS = ("as sent", "no format block", "one-line SQL", "told")


def variant(messages: list[dict[str, str]], name: str) -> list[dict[str, str]]:
    """The chat after the first operation's answer, with one part changed (`VARIANTS`)."""
    messages = [dict(m) for m in messages]
    if name == "no format block":
        messages[0]["content"] = messages[0]["content"].removesuffix(f"\n\n{OUTPUT_FORMAT}")
    elif name == "one-line SQL":
        action = read_reply(messages[-2]["content"])
        assert action is not None
        messages[-2]["content"] = "Action: Operation\n```sql\n" + "; ".join(action.statements) + ";\n```"
    elif name == "told":
        messages[-1]["content"] += TOLD
    return messages


def p_answer(llm, messages: list[dict[str, str]]) -> float:
    prompt = llm._tokens(llm.render(messages), first=True)
    paths = [llm._tokens(text, first=False) for text in ("Action: Answer", "Action: Operation")]
    answer, operation = llm.score_paths(prompt, paths)
    return 1 / (1 + math.exp(operation - answer))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--llm", default=None, help="the model (default: the run's player)")
    args = parser.parse_args()
    config = run_config(args.run)
    llm = make_llm(args.llm or config["player"])
    engine = config["env_options"].get("engine", "sqlite")
    scores: dict[str, list[float]] = {name: [] for name in VARIANTS}
    right: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for unit in unit_records(args.run):
        first = unit["attempts"][0]["steps"][0]
        reply = first.get("raw") or first.get("action") or ""
        action = read_reply(reply)
        if action is None or action.kind != "operation":
            continue
        env = make_env("db_bench", engine=engine, task=unit["instance"]["task_id"])
        env.reset(0)
        result = env.step(reply)
        if result.done or result.info.get("error"):
            env.close()
            continue
        expected = env.current.expected(engine)
        was_right = expected.rows is not None and answer_matches(result.observation.text, expected.rows)
        chat = env.conversation("")
        line = []
        for name in VARIANTS:
            p = p_answer(llm, variant(chat, name))
            scores[name].append(p)
            if was_right:
                right[name].append(p)
            line.append(f"{name} {p:.3f}")
        print(f"task {unit['instance']['task_id']:3} {unit['instance']['kind']:6} first result right: {was_right!s:5} "
              + ", ".join(line), flush=True)  # fmt: skip
        env.close()
    for label, table in (("all", scores), ("first result right", right)):
        if table[VARIANTS[0]]:
            print(f"{label} ({len(table[VARIANTS[0]])} tasks): "
                  + ", ".join(f"{n} median {statistics.median(v):.3f} mean {statistics.mean(v):.3f} "
                              f"(> 0.5: {sum(p > 0.5 for p in v)})" for n, v in table.items()))  # fmt: skip


if __name__ == "__main__":
    main()
