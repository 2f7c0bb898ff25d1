"""Scripted players (`--llm scripted:NAME`): baselines and test aids, never the default."""

from ttlearn.agent import PLAYERS

__all__ = ["PLAYERS"]
