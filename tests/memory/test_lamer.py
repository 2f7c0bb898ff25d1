"""LaMer's memory: the reflection a reply holds, and the tokens of it the next attempt reads (what is trained)."""

from __future__ import annotations

from ttlearn.memory.lamer import extract_reflection, seen_token_span


def test_extract_reflection() -> None:
    assert extract_reflection("ok <reflection> go  left\nnow </reflection> x", 100) == "go left now"
    assert extract_reflection("no tags at all", 100) == "no tags at all"
    assert extract_reflection("<reflection>aaa bbb ccc", 9) == "aaa bbb"


def test_seen_token_span_keeps_only_what_the_next_attempt_reads() -> None:
    # Tokens: "Sure", ". <refl", "ection>", " Go", " left", " first", ".</reflection>". The body starts after
    # character 18 (len "Sure. <reflection>"), first reached by token 3 (" Go").
    tokens = ["Sure", ". <refl", "ection>", " Go", " left", " first", ".</reflection>"]
    prefixes = ["".join(tokens[: k + 1]) for k in range(len(tokens))]
    # uncut ("Go left first." fits 400 chars): tokens 3..6, the closing tag too (stopping kept it short)
    assert seen_token_span(prefixes, 400) == (3, 7)
    # cut at 8 chars: shown "Go left" (the word boundary before "first"), reached after token 4 → tokens 3..4
    assert extract_reflection(prefixes[-1], 8) == "Go left"
    assert seen_token_span(prefixes, 8) == (3, 5)
    # no tags: the whole reply is the reflection; an empty body is not kept, so nothing is trained
    assert seen_token_span(["Go", " up"], 400) == (0, 2)
    assert seen_token_span(["<reflection>", "</reflection>"], 400) == (0, 0)
    assert seen_token_span([], 400) == (0, 0)
