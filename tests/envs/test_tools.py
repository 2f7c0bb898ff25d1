"""Tool use on BFCL multi-turn: the call-reading rule, the split, the gold oracle, isolation and hostile calls."""

from __future__ import annotations

import time

import pytest

from ttlearn.data.bfcl import PREPARE_COMMAND
from ttlearn.envs import make_env
from ttlearn.envs._bfcl_tasks import CATEGORIES, in_split, signature
from ttlearn.envs._tool_calls import Call, MalformedCall, read_call
from ttlearn.envs.tools import END_TURN, INVALID_PENALTY, TURN_CALL_LIMIT, Tools

# -- the parse rule (no data needed) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, call",
    [
        ("cd(folder='document')", Call("cd", (), (("folder", "document"),))),
        ('Sure.\nmv(source="a.txt", destination="tmp")', Call("mv", (), (("source", "a.txt"), ("destination", "tmp")))),
        ("sort('final_report.pdf')", Call("sort", ("final_report.pdf",))),
        ("functions.ls(a=True)", Call("ls", (), (("a", True),))),
        ("[cd(folder='x'), ls()]", Call("cd", (), (("folder", "x"),))),
        ("post_tweet(content='a (b)', tags=('#x',))", Call("post_tweet", (), (("content", "a (b)"), ("tags", ["#x"])))),
        ('{"name": "ls", "arguments": {"a": true}}', Call("ls", (), (("a", True),))),
        ('```json\n{"name": "cd", "parameters": {"folder": "d"}}\n```', Call("cd", (), (("folder", "d"),))),
        ('{"name": "cd", "arguments": "{\\"folder\\": \\"d\\"}"}', Call("cd", (), (("folder", "d"),))),
        ("done", None),
        ("All files are moved (as asked).", None),
        ("", None),
    ],
)
def test_read_call_rule(reply, call):
    assert read_call(reply) == call


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("cd(folder='document'", "not closed"),
        ("cd(folder=document)", "must be literals"),
        ("cd(folder='a' + 'b')", "must be literals"),
        ("cd(**opts)", "single call"),
        ("cd(folder={1, 2})", "must be strings, numbers"),
        ('{"name": "cd", "arguments": [1]}', "must be a JSON object"),
        ('{"folder": "d"}', 'needs a "name"'),
        ("{name: cd}", "does not parse"),
    ],
)
def test_malformed_calls_say_why(reply, reason):
    with pytest.raises(MalformedCall, match=reason):
        read_call(reply)


def test_canonical_text_reads_back_as_the_same_call():
    call = Call("mv", ("x",), (("destination", "it's"), ("n", 2)))
    assert call.text() == "mv('x', destination=\"it's\", n=2)"
    assert read_call(call.text()) == call


def test_names_that_unicode_normalises_read_back_as_the_same_call():
    """`ｌｓ` and `ﬁle` once made calls whose canonical text did not read back: names are NFKC-normalised as Python
    reads them, and refused when still not ASCII."""
    call = read_call('{"name": "ｌｓ", "arguments": {"ﬁle": "a.txt", "ａ": 1}}')
    assert call == Call("ls", (), (("file", "a.txt"), ("a", 1)))
    assert read_call(call.text()) == call
    assert read_call("ls(ﬁle='a.txt')") == Call("ls", (), (("file", "a.txt"),))
    for reply in ('{"name": "café"}', '{"name": "ls", "arguments": {"naïve": 1}}', "ls(naïve=1)"):
        with pytest.raises(MalformedCall, match="ASCII"):
            read_call(reply)


def test_signature_is_compact():
    doc = {
        "name": "tail",
        "description": "This tool belongs to the Gorilla file system. Tool description: Show the last lines.",
        "parameters": {
            "type": "dict",
            "properties": {"file_name": {"type": "string"}, "lines": {"type": "integer", "default": 10}},
            "required": ["file_name"],
        },
    }
    assert signature(doc) == "tail(file_name: string, lines: integer = 10) - Show the last lines."


