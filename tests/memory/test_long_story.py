"""What a long story needs: older scenes recalled when the chat turns back to them, the
whole memory within its budget, hidden messages in their scenes, and a failed job that
stops nothing for good."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from proxy.memory.views import recall
from proxy.store import Database
from proxy.web.keys import RUNTIME
from proxy.web.routes import INJECTED_HEADER
from tests.core.test_tokens import recorded
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory
from tests.memory_env import recapped as recapped_positions
from tests.spies import spy

NO_RECAPS = {"memory.message_recaps": False}
ENDS = {8, 17, 26, 35, 44}
FACT = "Ava buries the Brass Key beside the Cedar Well."
QUESTION = "Tom looks at the map again. Where did you bury that brass key?"


def recapped(count: int) -> Any:
    def check(db: Database) -> bool:
        breaks = db.memory.breaks(CHAT_ID)
        return len(breaks) == count and all(b.current is not None for b in breaks)

    return check


async def ask(memory: Memory, text: str) -> Any:
    """The user sends `text`: ST saves it, then sends the request."""
    memory.story.messages[-1]["mes"] = memory.story.messages[-1]["swipes"][0] = text
    memory.story.save()
    last = len(memory.story.messages) - 1
    await memory.until(lambda db: db.messages(CHAT_ID)[last].message.mes == text, settle=False)
    await memory.engine.settle()
    return await memory.client.post("/v1/chat/completions", json=memory.story.request())


async def bury_the_key(memory: Memory) -> None:
    """Message 12 tells where the key is buried; the chat's five scenes get recapped."""
    memory.story.messages[12]["mes"] += " " + FACT
    memory.story.save()
    await memory.until(lambda db: FACT in db.messages(CHAT_ID)[12].message.mes, settle=False)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(recapped(5))


