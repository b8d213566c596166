"""ST's captures of each connection type (`tests/data/sources/`), as the tests read them."""

from __future__ import annotations

import shutil
from pathlib import Path

from proxy.core.models import ChatMessage, Generation
from proxy.library import ChatLibrary
from proxy.store import Store

SOURCES = Path(__file__).parents[1] / "data" / "sources"
STEPS = ("03_send_01", "04_send_02", "05_send_03", "06_swipe", "07_continue")
MARKERS = ("[Start a new Chat]",)


async def identify_at(
    run: Path, step: str, messages: list[ChatMessage], tmp_path: Path
) -> Generation | None:
    """The generation kind a request of `step` is identified as, against the chat file as
    ST had saved it when it sent the request: for a send, the step's file without the
    reply; for a swipe or a continue, the step before's. None: not identified."""
    data = tmp_path / "data"
    before = STEPS[STEPS.index(step) - 1] if step in ("06_swipe", "07_continue") else step
    shutil.copytree(run / "chats" / before / "chats", data / "default-user" / "chats")
    if before == step:
        for path in (data / "default-user" / "chats").rglob("*.jsonl"):
            lines = path.read_bytes().rstrip(b"\n").split(b"\n")
            path.write_bytes(b"\n".join(lines[:-1]) + b"\n")
    library = ChatLibrary(data, Store(tmp_path / "s.sqlite3"))
    await library.index_all()
    found = await library.identify_request(messages, MARKERS)
    await library.store.close()
    return found.identification.generation if found.identification else None
