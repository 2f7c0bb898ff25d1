"""The `tools` environment's back end: BFCL's simulated APIs, run in a child process.

Started as a script (`python _bfcl_worker.py BFCL_DIR`), standard library only, so it needs neither ttlearn nor a
shell. It reads one JSON request per line on stdin and answers one JSON line on stdout:

- `{"op": "load", "config": ..., "classes": [...], "long_context": bool}`: fresh agent and gold instances of the
  classes, from the task's initial configuration (nothing survives from the previous episode);
- `{"op": "call", "name": ..., "args": [...], "kwargs": {...}}`: run one agent call, answer its result text;
- `{"op": "check", "gold": [{"name": ..., "args": ..., "kwargs": ...}, ...]}`: run the turn's gold calls on the gold
  instances, then BFCL's own checkers: the agent's back-end state must equal the gold one, and the gold calls'
  results must all be among the agent's results so far.

Arguments arrive as JSON values and reach methods by name (no `eval`). The address space is capped, and the parent
kills this process when a request runs past its time limit, so a call that explodes costs the episode, nothing more.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import sys
from typing import Any

MEMORY_LIMIT_BYTES = 2 * 1024**3


def _limit_memory() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):  # not on this platform: the parent's time limit still holds
        pass


class Backend:
    """One episode's API instances: the agent's and the gold ones, each class built from the same configuration."""

    def __init__(self, config: dict[str, Any], classes: list[str], long_context: bool) -> None:
        from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

        def build() -> tuple[dict[str, Any], dict[str, Any]]:
            instances, methods = {}, {}
            for class_name in classes:
                instance = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)()
                if class_name not in STATELESS_CLASSES:
                    instance._load_scenario(copy.deepcopy(config.get(class_name, {})), long_context=long_context)
                instances[class_name] = instance
                # like BFCL, a later class wins a method name two classes share
                for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                    if not name.startswith("_"):
                        methods[name] = method
            return instances, methods

        self.agent, self.agent_methods = build()
        self.gold, self.gold_methods = build()
        self.agent_results: list[str] = []

    @staticmethod
    def run(methods: dict[str, Any], name: str, args: list[Any], kwargs: dict[str, Any]) -> str:
        """One call, its result written as BFCL writes it (dicts as JSON, errors as "Error during execution: …")."""
        try:
            if name not in methods:
                raise NameError(f"name '{name}' is not defined")
            result = methods[name](*args, **kwargs)
        except Exception as error:  # the API's own failures are answers the agent must read
            return f"Error during execution: {error}"
        if isinstance(result, str):
            return result
        if isinstance(result, dict):
            try:
                return json.dumps(result)
            except (TypeError, ValueError):
                return str(result)
        return str(result)

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        result = self.run(self.agent_methods, name, args, kwargs)
        self.agent_results.append(result)
        return {"result": result}

    def check(self, gold: list[dict[str, Any]]) -> dict[str, Any]:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import response_checker, state_checker

        gold_results = [self.run(self.gold_methods, c["name"], c["args"], c["kwargs"]) for c in gold]
        verdict = state_checker(self.agent, self.gold)
        if verdict["valid"]:
            verdict = response_checker(self.agent_results, gold_results, 0)
        return {"passed": verdict["valid"], "reason": verdict.get("error_type", "")}


def serve(bfcl_dir: str) -> None:
    sys.path.insert(0, bfcl_dir)
    _limit_memory()
    answers, sys.stdout = sys.stdout, sys.stderr  # whatever an API prints must not mix with the answers
    backend: Backend | None = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "load":
            backend = Backend(request["config"], request["classes"], request["long_context"])
            answer: dict[str, Any] = {"ok": True}
        elif backend is None:
            answer = {"error": "no task loaded"}
        elif op == "call":
            answer = backend.call(request["name"], request["args"], request["kwargs"])
        elif op == "check":
            answer = backend.check(request["gold"])
        else:
            answer = {"error": f"unknown op {op!r}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve(sys.argv[1])