def test_split_keeps_a_scenarios_variants_together():
    assert [in_split(i, "test") for i in range(6)] == [True, False, False, False, False, True]
    assert not any(in_split(i, "train") and in_split(i, "test") for i in range(200))
    assert Tools("train").instance_count() == 640 and Tools("test", ["base"]).instance_count() == 40


def test_missing_data_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TTLEARN_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=PREPARE_COMMAND):
        make_env("tools").reset(0)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="split must be"):
        Tools(split="dev")
    with pytest.raises(ValueError, match="categories must be"):
        Tools(categories=["composite"])


# -- playing (the data comes from conftest's `bfcl_data`) -------------------------------------------------------


@pytest.fixture(scope="module")
def env() -> Tools:
    tools = make_env("tools", split="test")
    yield tools
    tools.close()


def seed_of(env: Tools, task_id: str) -> int:
    return [t.id for t in env.tasks()].index(task_id)


def play_oracle(env: Tools, seed: int) -> list[str]:
    texts = [env.reset(seed).text]
    while True:
        result = env.step(env.oracle_action(seed))
        texts.append(result.observation.text)
        if result.done:
            return texts


def test_split_sizes_match_the_data(env: Tools):
    assert len(env.tasks()) == env.instance_count() == 160
    assert len(Tools("all").tasks()) == 800
    assert {t.category for t in env.tasks()[:4]} == set(CATEGORIES)


@pytest.mark.parametrize("index", range(8))
def test_oracle_passes_every_turn(env: Tools, index: int):
    seed = index * 7  # all four categories, several APIs
    play_oracle(env, seed)
    stats = env.instance_stats()
    assert env.success() and env.score() == 1.0, stats
    assert stats["turn_verdicts"].count(True) == stats["checked_turns"]


def test_restart_replays_the_same_answers(env: Tools):
    first = play_oracle(env, 1)
    env.restart()
    assert env.score() == 0 and env.instance_stats()["turn_verdicts"] == []
    assert play_oracle(env, 1) == first


def test_episodes_do_not_leak_state(env: Tools):
    seed = seed_of(env, "multi_turn_base_0")
    env.reset(seed)
    before = env.step("ls()").observation.text
    env.step("mkdir(dir_name='leak')")
    assert "leak" in env.step("ls()").observation.text
    env.reset(seed)
    assert env.step("ls()").observation.text == before
    other = make_env("tools", split="test")
    try:
        other.reset(seed)
        assert other.step("ls()").observation.text == before
    finally:
        other.close()


def test_malformed_call_is_an_invalid_step(env: Tools):
    env.reset(0)
    assert env.parse_action("cd(folder=document)", ()) is None
    result = env.invalid_step("cd(folder=document)")
    assert result.reward == INVALID_PENALTY and not result.done and result.info["invalid"]
    assert "must be literals" in result.observation.text
    with pytest.raises(ValueError):
        env.step("cd(folder=document)")
    assert env.parse_action("I moved it.", ()) == END_TURN


def test_unknown_function_and_api_errors_are_answers(env: Tools):
    env.reset(seed_of(env, "multi_turn_base_0"))
    assert "there is no function 'rm_rf'" in env.step("rm_rf(path='/')").observation.text
    result = env.step("cd(nonsense=1)")
    assert "Error during execution" in result.observation.text and not result.done


def test_a_wrong_turn_fails_the_check(env: Tools):
    env.reset(seed_of(env, "multi_turn_base_0"))
    result = env.step(END_TURN)  # the first request needs three calls
    assert result.info["turn_passed"] is False and result.reward == 0
    assert "does not match" in env.transcript()


def test_too_many_calls_in_a_turn_end_the_episode(env: Tools):
    env.reset(0)
    for _ in range(TURN_CALL_LIMIT):
        env.step("pwd()")
    result = env.step("pwd()")
    assert result.done and not env.success() and "more than 40 calls" in result.observation.text


def test_a_call_that_explodes_costs_the_episode_only():
    tools = Tools(split="test", categories=["base"], call_timeout_s=1.0)
    try:
        seed = seed_of(tools, "multi_turn_base_15")  # MathAPI
        tools.reset(seed)
        result = tools.step("power(base=7, exponent=100000000000)")
        assert result.done and not tools.success() and "was stopped" in result.observation.text
        play_oracle(tools, seed)
        assert tools.success()
    finally:
        tools.close()


