"""Claude through ST's reverse proxy, end to end in-process: memory where the setting
says, and a Claude chat's own memory calls through the Messages API (the captured
exchanges replay in `tests/web/test_sources.py`)."""

from __future__ import annotations

import itertools
import json
from typing import Any
from urllib.parse import quote

import pytest

from proxy.chat.providers import StaticMemory
from proxy.core.models import Memory
from proxy.runtime.runtime import build_runtime
from proxy.web import make_app
from tests.adapters.test_anthropic_messages import generations
from tests.conftest import FakeLLM, ProxyFactory, make_settings
from tests.fakes.fake_llm import REPLY, anthropic_events
from tests.fakes.fake_upstream import FakeUpstream, Script
from tests.memory.st_wire import claude
from tests.memory.story import CHAT_ID, Story
from tests.memory_env import MemoryFactory, recapped

HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "proxy-password"}


@pytest.mark.parametrize(
    ("position", "where"),
    [("before_prompt", "system"), ("in_prompt", "system"), ("in_chat", "turns")],
)
async def test_memory_goes_where_the_setting_says(
    proxy: ProxyFactory, fake_llm: FakeLLM, position: str, where: str
) -> None:
    memory = Memory(values={"running_recap": "Arden fought wolves."})
    client = await proxy(memory=memory, **{"injection.position": position})
    raw = generations("stream")["05_send_03"]
    response = await client.post("/v1/messages", data=raw, headers=HEADERS)
    assert int(response.headers["X-Recap-Injected"]) > 0
    assert b"message_stop" in await response.read()
    sent = json.loads(fake_llm.state.seen[-1].body)
    in_system = "Arden fought wolves." in sent.get("system", "")
    in_turns = any("Arden fought wolves." in m["content"] for m in sent["messages"])
    assert (in_system, in_turns) == (where == "system", where == "turns")


async def test_what_the_upstream_gets_with_memory(aiohttp_client: Any) -> None:
    raw = generations("stream_sysprompt")["05_send_03"]
    for position, depth in (("before_prompt", 2), ("in_chat", 2)):
        upstream = FakeUpstream(Script(chunks=[b"event: message_stop\ndata: {}\n\n"]))
        settings = make_settings(**{"injection.position": position, "injection.depth": depth})
        memory = Memory(values={"running_recap": "Arden fought wolves."})
        app = make_app(build_runtime(settings, upstream=upstream, provider=StaticMemory(memory)))
        client = await aiohttp_client(app)
        await (await client.post("/v1/messages", data=raw, headers=HEADERS)).read()
        sent = json.loads(upstream.sent[0].body or b"{}")
        original = json.loads(raw)
        turns = sent["messages"]
        assert all(a["role"] != b["role"] for a, b in itertools.pairwise(turns))
        if position == "before_prompt":
            assert sent["system"].endswith("\n\n" + original["system"])
            assert "Arden fought wolves." in sent["system"][: -len(original["system"])]
            assert turns == original["messages"]
        else:
            assert sent["system"] == original["system"]
            holder = [m for m in turns if "Arden fought wolves." in m["content"]]
            assert len(holder) == 1 and holder[0]["role"] == "user"
            assert len(turns) == len(original["messages"])  # merged, not added


def claude_request(story: Story, *, stream: bool = False) -> dict[str, Any]:
    """The story's next request as ST sends it to Claude ("use system prompt" off): its
    system messages become the user's, and same-role neighbours are merged."""
    return {**claude(story.request()["messages"], False), "model": "claude-fake", "stream": stream}


async def test_a_claude_chat_gets_its_memory_written_through_the_messages_api(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(16, {8}, **{"memory.message_recaps": False})
    first = await memory.client.post(
        "/v1/messages", json=claude_request(memory.story), headers=HEADERS
    )
    assert first.status == 200 and first.headers["X-Recap-Chat"]
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    own = [s for s in memory.fake.state.seen if "X-Recap-Proxy-Operation" in s.headers]
    assert own and {s.path for s in own} == {"/v1/messages"}
    assert all(s.headers["x-api-key"] == "proxy-password" for s in own)
    assert {s.headers["X-Recap-Proxy-Operation"] for s in own} >= {
        "scene_recap",
        "running_recap",
    }
    running = await memory.run(lambda db: db.memory.current_running(CHAT_ID))
    assert running is not None
    streamed = await memory.client.post(
        "/v1/messages", json=claude_request(memory.story, stream=True), headers=HEADERS
    )
    assert await streamed.read() == b"".join(anthropic_events(REPLY, model="claude-fake"))
    last = memory.forwarded()[-1]
    assert running.content in last["system"]
    turns = last["messages"]
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(turns))


