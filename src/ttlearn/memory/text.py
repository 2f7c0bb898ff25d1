"""How memory methods put an episode into words and bound what they show, shared so that none imports another."""

from __future__ import annotations

from ttlearn.types import Episode


def episode_log(episode: Episode) -> str:
    """One episode as the memory methods show it: index, score and the environment's transcript."""
    transcript = episode.info.get("transcript") or "; ".join(f"{s.action}→{s.reward:+g}" for s in episode.steps)
    return f"Game {episode.index} (score {episode.score:+g}): {transcript}"


def clip_text(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def bound_memory(text: str, max_chars: int) -> str:
    """Collapse whitespace and cut at a word boundary so the memory never exceeds `max_chars`."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars].rsplit(" ", 1)[0]
    return cut or text[:max_chars]
