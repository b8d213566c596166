"""One small adapter per wire format, behind one Protocol.

An adapter turns a request body into the canonical message list the core decides on,
and carries a decided `Insertion` back into a body, keeping everything else as it was.
`ADAPTERS` maps a route (the path after `/v1/`) to its adapter: adding a format is one
module plus its test file, and one line here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from adapters.anthropic_messages import AnthropicMessagesAdapter
from adapters.base import ParsedRequest
from adapters.openai_chat import OpenAIChatAdapter
from adapters.text_completions import TextCompletionAdapter
from proxy.core.models import Insertion


class Adapter(Protocol):
    name: str

    def parse(self, raw: bytes) -> ParsedRequest:
        """Decode a request body; raises `AdapterError` when it does not fit."""
        ...

    def apply(
        self,
        parsed: ParsedRequest,
        insertion: Insertion | None,
        replacements: Mapping[int, str] | None = None,
        drop: Collection[int] = (),
    ) -> bytes:
        """The body to send upstream with `insertion` and `replacements` carried out, and
        the messages at the indices in `drop` (of the parsed list) left out."""
        ...


ADAPTERS: dict[str, Adapter] = {
    "chat/completions": OpenAIChatAdapter(),
    "messages": AnthropicMessagesAdapter(),
    "completions": TextCompletionAdapter(),
}
# Text completion routes outside `/v1` (llama.cpp, Ollama, KoboldAI Classic).
ROOT_ADAPTERS: dict[str, Adapter] = {
    path: ADAPTERS["completions"]
    for path in ("/completion", "/api/generate", "/api/v1/generate", "/api/extra/generate/stream")
}

__all__ = ["ADAPTERS", "ROOT_ADAPTERS", "Adapter", "ParsedRequest"]
