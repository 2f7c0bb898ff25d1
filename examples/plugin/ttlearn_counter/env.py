"""`counter`: reach the target total exactly by adding 1, 2 or 3 a step, within a few steps."""

from __future__ import annotations

from ttlearn.envs.base import Env
from ttlearn.types import Observation, StepResult

ACTIONS = ("add 1", "add 2", "add 3")


class Counter(Env):  # named by its entry point: `Counter.name` is "counter" once ttlearn loads it
    turns = 6

    def __init__(self, span: int = 8, seed: int = 0) -> None:  # every env takes `seed=`; make_env records both
        if span < 1:
            raise ValueError(f"span must be at least 1, got {span}")
        self.span = span
        self.target = self.total = self.steps = 0

    def describe(self) -> str:
        return "Reach the target total exactly. Each step adds 1, 2 or 3; going past the target loses."

    def reset(self, seed: int) -> Observation:
        self.target = 4 + seed % self.span
        return self.restart()

    def restart(self) -> Observation:
        self.total = self.steps = 0
        return self._observe()

    def _observe(self) -> Observation:
        text = f"Total {self.total}, target {self.target}, {self.turns - self.steps} steps left."
        return Observation(text, self.legal_actions(), {"total": self.total, "target": self.target})

    def legal_actions(self) -> tuple[str, ...]:
        return ACTIONS

    def step(self, action: str) -> StepResult:
        if action not in ACTIONS:
            raise ValueError(f"not an action: {action!r}")
        self.total += int(action.split()[1])
        self.steps += 1
        done = self.total >= self.target or self.steps >= self.turns
        reward = 1.0 if done and self.success() else 0.0
        return StepResult(self._observe(), reward, done)

    def score(self) -> float:
        return 1.0 if self.success() else 0.0

    def success(self) -> bool:
        return self.total == self.target

    def oracle_action(self, seed: int) -> str:
        return f"add {min(3, self.target - self.total)}"
