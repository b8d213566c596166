"""The message recap as a job runs it: of the text the message holds when it is written,
and about that text."""

from __future__ import annotations

from tests.memory.story import CHAT_ID
from tests.memory_env import MemoryFactory, hold, start


async def test_message_edited_while_its_recap_is_in_flight(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        12,
        ends=set(),
        **{"memory.auto_scene_break": False, "memory.message_recap_batch_size": 6},
    )
    await hold(memory, "message_recap")
    memory.story.messages[4]["mes"] = "Ava lights a fire in the cave and tells Tom to sleep now."
    memory.story.save()
    await memory.until(lambda db: "fire" in db.messages(CHAT_ID)[4].message.mes, settle=False)
    memory.fake.state.release.set()
    await memory.until(
        lambda db: any("fire" in r.recap for r in db.memory.message_recaps(CHAT_ID).values())
    )
    recaps = await memory.run(lambda db: db.memory.message_recaps(CHAT_ID))
    by_position = await memory.run(
        lambda db: {db.memory.position_of(uid): r.recap for (uid, _), r in recaps.items()}
    )
    assert by_position[4].startswith("#4: Ava lights a fire")  # never the old text's recap
    assert memory.fake.state.operations.count("message_recap") == 2  # redone once


async def test_recaps_about_something_else_are_not_kept(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        16, ends={8}, **{"memory.message_recaps": "always", "queue.max_attempts": 1}
    )
    memory.fake.state.faults = {
        "scene_recap": ["unrelated"] * 5,
        "message_recap": ["unrelated"] * 20,
    }
    await start(memory)
    await memory.engine.settle()
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert await memory.run(lambda db: db.memory.scene_recaps(scene.uid)) == []
    failed = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    errors = {j.operation: j.error or "" for j in failed}
    assert "shares no word" in errors["scene_recap"]
    assert "no recap shares a word with its message" in errors["message_recap"]
