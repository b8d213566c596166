"""The whole loop: an ST chat grows by atomic saves, a scene is detected, recapped and
folded in, and the next request carries the running recap with the covered messages
left out."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from urllib.parse import quote

import pytest

from proxy.core.models import Caller, Identification
from tests.memory.story import CHAT_ID
from tests.memory_env import MemoryFactory


@pytest.mark.parametrize("stream", [False, True])
async def test_memory_builds_itself_and_goes_into_the_next_request(
    memory_proxy: MemoryFactory, stream: bool
) -> None:
    memory = await memory_proxy(16, ends={8})

    first = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert first.status == 200
    assert first.headers["X-Recap-Trimmed"] == "0"
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))

    breaks = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert [(b.position, b.source) for b in breaks] == [(8, "auto")]
    recaps = await memory.run(lambda db: db.memory.scene_recaps(breaks[0].uid))
    assert len(recaps) == 1 and recaps[0].recap.startswith("9 messages")
    assert breaks[0].name is not None and breaks[0].name.endswith(" 0-8")
    [running] = await memory.run(lambda db: db.memory.running_recaps(CHAT_ID))
    assert running.scene_count == 1 and running.new_scene_uid == breaks[0].uid

    memory.story.grow(2)  # ST saves the reply and the user's next message
    await memory.until(lambda db: db.messages(CHAT_ID)[-1].position == 17)
    response = await memory.client.post(
        "/v1/chat/completions", json=memory.story.request(stream=stream)
    )
    body = await response.read()
    assert response.status == 200
    if stream:
        assert body.rstrip().endswith(b"data: [DONE]")
    sent = memory.forwarded()[-1]["messages"]
    assert sent[0]["role"] == "system" and "<ROLEPLAY_RECAP>" in sent[0]["content"]
    assert running.content in sent[0]["content"]
    # Messages 0..8 are covered by the running recap and left out; 9..17 stay, in order.
    assert response.headers["X-Recap-Trimmed"] == "9"
    texts = [m["content"] for m in sent[3:]]
    assert texts == [m["mes"] for m in memory.story.messages[9:]]
    assert sent[1]["content"].startswith("You are Ava")


async def test_upkeep_follows_the_queue_order_and_skips_what_is_covered(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(16, ends={8})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    # The scene is folded in before any message recap runs, and message recaps wait for
    # detection to settle where the open scene starts: the messages of a finished scene
    # (which the running recap is about to cover) are never recapped one by one.
    assert memory.fake.state.operations == [
        "detect_scene_break",
        "scene_recap",
        "running_recap",
        "detect_scene_break",
        "message_recap",
    ]
    recaps = await memory.run(lambda db: db.memory.message_recaps(CHAT_ID))
    positions = await memory.run(lambda db: {db.memory.position_of(uid) for uid, _ in recaps})
    assert positions == {10, 12, 14}  # Ava's messages of the open scene, one batch of 3
    # Every call said what it was, and used the chat's own model.
    for seen in memory.fake.state.seen:
        if "X-Recap-Proxy-Operation" in seen.headers:
            assert json.loads(seen.body)["model"] == "fake-model"


async def test_trimming_reaches_past_the_identification_window(
    memory_proxy: MemoryFactory,
) -> None:
    # 100 messages: more than the 64 newest the chat index matches requests against.
    memory = await memory_proxy(100, ends={70}, **{"memory.message_recaps": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.headers["X-Recap-Trimmed"] == "71"
    sent = memory.forwarded()[-1]["messages"]
    assert [m["content"] for m in sent[3:]] == [m["mes"] for m in memory.story.messages[71:]]


async def test_the_requests_newest_message_stays_though_a_folded_scene_covers_it(
    memory_proxy: MemoryFactory,
) -> None:
    # A scene break on Ava's last reply (set on the page; a branch made there inherits
    # one), folded into the running recap: every message up to it is covered. Her reply
    # swiped, ST's request ends with the user's message before it, which must still go.
    memory = await memory_proxy(16, ends=set(), **{"memory.auto_scene_break": False})
    story = memory.story
    story.grow(1)  # Ava's 16
    await memory.client.post("/v1/chat/completions", json=story.request())
    api = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"
    response = await memory.client.put(f"{api}/messages/16/scene_break", json={})
    assert response.status == 200
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    swipe = story.request()
    swipe["messages"] = swipe["messages"][:-1]
    response = await memory.client.post("/v1/chat/completions", json=swipe)
    assert response.headers["X-Recap-Trimmed"] == "15"
    sent = memory.forwarded()[-1]["messages"]
    assert sent[-1] == {"role": "user", "content": story.messages[15]["mes"]}


async def test_sts_prompt_as_the_users_at_depth_0_does_not_hide_the_chat(
    memory_proxy: MemoryFactory,
) -> None:
    # A Prompt Manager prompt (or Author's Note, or world info) "in chat" at depth 0 as
    # the user's: after the user's message, a user message no chat holds.
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    prompt = {"role": "user", "content": "[OOC: keep the reply under 200 words.]"}
    body = memory.story.request()
    body["messages"].append(prompt)
    response = await memory.client.post("/v1/chat/completions", json=body)
    assert response.headers["X-Recap-Chat"] == quote(CHAT_ID, safe="")
    assert response.headers["X-Recap-Trimmed"] == "9"
    asked = await (await memory.client.post("/recap/api/identify", json=body)).json()
    assert (asked["generation"], asked["confidence"]) == ("normal", 1.0)
    sent = memory.forwarded()[-1]["messages"]
    assert "<ROLEPLAY_RECAP>" in sent[0]["content"]
    # The history ends with the user's message, the prompt stays after it, where ST put it.
    assert sent[-2:] == [{"role": "user", "content": memory.story.messages[-1]["mes"]}, prompt]


async def test_the_character_is_named_as_the_chat_names_it_not_by_its_folder(
    memory_proxy: MemoryFactory,
) -> None:
    # ST keeps its default character in `default_Seraphina/`; the chat calls her Seraphina.
    memory = await memory_proxy(16, ends={8}, folder="default_Ava")
    chat_id = memory.story.chat_id
    assert "/default_Ava/" in chat_id
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.status == 200 and response.headers["X-Recap-Chat"]
    await memory.until(lambda db: db.memory.running_recaps(chat_id))
    prompts = [
        m["content"]
        for seen in memory.fake.state.seen
        if "X-Recap-Proxy-Operation" in seen.headers
        for m in json.loads(seen.body)["messages"]
    ]
    assert prompts and all("default_Ava" not in p for p in prompts)
    assert all("a role-play between Tom and Ava" in p for p in prompts)
    [listed] = await (await memory.client.get("/recap/api/chats")).json()
    assert listed["name"] == "Ava"


async def test_a_running_chats_key_and_model_are_kept_once_its_request_is_on_its_way(
    memory_proxy: MemoryFactory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first request of a chat starts its upkeep and keeps its key at once; once
    upkeep runs, a request's key and model are kept after it is sent, not before its first
    byte; a failure there is logged and the request goes on."""
    memory = await memory_proxy(6, ends=set())
    engine = memory.engine
    first = await memory.client.post(
        "/v1/chat/completions",
        json=memory.story.request(),
        headers={"Authorization": "Bearer sk-first-key-0000"},
    )
    assert first.status == 200 and "sk-first-key-0000" in engine.llm.secrets()
    await engine.settle()
    ident = Identification(CHAT_ID, 1.0, "normal", 6, (2, 3), 2, (4, 5))
    started = engine.touch(ident, {"Authorization": "Bearer sk-second-key-00"}, Caller("m"))
    assert started is None and "sk-second-key-00" not in engine.llm.secrets()
    await asyncio.sleep(0)
    assert "sk-second-key-00" in engine.llm.secrets()

    def broken(*args: object) -> bool:
        raise RuntimeError("the credentials broke")

    monkeypatch.setattr(engine.llm, "remember", broken)
    again = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert again.status == 200 and again.headers["X-Recap-Chat"]
    await asyncio.sleep(0)
    assert "keeping the key and model" in caplog.text and "the credentials broke" in caplog.text


