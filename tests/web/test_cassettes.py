"""Cassettes: the committed ones replay through the proxy, and record mode writes new ones."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from proxy.chat.providers import StaticMemory
from proxy.core.models import Memory
from proxy.runtime.runtime import build_runtime
from proxy.upstream.cassette import decode_body, decode_chunk, load_cassette
from proxy.web import make_app
from proxy.web.keys import RELAY
from tests.conftest import FakeLLM, ProxyFactory, make_settings
from tests.fakes.cassette_upstream import all_cassettes, make_replay_app

SKIP_HEADERS = {"host", "content-length", "connection"}


def client_headers(part: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in part["headers"] if k.lower() not in SKIP_HEADERS}


async def replay_through_proxy(
    aiohttp_server: Any, aiohttp_client: Any, paths: list[Path], memory: Memory | None = None
) -> None:
    app, replayer = make_replay_app(paths)
    upstream = await aiohttp_server(app)
    settings = make_settings(**{"upstream.base_url": str(upstream.make_url("/v1"))})
    provider = StaticMemory(memory) if memory is not None else None
    client = await aiohttp_client(
        make_app(build_runtime(settings, provider=provider)), auto_decompress=False
    )
    for path in paths:
        cassette = load_cassette(path)
        request = cassette["request"]
        url = request["path"] + (f"?{request['query']}" if request["query"] else "")
        response = await client.request(
            request["method"],
            url,
            data=decode_body(request) or None,
            headers=client_headers(request),
        )
        expected = b"".join(decode_chunk(c) for c in cassette["response"]["chunks"])
        assert response.status == cassette["response"]["status"], path.name
        assert await response.read() == expected, path.name
    assert replayer.unmatched == []
    assert len(replayer.served) == len(paths)


def test_there_are_cassettes_from_real_st_captures() -> None:
    names = [p.name for p in all_cassettes()]
    assert any("send" in n and n.startswith("stream-") for n in names)
    assert any(n.startswith("nonstream-") for n in names)
    assert any("group" in n for n in names)


async def test_committed_cassettes_replay_byte_for_byte(
    aiohttp_server: Any, aiohttp_client: Any
) -> None:
    await replay_through_proxy(aiohttp_server, aiohttp_client, all_cassettes())


async def test_record_mode_writes_replayable_redacted_cassettes(
    proxy: ProxyFactory,
    fake_llm: FakeLLM,
    tmp_path: Path,
    aiohttp_server: Any,
    aiohttp_client: Any,
) -> None:
    memory = Memory(values={"running_recap": "Arden survived the wolves."})
    fake_llm.state.chunk_delay = 0.01  # events arrive apart, so they are recorded apart
    client = await proxy(memory=memory, **{"server.record_dir": str(tmp_path)})
    chat = {
        "messages": [
            {"role": "system", "content": "main"},
            {"role": "system", "content": "[Start a new Chat]"},
            {"role": "user", "content": "hello"},
        ],
        "model": "fake-model",
        "stream": True,
        "api_key": "sk-in-body",
    }
    secret = {"Authorization": "Bearer sk-secret-123", "X-Api-Key": "sk-other"}
    streamed = await (
        await client.post("/v1/chat/completions", data=json.dumps(chat).encode(), headers=secret)
    ).read()
    await (await client.get("/v1/models?key=sk-query&x=1", headers=secret)).read()
    await client.app[RELAY].drain()

    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 2
    for path in files:
        text = path.read_text(encoding="utf-8")
        for leaked in ("sk-secret-123", "sk-other", "sk-query", "sk-in-body"):
            assert leaked not in text, f"{leaked} written to {path.name}"
    chat_cassette = load_cassette(files[0])
    assert chat_cassette["request"]["path"] == "/v1/chat/completions"
    assert ["Authorization", "Bearer <redacted>"] in chat_cassette["request"]["headers"]
    upstream_body = chat_cassette["upstream_request"]["body"]
    assert upstream_body["messages"][0]["content"].startswith("<ROLEPLAY_RECAP>")
    assert chat_cassette["meta"]["insertions"][0]["index"] == 0
    chunks = chat_cassette["response"]["chunks"]
    assert b"".join(decode_chunk(c) for c in chunks) == streamed
    assert len(chunks) > 1 and all(c["t"] >= 0 for c in chunks)
    assert load_cassette(files[1])["request"]["query"] == "key=REDACTED&x=1"

    # What was recorded replays, with the same memory, through a fresh proxy. The body
    # keys were redacted, so the replayed client body carries the redacted value.
    await replay_through_proxy(aiohttp_server, aiohttp_client, files, memory)


async def test_recording_failure_does_not_break_the_chat(
    proxy: ProxyFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    client = await proxy(**{"server.record_dir": str(blocker / "sub")})
    response = await client.get("/v1/models")
    assert response.status == 200
    await client.app[RELAY].drain()
    await asyncio.sleep(0)
    assert "cannot write cassette" in caplog.text
