"""Request bodies: read strictly, validated in a worker thread, refused with a short answer.

A body is JSON that SQLite and the JSON answer can both hold: numbers are finite (no NaN, Infinity or 1e400),
integers fit 64 bits, strings are valid Unicode (no lone surrogate). Anything else is the caller's mistake (422),
never a crash (500). Parsing and validation run in a worker thread, so a 1 MB body being checked does not stall
the event loop that answers every other client. A refusal names at most `MAX_ERRORS` problems and never echoes
the input: a body that breaks one rule ten thousand times gets a short answer, not a copy of itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

MAX_ERRORS = 20
INT64 = (-(2**63), 2**63 - 1)


class BodyError(ValueError):
    """A body that is not JSON the service accepts."""


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > 19 or not INT64[0] <= (value := int(text)) <= INT64[1]:
        raise BodyError(f"the integer {text[:25]}{'…' if len(text) > 25 else ''} does not fit in 64 bits")
    return value


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BodyError(f"the number {text[:25]} is out of range (numbers must be finite)")
    return value


def _constant(name: str) -> Any:
    raise BodyError(f"{name} is not JSON (numbers must be finite)")


def read_json(raw: bytes) -> Any:
    """The JSON value of `raw`, or BodyError saying what breaks the rules above."""
    try:
        value = json.loads(raw, parse_int=_integer, parse_float=_number, parse_constant=_constant)
    except UnicodeDecodeError:
        raise BodyError("the body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BodyError(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise BodyError("the JSON nests too deeply") from None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # C speed; fails only on a lone surrogate
    except UnicodeEncodeError:
        raise BodyError("a string holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text") from None
    return value


def error_detail(errors: Sequence[dict[str, Any]], total: int) -> list[dict[str, Any]]:
    """The first MAX_ERRORS of `total` validation errors as {type, loc, msg}, and one line for the rest."""
    detail = [
        {"type": e["type"], "loc": [str(part) for part in e["loc"]], "msg": str(e["msg"])[:300]}
        for e in errors[:MAX_ERRORS]
    ]
    if total > len(detail):
        detail.append({"type": "too_many_errors", "loc": [], "msg": f"and {total - len(detail)} more errors"})
    return detail


def _validated(model: type[BaseModel], raw: bytes) -> BaseModel:
    """`raw` read and validated against `model` (run in a worker thread); HTTPException 422 when it fails."""
    try:
        return model.model_validate(read_json(raw))
    except BodyError as exc:
        detail = [{"type": "json_invalid", "loc": ["body"], "msg": str(exc)}]
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)[:MAX_ERRORS]
        detail = error_detail([{**e, "loc": ("body", *e["loc"])} for e in errors], exc.error_count())
    raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail)


class _ValidatingRequest(Request):
    """A request whose `json()` is its body validated against the route's model, off the event loop: FastAPI then
    receives the model instance, which it does not validate again."""

    model: type[BaseModel]

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = await run_in_threadpool(_validated, self.model, await self.body())
        return self._json


class ThreadedBodyRoute(APIRoute):
    """A route whose JSON body (one pydantic model) is read and validated as `_ValidatingRequest` does."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        model = self.body_field.field_info.annotation if self.body_field else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return handler

        async def route(request: Request) -> Response:
            validating = _ValidatingRequest(request.scope, request.receive)
            validating.model = model
            return await handler(validating)

        return route


async def short_validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own 422 (path and query parameters, a missing body), capped and without the input."""
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    return JSONResponse(
        {"detail": error_detail(errors[:MAX_ERRORS], len(errors))}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT
    )
