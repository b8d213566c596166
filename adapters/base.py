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
    # For formats whose canonical messages are not one per wire message: where each one
    # is in the body (the adapter's own reading; empty when they are one to one).
    wire_index: tuple[int, ...] = ()
    api: str = "openai_chat"  # the adapter's name: the wire format
    layout: Any = None  # what else the adapter read that `apply` needs (its own)
    route: str = ""  # the `[[upstream.routes]]` prefix it came under (set by the shell)
