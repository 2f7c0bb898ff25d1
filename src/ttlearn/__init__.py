"""ttlearn: test-time learning for LLM agents.

Rooms: `envs` (what is played), `llm` (who answers), `memory` (what carries over between episodes), `session`
(where they meet), `runs` (what is recorded), `train` (RL over memories and policies), `eval` (what it all means).
"""

__version__ = "0.1.0"
