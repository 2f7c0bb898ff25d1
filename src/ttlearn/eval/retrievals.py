"""What MemRL's Q did in a run, from its logged retrievals alone: did ranking by Q ever show another item than
similarity would have, and how often did the q_min filter hide one? The answer to "does Q add anything?"."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def q_effect(logs: Iterable[tuple[Sequence[Mapping[str, Any]], Sequence[int], bool]]) -> dict[str, int]:
    """Count, over retrievals given as (candidates, chosen ids, explored):

    - `retrievals`, and `with_candidates` (phase A found at least one key above δ);
    - `filtered`: retrievals where q_min dropped a candidate (its logged score is None);
    - `reordered`: retrievals, not explored, whose chosen set differs from the len(chosen) candidates most similar
      to the query (ties by log order), i.e. where Q — its z-score or its filter — changed what was shown;
    - `explored`: ε-random picks, which neither ranking decides.
    """
    counts = dict.fromkeys(("retrievals", "with_candidates", "filtered", "reordered", "explored"), 0)
    for candidates, chosen, explored in logs:
        counts["retrievals"] += 1
        if not candidates:
            continue
        counts["with_candidates"] += 1
        counts["filtered"] += any(c["score"] is None for c in candidates)
        if explored:
            counts["explored"] += 1
            continue
        by_similarity = sorted(range(len(candidates)), key=lambda i: (-candidates[i]["sim"], i))[: len(chosen)]
        counts["reordered"] += {candidates[i]["id"] for i in by_similarity} != set(chosen)
    return counts
