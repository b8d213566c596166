"""Text Completion through the proxy: Ollama's NDJSON comes back chunk for chunk, memory
goes into the prompt on every backend's route, a ChatML chat gets its memory written and
inserted, and a prompt with instruct off is found with ST's unnamed lines in it (the
captured exchanges replay in `tests/web/test_sources.py`)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest

from proxy.chat.providers import NoMemory, StaticMemory
from proxy.core.models import Memory
from proxy.runtime.runtime import build_runtime
from proxy.web import make_app
from tests.adapters.captures import generations
from tests.adapters.test_text_completions import CUSTOM
from tests.conftest import make_settings
from tests.fakes.fake_llm import REPLY
from tests.fakes.fake_text import ROUTES
from tests.fakes.fake_upstream import FakeUpstream, Script
from tests.memory.st_wire import NOTE, text_prompt
from tests.memory.story import CHAT_ID, SYSTEM, USER, Story
from tests.memory_env import MemoryFactory


async def test_ollama_lines_arrive_one_per_chunk(aiohttp_client: Any) -> None:
    lines = [b'{"response":"a","done":false}\n', b'{"response":"b","done":false}\n',
             b'{"done":true}\n']  # fmt: skip
    upstream = FakeUpstream(
        Script(headers=[("Content-Type", "application/x-ndjson")], chunks=lines)
    )
    app = make_app(build_runtime(make_settings(), upstream=upstream, provider=NoMemory()))
    client = await aiohttp_client(app)
    raw = generations("textgen-ollama/chatml_stream")["05_send_03"]
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
    app = make_app(build_runtime(make_settings(), upstream=upstream, provider=StaticMemory(memory)))
    client = await aiohttp_client(app)
    raw = generations("textgen-generic/chatml_stream")["05_send_03"]
    response = await client.post(path, data=raw)
    assert int(response.headers["X-Recap-Injected"]) > 0
    prompt = json.loads(upstream.sent[0].body or b"{}")["prompt"]
    assert prompt.startswith("<|im_start|>system\n<ROLEPLAY_RECAP>")
    assert "Arden fought wolves." in prompt and prompt.endswith(json.loads(raw)["prompt"])


def chatml_request(story: Story, *, stream: bool = False) -> dict[str, Any]:
    """The story's next request as ST's Text Completion sends it in ChatML."""
    blocks = [f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"]
    for m in story.messages:
        role = "user" if m["is_user"] else "assistant"
        blocks.append(f"<|im_start|>{role}\n{m['name']}: {m['mes']}<|im_end|>\n")
    blocks.append(f"<|im_start|>assistant\n{story.char}:")
    stop = [f"\n{USER}:", "\n<|im_end|>"]
    return {"prompt": "".join(blocks), "max_tokens": 300, "stream": stream, "stop": stop}


@pytest.mark.parametrize(
    ("path", "chat_route"),
    [("/v1/completions", True), ("/completion", True), ("/api/generate", True),
     ("/api/extra/generate/stream", False), ("/api/v1/generate", False)],
)  # fmt: skip
async def test_a_text_completion_chat_gets_its_memory(
    memory_proxy: MemoryFactory, path: str, chat_route: bool
) -> None:
    """Streamed on each backend's route, answers byte for byte; the memory is written
    through the server's chat route, or its completion endpoint where it has none."""
    memory = await memory_proxy(16, {8}, **{"memory.message_recaps": False})
    memory.fake.state.chat_route = chat_route
    first = await memory.client.post(path, json=chatml_request(memory.story, stream=True))
    assert first.status == 200 and first.headers["X-Recap-Chat"]
    _, frames, _ = ROUTES[path]
    assert await first.read() == b"".join(frames([w + " " for w in REPLY.split(" ")], "stop"))
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    own = [s for s in memory.fake.state.seen if "X-Recap-Proxy-Operation" in s.headers]
    if chat_route:
        assert own and {s.path for s in own} == {"/v1/chat/completions"}
        assert {json.loads(s.body)["model"] for s in own} == {"local-model"}
    else:  # the 404 is met once; then the chat's own completion endpoint, in ChatML
        assert [s.path for s in own].count("/v1/chat/completions") == 1
        assert {s.path for s in own[1:]} == {"/api/v1/generate"}
        assert json.loads(own[-1].body)["prompt"].endswith("<|im_start|>assistant\n")
    running = await memory.run(lambda db: db.memory.current_running(CHAT_ID))
    assert running is not None
    await memory.client.post(path, json=chatml_request(memory.story))
    prompt = memory.forwarded()[-1]["prompt"]
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


async def test_a_line_without_a_name_after_the_last_message_still_finds_the_chat(
    memory_proxy: MemoryFactory,
) -> None:
    """Instruct off, ST's Author's Note at depth 0 is a line of its own after the user's
    message, and reads as more of it: the chat is found with the two taken apart, the note
    stays where ST put it, and covered lines leave."""
    memory = await memory_proxy(16, {8}, **{"memory.message_recaps": False})
    story = memory.story
    await memory.client.post("/v1/completions", json=chatml_request(story))
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    body = text_prompt(SYSTEM, story.messages, template="plain", user=USER, char=story.char, note=0)
    assert body["prompt"].endswith(f"{story.messages[-1]['mes']}\n{NOTE}\n{story.char}:")
    response = await memory.client.post("/v1/completions", json=body)
    assert response.headers["X-Recap-Chat"] == quote(CHAT_ID, safe="")
    assert int(response.headers["X-Recap-Trimmed"]) > 0
    prompt = memory.forwarded()[-1]["prompt"]
    assert "<ROLEPLAY_RECAP>" in prompt
    assert f"\n{story.char}: {story.messages[0]['mes']}" not in prompt  # covered, left out
    assert f"\n{story.char}: {story.messages[10]['mes']}" in prompt
    assert prompt.endswith(f"{story.messages[-1]['mes']}\n{NOTE}\n{story.char}:")


async def test_a_note_written_as_a_user_turn_after_the_last_message_still_finds_the_chat(
    memory_proxy: MemoryFactory,
) -> None:
    """ST's Llama 3 (as Gemma and Mistral) writes its Author's Note as a user turn: at
    depth 0, the newest user turn, which no chat holds. It is taken for ST's prompt, and
    stays where ST put it, before the character's open turn."""
    memory = await memory_proxy(16, {8}, **{"memory.message_recaps": False})
    story = memory.story
    await memory.client.post("/v1/completions", json=chatml_request(story))
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    body = text_prompt(
        SYSTEM, story.messages, template="llama3", user=USER, char=story.char, note=0
    )
    note = f"<|start_header_id|>user<|end_header_id|>\n\n{NOTE}<|eot_id|>"
    opened = f"<|start_header_id|>assistant<|end_header_id|>\n\n{story.char}:"
    assert body["prompt"].endswith(note + opened)
    response = await memory.client.post("/v1/completions", json=body)
    assert response.headers["X-Recap-Chat"] == quote(CHAT_ID, safe="")
    assert int(response.headers["X-Recap-Trimmed"]) > 0
    prompt = memory.forwarded()[-1]["prompt"]
    assert "<ROLEPLAY_RECAP>" in prompt and prompt.endswith(note + opened)
