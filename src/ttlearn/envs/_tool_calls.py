"""Reading an agent's function call: the first call in a reply, in Python syntax `name(arg=value, ...)` or as JSON
`{"name": ..., "arguments": {...}}`, into a name and literal values (`ast` / `json`; nothing is `eval`-ed)."""

from __future__ import annotations

import ast
import json
import keyword
import math
import unicodedata
from dataclasses import dataclass
from typing import Any


class MalformedCall(ValueError):
    """A reply that tries to call a function but cannot be read as one call; the message says why."""


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def text(self) -> str:
        """The canonical Python-call form, e.g. `mv(source='a.txt', destination='tmp')`."""
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        return f"{self.name}({', '.join(parts)})"


_JSON_TYPES = (str, bool, type(None))
MAX_INT_BITS = 13_000
"""Integers up to ~3,900 digits: Python refuses to print one past 4,300, so no canonical text could hold it."""
PARSE_ERRORS = (SyntaxError, ValueError, TypeError, RecursionError, MemoryError)
"""What Python's parsers raise on hostile text (deep nesting, huge literals, long chains of unary minus)."""


def _json_value(value: Any, depth: int = 0) -> Any:
    """The literal as a JSON value (tuples become lists); MalformedCall for sets, bytes, complex numbers, numbers that
    are not finite or too long to print, and nesting deeper than 100."""
    if depth > 100:
        raise MalformedCall("argument values are nested more than 100 levels deep")
    if isinstance(value, _JSON_TYPES):
        return value
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise MalformedCall("integers must have fewer than 3,900 digits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MalformedCall(f"numbers must be finite, got {value!r}")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_value(v, depth + 1) for k, v in value.items()}
    raise MalformedCall(f"argument values must be strings, numbers, booleans, None, lists or dicts, got {value!r}")


def _name(text: str, what: str) -> str:
    """`text` as a function or argument name of a canonical Python call, else MalformedCall. NFKC first, as Python's
    own parser reads identifiers (`ｌｓ` is `ls`, `ﬁle` is `file`), then ASCII only: the call must read back from
    its `text()` as the very same call, and the Python syntax matches ASCII names."""
    name = unicodedata.normalize("NFKC", text)
    if not name.isascii() or not name.isidentifier() or keyword.iskeyword(name):
        raise MalformedCall(f"{what} must be an ASCII Python identifier and not a keyword, got {text[:60]!r}")
    return name


def _name_character(char: str) -> bool:
    """Whether `char` may be part of a dotted name as Python reads one: a dot, or any identifier character (Unicode
    too: `ſ` and `ｄ` are letters to Python, which NFKC-normalises them to `s` and `d`)."""
    return char == "." or ("a" + char).isidentifier()


def _python_call_start(text: str) -> tuple[int, int] | None:
    """(start of the name, index of its '(') of the first Python-syntax call in `text`: the whole run of name
    characters right before a '(' that starts like an identifier. Never a part of a name: `ſudo(` is the name `ſudo`,
    which `_name` normalises to `sudo` or refuses, never `udo`. Linear: each character is walked back over at most
    once (the run before one '(' ends at the previous one)."""
    paren = text.find("(")
    while paren >= 0:
        start = paren
        while start > 0 and _name_character(text[start - 1]):
            start -= 1
        if start < paren and text[start].isidentifier():
            return start, paren
        paren = text.find("(", paren + 1)
    return None


def _closing_paren(text: str, start: int) -> int:
    """The index of the ')' closing the '(' at `start`, skipping quoted strings; MalformedCall if none."""
    depth, quote, index = 0, "", start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    raise MalformedCall("the call's parentheses are not closed")


def _python_call(text: str, start: int, paren: int) -> Call:
    source = text[start : _closing_paren(text, paren) + 1]
    shown = source if len(source) <= 80 else source[:77] + "..."
    try:
        node = ast.parse(source, mode="eval").body
    except PARSE_ERRORS as error:
        reason = getattr(error, "msg", type(error).__name__)
        raise MalformedCall(f"{shown!r} is not valid call syntax ({reason})") from None
    if not isinstance(node, ast.Call) or any(k.arg is None for k in node.keywords):
        raise MalformedCall(f"{shown!r} is not a single call with named or positional arguments")
    try:
        args = tuple(_json_value(ast.literal_eval(a)) for a in node.args)
        kwargs = tuple(
            (_name(k.arg, "an argument name"), _json_value(ast.literal_eval(k.value))) for k in node.keywords
        )
    except MalformedCall:
        raise
    except PARSE_ERRORS:
        raise MalformedCall("argument values must be literals: quote strings, no variables or expressions") from None
    return Call(_name(source[: paren - start].rsplit(".", 1)[-1], "a function name"), args, kwargs)


def _json_call(text: str, start: int) -> Call:
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as error:
        raise MalformedCall(f"the JSON object does not parse ({error.msg})") from None
    except PARSE_ERRORS as error:  # nesting past the recursion limit, an integer past 4,300 digits
        raise MalformedCall(f"the JSON object cannot be read ({type(error).__name__})") from None
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(name, str) or not name:
        raise MalformedCall('a JSON call needs a "name" string, e.g. {"name": "ls", "arguments": {}}')
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI's tool calls carry the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except PARSE_ERRORS:
            raise MalformedCall('"arguments" must be a JSON object') from None
    if not isinstance(arguments, dict):
        raise MalformedCall('"arguments" must be a JSON object')
    kwargs = tuple((_name(k, "an argument name"), _json_value(v)) for k, v in arguments.items())
    return Call(_name(name, "a function name"), (), kwargs)


def read_call(reply: str) -> Call | None:
    """The one function call a reply makes; None when it makes none (it ends the user's turn).

    The rule: the first call in the reply counts, in whichever syntax comes first —
    Python `name(arg=value, ...)` (no space before the parenthesis; positional values allowed; a dotted prefix such
    as `functions.ls(` is dropped; values must be literals) or JSON `{"name": ..., "arguments": {...}}`
    ("parameters" is accepted for "arguments"). A reply with neither, such as `done` or plain prose, makes no call.
    A reply that starts a call but cannot be read raises MalformedCall with the reason (never another exception).
    A call reads back from its canonical `text()` as the very same call: names are identifiers, values are plain
    finite JSON values, so what `parse_action` accepted, `step` runs. Names are read alike in both syntaxes: NFKC
    (`ſudo` is `sudo`, `ｌｓ` is `ls`), then refused unless ASCII.
    """
    python = _python_call_start(reply)
    brace = reply.find("{")
    if python is None and brace < 0:
        return None
    if python is not None and (brace < 0 or python[0] < brace):
        return _python_call(reply, *python)
    return _json_call(reply, brace)
