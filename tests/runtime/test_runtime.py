"""The runtime builds the parts: what it is given is what runs, and a failed start still
closes what was opened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from proxy.errors import ConfigError
from proxy.memory.engine import MemoryEngine
from proxy.runtime.runtime import build_runtime
from proxy.store import Store
from proxy.web import make_app
from proxy.web.keys import RUNTIME
from tests.conftest import FakeLLM, make_settings
from tests.memory.story import Story
from tests.memory_env import MemoryFactory
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
    runtime = build_runtime(make_settings(**settings_for(tmp_path, fake_llm)), store=store)
    memory = runtime.memory_parts()
    assert memory.store is store and memory.library.store is store and memory.engine.store is store
    runner = web.AppRunner(make_app(runtime))
    await runner.setup()
    try:
        await memory.library.indexed.wait()
        assert await store.call(lambda db: db.clock()) == 1234.0
    finally:
        await runner.cleanup()
    assert store.closed


async def test_a_clock_alone_reaches_the_store_and_the_engine(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    def clock() -> float:
        return 99.0

    runtime = build_runtime(make_settings(**settings_for(tmp_path, fake_llm)), clock=clock)
    assert runtime.memory_parts().store.clock is clock
    assert runtime.memory_parts().engine.clock is clock


async def test_an_engine_that_fails_to_start_still_closes_the_store(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: MemoryEngine) -> MemoryEngine:
        raise RuntimeError("the engine broke")

    monkeypatch.setattr(MemoryEngine, "__aenter__", broken)
    store = Store(tmp_path / "store.sqlite3")
    app = make_app(build_runtime(make_settings(**settings_for(tmp_path, fake_llm)), store=store))
    runner = web.AppRunner(app)
    with pytest.raises(RuntimeError, match="the engine broke"):
        await runner.setup()
    await runner.cleanup()
    assert store.closed
    with pytest.raises(RuntimeError, match="closed"):
        await store.call(lambda db: None)


async def test_a_store_that_cannot_be_used_leaves_the_proxy_proxying_and_says_why(
    tmp_path: Path, fake_llm: FakeLLM, aiohttp_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(tmp_path, fake_llm)
    Story(tmp_path / "data", set(), char="Ava").grow(4)
    damaged = b"not a store, " * 1000
    (tmp_path / "store.sqlite3").write_bytes(damaged)
    app = make_app(build_runtime(make_settings(**settings)))
    assert app[RUNTIME].store is None and app[RUNTIME].memory is None
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
    make_app(build_runtime(settings))
    assert "the injection template is blank: no memory goes into any request" in caplog.text


def test_without_a_data_folder_the_memory_parts_say_why(fake_llm: FakeLLM) -> None:
    runtime = build_runtime(make_settings(**{"upstream.base_url": fake_llm.base_url}))
    assert runtime.memory is None and runtime.engine is None and runtime.queue is None
    with pytest.raises(ConfigError, match="without memory: no SillyTavern data folder"):
        runtime.memory_parts()


async def test_st_data_folder_going_and_coming_back_is_a_health_event(
    memory_proxy: MemoryFactory,
) -> None:
    """The page's health band asks /health on it at once, not at its next poll."""
    memory = await memory_proxy(2, ends=set())
    events = memory.app[RUNTIME].events
    data = memory.story.path.parents[3]
    away = data.with_name("away")

    def told() -> list[object]:
        return [e.data["watcher"] for e in events.since(0) or [] if e.kind == "health"]

    data.rename(away)
    await until(lambda: told() == ["missing"], "the folder's loss said")
    away.rename(data)
    await until(lambda: told() == ["missing", "running"], "its return said")
