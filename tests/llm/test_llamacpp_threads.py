"""llama.cpp's thread count follows what is idle: an idle 2-core machine uses both cores, a loaded one one thread."""

from __future__ import annotations

import os

import pytest

from ttlearn.llm.cores import busy_between, busy_cpus, default_threads, threads_for


@pytest.mark.parametrize(
    ("cpus", "busy", "threads"),
    [
        (2, 0.0, 2),  # a newcomer's idle laptop: both cores
        (2, 0.2, 2),  # 1.8 idle: both cores are at least 75% idle on average
        (2, 0.3, 1),  # 1.7 idle: a second thread would wait on a shared core at every barrier
        (2, 1.9, 1),  # loaded: still one thread, never zero
        (1, 0.0, 1),
        (4, 0.0, 2),  # more than two CPUs: hyperthread siblings, half of them
        (16, 2.0, 8),  # 14.25 → capped at 8
        (16, 10.0, 6),  # floor(16 − 10 + 0.25) = 6
    ],
)
def test_threads_for_counts_the_idle_cores(cpus: int, busy: float, threads: int) -> None:
    assert threads_for(cpus, busy) == threads


def test_busy_between_two_readings_of_proc_stat() -> None:
    # cpu0: 100 ticks, 25 of them idle and 5 iowait → 0.70 busy; cpu1: 200 ticks, 180 idle → 0.10 busy
    before = {"cpu0": [10, 0, 10, 100, 0, 0, 0, 0, 0, 0], "cpu1": [0, 0, 0, 1000, 0, 0, 0, 0]}
    after = {"cpu0": [60, 10, 20, 125, 5, 0, 0, 0, 0, 0], "cpu1": [10, 5, 5, 1180, 0, 0, 0, 0]}
    assert busy_between(before, after) == pytest.approx(0.70 + 0.10)


def test_a_cpu_whose_counters_did_not_move_counts_as_idle() -> None:
    frozen = {"cpu0": [5, 0, 5, 50, 0, 0, 0, 0]}
    assert busy_between(frozen, frozen) == 0.0


def test_busy_cpus_reads_this_machine() -> None:
    cpus = os.sched_getaffinity(0)
    assert 0.0 <= busy_cpus(cpus, window_s=0.05) <= len(cpus) + 1e-9


def test_the_environment_variable_overrides_the_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTLEARN_THREADS", "3")
    assert default_threads() == 3
    monkeypatch.delenv("TTLEARN_THREADS")
    assert 1 <= default_threads() <= threads_for(len(os.sched_getaffinity(0)), 0.0)
