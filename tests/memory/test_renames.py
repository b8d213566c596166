"""A chat renamed in ST keeps its memory and its upkeep goes on under the new name."""

from __future__ import annotations

import asyncio

from tests.memory.story import CHAR, CHAT_ID
from tests.memory_env import MemoryFactory

NEW_ID = f"default-user/chats/{CHAR}/{CHAR} - the long road"


async def test_a_renamed_chat_goes_on_with_the_model_of_its_requests(
    memory_proxy: MemoryFactory,
) -> None:
    """The key and model of the chat's requests (kept in memory only) follow the rename:
    what the chat gains afterwards is recapped without waiting for a request under the
    new name."""
    memory = await memory_proxy(12, ends={8}, **{"memory.message_recaps": False})
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.status == 200
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))

    new_path = memory.story.path.with_name(f"{CHAR} - the long road.jsonl")
    memory.story.path.rename(new_path)
    await memory.until(lambda db: db.chat(NEW_ID) is not None)
    memory.story.path = new_path
    memory.story.ends.add(16)
    memory.story.grow(8)  # a second scene ends, and nothing is asked under the new name

    await memory.until(lambda db: len(db.memory.running_recaps(NEW_ID)) >= 2, settle=False)
    await asyncio.wait_for(memory.engine.settle(), 10)
    scenes = await memory.run(lambda db: [b.position for b in db.memory.breaks(NEW_ID)])
    assert scenes == [8, 16]
    assert not await memory.run(lambda db: db.memory.breaks(CHAT_ID))
