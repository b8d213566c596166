"""Every exchange ST 1.12.6 had with each kind of API (`tests/data/sources/`) replays
through the proxy with no memory set: probes, tokenization and generations reach the
upstream as ST sent them, on the same path with their key, and each answer comes back as
the upstream wrote it (Anthropic and OpenAI SSE, llama.cpp's, Ollama's NDJSON, JSON)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.chat.providers import NoMemory
from proxy.runtime.runtime import build_runtime
from proxy.web import make_app
from tests.adapters.captures import SOURCES, exchanges
from tests.conftest import make_settings
from tests.fakes.fake_upstream import FakeUpstream, Script

RUNS = sorted(str(path.parent.relative_to(SOURCES)) for path in SOURCES.glob("*/*/requests.jsonl"))
KEYS = ("authorization", "x-api-key", "anthropic-version")


def test_every_copied_run_is_replayed() -> None:
    assert len(RUNS) == 16 and "claude/stream" in RUNS and "textgen-ollama/chatml_stream" in RUNS


@pytest.mark.parametrize("run", RUNS)
async def test_captured_exchanges_pass_unchanged(aiohttp_client: Any, run: str) -> None:
    for request, answer in exchanges(run):
        chunks = [c.encode() for c in answer.get("chunks") or [answer.get("body_text") or ""]]
        kept = [(k, v) for k, v in answer["headers"].items() if k.lower() == "content-type"]
        upstream = FakeUpstream(Script(status=answer["status"], headers=kept, chunks=chunks))
        app = make_app(build_runtime(make_settings(), upstream=upstream, provider=NoMemory()))
        client = await aiohttp_client(app)
        body = request["body_text"].encode() if request.get("body_text") else None
        query = f"?{request['query']}" if request.get("query") else ""
        keys = {k: v for k, v in request["headers"].items() if k.lower() in KEYS}
        response = await client.request(
            request["method"], request["path"] + query, data=body, headers=keys
        )
        received = [chunk async for chunk, _ in response.content.iter_chunks()]
        assert response.status == answer["status"], (run, request["path"])
        assert b"".join(received) == b"".join(chunks), (run, request["path"])
        [sent] = upstream.sent
        assert sent.path == request["path"] and (sent.body or None) == body
        forwarded = {k.lower(): v for k, v in sent.headers}
        assert all(forwarded[k.lower()] == v for k, v in keys.items()), (run, request["path"])
        await client.close()
