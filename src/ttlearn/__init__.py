"""ttlearn: test-time learning for LLM agents.

Rooms: `envs` (what is played), `llm` (who answers), `memory` (what carries over between episodes), `players`
(who decides), `rollout` (where they meet: the episode loop, the unit player, the driver, the arena), `runs` (what is
recorded), `train` (RL over memories and policies), `eval` (what it all means), `serve` (a memory over HTTP),
`cli` (the commands).
"""

__version__ = "0.1.0"
