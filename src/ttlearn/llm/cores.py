"""How many cores are idle now, for the back ends that compute on this machine: llama.cpp's thread count and how many
calls the embedded and `hf:` models take side by side (`LLM.side_by_side`)."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

IDLE_SHARE = 0.75
"""A thread is given a core only when that much of it is idle: llama.cpp's threads meet at a barrier after every
layer, so one thread that shares its core with another process holds all of them up (two threads on a loaded
2-core machine fell to ~2 tok/s)."""


def threads_for(cpus: int, busy_cpus: float) -> int:
    """Threads for llama.cpp on `cpus` CPUs of which `busy_cpus` (in CPUs) are busy with other work: one per core
    that is at least `IDLE_SHARE` idle, at least one; on machines with more than two CPUs at most half of them
    (hyperthread siblings share a core's arithmetic units) and at most 8."""
    ceiling = cpus if cpus <= 2 else min(8, cpus // 2)
    return max(1, min(ceiling, math.floor(cpus - busy_cpus + 1 - IDLE_SHARE)))


def busy_between(before: dict[str, list[int]], after: dict[str, list[int]]) -> float:
    """CPUs busy between two readings of /proc/stat's per-CPU lines ({"cpu0": [user, nice, system, idle, iowait,
    irq, softirq, steal, …]}): Σ over the CPUs of 1 − Δ(idle + iowait) / Δ(all eight counters)."""
    busy = 0.0
    for cpu, now in after.items():
        delta = [b - a for a, b in zip(before[cpu][:8], now[:8])]
        total = sum(delta)
        if total > 0:
            busy += 1 - (delta[3] + delta[4]) / total
    return busy


def _cpu_times(cpus: set[int]) -> dict[str, list[int]]:
    lines = Path("/proc/stat").read_text().splitlines()
    fields = (line.split() for line in lines if line.startswith("cpu") and not line.startswith("cpu "))
    return {f[0]: [int(x) for x in f[1:]] for f in fields if int(f[0][3:]) in cpus}


def busy_cpus(cpus: set[int], window_s: float = 0.3) -> float:
    """How many of `cpus` other work keeps busy now: /proc/stat over `window_s`, else the 1-minute load average."""
    try:
        before = _cpu_times(cpus)
        time.sleep(window_s)
        return busy_between(before, _cpu_times(cpus))
    except (OSError, ValueError, KeyError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def default_threads() -> int:
    """`TTLEARN_THREADS` when set, else `threads_for` the CPUs this process may use and what keeps them busy now: an
    idle 2-core machine gets both cores, a loaded one a single thread. Replies do not depend on it (each dot product
    is computed by one thread; tests/llm/test_llamacpp_exact.py), so it is not recorded."""
    if "TTLEARN_THREADS" in os.environ:
        return max(1, int(os.environ["TTLEARN_THREADS"]))
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    return threads_for(len(cpus), busy_cpus(cpus))
