"""Games inside training: a frozen player plays one game with a given memory text, seeded like a session.

The seeds follow `Session.play_game` (game g of a sequence with seed s: `derive_seed(s, "game", g)`, act k:
`derive_seed(s, "act", g, k)`), so a training sequence replays exactly as `ttlearn run --seed s` would play it
with the same memories. No run directory, no recording: training plays thousands of games.
"""

from __future__ import annotations

from ttlearn.agent import PLAYERS, LLMPlayer, Player
from ttlearn.envs.base import Env
from ttlearn.llm.base import make_llm
from ttlearn.session import SCRIPTED, derive_seed
from ttlearn.types import Episode, Step


def make_player(spec: str, temperature: float = 0.0) -> Player:
    """`scripted:NAME` → a registered scripted player; anything else → the frozen LLM player on that LLM spec."""
    if spec.startswith(SCRIPTED):
        return PLAYERS.build(spec[len(SCRIPTED):])
    return LLMPlayer(make_llm(spec), temperature=temperature)


def play_game(env: Env, player: Player, memory: str, sequence_seed: int, index: int) -> Episode:
    """Game `index` (1-based) of the sequence seeded `sequence_seed`, with the player reading `memory`."""
    seed = derive_seed(sequence_seed, "game", index)
    obs = env.reset(seed)
    player.begin_episode(env)
    task = env.task()
    steps: list[Step] = []
    done = False
    while not done:
        decision = player.act(env, obs, memory, seed=derive_seed(sequence_seed, "act", index, len(steps)))
        result = env.step(decision.action)
        steps.append(Step(obs.text, decision.action, result.reward, decision.valid, decision.raw, dict(result.info)))
        obs, done = result.observation, result.done
    player.end_episode(env, obs)
    info = {"rules": env.describe(), "transcript": env.transcript()}
    return Episode(index, seed, task, tuple(steps), env.score(), env.success(), info)
