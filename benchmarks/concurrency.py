"""Episodes in flight against one server: ttlearn's decisions/s vs the server's own throughput, N = 1, 2, 4, 8.

For every N, the same workload: `--games` independent RPS games (memory none, `--rounds` decisions each).
    ttlearn  the games played by a session with `concurrency=N` through the rollout core (N games in flight, one
             shared `openai:` back end), timed from the first move to the last durable game record;
    raw      the very requests that session sent (read back from its run directory), each game's in order, N games
             at a time on N bare HTTP threads (keep-alive `http.client`), no ttlearn code in the loop;
    ratio    ttlearn decisions/s ÷ raw decisions/s (target ≥ 0.8 at every N), over `--repeats` alternating pairs
             of measurements (the range of the per-pair ratios beside it: a loaded machine is noisy).
Both sides must have generated the same tokens (`same` in the last column).

By default it serves the embedded SmolLM2 with llama-cpp-python's server on loopback (`--server-threads` threads).
That server has no parallel slots (one lock around one model), so N only overlaps client-side work with the
server's; against a batching server (`vllm serve MODEL --max-num-seqs 64`, or the native `llama-server -np 8`) pass
`--server openai:http://HOST:PORT/v1#MODEL` and the raw column is its real concurrent throughput.

    python benchmarks/concurrency.py --games 8 --rounds 2
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ttlearn.llm.local_server import llama_server
from ttlearn.llm.models import model_path
from ttlearn.llm.openai import CHOICE_FORMATS
from ttlearn.rollout.parts import LLMPool
from ttlearn.rollout.run import play, prepare
from ttlearn.runs import RunConfig

Call = dict[str, Any]


def play_session(player: str, games: int, rounds: int, concurrency: int, out: Path) -> tuple[float, list[Call]]:
    """Wall seconds of `games` RPS games played `concurrency` at a time, and the LLM calls they recorded."""
    config = RunConfig(
        env="rps",
        env_options={"opponent": "cycle3", "rounds": rounds},
        memory="none",
        player=player,
        units=games,
        attempts=1,
        carry_memory=True,
    )
    run = prepare(out, config, concurrency)
    pool = LLMPool()
    try:
        pool.get(player)  # loaded before the clock starts
        start = time.perf_counter()
        play(run, concurrency=concurrency, pool=pool)
        wall = time.perf_counter() - start
    finally:
        pool.close()
    return wall, [{**call, "game": unit} for unit in range(1, run.done + 1) for call in run.calls(unit)]


class RawClient:
    """Bare chat-completion requests, one keep-alive connection per thread."""

    def __init__(self, base_url: str, model: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port, self.path = parts.hostname, parts.port or 80, parts.path.rstrip("/") + "/chat/completions"
        self.model = model
        self.spelling: Any = None  # set by pick_spelling
        self._local = threading.local()

    def payload(self, call: Call, spelling: Any) -> dict[str, Any]:
        params = call["params"]
        body = {
            "model": self.model,
            "messages": call["messages"],
            "max_tokens": params["max_tokens"],
            "temperature": params["temperature"],
            "seed": params["seed"],
        }
        if spelling is not None:
            schema = {"type": "object", "properties": {"action": {"enum": params["choices"]}}, "required": ["action"]}
            body["response_format"] = spelling(schema)
        return body

    def post(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not hasattr(self._local, "connection"):
            self._local.connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
        connection = self._local.connection
        connection.request("POST", self.path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if response.status == 200 else {})

    def pick_spelling(self, call: Call) -> None:
        """The first structured-output spelling this server accepts, as ttlearn's client would settle on."""
        for spelling in CHOICE_FORMATS:
            status, _ = self.post(self.payload(call, spelling))
            if status == 200:
                self.spelling = spelling
                return
        raise RuntimeError(f"{self.host}:{self.port} accepts no chat completion request")

    def completion_tokens(self, call: Call) -> int:
        status, data = self.post(self.payload(call, self.spelling))
        if status != 200:
            raise RuntimeError(f"the server answered {status}")
        return int(data["usage"]["completion_tokens"])


