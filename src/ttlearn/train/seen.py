"""The tokens of a sampled text that its reader sees: the only ones a trainer trains, since no reward depends on the
others. MemoPilot's player reads a note cut to `memory_chars`; LaMer's next attempt reads a reflection's body, cut
likewise. Each memory says which tokens of a text its reader sees (`memory.memopilot.seen_token_count`,
`memory.lamer.seen_token_span`); this cuts the sample there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ttlearn.llm.hf import HFPolicy, Sample


def seen_tokens(policy: HFPolicy, sample: Sample, span: Callable[[Sequence[str]], tuple[int, int]]) -> Sample:
    """The sample cut to the tokens [start, end) its reader sees, `span(prefixes)` given prefixes[k] = the text of
    its first k + 1 tokens: the tokens before `start` join the prompt (they condition the seen ones), those from `end`
    are dropped, log-probs alike. The completion is empty when nothing is seen."""
    ids = sample.completion_ids
    start, end = span([policy.tokenizer.decode(ids[: k + 1], skip_special_tokens=True) for k in range(len(ids))])
    return dataclasses.replace(
        sample,
        prompt_ids=sample.prompt_ids + ids[:start],
        completion_ids=ids[start:end],
        logprobs=sample.logprobs[start:end],
    )
