"""An LLM's answer to one of the proxy's own calls, read from each API's wire format:
OpenAI chat completions and Anthropic's Messages API, whole or streamed (some gateways
stream whatever they are asked), with why it ended and what it cost when the API says.
Pure: bytes in, an `Answer` out, `JobFailure` for anything else.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import JobFailure


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    reasoning: str
    model: str
    finish_reason: str | None = None
    # What the API said the call cost (None: it did not say; the caller counts).
    prompt_tokens: int | None = None
    answer_tokens: int | None = None

    @property
    def cut_off(self) -> bool:
        """The model stopped at the answer limit: the text is incomplete, whatever it
        looks like (OpenAI `length`, Anthropic-style `max_tokens`)."""
        return self.finish_reason in ("length", "max_tokens")


def read_anthropic(raw: bytes, model: str, operation: str) -> Answer:
    """A Messages API answer (or its SSE stream), with its `stop_reason`."""
    if raw.lstrip()[:6] in (b"event:", b"data: "):
        return _anthropic_streamed(raw, model, operation)
    try:
        data = orjson.loads(raw)
        blocks = data["content"]
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        thinking = "".join(b.get("thinking", "") for b in blocks if b.get("type") == "thinking")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise JobFailure(f"{operation}: not a Messages API answer: {short(raw)}") from None
    stop = data.get("stop_reason")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Answer(text, thinking, str(data.get("model") or model), str(stop) if stop else None,
                  _count(usage, "input_tokens"), _count(usage, "output_tokens"))  # fmt: skip


def _anthropic_streamed(raw: bytes, model: str, operation: str) -> Answer:
    text: list[str] = []
    thinking: list[str] = []
    stop: str | None = None
    for event in _sse_events(raw):
        delta = event.get("delta") or {}
        if event.get("type") == "content_block_delta" and isinstance(delta, dict):
            text.append(str(delta.get("text") or ""))
            thinking.append(str(delta.get("thinking") or ""))
        elif event.get("type") == "message_delta" and isinstance(delta, dict):
            stop = delta.get("stop_reason") or stop
        elif event.get("type") == "message_start":
            model = str((event.get("message") or {}).get("model") or model)
    if not text:
        raise JobFailure(f"{operation}: not a Messages API stream: {short(raw)}")
    return Answer("".join(text), "".join(thinking), model, stop)


def _sse_events(raw: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects of an SSE body's `data:` lines, up to `[DONE]` (comments, `event:`
    lines, keep-alives and anything not an object are skipped)."""
    for line in raw.splitlines():
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            yield event


def read_answer(raw: bytes, model: str, operation: str) -> Answer:
    """A chat completion, whole or as an SSE stream (some gateways stream whatever they
    are asked), with its `finish_reason`."""
    if raw.lstrip()[:5] == b"data:":
        return _streamed(raw, model, operation)
    try:
        data = orjson.loads(raw)
        choice = data["choices"][0]
        message = choice["message"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise JobFailure(f"{operation}: not a chat completion: {short(raw)}") from None
    text = message.get("content") or ""
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    finish = choice.get("finish_reason")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Answer(
        str(text),
        str(reasoning),
        str(data.get("model") or model),
        str(finish) if finish is not None else None,
        _count(usage, "prompt_tokens"),
        _count(usage, "completion_tokens"),
    )


def _count(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _streamed(raw: bytes, model: str, operation: str) -> Answer:
    text: list[str] = []
    reasoning: list[str] = []
    finish: str | None = None
    for event in _sse_events(raw):
        try:
            choice = event["choices"][0]
        except (KeyError, IndexError, TypeError):
            continue  # usage-only events carry no choice
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") or {}
        text.append(str(delta.get("content") or ""))
        reasoning.append(str(delta.get("reasoning_content") or delta.get("reasoning") or ""))
        model = str(event.get("model") or model)
        if choice.get("finish_reason") is not None:
            finish = str(choice["finish_reason"])
    if not text:
        raise JobFailure(f"{operation}: not a chat completion stream: {short(raw)}")
    return Answer("".join(text), "".join(reasoning), model, finish)


def short(raw: bytes) -> str:
    return " ".join(raw[:300].decode("utf-8", "replace").split())
