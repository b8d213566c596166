"""One small adapter per wire format, behind one Protocol.

An adapter turns a request body into the canonical message list the core decides on,
and carries the decided insertions back into a body, keeping everything else as it was.
`ADAPTERS` maps a route (the path after `/v1/`) to its adapter: adding a format is one
module plus its test file, and one line here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from adapters.anthropic_messages import AnthropicMessagesAdapter
from adapters.base import ParsedRequest
from adapters.openai_chat import OpenAIChatAdapter
from adapters.text_completions import TextCompletionAdapter
from proxy.core.models import Insertion


class Adapter(Protocol):
    name: str

    def parse(self, raw: bytes, previous: ParsedRequest | None = None) -> ParsedRequest:
        """Decode a request body; raises `AdapterError` when it does not fit. `previous`:
        the last request this adapter parsed, whose work the format may reuse."""
        ...

    def apply(
        self,
        parsed: ParsedRequest,
        insertions: Sequence[Insertion] = (),
        replacements: Mapping[int, str] | None = None,
        drop: Collection[int] = (),
    ) -> bytes:
        """The body to send upstream with `insertions` (by index; at the same index in
        their order) and `replacements` carried out, and the messages at the indices in
        `drop` (of the parsed list) left out."""
        ...

    def leaves_out(self, parsed: ParsedRequest, drop: Collection[int]) -> tuple[int, ...]:
        """Which of `drop` the format lets go: `apply` leaves out exactly these."""
        ...


ADAPTERS: dict[str, Adapter] = {
    "chat/completions": OpenAIChatAdapter(),
    "messages": AnthropicMessagesAdapter(),
    "completions": TextCompletionAdapter(),
}
# Text completion routes outside `/v1` (llama.cpp, Ollama, KoboldAI Classic).
TEXT_ROUTES = ("/completion", "/api/generate", "/api/v1/generate", "/api/extra/generate/stream")
ROOT_ADAPTERS: dict[str, Adapter] = {path: ADAPTERS["completions"] for path in TEXT_ROUTES}


@dataclass(frozen=True, slots=True)
class Formats:
    """The adapters of one running proxy: by the path after `/v1/`, and by whole path."""

    api: Mapping[str, Adapter]
    root: Mapping[str, Adapter]

    def for_path(self, path: str) -> Adapter | None:
        if path.startswith("/v1/"):
            return self.api.get(path[4:])
        return self.root.get(path)

    def for_body(self, raw: bytes) -> Adapter:
        """The adapter for a body that came without the path it was for (`identify`), by
        the fields only its format has: a text prompt (`prompt`), Claude's Messages API
        (`system` or `stop_sequences` beside its `messages`), else a chat completion (whose
        adapter says what is wrong with a body that is none of them)."""
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None  # the chat adapter's parse says what is wrong with it
        if isinstance(body, dict) and "messages" not in body and "prompt" in body:
            return self.api["completions"]
        if isinstance(body, dict) and ("system" in body or "stop_sequences" in body):
            return self.api["messages"]
        return self.api["chat/completions"]


def formats(settings: Callable[[], Iterable[Mapping[str, Any]]] | None = None) -> Formats:
    """The adapters, the text one told how ST writes its prompts (`settings`: each user's
    `{"instruct", "context"}` templates)."""
    if settings is None:
        return Formats(ADAPTERS, ROOT_ADAPTERS)
    text = TextCompletionAdapter(settings)
    return Formats({**ADAPTERS, "completions": text}, dict.fromkeys(TEXT_ROUTES, text))


__all__ = ["ADAPTERS", "ROOT_ADAPTERS", "Adapter", "Formats", "ParsedRequest", "formats"]
