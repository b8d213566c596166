"""OpenAI `POST /chat/completions`: the format ST's Chat Completion "Custom" source speaks.

Only `messages` is read closely. When memory is inserted the body is re-encoded from the
decoded JSON with one new message spliced in, so every other key keeps its value and
order (unknown keys, `name` fields, content arrays with images, tool calls).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from adapters.base import ParsedRequest
from proxy.core.models import ChatMessage, Insertion
from proxy.errors import AdapterError


def decode_json(raw: bytes) -> Any:
    """orjson for speed; the standard library for what orjson refuses (integers past 64 bits)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise AdapterError(f"body is not valid JSON: {exc}") from None


def encode_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def content_text(content: Any) -> str:
    """The text of a message's `content`: a string, or the text parts of a content array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


class OpenAIChatAdapter:
    name = "openai_chat"

    def parse(self, raw: bytes) -> ParsedRequest:
        body = decode_json(raw)
        if not isinstance(body, dict):
            raise AdapterError("body is not a JSON object")
        wire = body.get("messages")
        if not isinstance(wire, list):
            raise AdapterError("body has no `messages` list")
        messages: list[ChatMessage] = []
        for i, msg in enumerate(wire):
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                raise AdapterError(f"messages[{i}] is not an object with a string `role`")
            name = msg.get("name")
            messages.append(
                ChatMessage(
                    role=msg["role"],
                    text=content_text(msg.get("content")),
                    name=name if isinstance(name, str) else None,
                )
            )
        model = body.get("model")
        return ParsedRequest(
            body=body,
            messages=messages,
            stream=body.get("stream") is True,
            model=model if isinstance(model, str) else None,
        )

    def apply(self, parsed: ParsedRequest, insertion: Insertion) -> bytes:
        wire = parsed.body["messages"]
        new_message = {"role": insertion.role.value, "content": insertion.text}
        body = dict(parsed.body)
        body["messages"] = [*wire[: insertion.index], new_message, *wire[insertion.index :]]
        return encode_json(body)
