"""What every adapter hands to the core."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.models import ChatMessage


@dataclass(slots=True)
class ParsedRequest:
    """A decoded request: its bytes, the body as decoded JSON, and its canonical messages."""

    raw: bytes
    body: dict[str, Any]
    messages: list[ChatMessage]
    stream: bool
    model: str | None
