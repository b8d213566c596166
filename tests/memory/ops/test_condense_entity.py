"""Condensing an entity whose facts passed `entity_max_tokens`: a change kept beside the
scenes' facts, never the prompt coming back, never the user's own entity."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tests.memory.story import CHAT_ID, Story
from tests.memory_env import Memory, MemoryFactory, hold, start

FACTS = [
    "keeps the guild ledger in a locked iron chest under the chapel floor",
    "owes Tom a favour since the night of the flooded ferry crossing",
    "was exiled from the guild after the audit found the missing silver",
    "came back to the village wearing a grey friar's hood and a new name",
    "is alive and hiding in the ruined mill beyond the northern ford",
]


def aldric_story(story: Story) -> None:
    story.grow(16)
    for i, fact in enumerate(FACTS):
        story.messages[i + 1]["mes"] += f" [[Aldric: {fact}]]"
    for message in story.messages:
        message["swipes"] = [message["mes"]]
    story.save()


async def _memory(memory_proxy: MemoryFactory, **dotted: Any) -> Memory:
    settings = {"memory.message_recaps": False, "memory.entity_max_tokens": 60, **dotted}
    return await memory_proxy(16, ends={8}, build=aldric_story, **settings)


async def _aldric(memory: Memory) -> Any:
    url = f"/recap/api/chats/{quote(CHAT_ID, safe='')}/entities/Aldric"
    return await (await memory.client.get(url)).json()


async def test_an_entity_over_its_budget_is_condensed_to_what_is_current(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await _memory(memory_proxy)
    await start(memory)
    await memory.engine.settle()
    assert memory.fake.state.operations.count("condense_entity") == 1
    aldric = await _aldric(memory)
    assert aldric["condensed"] is not None
    shown = [f["text"] for f in aldric["facts"]]
    assert shown and shown[-1] == FACTS[-1]  # the newest: what is true now
    assert len(shown) < len(FACTS) and {f["source"] for f in aldric["facts"]} == {"condensed"}
    assert [f["text"] for f in aldric["scene_facts"]] == FACTS  # the scenes' stay
    assert [v["kind"] for v in aldric["versions"]] == ["condense"]
    # The request that names him carries the condensed card.
    story = memory.story
    story.messages[15]["mes"] = story.messages[15]["swipes"][0] = "Where is Aldric?"
    story.save()
    await memory.client.post("/v1/chat/completions", json=story.request())
    sent = "\n".join(m["content"] for m in memory.forwarded()[-1]["messages"])
    assert FACTS[-1] in sent and FACTS[0] not in sent


async def test_an_answer_that_is_not_real_never_replaces_the_facts(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await _memory(memory_proxy, **{"queue.max_attempts": 1})
    memory.fake.state.faults = {"condense_entity": ["placeholders", "garbage"]}
    await start(memory)
    await memory.engine.settle()
    aldric = await _aldric(memory)
    assert aldric["condensed"] is None and [f["text"] for f in aldric["facts"]] == FACTS
    failed = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert [j.operation for j in failed] == ["condense_entity"]
    assert "condense_entity" in (failed[0].error or "")


async def test_an_entity_the_user_wrote_meanwhile_is_never_condensed(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await _memory(memory_proxy)
    await hold(memory, "condense_entity")
    url = f"/recap/api/chats/{quote(CHAT_ID, safe='')}/entities/Aldric"
    edited = await memory.client.patch(url, json={"facts": FACTS})
    assert edited.status == 200
    memory.fake.state.release.set()
    await memory.engine.settle()
    # The answer came for facts the user has since written: not kept, and no new call.
    assert memory.fake.state.operations.count("condense_entity") == 1
    aldric = await _aldric(memory)
    assert aldric["edited"] and aldric["condensed"] is None
    assert [f["text"] for f in aldric["facts"]] == FACTS
