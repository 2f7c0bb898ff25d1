"""Players: the frozen LLM player (`players.llm`), the turn composer (`players.turn`) and the scripted players
(`--llm scripted:NAME`): baselines and test aids, never the default."""

from ttlearn.players.base import PLAYERS, Decision, Player

__all__ = ["PLAYERS", "Decision", "Player"]