def test_data_prepare_refuses_an_unknown_family():
    from typer.testing import CliRunner

    from ttlearn.cli import app

    result = CliRunner().invoke(app, ["data", "prepare", "webshop"])
    assert result.exit_code == 2 and "no data to prepare for 'webshop'" in result.output


def test_data_prepare_is_idempotent():
    from typer.testing import CliRunner

    from ttlearn.cli import app

    result = CliRunner().invoke(app, ["data", "prepare", "tools"])
    assert result.exit_code == 0 and "tools: ready in" in result.output


@pytest.mark.parametrize(
    "reply, call",
    [
        ("ſudo(x=1)", Call("sudo", (), (("x", 1),))),  # ſ (long s) is s to Python: it once read as `udo(x=1)`
        ("ｄｅｌｅｔｅ_file(name='a')", Call("delete_file", (), (("name", "a"),))),  # once `_file(name='a')`
        ("functions.ｌｓ(a=True)", Call("ls", (), (("a", True),))),
        ("ℌelp()", Call("Help")),
    ],
)
def test_python_call_names_are_normalised_as_json_ones_are(reply, call):
    """A non-ASCII start of a name made the Python syntax drop it (`ſudo(x=1)` called `udo`), while the JSON form
    normalises the whole name (NFKC) or refuses it: both syntaxes now read the same name."""
    assert read_call(reply) == call
    name = reply.partition("(")[0].rsplit(".", 1)[-1]
    assert read_call(f'{{"name": "{name}", "arguments": {{}}}}').name == call.name


@pytest.mark.parametrize("reply", ["éx(a=1)", "caféls()", "xé(a=1)", "e\u0301x(a=1)"])
def test_python_call_names_that_stay_non_ascii_are_refused_whole(reply):
    """`éx(…)` once called `x`; a name whose NFKC form is not ASCII is refused, as in JSON, never cut."""
    with pytest.raises(MalformedCall, match="ASCII"):
        read_call(reply)


HOSTILE_REPLIES = {
    "keyword argument name": '{"name": "mv", "arguments": {"from": "a", "to": "b"}}',
    "class argument name": '{"name": "ls", "arguments": {"class": 1}}',
    "argument name with a space": '{"name": "ls", "arguments": {"a b": 1}}',
    "python infinity": "ls(a=1e999)",
    "json infinity": '{"name": "ls", "arguments": {"a": Infinity}}',
    "json nan": '{"name": "ls", "arguments": {"a": NaN}}',
    "deep json": '{"name": "ls", "arguments": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}",
    "deep python": "ls(a=" + "[" * 1000 + "]" * 1000 + ")",
    "huge json int": '{"name": "ls", "arguments": {"a": ' + "9" * 5000 + "}}",
    "huge python int": "ls(a=" + "9" * 5000 + ")",
    "100k unary minus": "ls(a=" + "-" * 100_000 + "1)",
    "a call hidden in the function name": '{"name": "cd(folder=\'x\') or ls", "arguments": {}}',
}


@pytest.mark.parametrize("name", HOSTILE_REPLIES)
def test_every_hostile_reply_is_a_counted_invalid_step(env: Tools, name):
    env.reset(0)
    reply = HOSTILE_REPLIES[name]
    with pytest.raises(MalformedCall):
        read_call(reply)
    assert env.parse_action(reply, ()) is None
    result = env.invalid_step(reply)
    assert result.reward == INVALID_PENALTY and result.info["invalid"]


def test_step_runs_the_call_parse_action_read(env: Tools):
    env.reset(0)
    action = env.parse_action('{"name": "ls", "arguments": {"a": true}}', ())
    assert action == "ls(a=True)" and env.step(action).info["call"] == "ls"


def test_read_call_is_linear_in_the_reply():
    for filler in ("a" * 40_000, "a." * 20_000, "9a" * 20_000):
        start = time.perf_counter()
        assert read_call(filler) is None
        assert time.perf_counter() - start < 0.1, filler[:4]