async def test_a_stepped_start_never_leaves_the_assistant_first(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(
        40,
        {8},
        **{"memory.message_recaps": "needed", "memory.history_cut_step": 5},
    )
    await memory.client.post("/v1/messages", json=claude_request(memory.story), headers=HEADERS)
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    # "Use system prompt" on: the system apart, and ST's context full from message 21 on
    # (the user's). The stepped start (9, 14, 19, 24: steps of five from trimming's cut)
    # would be Ava's 24, but her 22 has no recap yet: the start holds before it, and the
    # user's 21 stays first.
    chat = memory.story.messages
    turns = [
        {"role": "user" if m["is_user"] else "assistant", "content": m["mes"]} for m in chat[21:]
    ]
    body = {"system": "You are Ava.", "messages": turns, "model": "claude-fake", "max_tokens": 9}
    response = await memory.client.post("/v1/messages", json=body, headers=HEADERS)
    assert response.status == 200 and response.headers["X-Recap-Trimmed"] == "0"
    sent = memory.forwarded()[-1]["messages"]
    assert sent[0] == {"role": "user", "content": chat[21]["mes"]}
    # Once it has (written at once: it was due), the start is 24, and the user's 23 stays
    # before it.
    await memory.until(lambda db: 22 in recapped(db))
    response = await memory.client.post("/v1/messages", json=body, headers=HEADERS)
    assert response.status == 200 and response.headers["X-Recap-Trimmed"] == "2"
    sent = memory.forwarded()[-1]["messages"]
    assert sent[0] == {"role": "user", "content": chat[23]["mes"]}


async def test_turns_st_merged_are_taken_apart_to_find_the_chat(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(16, {8}, **{"memory.message_recaps": False})
    story = memory.story
    await memory.client.post("/v1/messages", json=claude_request(story), headers=HEADERS)
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)

    async def sent(messages: list[dict[str, Any]], generation: str) -> dict[str, Any]:
        # ST sends `stop_sequences` (empty, as here) to Claude: `/recap/api/identify` tells
        # the format by it.
        body = claude(messages, False)
        asked = await memory.client.post("/recap/api/identify", json=body)
        told = await asked.json()
        assert (told["generation"], told["confidence"]) == (generation, 1.0)
        response = await memory.client.post("/v1/messages", json=body, headers=HEADERS)
        assert response.headers["X-Recap-Chat"] == quote(CHAT_ID, safe="")
        assert int(response.headers["X-Recap-Injected"]) > 0
        assert int(response.headers["X-Recap-Trimmed"]) > 0  # the first scene's messages
        last: dict[str, Any] = memory.forwarded()[-1]
        assert all(a["role"] != b["role"] for a, b in itertools.pairwise(last["messages"]))
        assert last["messages"][-1] == body["messages"][-1]  # the merged turn as it came
        return last

    # The user sends again after a reply that failed: two user messages in a row.
    again = {**story.messages[-1], "mes": "Tom asks once more, louder this time."}
    story.messages.append(again)
    story.save()
    await sent(story.request()["messages"], "normal")
    # An Author's Note at depth 0 after the user's message, merged into it.
    note = {"role": "system", "content": "[Author's note: it starts to rain.]"}
    await sent([*story.request()["messages"], note], "normal")
    # Ava answers; ST 1.13's continue nudge is a user turn of its own.
    story.messages.append({**story.messages[-3], "mes": "Ava shrugs and points at the ford."})
    story.save()
    nudge = {"role": "system", "content": "[Continue your last message without repeating it.]"}
    await sent([*story.request()["messages"], nudge], "continue")
    # The user answers: the two merged messages are inside the history now, one turn for
    # two of the file's messages. Matched by the newest two alone, the request would have
    # too little confidence to start a branch's upkeep.
    story.messages.append({**story.messages[-2], "mes": "Tom wades into the ford."})
    story.save()
    last = await sent(story.request()["messages"], "normal")
    assert last["messages"][-3]["content"].endswith(again["mes"])  # still merged upstream
