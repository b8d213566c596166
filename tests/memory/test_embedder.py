"""Recall by meaning end to end: scene recaps embedded in the background, the user's
question embedded when ST saves it, and a paraphrase that shares no word with its scene
brought back; a failing embeddings API leaves recall on words, said in `/health`."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.core.entities import HEADING as CARDS
from proxy.core.recall import HEADING
from tests.conftest import FakeLLM
from tests.memory.story import CHAT_ID, Story
from tests.memory_env import Memory, MemoryFactory, start

KEY = "Ava hid the silver key under the third stone of the Old Mill."
LEDGER = "Brother Aldric was exiled after he stole the guild ledger in Thornwick."


def facts(story: Story) -> None:
    story.grow(30)
    story.messages[4]["mes"] += " " + KEY
    story.messages[12]["mes"] += " " + LEDGER + " [[Brother Aldric: stole the guild ledger]]"
    for message in story.messages:
        message["swipes"] = [message["mes"]]
    story.save()


async def _memory(memory_proxy: MemoryFactory, fake_llm: FakeLLM, **more: Any) -> Memory:
    settings = {"memory.message_recaps": False,
                "memory.embeddings.base_url": fake_llm.base_url, **more}  # fmt: skip
    memory = await memory_proxy(30, ends={8, 17}, build=facts, **settings)
    await start(memory)
    return memory


async def embedded(memory: Memory, scenes: int, entities: int = 1) -> None:
    """Until the chat's view holds the vectors of `scenes` scenes (and its entities)."""
    for _ in range(300):
        await memory.engine.settle()
        view = memory.engine.views.get(CHAT_ID)
        if view is not None and view.vectors is not None and len(view.vectors.uids) == scenes:
            cards = view.entity_vectors
            if len(cards.uids if cards is not None else ()) == entities:
                return
        await asyncio.sleep(0.02)
    raise AssertionError("the scenes were never embedded")


async def asked(memory: Memory, question: str) -> str:
    """The user's next message, saved as ST saves it, then its request: what went up of
    `{{relevant_scenes}}` (and after it: the running recap holds every scene anyway)."""
    story = memory.story
    story.messages[29]["mes"] = story.messages[29]["swipes"][0] = question
    story.save()
    response = await memory.client.post("/v1/chat/completions", json=story.request())
    assert response.status == 200
    sent = "\n".join(m["content"] for m in memory.forwarded()[-1]["messages"])
    return sent.split(HEADING, 1)[1] if HEADING in sent else ""


async def test_a_paraphrase_brings_back_its_scene_by_meaning(
    memory_proxy: MemoryFactory, fake_llm: FakeLLM
) -> None:
    memory = await _memory(memory_proxy, fake_llm, **{"memory.recall_wait_ms": 2000})
    await embedded(memory, 2, entities=1)
    # Words alone find nothing: no content word in common with either scene.
    sent = await asked(memory, "Where did we stash the opener?")
    assert "silver key" in sent and "guild ledger" not in sent
    sent = await asked(memory, "What happened to the friar who took the account book?")
    assert "guild ledger" in sent and "silver key" not in sent
    # Not named, but meant: his card comes too.
    whole = "\n".join(m["content"] for m in memory.forwarded()[-1]["messages"])
    assert f"{CARDS}\n- Brother Aldric (character): stole the guild ledger." in whole
    # Each scene embedded once; each question once (a swipe asks the same again).
    embeds = fake_llm.state.operations.count("embed")
    await asked(memory, "What happened to the friar who took the account book?")
    assert fake_llm.state.operations.count("embed") == embeds
    calls = await memory.run(
        lambda db: db.db.execute(
            "SELECT calls FROM usage WHERE chat_id=? AND operation='embed'", (CHAT_ID,)
        ).fetchone()[0]
    )
    assert calls == embeds  # counted in the chat's usage
    health = await (await memory.client.get("/health")).json()
    assert health["embeddings"]["state"] == "ok"
    assert health["embeddings"]["questions_ready"] == 3  # each request found its vector


async def test_without_its_vector_a_request_ranks_by_words_and_never_waits(
    memory_proxy: MemoryFactory, fake_llm: FakeLLM
) -> None:
    memory = await _memory(memory_proxy, fake_llm)  # recall_wait_ms = 0
    await embedded(memory, 2)
    fake_llm.state.faults = {"embed": ["hold"]}  # the question's call hangs
    try:
        assert await asked(memory, "Where did we stash the opener?") == ""  # by words: none
    finally:
        fake_llm.state.release.set()


async def test_a_failing_api_leaves_recall_on_words_and_says_so(
    memory_proxy: MemoryFactory, fake_llm: FakeLLM
) -> None:
    fake_llm.state.faults = {"embed": ["status=503"] * 50}
    memory = await _memory(memory_proxy, fake_llm)
    await memory.engine.settle()
    for _ in range(100):
        if memory.engine.embedder is not None and memory.engine.embedder.state != "ok":
            break
        await asyncio.sleep(0.02)
    health = await (await memory.client.get("/health")).json()
    assert health["embeddings"]["state"].startswith("failing: 503 from")
    assert any("embeddings" in p for p in health["problems"])
    queue = await (await memory.client.get("/recap/api/queue")).json()
    assert queue["embeddings"]["state"].startswith("failing") and queue["embeddings"]["waiting"]
    # The chat goes on, its request with its memory (no scene near by meaning).
    assert await asked(memory, "Where did we stash the opener?") == ""
    whole = "\n".join(m["content"] for m in memory.forwarded()[-1]["messages"])
    assert "The story so far" in whole
