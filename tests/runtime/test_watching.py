"""The folder followed while the program runs: indexing that meets a failing store goes
on by itself once the store takes writes again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.runtime.runtime import build_runtime
from proxy.store import Database, Store
from proxy.web import make_app
from proxy.web.keys import RUNTIME
from tests.conftest import FakeLLM, make_settings
from tests.memory.story import Story
from tests.memory_env import QUICK
from tests.runtime.test_runtime import settings_for
from tests.waiting import until


async def test_indexing_waits_out_a_full_store_then_catches_up(
    tmp_path: Path, fake_llm: FakeLLM, aiohttp_client: Any
) -> None:
    settings = settings_for(tmp_path, fake_llm)
    story = Story(tmp_path / "data", set(), char="Ava")
    story.grow(60)  # more than the new store's pages hold
    store = Store(tmp_path / "store.sqlite3")

    def full(db: Database) -> None:  # the file may not grow: SQLite's own SQLITE_FULL
        pages = db.db.execute("PRAGMA page_count").fetchone()[0]
        db.db.execute(f"PRAGMA max_page_count={pages}")

    await store.call(full)
    runtime = build_runtime(make_settings(**settings), store=store, waits=QUICK)
    client = await aiohttp_client(make_app(runtime))
    await until(lambda: store.failure is not None, "the store failing")
    health = await client.get("/health")
    assert health.status == 503 and "disk is full" in (await health.json())["store"]
    # Chats still go upstream, without memory.
    answer = await client.post("/v1/chat/completions", json=story.request())
    assert answer.status == 200 and answer.headers["X-Recap-Chat"] == ""

    # Space again: indexing picks up by itself, and the chat is known.
    await store.call(lambda db: db.db.execute("PRAGMA max_page_count=1073741823"))

    async def identified() -> bool:
        answer = await client.post("/v1/chat/completions", json=story.request())
        return bool(answer.headers["X-Recap-Chat"])

    await until(identified, "the chat identified once the store has room")

    # Full again while ST saves the chat: its re-read fails, and is made again once the
    # store has room, with no request to ask for it.
    await store.call(full)
    story.grow(60)
    library = client.server.app[RUNTIME].memory_parts().library
    await until(library.fell_behind.is_set, "the chat's re-read failing")
    assert (await store.chat(story.chat_id)).messages == 60  # type: ignore[union-attr]
    await store.call(lambda db: db.db.execute("PRAGMA max_page_count=1073741823"))

    async def caught_up() -> bool:
        record = await store.chat(story.chat_id)
        return record is not None and record.messages == 120

    await until(caught_up, "the saved chat read again once the store has room")
