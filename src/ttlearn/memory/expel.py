"""ExpeL (Zhao et al. 2024): a pool of past trajectories retrieved as few-shot examples, plus LLM-edited insights.

After every episode the writer LLM compares the latest game with the pool's best and worst earlier games and edits a
numbered insight list with one operation per line: `ADD <text>`, `EDIT <n> <text>`, `REMOVE <n>`, `AGREE <n>`. Each
insight carries a vote count (see `apply_operations` for the rules); the player sees the insights, strongest first,
and the k past games most similar to the current situation.

Choices where the paper leaves room, or where we depart from its released code:
- EDIT adds one vote, as in ExpeL's released code (an edit is a form of endorsement); REMOVE always subtracts one
  (the released code subtracts three when the list is full; we instead tell the writer the list is full).
- A full list (`max_insights`, 20) rejects further ADDs and counts them (`rejected_adds`); nothing is evicted
  silently, so the writer must REMOVE or EDIT to make room.
- Our episodes are games, not solved/failed tasks, so "success/failure pairs" become the latest game against the
  pool's best and worst by score.
- Trajectories are keyed by the episode's task *and* log: per-step queries (RPS: round and the opponent's recent moves)
  then match games in which the same situations occurred.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from ttlearn.llm.base import LLM
from ttlearn.memory.base import Memory
from ttlearn.memory.embed import EmbeddingCache, top_k_similar
from ttlearn.memory.text import clip_text, episode_log
from ttlearn.types import Episode

VERBS = ("ADD", "EDIT", "REMOVE", "AGREE")
ADD_VOTES = 2

# An operation attempt is a line whose first word is in capitals (after an optional list marker), e.g. "ADD: ...",
# "- EDIT 2: ...", "3. AGREE 1". Prose lines are not operations and are ignored, not counted.
_OP_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])?\s*([A-Z]{3,})\b\s*:?\s*(.*)$")
_INDEX = re.compile(r"^#?(\d+)\s*[:.)\-]?\s*(.*)$")
_ADD_NUMBER = re.compile(r"^#?\d+\s*:\s*")


@dataclass(frozen=True)
class InsightOp:
    verb: str
    index: int | None = None
    """1-based position in the list as it was shown to the writer (EDIT / REMOVE / AGREE)."""
    text: str = ""


def _norm(text: str) -> str:
    """The identity of an insight for duplicate checks: case, spacing and final punctuation ignored."""
    return " ".join(text.casefold().split()).rstrip(".!;: ")


def parse_operations(text: str, max_chars: int = 200) -> tuple[list[InsightOp], int]:
    """Read the writer's operation lines; returns (well-formed operations, number of malformed ones).

    Malformed: an unknown capitalised verb, a missing index for EDIT / REMOVE / AGREE, an empty text for ADD / EDIT.
    Texts are squashed to one line and clipped to `max_chars`. Text after a REMOVE / AGREE index (ExpeL's writers
    often repeat the insight) is ignored; a number right after ADD (ExpeL's "ADD 4: ...") is ignored too.
    """
    ops: list[InsightOp] = []
    malformed = 0
    for line in text.splitlines():
        match = _OP_LINE.match(line)
        if match is None:
            continue
        verb, rest = match.group(1), " ".join(match.group(2).split())
        if verb not in VERBS:
            malformed += 1
            continue
        if verb == "ADD":
            body = _ADD_NUMBER.sub("", rest, count=1)
            if body:
                ops.append(InsightOp("ADD", None, clip_text(body, max_chars)))
            else:
                malformed += 1
            continue
        numbered = _INDEX.match(rest)
        if numbered is None:
            malformed += 1
            continue
        index, body = int(numbered.group(1)), numbered.group(2)
        if verb == "EDIT":
            if body:
                ops.append(InsightOp("EDIT", index, clip_text(body, max_chars)))
            else:
                malformed += 1
        else:
            ops.append(InsightOp(verb, index))
    return ops, malformed


@dataclass(frozen=True)
class EditResult:
    insights: list[tuple[str, int]]
    malformed: int
    rejected_adds: int


def apply_operations(insights: Sequence[tuple[str, int]], ops: Sequence[InsightOp], capacity: int) -> EditResult:
    """Apply one batch of operations to a list of (text, votes), strongest first.

    Indices refer to the list as the writer saw it, so the batch is applied to that list as a whole:
        votes'_i = votes_i + [AGREE i] + [EDIT i] − [REMOVE i]      (EDIT also replaces the text)
    then insights with votes' ≤ 0 are deleted, each ADD appends (text, 2) while fewer than `capacity` remain (further
    ADDs are rejected and counted), and the list is sorted by votes, descending, ties in their previous order.

    Malformed and skipped (counted): an index outside 1..len, a second operation on the same index, an ADD or EDIT
    whose text duplicates another insight or an earlier ADD of the batch.
    """
    texts = [t for t, _ in insights]
    votes = [v for _, v in insights]
    touched: set[int] = set()
    seen = {_norm(t) for t in texts}
    adds: list[str] = []
    malformed = 0
    for op in ops:
        if op.verb == "ADD":
            if _norm(op.text) in seen:
                malformed += 1
                continue
            seen.add(_norm(op.text))
            adds.append(op.text)
            continue
        i = (op.index or 0) - 1
        if not 0 <= i < len(texts) or i in touched:
            malformed += 1
            continue
        if op.verb == "EDIT":
            others = {_norm(t) for j, t in enumerate(texts) if j != i} | {_norm(a) for a in adds}
            if _norm(op.text) in others:
                malformed += 1
                continue
            seen.discard(_norm(texts[i]))
            seen.add(_norm(op.text))
            texts[i] = op.text
        touched.add(i)
        votes[i] += -1 if op.verb == "REMOVE" else 1
    kept = [(t, v) for t, v in zip(texts, votes, strict=True) if v > 0]
    room = max(capacity - len(kept), 0)
    kept += [(a, ADD_VOTES) for a in adds[:room]]
    kept.sort(key=lambda item: -item[1])
    return EditResult(kept, malformed, max(len(adds) - room, 0))


PROMPT = (
    "Insights so far, numbered:\n{insights}\n\n"
    "Latest game:\n{latest}\n\n{earlier}"
    "Compare the latest game with the earlier ones: what made a game go well or badly? Update the insight list. "
    "Write one operation per line and nothing else:\n"
    "ADD <new insight>\nEDIT <number> <improved insight>\nAGREE <number>\nREMOVE <number>\n"
    "An insight is one short, general, actionable sentence.{full}"
)


class ExpelMemory(Memory):
    needs_llm = True
    learns_across_tasks = True

    def __init__(
        self,
        llm: LLM | None = None,
        k: int = 2,
        max_insights: int = 20,
        pool_size: int = 200,
        max_chars: int = 2000,
        example_chars: int = 500,
        insight_chars: int = 200,
        max_tokens: int = 160,
        embedder: str = "minilm",
    ) -> None:
        super().__init__(llm)
        if k < 0 or max_insights < 1 or pool_size < 1:
            raise ValueError("expel needs k >= 0, max_insights >= 1 and pool_size >= 1")
        if min(max_chars, example_chars, insight_chars) < 20 or max_tokens < 8:
            raise ValueError("expel needs max_chars, example_chars, insight_chars >= 20 and max_tokens >= 8")
        self.k, self.max_insights, self.pool_size = k, max_insights, pool_size
        self.max_chars, self.example_chars, self.insight_chars = max_chars, example_chars, insight_chars
        self.max_tokens = max_tokens
        self.cache = EmbeddingCache(embedder)
        self.insights: list[tuple[str, int]] = []
        self.pool: list[dict[str, Any]] = []
        self.malformed_ops = 0
        self.rejected_adds = 0

    # ---- what the player sees ---------------------------------------------------------------------------------
    def context(self, query: str) -> str:
        parts = []
        if self.insights:
            lines = "\n".join(f"{i}. {t}" for i, (t, _) in enumerate(self.insights, 1))
            parts.append(f"Insights from earlier games (strongest first):\n{lines}")
        if self.pool and self.k:
            keys = self.cache.rows([_key(e) for e in self.pool])
            query_row = self.cache.rows([query])[0]
            picked = top_k_similar(query_row, keys, self.k)
            examples = "\n".join(clip_text(self.pool[i]["log"], self.example_chars) for i in picked)
            parts.append(f"Similar earlier games:\n{examples}")
        return clip_text("\n\n".join(parts), self.max_chars)

    # ---- learning -------------------------------------------------------------------------------------------------
    def observe(self, episode: Episode) -> None:
        assert self.llm is not None
        entry = {
            "index": episode.index,
            "task": episode.task,
            "log": episode_log(episode),
            "score": episode.score,
            "success": episode.success,
        }
        messages = [
            {"role": "system", "content": episode.info.get("rules", episode.task)},
            {"role": "user", "content": self._prompt(entry)},
        ]
        reply = self.llm.complete(messages, max_tokens=self.max_tokens, temperature=0.0, seed=episode.seed)
        ops, malformed = parse_operations(reply.text, self.insight_chars)
        result = apply_operations(self.insights, ops, self.max_insights)
        self.insights = result.insights
        self.malformed_ops += malformed + result.malformed
        self.rejected_adds += result.rejected_adds
        self.pool = (self.pool + [entry])[-self.pool_size :]
        self.cache.forget_all_but([_key(e) for e in self.pool])

    def _prompt(self, latest: dict[str, Any]) -> str:
        shown = "\n".join(f"{i}. {t}" for i, (t, _) in enumerate(self.insights, 1)) or "(none yet)"
        earlier = ""
        if self.pool:
            best = max(reversed(self.pool), key=lambda e: e["score"])
            worst = min(reversed(self.pool), key=lambda e: e["score"])
            pair = [("Best earlier game", best)] + ([("Worst earlier game", worst)] if worst is not best else [])
            earlier = "".join(f"{label}:\n{clip_text(e['log'], self.example_chars)}\n\n" for label, e in pair)
        full = (
            f"\nThe list is full ({self.max_insights}): ADD is not allowed; REMOVE or EDIT a weak insight instead."
            if len(self.insights) >= self.max_insights
            else ""
        )
        latest_log = clip_text(latest["log"], self.example_chars)
        return PROMPT.format(insights=shown, latest=latest_log, earlier=earlier, full=full)

    # ---- snapshot -------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "insights": [[t, v] for t, v in self.insights],
            "pool": [dict(e) for e in self.pool],
            "malformed_ops": self.malformed_ops,
            "rejected_adds": self.rejected_adds,
        }

    def load(self, state: dict[str, Any]) -> None:
        self.insights = [(str(t), int(v)) for t, v in state.get("insights", [])]
        self.pool = [dict(e) for e in state.get("pool", [])]
        self.malformed_ops = int(state.get("malformed_ops", 0))
        self.rejected_adds = int(state.get("rejected_adds", 0))


def _key(entry: dict[str, Any]) -> str:
    return f"{entry['task']}\n{entry['log']}"
