"""Hold'em baselines: a styled bot from `envs.holdem_bots` in the player's seat (`scripted:holdem-<style>`)."""

from __future__ import annotations

from ttlearn.envs.base import Env
from ttlearn.envs.holdem_bots import STYLES
from ttlearn.players.base import Decision, Player
from ttlearn.registry import Family
from ttlearn.types import Observation


class HoldemBotPlayer(Player):
    style = "tight"

    @classmethod
    def check_fit(cls, env: Env) -> None:
        if not hasattr(env, "bot_action"):
            raise ValueError(f"environment {env.name!r} has no hold'em bots; use another scripted player")

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        return Decision(env.bot_action(self.style))  # type: ignore[attr-defined] - check_fit made sure


def _styled(name: str) -> type[HoldemBotPlayer]:
    """The player of the style a `holdem-<style>` name names, as a class of its own (its name is the registry's)."""
    style = name.removeprefix("holdem-")
    if style not in STYLES:
        raise ValueError(f"no hold'em bot style {style!r}; choose one of: {', '.join(STYLES)}")
    return type(f"HoldemBot_{style}", (HoldemBotPlayer,), {"style": style, "__module__": __name__})  # ABCMeta: "abc"


BOTS = Family(_styled)
"""Every `holdem-<style>` name of the `PLAYERS` table points here."""
