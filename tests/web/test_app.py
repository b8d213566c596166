"""`make_app` wires routes and middlewares over a built runtime, whose parts start and stop
with the app."""

from __future__ import annotations

from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from proxy.runtime.runtime import build_runtime
from proxy.web import make_app
from proxy.web.keys import RELAY, RUNTIME
from tests.conftest import FakeLLM, make_settings
from tests.runtime.test_runtime import settings_for


async def test_the_app_serves_the_runtime_it_was_given_and_runs_its_parts(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    runtime = build_runtime(make_settings(**settings_for(tmp_path, fake_llm)))
    app = make_app(runtime)
    assert app[RUNTIME] is runtime and app[RELAY].upstream is runtime.upstream
    store = runtime.memory_parts().store
    async with TestClient(TestServer(app)) as client:
        assert not store.closed  # started with the app
        health = await (await client.get("/health")).json()
        assert health["store"] == "ok"
        chats = await client.get("/recap/api/chats")
        assert chats.status == 200
    assert store.closed  # stopped with it


async def test_the_access_log_is_a_middleware_only_when_asked_for(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = settings_for(tmp_path, fake_llm)
    quiet = make_app(build_runtime(make_settings(**settings)))
    logged = make_app(build_runtime(make_settings(**settings, **{"server.access_log": True})))
    assert len(logged.middlewares) == len(quiet.middlewares) + 1
