"""`make_app` wires the owners: what it is given is what runs, and a failed start still
closes what was opened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from proxy.memory.engine import MemoryEngine
from proxy.store import Database, Store
from proxy.web import make_app
from proxy.web.keys import ENGINE, LIBRARY, STORE
from tests.conftest import FakeLLM, make_settings
from tests.memory.story import Story
from tests.waiting import until


def settings_for(tmp_path: Path, fake_llm: FakeLLM) -> dict[str, str]:
    (tmp_path / "data" / "default-user" / "chats").mkdir(parents=True)
    return {
        "upstream.base_url": fake_llm.base_url,
        "sillytavern.data_dir": str(tmp_path / "data"),
        "store.path": str(tmp_path / "store.sqlite3"),
    }


async def test_the_given_store_and_clock_are_the_ones_used(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    store = Store(tmp_path / "mine.sqlite3", clock=lambda: 1234.0)
    app = make_app(make_settings(**settings_for(tmp_path, fake_llm)), store=store)
    assert app[STORE] is store and app[LIBRARY].store is store and app[ENGINE].store is store
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await app[LIBRARY].indexed.wait()
        assert await store.call(lambda db: db.clock()) == 1234.0
    finally:
        await runner.cleanup()
    assert store.closed


async def test_a_clock_alone_reaches_the_store_and_the_engine(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    def clock() -> float:
        return 99.0

    app = make_app(make_settings(**settings_for(tmp_path, fake_llm)), clock=clock)
    assert app[STORE].clock is clock and app[ENGINE].clock is clock


async def test_an_engine_that_fails_to_start_still_closes_the_store(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: MemoryEngine) -> MemoryEngine:
        raise RuntimeError("the engine broke")

    monkeypatch.setattr(MemoryEngine, "__aenter__", broken)
    store = Store(tmp_path / "store.sqlite3")
    app = make_app(make_settings(**settings_for(tmp_path, fake_llm)), store=store)
    runner = web.AppRunner(app)
    with pytest.raises(RuntimeError, match="the engine broke"):
        await runner.setup()
    await runner.cleanup()
    assert store.closed
    with pytest.raises(RuntimeError, match="closed"):
        await store.call(lambda db: None)


async def test_indexing_waits_out_a_full_store_then_catches_up(
    tmp_path: Path, fake_llm: FakeLLM, aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("proxy.web.app.INDEX_RETRY_S", 0.05)
    settings = settings_for(tmp_path, fake_llm)
    story = Story(tmp_path / "data", set(), char="Ava")
    story.grow(60)  # more than the new store's pages hold
    store = Store(tmp_path / "store.sqlite3")

    def full(db: Database) -> None:  # the file may not grow: SQLite's own SQLITE_FULL
        pages = db.db.execute("PRAGMA page_count").fetchone()[0]
        db.db.execute(f"PRAGMA max_page_count={pages}")

    await store.call(full)
    client = await aiohttp_client(make_app(make_settings(**settings), store=store))
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
    library = client.server.app[LIBRARY]
    await until(library.fell_behind.is_set, "the chat's re-read failing")
    assert (await store.chat(story.chat_id)).messages == 60  # type: ignore[union-attr]
    await store.call(lambda db: db.db.execute("PRAGMA max_page_count=1073741823"))

    async def caught_up() -> bool:
        record = await store.chat(story.chat_id)
        return record is not None and record.messages == 120

    await until(caught_up, "the saved chat read again once the store has room")


async def test_a_store_that_cannot_be_used_leaves_the_proxy_proxying_and_says_why(
    tmp_path: Path, fake_llm: FakeLLM, aiohttp_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(tmp_path, fake_llm)
    Story(tmp_path / "data", set(), char="Ava").grow(4)
    damaged = b"not a store, " * 1000
    (tmp_path / "store.sqlite3").write_bytes(damaged)
    app = make_app(make_settings(**settings))
    assert STORE not in app and LIBRARY not in app
    client = await aiohttp_client(app)
    answer = await client.post(
        "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert answer.status == 200 and (await answer.json())["choices"]
    health = await client.get("/health")
    report = await health.json()
    assert health.status == 503
    assert report["store"] == f"cannot use {tmp_path / 'store.sqlite3'}: file is not a database"
    assert "\nrecap_proxy_store_failing 1.0\n" in await (await client.get("/metrics")).text()
    assert "proxying without memory until it is mended" in caplog.text
    for path in ("/recap/api/chats", "/recap/api/queue"):  # the page says it too
        listed = await client.get(path)
        error = (await listed.json())["error"]
        assert listed.status == 503 and error["code"] == "store_unusable", path
        assert "file is not a database" in error["message"]
    assert (tmp_path / "store.sqlite3").read_bytes() == damaged  # left for the user to save


def test_a_blank_injection_template_is_warned_of_at_start(
    fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(**{"upstream.base_url": fake_llm.base_url, "injection.template": ""})
    make_app(settings)
    assert "the injection template is blank: no memory goes into any request" in caplog.text
