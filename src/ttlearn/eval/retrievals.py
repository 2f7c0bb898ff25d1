"""What MemRL's Q did in a run, from its logged retrievals alone: did ranking by Q ever show another item than
similarity would have, and how often did the q_min filter hide one? The answer to "does Q add anything?"."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def q_effect(logs: Iterable[tuple[Sequence[Mapping[str, Any]], Sequence[int], bool]]) -> dict[str, int]:
    """Count, over retrievals given as (candidates, chosen ids, explored):

    - `retrievals`, and `with_candidates` (phase A found at least one key above δ);
    - `filtered`: retrievals where q_min dropped a candidate (its logged score is None);
    - `less_similar`: retrievals, not explored, where Q — its z-score or its filter — made the memory show an item
      less similar to the query than the len(chosen) most similar ones;
    - `tie_broken`: retrievals where Q only chose among equally similar items (items of one intent key share its
      similarity: typically the same task answered twice);
    - `explored`: ε-random picks, which neither ranking decides.
    """
    counts = dict.fromkeys(("retrievals", "with_candidates", "filtered", "less_similar", "tie_broken", "explored"), 0)
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
        if {candidates[i]["id"] for i in by_similarity} == set(chosen):
            continue
        shown = sorted((c["sim"] for c in candidates if c["id"] in chosen), reverse=True)
        best = [candidates[i]["sim"] for i in by_similarity]
        counts["less_similar" if shown < best else "tie_broken"] += 1
    return counts
