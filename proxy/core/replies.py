"""Reading the JSON an LLM was asked for, robustly. Pure.

Models wrap JSON in code fences, put prose before and after it, continue a prefilled `{`
without repeating it, leave a trailing comma, or think aloud in `<think>` tags first. The
reader finds the first complete JSON object (a scanner that respects strings), repairs
trailing commas, validates it with pydantic, and keeps any reasoning apart from the answer.
A reply that still does not fit raises `ReplyError` naming what was wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from proxy.errors import RecapProxyError

T = TypeVar("T", bound=BaseModel)

_THINK = re.compile(r"<(think|thinking|reasoning)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


class ReplyError(RecapProxyError):
    """An LLM reply that holds no usable answer; the message says why."""


@dataclass(frozen=True, slots=True)
class Reply:
    data: Any
    reasoning: str


def extract_json(text: str, *, prefill: str = "") -> Reply:
    """The first JSON object in `text` (after `prefill`, when the model continued it)."""
    reasoning = "\n".join(m.group(2).strip() for m in _THINK.finditer(text))
    body = _THINK.sub("", text).strip()
    if prefill and not body.lstrip().startswith(prefill.strip()):
        body = prefill + body
    fenced = _FENCE.search(body)
    candidates = [fenced.group(1)] if fenced else []
    candidates.append(body)
    for candidate in candidates:
        for found in _objects(candidate):
            for attempt in (found, _TRAILING_COMMA.sub(r"\1", found)):
                try:
                    return Reply(json.loads(attempt), reasoning)
                except ValueError:
                    continue
    snippet = " ".join(body.split())[:120]
    raise ReplyError(f"no JSON object in the reply: {snippet!r}")


def read_reply(text: str, model: type[T], *, prefill: str = "") -> tuple[T, str]:
    """The reply validated as `model`, and the model's reasoning (if it gave any)."""
    reply = extract_json(text, prefill=prefill)
    try:
        return model.model_validate(reply.data), reply.reasoning
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()
        )
        raise ReplyError(f"reply does not fit {model.__name__}: {problems}") from None


def _objects(text: str) -> Iterator[str]:
    """Each balanced `{...}` in text, from left to right, with brackets inside strings
    ignored (prose such as "{maybe}" before the answer is skipped by the caller)."""
    start = text.find("{")
    while start >= 0:
        depth, in_string, escaped = 0, False, False
        for i in range(start, len(text)):
            char = text[i]
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char in "{[":
                depth += 1
            elif char in "}]":
                depth -= 1
                if depth == 0:
                    yield text[start : i + 1]
                    break
        start = text.find("{", start + 1)
