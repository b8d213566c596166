"""Scene recaps see the lorebook entries that were active in the scene's messages."""

from __future__ import annotations

import json
from functools import partial

from proxy.store import Database
from tests.lore_data import entry, write_card, write_world
from tests.memory.story import CHAT_ID
from tests.memory_env import MemoryFactory

BRIDGE = "The Ashen Bridge spans the northern gorge; only rangers may cross it."


def has_messages(db: Database, count: int) -> bool:
    return len(db.messages(CHAT_ID)) == count


async def test_scene_recap_prompt_carries_the_active_lore(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(6, ends={8}, **{"memory.message_recaps": False})
    user = memory.story.path.parents[2]  # data/default-user
    write_world(user, "Woods", {"1": entry(1, BRIDGE, key=["bridge"], comment="Ashen Bridge")})
    write_card(user, "Ava", "Ava", "Woods")
    while len(memory.story.messages) < 16:
        response = await memory.client.post(
            "/v1/chat/completions", json=memory.story.request(lore=BRIDGE)
        )
        assert response.status == 200
        memory.story.grow(2)
        count = len(memory.story.messages)
        await memory.until(partial(has_messages, count=count))
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))

    prompts = [
        json.loads(seen.body)["messages"][0]["content"]
        for seen in memory.fake.state.seen
        if seen.headers.get("X-Recap-Proxy-Operation") == "scene_recap"
    ]
    assert len(prompts) == 1
    lore = prompts[0].split("<ACTIVE_LORE>")[1].split("</ACTIVE_LORE>")[0]
    assert lore.strip() == f"- Ashen Bridge: {BRIDGE}"
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    [recap] = await memory.run(lambda db: db.memory.scene_recaps(scene.uid))
    assert "(lore: - Ashen Bridge" in recap.recap