def searches_from_now(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The scene search's calls from now on: (chat, question, limit, minimum score)."""
    return spy(monkeypatch, memory.app[RUNTIME].memory_parts().store.search, "ranked")


async def sent_memory(memory: Memory) -> str:
    """The inserted memory of the last chat request that went upstream: its stable part
    (first, before the main prompt) and its changing part (in the chat), if any."""
    sent = memory.forwarded()[-1]["messages"]
    first = sent[0]
    assert first["role"] == "system" and "<ROLEPLAY_RECAP>" in first["content"]
    changing = [m["content"] for m in sent if m["content"].startswith("<RECENT_MEMORY>")]
    return "\n\n".join([first["content"], *changing])


async def test_an_older_scene_comes_back_when_the_chat_asks_about_it(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(50, ENDS, **NO_RECAPS)
    await bury_the_key(memory)
    await memory.until(lambda db: len(db.memory.running_recaps(CHAT_ID)) >= 5)

    # The last message is about something else: no older scene is recalled.
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert int(response.headers["X-Recap-Trimmed"]) == 45
    assert "Earlier scenes" not in await sent_memory(memory)

    # It asks about the key: the scene (9-17) comes back, though its messages are left out.
    response = await ask(memory, QUESTION)
    assert int(response.headers["X-Recap-Trimmed"]) == 45
    text = await sent_memory(memory)
    recalled = text.split("Earlier scenes", 1)[1]
    assert FACT in recalled and "9-17]" in recalled
    assert "0-8]" not in recalled  # only what matches
    # The recalled scene is in the changing part, in the chat at depth 2; the preview of the
    # same request shows the whole memory as `injected` and each part with its place.
    sent = memory.forwarded()[-1]["messages"]
    assert sent[-3]["content"].startswith("<RECENT_MEMORY>") and FACT in sent[-3]["content"]
    shown = await memory.client.post("/recap/api/preview", json=memory.story.request())
    preview = await shown.json()
    assert [(p["part"], p["placement"]["position"]) for p in preview["parts"]] == [
        ("stable", "before_prompt"),
        ("changing", "in_chat"),
    ]
    assert preview["injected"]["text"] == "\n\n".join(p["text"] for p in preview["parts"])
    assert FACT in preview["injected"]["text"] and preview["injected"]["index"] == 0


async def test_a_scene_still_in_the_prompt_is_not_recalled(memory_proxy: MemoryFactory) -> None:
    # Nothing is left out: every scene is in the prompt, so recall has nothing to add.
    memory = await memory_proxy(50, ENDS, **NO_RECAPS, **{"memory.auto_hide_scene_count": -1})
    await bury_the_key(memory)
    await ask(memory, QUESTION)
    assert "Earlier scenes" not in await sent_memory(memory)


async def test_the_whole_memory_stays_within_its_budget(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        50, ENDS, **{"memory.max_memory_tokens": 300, "memory.message_recap_batch_size": 1}
    )
    memory.story.messages[12]["mes"] += " " + FACT
    memory.story.save()
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(recapped(5))
    response = await ask(memory, QUESTION)
    injected = int(response.headers[INJECTED_HEADER])
    assert 150 < injected <= 300
    # The running recap (over 300 tokens by now) keeps its newest lines.
    running = await memory.run(lambda db: db.memory.current_running(CHAT_ID))
    assert running is not None
    text = await sent_memory(memory)
    assert running.content.splitlines()[-1] in text
    assert running.content.splitlines()[0] not in text


@pytest.mark.parametrize("include", [True, False])
async def test_hidden_messages_are_part_of_their_scene(
    memory_proxy: MemoryFactory, include: bool
) -> None:
    memory = await memory_proxy(16, {8}, **NO_RECAPS, **{"memory.include_hidden_messages": include})
    for i in range(2, 6):  # hidden in ST, as /hide or ST-Auto-Recap's auto-hide leave them
        memory.story.messages[i]["is_system"] = True
    memory.story.messages[3]["mes"] = "Tom hides the Silver Compass in the Old Oak."
    memory.story.save()
    await memory.until(lambda db: db.messages(CHAT_ID)[3].message.hidden, settle=False)
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.status == 200
    await memory.until(recapped(1))
    prompts = [
        json.loads(seen.body)["messages"][0]["content"]
        for seen in memory.fake.state.seen
        if seen.headers.get("X-Recap-Proxy-Operation") == "scene_recap"
    ]
    assert ("Silver Compass" in prompts[-1]) is include
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert scene.position == 8
    # Never back into the request: ST left them out, and so does the proxy.
    sent = memory.forwarded()[-1]["messages"]
    assert not any("Silver Compass" in m["content"] for m in sent)


async def test_a_failed_scene_recap_stops_nothing_for_good(
    memory_proxy: MemoryFactory, caplog: pytest.LogCaptureFixture
) -> None:
    memory = await memory_proxy(
        27,
        {8, 17},
        **NO_RECAPS,
        **{
            "queue.max_attempts": 2,
            "queue.backoff_seconds": 0.01,
            "queue.backoff_cap_seconds": 0.01,
            "queue.failed_retry_minutes": 0.03,
        },
    )
    memory.fake.state.faults = {"scene_recap": ["", "status=500", "status=500"]}
    with caplog.at_level(logging.WARNING, logger="proxy.memory.calls.jobs"):
        await memory.client.post("/v1/chat/completions", json=memory.story.request())
        await memory.until(lambda db: db.jobs.list(CHAT_ID, ("failed",)), settle=False)
    # Visible: in the queue, in the overview, once in the log.
    jobs = await (await memory.client.get(f"/recap/api/queue?chat={CHAT_ID}")).json()
    assert [j["operation"] for j in jobs["jobs"] if j["state"] == "failed"] == ["scene_recap"]
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1 and "scene_recap" in failures[0].getMessage()
    # Meanwhile the last good running recap goes in, and trimming works up to it.
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.headers["X-Recap-Trimmed"] == "9"
    [first] = await memory.run(lambda db: db.memory.running_recaps(CHAT_ID))
    assert first.content in await sent_memory(memory)
    # After the cool-down the scene is recapped again by itself, and folded in.
    await memory.until(lambda db: len(db.memory.running_recaps(CHAT_ID)) == 2, timeout=10)
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.headers["X-Recap-Trimmed"] == "18"


async def test_a_template_without_relevant_scenes_never_searches(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await memory_proxy(
        50,
        ENDS,
        **NO_RECAPS,
        **{
            "injection.template": "[Story so far: {{running_recap}}]",
            "injection.changing.template": "[Lately: {{recent_recaps}}]",
        },
    )
    await bury_the_key(memory)
    searches = searches_from_now(memory, monkeypatch)
    response = await ask(memory, QUESTION)
    assert int(response.headers["X-Recap-Trimmed"]) == 45
    sent = memory.forwarded()[-1]["messages"][0]["content"]
    assert sent.startswith("[Story so far: ") and "Earlier scenes" not in sent
    assert searches == [] and memory.engine.views[CHAT_ID].scenes == {}


async def test_the_scenes_a_saved_message_asks_about_are_searched_before_its_request(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ST saves the user's message, then builds its prompt, then sends it: the scene search
    runs when the save is read, and the request finds its answers (no search on its way)."""
    memory = await memory_proxy(50, ENDS, **NO_RECAPS)
    await bury_the_key(memory)
    await memory.until(lambda db: len(db.memory.running_recaps(CHAT_ID)) >= 5)
    searches = searches_from_now(memory, monkeypatch)
    memory.story.messages[-1]["mes"] = memory.story.messages[-1]["swipes"][0] = QUESTION
    memory.story.save()
    last = len(memory.story.messages) - 1
    await memory.until(lambda db: db.messages(CHAT_ID)[last].message.mes == QUESTION)
    asked = len(searches)
    assert asked and any("brass" in query for _, query, *_ in searches)  # by the save alone
    # Neither a search nor its search terms on the request's way (the ranking is found by
    # the messages' fingerprints; the search alone is memoised by its question too).
    worked = spy(monkeypatch, recall, "search_terms")
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert len(searches) == asked and worked == []
    assert FACT in (await sent_memory(memory)).split("Earlier scenes", 1)[1]


def newest(memory: Memory, count: int) -> dict[str, Any]:
    """ST's request when its context holds only the chat's newest `count` messages."""
    body = memory.story.request()
    system = [m for m in body["messages"] if m["role"] == "system"]
    body["messages"] = [*system, *body["messages"][len(system) :][-count:]]
    return body


async def test_a_new_turn_encodes_none_of_its_memory_on_its_way(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory's text (scene recaps, message recaps, the running recap) is counted when
    the memory view that holds it is built, on the store's thread, as the memory's parts
    will hold it: a request finds every piece counted, though ST cut more of the chat."""
    memory = await memory_proxy(50, {8, 17, 26})
    memory.story.messages[12]["mes"] += " " + FACT
    memory.story.messages[-1]["mes"] = memory.story.messages[-1]["swipes"][0] = QUESTION
    memory.story.save()
    await memory.until(lambda db: db.messages(CHAT_ID)[49].message.mes == QUESTION, settle=False)
    await memory.client.post("/v1/chat/completions", json=newest(memory, 16))
    await memory.until(recapped(3))
    await memory.until(lambda db: set(range(28, 42, 2)) <= recapped_positions(db))
    # The first request counts the templates' own text, which no view holds.
    await memory.client.post("/v1/chat/completions", json=newest(memory, 16))
    await memory.engine.settle()
    calls, _ = recorded(monkeypatch, memory.app[RUNTIME].injector.counter)
    # ST's context now holds the newest 8: the recaps of 34-41 (Ava's, at even positions)
    # go in for the first time.
    response = await memory.client.post("/v1/chat/completions", json=newest(memory, 8))
    assert int(response.headers[INJECTED_HEADER]) > 0
    text = await sent_memory(memory)
    assert "- #40: " in text.split("Recent events", 1)[1]
    assert FACT in text.split("Earlier scenes", 1)[1]
    assert calls == []
