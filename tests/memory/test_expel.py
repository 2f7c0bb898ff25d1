"""ExpeL: operation parsing, the vote rules on scripted sequences, malformed operations, the 20-insight bound,
retrieval order, and the memory driven by a scripted writer."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import FakeLLM
from hypothesis import given
from hypothesis import strategies as st
from test_memory_roundtrip import episode

from ttlearn.memory import make_memory
from ttlearn.memory.embed import top_k_similar
from ttlearn.memory.expel import InsightOp, apply_operations, parse_operations


def run_batches(batches: list[str], capacity: int = 20) -> list[list[tuple[str, int]]]:
    """Apply each writer reply in turn; returns the list after every batch."""
    insights: list[tuple[str, int]] = []
    tables = []
    for reply in batches:
        ops, _ = parse_operations(reply)
        insights = apply_operations(insights, ops, capacity).insights
        tables.append(insights)
    return tables


def test_vote_rules_on_a_scripted_sequence():
    # hand-computed: ADD → 2, AGREE +1, EDIT +1 (text replaced), REMOVE −1, deleted at 0, sorted strongest first
    tables = run_batches(
        [
            "ADD Play paper.\nADD Watch for cycles.",
            "AGREE 1\nREMOVE 2\nADD Counter the last move.",  # paper 3, cycles 1, counter 2
            "REMOVE 3\nEDIT 2 Beat the opponent's last move.\nAGREE 1",  # cycles 0 → gone, edited 3, paper 4
            "REMOVE 1\nAGREE 2",  # paper 3, beat 4 → reorder
        ]
    )
    assert tables == [
        [("Play paper.", 2), ("Watch for cycles.", 2)],
        [("Play paper.", 3), ("Counter the last move.", 2), ("Watch for cycles.", 1)],
        [("Play paper.", 4), ("Beat the opponent's last move.", 3)],
        [("Beat the opponent's last move.", 4), ("Play paper.", 3)],
    ]


def test_equal_votes_keep_their_previous_order_and_new_insights_go_last():
    tables = run_batches(["ADD a.\nADD b.", "AGREE 2", "ADD c.\nREMOVE 1"])
    assert tables == [[("a.", 2), ("b.", 2)], [("b.", 3), ("a.", 2)], [("b.", 2), ("a.", 2), ("c.", 2)]]


def test_parse_accepts_expel_style_and_list_markers():
    ops, malformed = parse_operations(
        "Sure, here they are:\n- ADD 3: Play paper.\n2. EDIT 1: Play scissors.\nREMOVE 2: old text\n* AGREE #4"
    )
    assert malformed == 0
    assert ops == [
        InsightOp("ADD", None, "Play paper."),
        InsightOp("EDIT", 1, "Play scissors."),
        InsightOp("REMOVE", 2),
        InsightOp("AGREE", 4),
    ]


def test_parse_clips_long_texts():
    (op,), _ = parse_operations("ADD " + "x" * 500, max_chars=50)
    assert len(op.text) == 50 and op.text.endswith("…")


def test_malformed_operations_are_counted_and_skipped():
    reply = "\n".join(
        [
            "Here are my operations:",  # prose: not an operation, not counted
            "ADD Play paper.",
            "DELETE 1",  # unknown verb
            "EDIT Play rock.",  # no index
            "EDIT 1",  # no text
            "AGREE x",  # no index
            "ADD",  # no text
            "REMOVE 9",  # index out of range
            "AGREE 1",
            "AGREE 1",  # second operation on the same insight
            "ADD play paper",  # duplicate of the first ADD (case, final dot ignored)
            "EDIT 2 Play paper.",  # duplicate of an ADD of this batch
        ]
    )
    ops, parse_malformed = parse_operations(reply)
    assert parse_malformed == 5
    result = apply_operations([("Existing insight.", 2), ("Second insight.", 2)], ops, 20)
    assert result.malformed == 4
    assert result.insights == [("Existing insight.", 3), ("Second insight.", 2), ("Play paper.", 2)]
    assert result.rejected_adds == 0


def test_edit_to_an_existing_text_is_a_duplicate():
    ops, _ = parse_operations("EDIT 2 A.")
    result = apply_operations([("A.", 2), ("B.", 2)], ops, 20)
    assert result.malformed == 1 and result.insights == [("A.", 2), ("B.", 2)]


def test_the_list_never_exceeds_its_capacity():
    full = [(f"insight {i}.", 2) for i in range(19)]
    ops, _ = parse_operations("ADD new one.\nADD new two.\nADD new three.")
    result = apply_operations(full, ops, 20)
    assert len(result.insights) == 20 and result.rejected_adds == 2
    assert result.insights[-1] == ("new one.", 2)
    # a REMOVE that only lowers a vote frees no room; one that deletes does
    ops, _ = parse_operations("REMOVE 1\nADD fresh.")
    assert apply_operations(result.insights, ops, 20).rejected_adds == 1
    weak = [(t, 1 if i == 0 else 2) for i, (t, _) in enumerate(result.insights)]
    after = apply_operations(weak, ops, 20)
    assert after.rejected_adds == 0 and len(after.insights) == 20 and ("fresh.", 2) in after.insights


verbs = st.sampled_from(["ADD", "EDIT", "REMOVE", "AGREE", "DROP"])
lines = st.tuples(verbs, st.integers(-1, 25), st.sampled_from(["", "a.", "b.", "c.", "d."])).map(
    lambda t: f"{t[0]} {t[1]} {t[2]}".strip() if t[0] != "ADD" else f"ADD {t[2]}".strip()
)


@given(st.lists(st.lists(lines, max_size=8), max_size=6), st.integers(1, 4))
def test_any_operation_sequence_keeps_the_list_valid(batches, capacity):
    insights: list[tuple[str, int]] = []
    for batch in batches:
        ops, _ = parse_operations("\n".join(batch))
        insights = apply_operations(insights, ops, capacity).insights
        assert len(insights) <= capacity
        assert all(v > 0 and t for t, v in insights)
        assert [v for _, v in insights] == sorted((v for _, v in insights), reverse=True)
        assert len({t for t, _ in insights}) == len(insights)


def test_top_k_similar_orders_by_cosine_then_recency():
    keys = np.array([[1, 0], [0.6, 0.8], [1, 0], [0, 1]], dtype=np.float32)
    assert top_k_similar(np.array([1, 0], dtype=np.float32), keys, 3) == [2, 0, 1]
    assert top_k_similar(np.array([0, 1], dtype=np.float32), keys, 2) == [3, 1]
    assert top_k_similar(np.array([1, 0], dtype=np.float32), keys[:0], 3) == []


# ---- the memory, driven by a scripted writer ----------------------------------------------------------------------
def test_expel_memory_edits_insights_and_shows_them_strongest_first():
    llm = FakeLLM(["ADD Play paper.\nADD Watch cycles.", "AGREE 2\nBOGUS 1", "ADD Avoid rock."])
    memory = make_memory("expel", llm, embedder="hash", k=1)
    for i, score in enumerate([1.0, -2.0, 3.0], 1):
        memory.observe(episode(i, score=score))
    state = memory.state()
    assert state["insights"] == [["Watch cycles.", 3], ["Play paper.", 2], ["Avoid rock.", 2]]
    assert state["malformed_ops"] == 1 and state["rejected_adds"] == 0
    assert [e["index"] for e in state["pool"]] == [1, 2, 3]
    context = memory.context("anything")
    assert context.startswith("Insights from earlier games (strongest first):\n1. Watch cycles.\n2. Play paper.\n3.")
    assert context.count("Game ") == 1  # k = 1 example
    # every call: temperature 0, the episode's seed, the rules as system prompt
    assert [c["seed"] for c in llm.calls] == [1001, 1002, 1003]
    assert all(c["temperature"] == 0.0 for c in llm.calls)
    assert llm.calls[0]["messages"][0]["content"] == "Play rock-paper-scissors."


def test_insight_prompt_compares_the_latest_game_with_the_best_and_worst():
    llm = FakeLLM(lambda prompt: "")
    memory = make_memory("expel", llm, embedder="hash")
    memory.observe(episode(1, "rock", score=-3.0))
    assert "earlier game" not in llm.calls[0]["messages"][1]["content"]  # nothing to compare with yet
    memory.observe(episode(2, "paper", score=5.0))
    memory.observe(episode(3, "scissors", score=0.0))
    prompt = llm.calls[-1]["messages"][1]["content"]
    latest, best, worst = (
        prompt.index("Latest game:\nGame 3"),
        prompt.index("Best earlier game:\nGame 2"),
        prompt.index("Worst earlier game:\nGame 1"),
    )
    assert latest < best < worst
    assert "(none yet)" in prompt and "list is full" not in prompt


def test_full_list_is_announced_to_the_writer():
    llm = FakeLLM(["ADD a.\nADD b.", ""])
    memory = make_memory("expel", llm, embedder="hash", max_insights=2)
    memory.observe(episode(1))
    memory.observe(episode(2))
    assert "The list is full (2): ADD is not allowed" in llm.calls[1]["messages"][1]["content"]


def test_retrieval_puts_the_most_similar_game_first():
    memory = make_memory("expel", FakeLLM(lambda p: ""), embedder="hash", k=3)
    for i, moves in enumerate(["scissors scissors scissors", "rock rock rock", "paper paper paper"], 1):
        memory.observe(episode(i, moves))
    query = memory.pool[1]["task"] + "\n" + memory.pool[1]["log"]
    examples = memory.context(query).split("Similar earlier games:\n")[1].splitlines()
    assert examples[0].startswith("Game 2 ")
    assert len(examples) == 3


def test_context_is_bounded():
    llm = FakeLLM(lambda p: "\n".join(f"ADD insight number {i} {'x' * 150}." for i in range(30)))
    memory = make_memory("expel", llm, embedder="hash", max_chars=600)
    for i in range(1, 4):
        memory.observe(episode(i, "rock " * 200))
    assert len(memory.state()["insights"]) == 20
    assert len(memory.context("rock")) <= 600


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="max_insights"):
        make_memory("expel", FakeLLM([]), max_insights=0)
