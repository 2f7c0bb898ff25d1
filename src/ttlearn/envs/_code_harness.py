"""The program the `code` environment runs in the sandbox: the submission, then the problem's tests, one at a time.

It runs under a bare interpreter (standard library only, none of ttlearn); the environment appends a call
`main(spec)` with the spec as a Python literal: `prompt` and `solution` (executed in that order in one namespace, so
helpers and imports from the prompt exist), `tests` (the problem's test module, instrumented by the environment:
every assert became `_ttl_enter(i)` then `_ttl_check(...)` with `_ttl_left` / `_ttl_right` around a comparison's two
sides) and `entry_point`. It imports nothing but `os` (json alone would add ~3 ms to every run).

It writes Python literals, one per line, to file descriptor 3: {"test": i} when test i starts (once per test, so a
timeout names it), then one {"verdict": ...} with the raw facts of how it ended; the environment reads them with
`ast.literal_eval` and turns them into feedback. Values are `repr`s cut to `REPR_CHARS`.
"""

import os

REPR_CHARS = 300
_MISSING = object()


class TestFailed(Exception):
    """An instrumented assert was false."""


def cut(value):
    """`repr(value)`, at most REPR_CHARS long; a value whose repr raises is named by its type."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} whose repr raised>"
    return cut_text(text)


def error_text(error):
    """'Type: message', cut; the type alone when the message itself raises."""
    try:
        return cut_text(f"{type(error).__name__}: {error}")
    except Exception:
        return type(error).__name__


def cut_text(text):
    return text if len(text) <= REPR_CHARS else text[: REPR_CHARS - 3] + "..."


def emit(event):
    os.write(3, (repr(event) + "\n").encode())


def solution_line(error):
    """The line of the submission where `error` was raised (the innermost frame in it), or None."""
    frames = []
    trace = error.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == "solution.py":
            frames.append(trace.tb_lineno)
        trace = trace.tb_next
    return frames[-1] if frames else None


def main(spec):
    state = {"test": None, "left": _MISSING, "right": _MISSING, "call": None, "returned": _MISSING}

    def enter(index):
        if index != state["test"]:
            emit({"test": index})
        state.update(test=index, left=_MISSING, right=_MISSING)  # the last call stays: it may have come before

    def record(side):
        def keep(value):
            state[side] = value
            return value

        return keep

    def check(passed):
        if not passed:
            raise TestFailed

    def finish(verdict):
        emit({"verdict": verdict})
        os._exit(0)  # neither the submission's threads nor its exit handlers may change the verdict

    namespace = {"__name__": "solution"}
    try:
        exec(compile(spec["prompt"], "prompt.py", "exec"), namespace)
        code = compile(spec["solution"], "solution.py", "exec")
    except SyntaxError as error:
        finish({"kind": "syntax", "line": error.lineno, "message": error.msg})
    try:
        exec(code, namespace)
    except BaseException as error:  # the submission may raise anything, SystemExit included
        finish({"kind": "load", "exception": error_text(error), "line": solution_line(error)})
    function = namespace.get(spec["entry_point"])
    if not callable(function):
        finish({"kind": "missing"})

    def candidate(*args, **kwargs):
        shown = [cut(a) for a in args] + [f"{k}={cut(v)}" for k, v in kwargs.items()]
        state.update(call=f"{spec['entry_point']}({', '.join(shown)})", returned=_MISSING)
        result = function(*args, **kwargs)
        state["returned"] = result
        return result

    namespace.update(_ttl_enter=enter, _ttl_left=record("left"), _ttl_right=record("right"), _ttl_check=check)
    try:
        exec(compile(spec["tests"], "tests.py", "exec"), namespace)
        namespace["check"](candidate)
    except TestFailed:
        facts = {k: cut(state[k]) for k in ("left", "right", "returned") if state[k] is not _MISSING}
        finish({"kind": "failed", "test": state["test"], "call": state["call"], **facts})
    except BaseException as error:
        finish(
            {
                "kind": "exception",
                "test": state["test"],
                "call": state["call"],
                "exception": error_text(error),
                "line": solution_line(error),
            }
        )
    finish({"kind": "passed"})
