"""How memory methods put an episode into words and bound what they show, shared so that none imports another."""

from __future__ import annotations

from ttlearn.types import Episode


def game_number(episode: Episode) -> int:
    """The number a memory calls an episode by: its unit in the run (a game's number; `info["unit"]`, set by the
    unit player), else its index (episodes played before units were recorded, which replay as they were)."""
    return episode.info.get("unit", episode.index)


def episode_log(episode: Episode) -> str:
    """One episode as the memory methods show it: its game number, score and the environment's transcript."""
    transcript = episode.info.get("transcript") or "; ".join(f"{s.action}→{s.reward:+g}" for s in episode.steps)
    return f"Game {game_number(episode)} (score {episode.score:+g}): {transcript}"


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
