"""ST-Auto-Recap's `<ST_METADATA>` block found in a request's first system message."""

from __future__ import annotations

from proxy.core.models import ChatMessage
from proxy.core.st_metadata import find_st_metadata


def test_st_metadata_block() -> None:
    block = '<ST_METADATA>\n{"version": "1.0", "chat": "Seraphina - 2026", "operation": "chat-4"}'
    messages = [
        ChatMessage("system", block + "\n</ST_METADATA>\n\nMain prompt."),
        ChatMessage("user", "hi"),
    ]
    found = find_st_metadata(messages)
    assert found is not None
    assert (found.index, found.stripped, found.chat, found.operation) == (
        0,
        "Main prompt.",
        "Seraphina - 2026",
        "chat-4",
    )
    assert find_st_metadata([ChatMessage("system", "plain"), ChatMessage("user", "hi")]) is None
    broken = find_st_metadata([ChatMessage("system", "<ST_METADATA>{oops}</ST_METADATA>x")])
    assert broken is not None and broken.chat is None and broken.stripped == "x"
