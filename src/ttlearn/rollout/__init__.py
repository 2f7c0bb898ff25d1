"""Where environment, player and memory meet: the one episode loop (`loop`), the one builder from a config to live
parts (`parts`), and the two ways of running many episodes into a run directory — a session of games with the
memory carried over (`session`) and trial runs of repeated attempts at the same instances (`trials`). The arena,
which plays whole plans of runs, lives here too (`arena`). Nothing in envs, llm or memory imports this package."""