async def test_a_saved_users_message_holds_the_upkeep_until_its_request_is_answered(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ST saves the user's message, builds its prompt, sends it: the chat's planning and
    the calls it starts wait for that request's answer, not to compete with it; a save
    whose request never comes holds them for `waits.request_hold` at most."""
    memory = await memory_proxy(16, ends={8})
    engine = memory.engine
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    calls = memory.fake.state.operations
    before = len(calls)

    engine.waits = replace(engine.waits, request_hold=60)  # longer than any test's load
    memory.story.grow(2)  # the reply, then the user's next message (which ends a scene)
    await memory.until(lambda db: db.messages(CHAT_ID)[-1].position == 17, settle=False)
    await asyncio.sleep(0.2)  # ST builds its prompt
    assert len(calls) == before  # nothing planned, nothing called yet
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.status == 200
    await memory.engine.settle()
    assert len(calls) > before  # planned once the request was answered

    engine.waits = replace(engine.waits, request_hold=1.0)
    before = len(calls)
    memory.story.grow(2)  # saved, and no request follows (say, ST was closed)
    await memory.until(lambda db: db.messages(CHAT_ID)[-1].position == 19, settle=False)
    await asyncio.sleep(0.1)
    assert len(calls) == before
    await memory.engine.settle()  # the hold runs out: upkeep goes on by itself
    assert len(calls) > before
