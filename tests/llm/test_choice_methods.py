"""How a back end answers a list of choices: the surface forms, the grammar, and both on a real embedded model."""

from __future__ import annotations

import numpy as np
import pytest

from ttlearn.llm import make_llm
from ttlearn.llm.base import choice_grammar, surface_forms, written_choice

MOVES = ["rock", "paper", "scissors"]
PLAY_PAPER = [
    {"role": "system", "content": "You play rock-paper-scissors. Answer with one move."},
    {"role": "user", "content": "Play paper. Options: rock, scissors, paper."},
]


def test_surface_forms_cover_case_and_leading_space() -> None:
    assert surface_forms(["rock", "e5"]) == {
        "rock": "rock",
        " rock": "rock",
        "Rock": "rock",
        " Rock": "rock",
        "ROCK": "rock",
        " ROCK": "rock",
        "e5": "e5",
        " e5": "e5",
        "E5": "e5",
        " E5": "e5",
    }


def test_a_shared_form_goes_to_the_choice_listed_that_way_or_to_neither() -> None:
    forms = surface_forms(["a", "A", "no", "No"])
    assert forms["a"] == "a" and forms["A"] == forms[" A"] == "A"
    assert forms["No"] == "No" and "NO" not in forms and " NO" not in forms


def test_grammar_lists_the_forms_quoted_and_maps_text_back() -> None:
    forms = surface_forms(['say "hi"'])
    grammar = choice_grammar(list(forms))
    assert grammar.startswith('root ::= ("say \\"hi\\"" | " say \\"hi\\"" | ') and grammar.endswith(") [.!]?\n")
    assert written_choice("Rock.", surface_forms(MOVES)) == "rock"
    assert written_choice(" PAPER", surface_forms(MOVES)) == "paper"
    assert written_choice("lizard", surface_forms(MOVES)) is None
    with pytest.raises(ValueError, match="at least one form"):
        choice_grammar([])


@pytest.mark.model
def test_forms_score_is_the_logsumexp_of_each_form_scored_alone(smollm2) -> None:
    prompt = smollm2._tokens(smollm2.render(PLAY_PAPER), first=True)
    scores = smollm2.score_forms(prompt, MOVES)
    ends = smollm2.end_mask()
    for move in MOVES:
        alone = [
            smollm2.score_paths(prompt, [smollm2._tokens(form, first=False)], ends)[0]
            for form, owner in surface_forms(MOVES).items()
            if owner == move
        ]
        assert scores[move] == pytest.approx(float(np.logaddexp.reduce(alone)), abs=1e-3)
        # the capitalised form is one of the forms counted: the sum is above it alone
        capitalised = smollm2.score_paths(prompt, [smollm2._tokens(move.capitalize(), first=False)], ends)[0]
        assert scores[move] > capitalised
    plain = smollm2.score_choices(prompt, MOVES)
    assert all(scores[m] > plain[m] for m in MOVES)  # as listed then end-of-turn is one of the forms


@pytest.mark.model
def test_grammar_method_writes_a_legal_choice() -> None:
    llm = make_llm("smollm2:grammar")
    try:
        answers = {llm.complete(PLAY_PAPER, choices=MOVES, temperature=1.0, seed=seed).text for seed in range(6)}
        greedy = llm.complete(PLAY_PAPER, choices=MOVES, temperature=0.0)
    finally:
        llm.close()
    assert answers <= set(MOVES) and greedy.text in MOVES
    assert greedy.choice_logprobs is None and greedy.completion_tokens >= 1
