"""Where environment, player and memory meet: the one episode loop (`loop`), the one builder from a config to live
parts (`parts`), the one unit player (`unit`: a task instance with its attempts; a game is a unit with one attempt),
the one driver of a run into its directory (`run`), units in flight (`inflight`), judging a recorded run again
(`rejudge`), and the arena, which plays whole plans of runs (`arena`). Nothing in envs, llm or memory imports this
package."""
