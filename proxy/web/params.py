"""Reading what a client sent to `/recap/api`: path numbers and JSON bodies, with every
bad input a 4xx from the error tree (a number too large for any message, a body that is
not UTF-8 JSON, nested past reason, of the wrong type), never a 500."""

from __future__ import annotations

from typing import TypeVar

import orjson
from aiohttp import web

from proxy.core.jsontypes import JSONObject
from proxy.errors import NotFound, RequestError

T = TypeVar("T", str, int, bool)

# No chat has this many messages, scenes or jobs; past it a number names nothing (and
# would overflow SQLite's integers).
MAX_NUMBER = 2**31 - 1


def path_number(request: web.Request, name: str) -> int:
    """A `{name:\\d+}` path part as an int; one too large for anything is a 404."""
    text = request.match_info[name]
    value = int(text) if len(text) <= 10 else MAX_NUMBER + 1
    if value > MAX_NUMBER:
        raise NotFound(f"there is no {name} {text[:20]}{'...' if len(text) > 20 else ''}")
    return value


def query_number(request: web.Request, name: str) -> int | None:
    text = request.query.get(name)
    if text is None:
        return None
    if not text.isdigit() or len(text) > 10 or int(text) > MAX_NUMBER:
        raise RequestError(f"{name} must be a number")
    return int(text)


async def json_body(request: web.Request) -> JSONObject:
    """The body as a JSON object (`{}` when there is none)."""
    raw = await request.read() if request.body_exists else b""
    if not raw.strip():
        return {}
    try:
        # orjson: strict UTF-8, integers within 64 bits, nesting bounded (no RecursionError).
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"the body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RequestError("the body must be a JSON object")
    return data


def field(data: JSONObject, name: str, kind: type[T]) -> T:
    value = data.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RequestError(f"`{name}` must be a {kind.__name__}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
        raise RequestError(f"`{name}` is out of range")
    return value


def optional(data: JSONObject, name: str, kind: type[T]) -> T | None:
    return None if data.get(name) is None else field(data, name, kind)
