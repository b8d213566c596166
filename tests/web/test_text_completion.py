"""Text Completion through the proxy: ST's captured requests pass unchanged on every
backend's route, answers come back chunk for chunk (Ollama's NDJSON included), and a
ChatML chat gets its memory written and inserted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.chat.providers import NoMemory, StaticMemory
from proxy.core.models import Memory
from proxy.web import make_app
from tests.adapters.captures import SOURCES
from tests.adapters.test_text_completions import CUSTOM, RUNS, generations
from tests.conftest import make_settings
from tests.fakes.fake_upstream import FakeUpstream, Script
from tests.memory.story import CHAT_ID, SYSTEM, USER, Story
from tests.memory_env import MemoryFactory


def answers(run: str) -> dict[str, dict[str, Any]]:
    found = {}
    for line in (SOURCES / run / "responses.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        found[record["seq"]] = record
    return found


def requests(run: str) -> list[dict[str, Any]]:
    lines = (SOURCES / run / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("run", [*RUNS, "openai-reverse-proxy/stream"])
async def test_captured_exchanges_pass_unchanged(aiohttp_client: Any, run: str) -> None:
    """Every request of the run (probes, tokenization, generations) reaches the upstream
    as ST sent it, on the same path, and its answer reaches ST as the upstream wrote it."""
    replies = answers(run)
    for record in requests(run):
        answer = replies[record["seq"]]
        chunks = [c.encode() for c in answer.get("chunks") or [answer.get("body_text") or ""]]
        kept = [(k, v) for k, v in answer["headers"].items() if k.lower() == "content-type"]
        upstream = FakeUpstream(Script(status=answer["status"], headers=kept, chunks=chunks))
        app = make_app(
            make_settings(**{"upstream.base_url": "http://upstream.invalid"}),
            upstream=upstream,
            provider=NoMemory(),
        )
        client = await aiohttp_client(app)
        body = record["body_text"].encode() if record.get("body_text") else None
        query = f"?{record['query']}" if record.get("query") else ""
        response = await client.request(record["method"], record["path"] + query, data=body)
        received = [chunk async for chunk, _ in response.content.iter_chunks()]
        assert response.status == answer["status"]
        assert b"".join(received) == b"".join(chunks), (run, record["path"])
        [sent] = upstream.sent
        assert sent.path == record["path"] and (sent.body or None) == body
        await client.close()


async def test_ollama_lines_arrive_one_per_chunk(aiohttp_client: Any) -> None:
    lines = [b'{"response":"a","done":false}\n', b'{"response":"b","done":false}\n',
             b'{"done":true}\n']  # fmt: skip
    upstream = FakeUpstream(
        Script(headers=[("Content-Type", "application/x-ndjson")], chunks=lines)
    )
    app = make_app(make_settings(), upstream=upstream, provider=NoMemory())
    client = await aiohttp_client(app)
    _, raw = generations("textgen-ollama/chatml_stream")["05_send_03"]
    response = await client.post("/api/generate", data=raw)
    received = []
    async for chunk, _ in response.content.iter_chunks():
        received.append(chunk)
    assert b"".join(received) == b"".join(lines)


@pytest.mark.parametrize("path", ["/v1/completions", "/completion", "/api/generate",
                                  "/api/v1/generate", "/api/extra/generate/stream"])  # fmt: skip
async def test_memory_goes_into_the_prompt_on_every_route(aiohttp_client: Any, path: str) -> None:
    upstream = FakeUpstream(Script(chunks=[b"{}"]))
    memory = Memory(values={"running_recap": "Arden fought wolves."})
    app = make_app(make_settings(), upstream=upstream, provider=StaticMemory(memory))
    client = await aiohttp_client(app)
    _, raw = generations("textgen-generic/chatml_stream")["05_send_03"]
    response = await client.post(path, data=raw)
    assert int(response.headers["X-Recap-Injected"]) > 0
    prompt = json.loads(upstream.sent[0].body or b"{}")["prompt"]
    assert prompt.startswith("<|im_start|>system\n<ROLEPLAY_RECAP>")
    assert "Arden fought wolves." in prompt and prompt.endswith(json.loads(raw)["prompt"])


def chatml_request(story: Story) -> dict[str, Any]:
    """The story's next request as ST's Text Completion sends it in ChatML."""
    blocks = [f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"]
    for m in story.messages:
        role = "user" if m["is_user"] else "assistant"
        blocks.append(f"<|im_start|>{role}\n{m['name']}: {m['mes']}<|im_end|>\n")
    blocks.append(f"<|im_start|>assistant\n{story.char}:")
    stop = [f"\n{USER}:", "\n<|im_end|>"]
    return {"prompt": "".join(blocks), "max_tokens": 300, "stream": False, "stop": stop}


async def test_a_text_completion_chat_gets_its_memory(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, {8}, **{"memory.message_recaps": False})
    first = await memory.client.post("/v1/completions", json=chatml_request(memory.story))
    assert first.status == 200 and first.headers["X-Recap-Chat"]
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    own = [s for s in memory.fake.state.seen if "X-Recap-Proxy-Operation" in s.headers]
    assert own and {s.path for s in own} == {"/v1/chat/completions"}
    assert {json.loads(s.body)["model"] for s in own} == {"local-model"}
    running = await memory.run(lambda db: db.memory.current_running(CHAT_ID))
    assert running is not None
    await memory.client.post("/v1/completions", json=chatml_request(memory.story))
    prompt = json.loads(memory.fake.state.seen[-1].body)["prompt"]
    assert prompt.startswith("<|im_start|>system\n<ROLEPLAY_RECAP>")
    assert running.content.split("\n")[0] in prompt


async def test_the_instruct_template_st_uses_is_read_from_its_settings(
    memory_proxy: MemoryFactory,
) -> None:
    def build(story: Story) -> None:
        story.grow(6)
        settings = story.path.parents[2] / "settings.json"  # default-user/settings.json
        settings.write_text(json.dumps({"power_user": {"instruct": CUSTOM}}), encoding="utf-8")

    memory = await memory_proxy(0, set(), build=build)
    blocks = [f"<<S>>\n{SYSTEM}<<END>>\n"]
    for m in memory.story.messages:
        blocks.append(f"{'<<H>>' if m['is_user'] else '<<A>>'}\n{m['name']}: {m['mes']}<<END>>\n")
    prompt = "".join(blocks) + f"<<A>>\n{memory.story.char}:"
    response = await memory.client.post(
        "/v1/completions", json={"prompt": prompt, "stop": [f"\n{USER}:"]}
    )
    assert response.headers["X-Recap-Chat"]  # split by ST's own template, then identified