def replay_raw(client: RawClient, calls: list[Call], concurrency: int) -> tuple[float, int]:
    """Wall seconds to send `calls` game by game, `concurrency` games at a time; the completion tokens generated."""
    by_game: dict[int, list[Call]] = defaultdict(list)
    for call in calls:
        by_game[call["game"]].append(call)

    def play(game_calls: list[Call]) -> int:
        return sum(client.completion_tokens(call) for call in game_calls)

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(play, by_game.values()))
    return time.perf_counter() - start, tokens


def measure(
    client: RawClient, player: str, games: int, rounds: int, n: int, repeats: int, tmp: str
) -> tuple[float, float, tuple[float, float], bool]:
    """ttlearn's and the raw decisions/s at N in flight over `repeats` alternating pairs (so a change in the
    machine's load hits both sides), the lowest and highest per-pair ratio, and whether both generated the same
    tokens."""
    session_s, raw_s, same = [], [], True
    for repeat in range(repeats):
        wall, calls = play_session(player, games, rounds, n, Path(tmp) / f"n{n}-{repeat}")
        raw_wall, raw_tokens = replay_raw(client, calls, n)
        session_s.append(wall)
        raw_s.append(raw_wall)
        same = same and raw_tokens == sum(call["completion"]["completion_tokens"] for call in calls)
    decisions = len(calls) * repeats
    ratios = [raw / wall for wall, raw in zip(session_s, raw_s)]
    return decisions / sum(session_s), decisions / sum(raw_s), (min(ratios), max(ratios)), same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", help="openai:URL#MODEL of a running server (default: start llama.cpp's)")
    parser.add_argument("--server-threads", type=int, default=1, help="threads of the local llama.cpp server")
    parser.add_argument(
        "--batch-invariant", action="store_true", help="local server: one token per batch, answers in any order alike"
    )
    parser.add_argument("--games", type=int, default=8, help="games per measurement (≥ the largest N)")
    parser.add_argument("--rounds", type=int, default=2, help="decisions per game")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=3, help="alternating ttlearn / raw measurements per N")
    parser.add_argument("--budget-s", type=float, default=1200, help="start no new N after this many seconds")
    args = parser.parse_args()
    if args.games < max(args.concurrency):
        parser.error(f"--games {args.games} leaves some of N={max(args.concurrency)} threads idle; use ≥ N games")

    with tempfile.TemporaryDirectory() as tmp:
        serving = (
            nullcontext(args.server)
            if args.server
            else llama_server(
                model_path("smollm2"),
                "smollm2",
                Path(tmp) / "server.log",
                threads=args.server_threads,
                batch_invariant=args.batch_invariant,
            )
        )
        with serving as served:
            player = served if args.server else f"openai:{served}#smollm2"
            base_url, _, model = player[len("openai:") :].partition("#")
            client = RawClient(base_url, model)
            print(f"server {player}; {args.games} games × {args.rounds} decisions, {args.repeats} repeats per N")
            print(f"{'N':>3} {'ttlearn dec/s':>14} {'raw dec/s':>10} {'ratio':>6}  per repeat  tokens generated")
            _, warmup = play_session(player, 1, 1, 1, Path(tmp) / "warmup")  # loads pages, finds the spelling
            client.pick_spelling(warmup[0])
            began = time.perf_counter()
            for n in args.concurrency:
                if time.perf_counter() - began > args.budget_s:
                    print(f"{n:>3} skipped: past the --budget-s of {args.budget_s:g} s")
                    continue
                ours, theirs, spread, same = measure(client, player, args.games, args.rounds, n, args.repeats, tmp)
                print(
                    f"{n:>3} {ours:>14.3f} {theirs:>10.3f} {ours / theirs:>6.2f}  {spread[0]:.2f}–{spread[1]:.2f}  "
                    + ("same" if same else "DIFFERENT")
                )


if __name__ == "__main__":
    main()
