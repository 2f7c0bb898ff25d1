"""The program the `code` environment runs in the sandbox: the problem's tests against the submission, which runs in a
process of its own, so no code of the submission ever runs where the verdict is decided.

It runs under a bare interpreter (standard library only, none of ttlearn); the environment appends a call `main()`
and sends the spec, `marshal`ed, on standard input: `prompt`, `solution`, `tests` (the problem's test module,
instrumented by the environment: every assert became `_ttl_enter(i)` then `_ttl_check(...)` with `_ttl_left` /
`_ttl_right` around a comparison's two sides) and `entry_point`.

Two processes. The judge forks the runner before it reads the spec (so the runner's memory never holds the tests),
closes the runner's standard input and report stream, and sends it only the prompt and the submission. The runner
executes them and answers each call of the function with its result, `marshal`ed: plain data only, so a returned
object cannot bring code (an overridden `__eq__`) into the judge, which decodes it, keeps only exact built-in types,
and compares in its own namespace with the prompt and the tests. The submission cannot reach the judge's memory or
descriptors (both processes changed uid, so neither is dumpable: no ptrace, no /proc/<pid>/mem or fd), its report
stream (file descriptor 3) or its exit: ending the runner (`os._exit`, `sys.exit`, a crash) or killing the judge ends
the run without a verdict, a failure.

The judge writes Python literals, one per line, to file descriptor 3: {"test": i} when test i starts (once per test,
so a timeout names it), then one {"verdict": ...} with the raw facts of how it ended; the environment reads them with
`ast.literal_eval` and turns them into feedback. Values are `repr`s cut to `REPR_CHARS`.
"""

import marshal
import os
import sys

REPR_CHARS = 300
PLAIN = (int, float, complex, str, bytes, bool, type(None), tuple, list, dict, set, frozenset)
"""The types a result may have once decoded (exactly these: no subclass survives `marshal`)."""
_MISSING = object()


class TestFailed(Exception):
    """An instrumented assert was false."""


class SubmissionRaised(Exception):
    """The submission raised while the judge called it: its 'Type: message' and line, as the runner reported them."""

    def __init__(self, text, line):
        super().__init__(text)
        self.text, self.line = text, line


def cut(value):
    """`repr(value)`, at most REPR_CHARS long; a value whose repr raises is named by its type."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} whose repr raised>"
    return cut_text(text)


def error_text(error):
    """'Type: message', cut; the type alone when the message itself raises."""
    if isinstance(error, SubmissionRaised):
        return error.text
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
    if isinstance(error, SubmissionRaised):
        return error.line
    frames = []
    trace = error.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code.co_filename == "solution.py":
            frames.append(trace.tb_lineno)
        trace = trace.tb_next
    return frames[-1] if frames else None


def send(fd, value):
    data = marshal.dumps(value)
    data = len(data).to_bytes(8, "little") + data
    while data:
        data = data[os.write(fd, data) :]


def receive(fd):
    """The next message, or None when the other side is gone."""
    header = read_exactly(fd, 8)
    body = None if header is None else read_exactly(fd, int.from_bytes(header, "little"))
    return None if body is None else marshal.loads(body)


def read_exactly(fd, size):
    chunks = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def plain(value, depth=0):
    """Whether `value` is built of the PLAIN types only: what the judge may compare."""
    if type(value) not in PLAIN or depth > 100:
        return False
    if type(value) is dict:
        return all(plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items())
    if type(value) in (tuple, list, set, frozenset):
        return all(plain(item, depth + 1) for item in value)
    return True


def run_submission(requests, replies):
    """The runner: load the prompt and the submission, then answer calls until the judge hangs up."""
    spec = receive(requests)
    namespace = {"__name__": "solution"}
    try:
        exec(compile(spec["prompt"], "prompt.py", "exec"), namespace)
        code = compile(spec["solution"], "solution.py", "exec")
    except SyntaxError as error:
        send(replies, ("syntax", error.lineno, error.msg))
        os._exit(0)
    try:
        exec(code, namespace)
    except BaseException as error:  # the submission may raise anything, SystemExit included
        send(replies, ("load", error_text(error), solution_line(error)))
        os._exit(0)
    function = namespace.get(spec["entry_point"])
    send(replies, ("ready",) if callable(function) else ("missing",))
    del spec
    while (call := receive(requests)) is not None:
        try:
            result = function(*call[0], **call[1])
        except BaseException as error:
            send(replies, ("raised", error_text(error), solution_line(error)))
            continue
        try:
            send(replies, ("returned", marshal.dumps(result)))
        except ValueError:  # not data (a generator, an object of its own class)
            send(replies, ("unsupported", type(result).__name__))
    os._exit(0)


def main():
    requests_read, requests_write = os.pipe()
    replies_read, replies_write = os.pipe()
    if os.fork() == 0:
        os.close(0)
        os.close(3)
        os.close(requests_write)
        os.close(replies_read)
        run_submission(requests_read, replies_write)
    os.close(requests_read)
    os.close(replies_write)
    spec = marshal.loads(sys.stdin.buffer.read())
    state = {"test": None, "left": _MISSING, "right": _MISSING, "call": None, "returned": _MISSING}

    def finish(verdict):
        emit({"verdict": verdict})
        os._exit(0)

    send(requests_write, {k: spec[k] for k in ("prompt", "solution", "entry_point")})
    loaded = receive(replies_read)
    if loaded is None:
        finish({"kind": "load", "exception": "the submission's process ended while it was loaded", "line": None})
    if loaded[0] == "syntax":
        finish({"kind": "syntax", "line": loaded[1], "message": loaded[2]})
    if loaded[0] == "load":
        finish({"kind": "load", "exception": loaded[1], "line": loaded[2]})
    if loaded[0] == "missing":
        finish({"kind": "missing"})

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

    def candidate(*args, **kwargs):
        shown = [cut(a) for a in args] + [f"{k}={cut(v)}" for k, v in kwargs.items()]
        state.update(call=f"{spec['entry_point']}({', '.join(shown)})", returned=_MISSING)
        send(requests_write, (args, kwargs))
        reply = receive(replies_read)
        if reply is None:
            raise SubmissionRaised("SystemExit: the submission's process ended during the call", None)
        if reply[0] == "raised":
            raise SubmissionRaised(reply[1], reply[2])
        if reply[0] == "unsupported":
            raise SubmissionRaised(f"TypeError: it returned a {reply[1]} object, not plain data", None)
        try:
            result = marshal.loads(reply[1])
        except Exception:
            raise SubmissionRaised("ValueError: it returned unreadable data", None) from None
        if not plain(result):
            raise SubmissionRaised(f"TypeError: it returned a {type(result).__name__} object, not plain data", None)
        state["returned"] = result
        return result

    namespace = {"__name__": "tests"}
    exec(compile(spec["prompt"], "prompt.py", "exec"), namespace)  # the tests may use the prompt's helpers
    namespace[spec["entry_point"]] = candidate  # a test may call the function by its name (HumanEval/33)
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
