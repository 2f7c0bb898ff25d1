"""Hold'em baselines: a styled bot from `envs.holdem_bots` in the player's seat (`scripted:holdem-<style>`)."""

from __future__ import annotations

from ttlearn.envs.base import Env
from ttlearn.envs.holdem_bots import STYLES
from ttlearn.players.base import PLAYERS, Decision, Player
from ttlearn.types import Observation


class HoldemBotPlayer(Player):
    style = "tight"

    @classmethod
    def check_fit(cls, env: Env) -> None:
        if not hasattr(env, "bot_action"):
            raise ValueError(f"environment {env.name!r} has no hold'em bots; use another scripted player")

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        return Decision(env.bot_action(self.style))  # type: ignore[attr-defined] - check_fit made sure


for _style in STYLES:
    PLAYERS.register(f"holdem-{_style}")(
        type(
            f"HoldemBot_{_style}",
            (HoldemBotPlayer,),
            {"style": _style, "name": f"holdem-{_style}", "__module__": __name__},  # ABCMeta would say "abc"
        )
    )
