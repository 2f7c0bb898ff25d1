"""The OpenAI client's retry arithmetic and spec options, against hand-computed numbers (no server needed)."""

from __future__ import annotations

import email.utils

import pytest

from ttlearn.llm.openai import (
    RetryPolicy,
    backoff_delay,
    is_context_overflow,
    is_transient,
    parse_options,
    retry_after_s,
    retry_wait_s,
)


def test_which_statuses_are_retried():
    assert [s for s in (400, 401, 404, 408, 422, 429, 500, 502, 503, 504) if is_transient(s, "", False)] == [
        408,
        429,
        500,
        502,
        503,
        504,
    ]
    refusal = "{'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}"
    assert not is_transient(500, refusal, True)  # a spelling the server cannot parse: try the next one at once
    assert is_transient(500, refusal, False)


def test_full_jitter_backoff_doubles_up_to_the_cap():
    # uniform · min(cap, base · 2^attempt) with base 0.5 s, cap 30 s
    assert backoff_delay(0, 0.5, 30.0, 0.5) == 0.25
    assert backoff_delay(3, 0.5, 30.0, 0.5) == 2.0  # 0.5 · 8 = 4, half of it
    assert backoff_delay(10, 0.5, 30.0, 0.5) == 15.0  # 0.5 · 1024 = 512 → capped at 30
    assert backoff_delay(4, 0.5, 30.0, 0.0) == 0.0


def test_retry_after_in_seconds_or_as_a_date():
    now = 1_445_412_468.0  # 2015-10-21 07:27:48 UTC
    assert retry_after_s("7", now) == 7.0
    assert retry_after_s("1.5", now) == 1.5
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now) == 12.0
    assert retry_after_s(email.utils.formatdate(now - 60, usegmt=True), now) == 0.0  # a date in the past: now
    assert retry_after_s("-3", now) == 0.0
    for unusable in (None, "", "soon"):
        assert retry_after_s(unusable, now) is None


def test_the_server_s_retry_after_wins_but_is_capped():
    policy = RetryPolicy(backoff_base_s=0.5, backoff_cap_s=30.0)
    assert retry_wait_s(2, policy, 4.0, 0.9) == 4.0
    assert retry_wait_s(2, policy, 3600.0, 0.9) == 30.0
    assert retry_wait_s(2, policy, None, 0.5) == 1.0  # 0.5 · min(30, 0.5 · 4)


def test_spec_options_make_the_policy_and_the_calls_side_by_side():
    assert parse_options("") == (RetryPolicy(), 1)
    assert parse_options("timeout_s=30&max_retries=8") == (RetryPolicy(timeout_s=30.0, max_retries=8), 1)
    assert parse_options("backoff_base_s=0.1&backoff_cap_s=2") == (
        RetryPolicy(backoff_base_s=0.1, backoff_cap_s=2.0),
        1,
    )
    assert parse_options("side_by_side=4&max_retries=2") == (RetryPolicy(max_retries=2), 4)


@pytest.mark.parametrize(
    "options, message",
    [
        ("retries=3", "unknown openai option 'retries'; known: timeout_s, max_retries"),
        ("max_retries=many", "max_retries needs a number"),
        ("max_retries=1.5", "max_retries needs a number"),
        ("timeout_s=0", "timeout_s > 0"),
        ("max_retries=-1", "max_retries, backoff_base_s, backoff_cap_s ≥ 0"),
        ("side_by_side=2.5", "side_by_side needs a number"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        parse_options(options)


def test_a_refusal_for_a_prompt_over_the_context_is_told_apart():
    vllm = "This model's maximum context length is 4096 tokens. However, you requested 16709 tokens"
    assert is_context_overflow(400, vllm)
    assert is_context_overflow(400, '{"error": {"code": "context_length_exceeded"}}')
    assert is_context_overflow(400, "the request exceeds the available context size, try increasing it")
    assert not is_context_overflow(400, "unknown field: response_format")
    assert not is_context_overflow(500, vllm)  # a server error is retried, whatever it says
