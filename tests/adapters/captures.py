"""ST's captures of each connection type (`tests/data/sources/`), as the tests read them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from proxy.core.models import ChatMessage, Generation
from proxy.library.chats import ChatLibrary
from proxy.store import Store

SOURCES = Path(__file__).parents[1] / "data" / "sources"
STEPS = ("03_send_01", "04_send_02", "05_send_03", "06_swipe", "07_continue")
MARKERS = ("[Start a new Chat]",)


def records(run: str, name: str) -> list[dict[str, Any]]:
    """The lines of a run's `requests.jsonl` or `responses.jsonl`."""
    lines = (SOURCES / run / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def exchanges(run: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (request, response) of a run, in the order ST sent them."""
    answers = {r["seq"]: r for r in records(run, "responses")}
    return [(r, answers[r["seq"]]) for r in records(run, "requests")]


def generations(run: str) -> dict[str, bytes]:
    """The body of each step's generation request, as ST sent it."""
    return {
        r["step"]: r["body_text"].encode()
        for r in records(run, "requests")
        if r["kind"] == "generation"
    }


def chats_before(run: Path, step: str, data: Path) -> list[Path]:
    """Lay out the chat files as ST had saved them when it sent `step`'s request, under
    `data/default-user/chats`: for a send, the step's file without the reply; for a swipe
    or a continue, the step before's. Returns the chat files."""
    before = STEPS[STEPS.index(step) - 1] if step in ("06_swipe", "07_continue") else step
    chats = data / "default-user" / "chats"
    shutil.copytree(run / "chats" / before / "chats", chats)
    paths = sorted(chats.rglob("*.jsonl"))
    if before == step:
        for path in paths:
            lines = path.read_bytes().rstrip(b"\n").split(b"\n")
            path.write_bytes(b"\n".join(lines[:-1]) + b"\n")
    return paths


async def identify_at(
    run: Path, step: str, messages: list[ChatMessage], tmp_path: Path
) -> Generation | None:
    """The generation kind a request of `step` is identified as, against the chat file as
    ST had saved it when it sent the request (see `chats_before`). None: not identified."""
    data = tmp_path / "data"
    chats_before(run, step, data)
    library = ChatLibrary(data, Store(tmp_path / "s.sqlite3"))
    await library.index_all()
    found = await library.identify_request(messages, MARKERS)
    await library.store.close()
    return found.identification.generation if found.identification else None
