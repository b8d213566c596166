"""What every adapter hands to the core."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core.models import ChatMessage, PromptWriter


@dataclass(slots=True)
class ParsedRequest:
    """A decoded request: its bytes, the body as decoded JSON, and its canonical messages."""

    raw: bytes
    body: dict[str, Any]
    messages: list[ChatMessage]
    stream: bool
    model: str | None
    api: str = "openai_chat"  # the adapter's name: the wire format
    # What else the adapter read that its `apply` needs, e.g. where each canonical
    # message is in the body when they are not one per wire message (its own business).
    layout: Any = None
    route: str = ""  # the `[[upstream.routes]]` prefix it came under (set by the shell)
    path: str = ""  # the path it came to, under that prefix (set by the shell)
    # Text formats: how the proxy's own prompts are written in this request's template.
    writer: PromptWriter | None = None
    # How many of the first messages were taken from the previous request as they were
    # (the same objects), not decoded again.
    carried: int = 0
    # Formats whose client may merge chat messages into one turn (Claude's; a text prompt
    # with instruct off, where a line without a name joins the turn before it): takes
    # merged ones apart (`proxy.core.merged`), each parsed message in the mapping replaced
    # by its parts; and what the messages in such a turn are joined with.
    unmerge: Callable[[ParsedRequest, Mapping[int, Sequence[ChatMessage]]], None] | None = None
    merged_with: str = "\n\n"
