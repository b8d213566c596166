"""ST-Auto-Recap's `<ST_METADATA>` block: the chat a request names itself. Pure.

The extension (and tools that follow its proxy contract) puts
`<ST_METADATA>{json}</ST_METADATA>` into a request's first system message, naming the
chat and the operation; the block is ST's, not the model's, and goes upstream without it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.core.models import ChatMessage

_METADATA = re.compile(r"<ST_METADATA>\s*(\{.*?\})\s*</ST_METADATA>\s*", re.DOTALL)


@dataclass(frozen=True, slots=True)
class STMetadata:
    """ST-Auto-Recap's `<ST_METADATA>{json}</ST_METADATA>` block (its proxy contract)."""

    index: int  # the message that carried it
    stripped: str  # that message's text without the block
    chat: str | None
    character: str | None
    operation: str | None


def find_st_metadata(messages: Sequence[ChatMessage]) -> STMetadata | None:
    """The block in the first system message, if any (ST-Auto-Recap puts it there)."""
    for i, message in enumerate(messages):
        if message.role != "system":
            continue
        # The plain test first: most requests carry no block, and it costs a tenth.
        found = _METADATA.search(message.text) if "<ST_METADATA>" in message.text else None
        if found is None:
            return None
        try:
            data = json.loads(found.group(1))
        except ValueError:
            data = {}
        fields = data if isinstance(data, dict) else {}
        stripped = message.text[: found.start()] + message.text[found.end() :]
        return STMetadata(
            i,
            stripped,
            _text_field(fields, "chat"),
            _text_field(fields, "character"),
            _text_field(fields, "operation"),
        )
    return None


def _text_field(data: dict[str, object], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None
