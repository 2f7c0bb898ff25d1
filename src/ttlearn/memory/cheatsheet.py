"""Dynamic Cheatsheet (Suzgun et al. 2025): one evolving text of strategies, rewritten by a curator LLM.

Two variants share the cheatsheet, its guards and its snapshot:
- `cheatsheet` (DC-Cu, cumulative): after every episode the curator rewrites the cheatsheet from the old one and the
  episode's log.
- `cheatsheet-rs` (DC-RS, retrieval-synthesis): every episode is stored as an (input, output) pair = (its task, its
  log with score). Before the next episode, the k past pairs most similar to the current query and the previous
  cheatsheet are synthesised into that episode's cheatsheet. As in the paper's code, the synthesis replaces the
  carried-forward cheatsheet. The session asks for context before every step; we synthesise once per episode, at the
  first call after `observe`, and reuse it for the episode's other steps.

Guards: the curator's output is untrusted text. The cheatsheet is the text between `<cheatsheet>` tags when present,
else the whole reply. A rewrite that is empty or longer than `max_chars` is rejected, the old cheatsheet kept, and
the rejection counted (`rejected_empty`, `rejected_too_long`).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from ttlearn.llm.base import LLM, Message
from ttlearn.memory.base import Memory
from ttlearn.memory.embed import EmbeddingCache, top_k_similar
from ttlearn.memory.text import clip_text, episode_log
from ttlearn.types import Episode

_TAGGED = re.compile(r"<cheatsheet>(.*?)(?:</cheatsheet>|$)", re.DOTALL | re.IGNORECASE)

INSTRUCTIONS = (
    "Keep what still holds, add what the games teach (opponent patterns, moves that worked, mistakes to avoid), "
    "drop what they contradict. Be concrete and short: at most {max_chars} characters. "
    "Write only the cheatsheet, between <cheatsheet> and </cheatsheet>."
)
CURATE = "Current cheatsheet:\n{old}\n\nLatest game:\n{log}\n\nRewrite the cheatsheet for the next game. "
SYNTHESISE = (
    "Current cheatsheet:\n{old}\n\nEarlier games in similar situations:\n{pairs}\n\n"
    "The next game starts in this situation:\n{query}\n\nWrite the cheatsheet for this game from the earlier games. "
)


def extract_cheatsheet(reply: str) -> str:
    """The cheatsheet inside `<cheatsheet>…</cheatsheet>` (an unclosed tag runs to the end), else the whole reply."""
    match = _TAGGED.search(reply)
    return (match.group(1) if match else reply).strip()


def judge_rewrite(text: str, max_chars: int) -> str:
    """'ok', 'empty' (nothing but whitespace) or 'too_long' (more than `max_chars` characters)."""
    if not text.strip():
        return "empty"
    return "too_long" if len(text) > max_chars else "ok"


class _CheatsheetMemory(Memory):
    """The shared part: the cheatsheet text, the guarded rewrite, the counters and their snapshot."""

    needs_llm = True
    learns_across_tasks = True

    def __init__(self, llm: LLM | None = None, max_chars: int = 1200, max_tokens: int = 256) -> None:
        super().__init__(llm)
        if max_chars < 20 or max_tokens < 8:
            raise ValueError(f"{self.name} needs max_chars >= 20 and max_tokens >= 8")
        self.max_chars, self.max_tokens = max_chars, max_tokens
        self.cheatsheet = ""
        self.rejected_empty = 0
        self.rejected_too_long = 0

    def context(self, query: str) -> str:
        return self.cheatsheet

    def _rewrite(self, system: str, task: str, seed: int) -> None:
        """Ask the curator for a new cheatsheet; keep the old one if the new one fails a guard."""
        assert self.llm is not None
        messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": task + INSTRUCTIONS.format(max_chars=self.max_chars)},
        ]
        reply = self.llm.complete(messages, max_tokens=self.max_tokens, temperature=0.0, seed=seed)
        new = extract_cheatsheet(reply.text)
        verdict = judge_rewrite(new, self.max_chars)
        if verdict == "ok":
            self.cheatsheet = new
        elif verdict == "empty":
            self.rejected_empty += 1
        else:
            self.rejected_too_long += 1

    def _shown_old(self) -> str:
        return self.cheatsheet or "(empty)"

    def state(self) -> dict[str, Any]:
        return {
            "cheatsheet": self.cheatsheet,
            "rejected_empty": self.rejected_empty,
            "rejected_too_long": self.rejected_too_long,
        }

    def load(self, state: dict[str, Any]) -> None:
        self.cheatsheet = str(state.get("cheatsheet", ""))
        self.rejected_empty = int(state.get("rejected_empty", 0))
        self.rejected_too_long = int(state.get("rejected_too_long", 0))


class CumulativeCheatsheet(_CheatsheetMemory):
    def observe(self, episode: Episode) -> None:
        task = CURATE.format(old=self._shown_old(), log=episode_log(episode))
        self._rewrite(episode.info.get("rules", episode.task), task, seed=episode.seed)


class RetrievalSynthesisCheatsheet(_CheatsheetMemory):
    def __init__(
        self,
        llm: LLM | None = None,
        k: int = 3,
        max_chars: int = 1200,
        max_tokens: int = 256,
        pair_chars: int = 500,
        pool_size: int = 200,
        embedder: str = "minilm",
    ) -> None:
        super().__init__(llm, max_chars, max_tokens)
        if k < 1 or pair_chars < 20 or pool_size < 1:
            raise ValueError("cheatsheet-rs needs k >= 1, pair_chars >= 20 and pool_size >= 1")
        self.k, self.pair_chars, self.pool_size = k, pair_chars, pool_size
        self.cache = EmbeddingCache(embedder)
        self.pairs: list[dict[str, Any]] = []
        self.rules = ""
        self.observed = 0
        self.synthesised_after = 0  # `observed` at the last synthesis: equal means this episode's is made

    def observe(self, episode: Episode) -> None:
        pair = {"input": episode.task, "output": episode_log(episode), "seed": episode.seed}
        self.pairs = (self.pairs + [pair])[-self.pool_size :]
        self.cache.forget_all_but([p["input"] for p in self.pairs])
        self.rules = episode.info.get("rules", episode.task)
        self.observed += 1

    def context(self, query: str) -> str:
        if self.pairs and self.synthesised_after != self.observed:
            self.synthesised_after = self.observed
            self._synthesise(query)
        return self.cheatsheet

    def _synthesise(self, query: str) -> None:
        """One curator call per episode, seeded by the last observed episode's seed."""
        keys = self.cache.rows([p["input"] for p in self.pairs])
        picked = top_k_similar(self.cache.rows([query])[0], keys, self.k)
        task = SYNTHESISE.format(old=self._shown_old(), pairs=self._show_pairs(picked), query=query)
        self._rewrite(self.rules, task, seed=self.pairs[-1]["seed"])

    def _show_pairs(self, picked: Sequence[int]) -> str:
        return "\n\n".join(
            f"Situation: {self.pairs[i]['input']}\nWhat happened: {clip_text(self.pairs[i]['output'], self.pair_chars)}"
            for i in picked
        )

    def state(self) -> dict[str, Any]:
        return {
            **super().state(),
            "pairs": [dict(p) for p in self.pairs],
            "rules": self.rules,
            "observed": self.observed,
            "synthesised_after": self.synthesised_after,
        }

    def load(self, state: dict[str, Any]) -> None:
        super().load(state)
        self.pairs = [dict(p) for p in state.get("pairs", [])]
        self.rules = str(state.get("rules", ""))
        self.observed = int(state.get("observed", 0))
        self.synthesised_after = int(state.get("synthesised_after", 0))
