"""The fake LLM's text completion routes, each in its server's own wire format.

`/v1/completions` (OpenAI text completion: text-generation-webui, KoboldCpp, vLLM),
llama.cpp's `/completion`, Ollama's `/api/generate` (NDJSON, one object per chunk),
KoboldAI Classic's `/api/v1/generate` and KoboldCpp's `/api/extra/generate/stream` (SSE
`{"token"}`). Each honours its own answer-limit key, streams when its body asks, and
answers the proxy's own calls (`X-Recap-Proxy-Operation`) from the prompt as the chat
route does. `FakeState.chat_route = False` makes `/v1/chat/completions` a 404, as on a
server that only completes text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes import fake_llm

Frames = Callable[[list[str], str], list[bytes]]


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _openai(words: list[str], finish: str) -> list[bytes]:
    last = len(words) - 1
    chunks = [
        _sse({"object": "text_completion", "choices": [
            {"index": 0, "text": w, "finish_reason": finish if i == last else None}]})
        for i, w in enumerate(words)
    ]  # fmt: skip
    return [*chunks, b"data: [DONE]\n\n"]


def _llamacpp(words: list[str], finish: str) -> list[bytes]:
    chunks = [_sse({"content": w, "stop": False}) for w in words]
    return [*chunks, _sse({"content": "", "stop": True, "stopped_limit": finish == "length"})]


def _ollama(words: list[str], finish: str) -> list[bytes]:
    chunks = [json.dumps({"response": w, "done": False}).encode() + b"\n" for w in words]
    end = {"response": "", "done": True, "done_reason": finish}
    return [*chunks, json.dumps(end).encode() + b"\n"]


def _kobold(words: list[str], finish: str) -> list[bytes]:
    return [_sse({"token": w, "finish_reason": None}, "message") for w in words]


# path -> (answer-limit key, streamed frames, whole answer)
ROUTES: dict[str, tuple[str, Frames, Callable[[str, str], dict[str, Any]]]] = {
    "/v1/completions": ("max_tokens", _openai, lambda t, f: {
        "object": "text_completion", "choices": [{"index": 0, "text": t, "finish_reason": f}]}),
    "/completion": ("n_predict", _llamacpp, lambda t, f: {
        "content": t, "stop": True, "stopped_limit": f == "length"}),
    "/api/generate": ("num_predict", _ollama, lambda t, f: {
        "response": t, "done": True, "done_reason": f}),
    "/api/v1/generate": ("max_length", _kobold, lambda t, f: {
        "results": [{"text": t, "finish_reason": f}]}),
    "/api/extra/generate/stream": ("max_length", _kobold, lambda t, f: {
        "results": [{"text": t, "finish_reason": f}]}),
}  # fmt: skip


async def complete(request: web.Request) -> web.StreamResponse:
    state = request.app[fake_llm.STATE]
    seen = await fake_llm.seen_of(request)
    state.seen.append(seen)
    state.started.set()
    path = request.path
    key, frames, whole = ROUTES[path]
    payload = json.loads(seen.body)
    options = payload.get("options") if path == "/api/generate" else payload
    limit = (options or {}).get(key)
    operation = request.headers.get("X-Recap-Proxy-Operation")
    if operation is not None:
        answer, finish, _ = fake_llm.own_answer(state, operation, [str(payload["prompt"])], limit)
        return web.json_response(whole(answer, finish))
    reply, finish = fake_llm.limited(fake_llm.REPLY, limit)
    streamed = payload.get("stream") is not False if path == "/api/generate" else (
        payload.get("stream") is True or path == "/api/extra/generate/stream")  # fmt: skip
    if not streamed:
        return web.json_response(whole(reply, finish))
    kind = "application/x-ndjson" if path == "/api/generate" else "text/event-stream"
    words = [w + " " for w in reply.split(" ")]
    return await fake_llm.stream(request, frames(words, finish), kind)


def add_routes(app: web.Application) -> None:
    for path in ROUTES:
        app.router.add_post(path, complete)
