"""Episodes in flight: N independent jobs on N threads that share the back ends, results written in job order.

Each thread holds one `Parts` (its own environment, player, memory and call records) while it plays a job; the LLMs
behind them are shared (a server batches the concurrent requests; the in-process llama.cpp back end serialises them
with its lock). Results reach `finish` — the run's single writer — strictly in job order, each as soon as every
earlier job is done, so the run directory is always a prefix of the sequential run and resumes exactly.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ttlearn.rollout.parts import Parts

R = TypeVar("R")
T = TypeVar("T")


def map_in_flight(work: Callable[[T], R], items: Sequence[T], concurrency: int) -> list[R]:
    """`[work(item) for item in items]` with up to `concurrency` items in flight (the G rollouts of a training group
    against one server); results in item order, the first error raised."""
    if concurrency <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(min(concurrency, len(items)), thread_name_prefix="rollout") as pool:
        return list(pool.map(work, items))


def play_in_order(
    jobs: Iterable[int], parts: Sequence[Parts], play: Callable[[Parts, int], R], finish: Callable[[R], None]
) -> None:
    """Run `play(parts, job)` for every job on `len(parts)` threads; call `finish(result)` in job order."""
    if len(parts) == 1:
        for job in jobs:
            finish(play(parts[0], job))
        return
    free: queue.Queue[Parts] = queue.Queue()
    for item in parts:
        free.put(item)

    def work(job: int) -> R:
        held = free.get()
        try:
            return play(held, job)
        finally:
            free.put(held)

    with ThreadPoolExecutor(len(parts), thread_name_prefix="episode") as pool:
        futures = [pool.submit(work, job) for job in jobs]
        try:
            for future in futures:
                finish(future.result())
        finally:
            for future in futures:
                future.cancel()
