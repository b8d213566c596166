"""A branch starts from its parent's memory up to the branch point, then goes its own way."""

from __future__ import annotations

import json
from urllib.parse import quote

from tests.memory.story import CHAR, CHAT_ID
from tests.memory_env import MemoryFactory
from tests.st_data import save_like_st

BRANCH_NAME = f"Branch #1 - {CHAR} - 2026-11-22@11h00m00s"
BRANCH_ID = f"default-user/chats/{CHAR}/{BRANCH_NAME}"


async def test_branch_inherits_then_diverges(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))

    # ST's "branch from here" on message 11: a new file with messages 0..11.
    header = {
        "user_name": "Tom",
        "character_name": CHAR,
        "chat_metadata": {"integrity": "branch-1", "main_chat": f"{CHAR} - 2026-11-22@10h00m00s"},
    }
    rows = [header, *memory.story.messages[:12]]
    path = memory.story.path.with_name(f"{BRANCH_NAME}.jsonl")
    save_like_st(path, "\n".join(json.dumps(r) for r in rows).encode() + b"\n")
    await memory.until(lambda db: db.chat(BRANCH_ID) is not None)
    response = await memory.client.post(f"/recap/api/chats/{quote(BRANCH_ID)}/backfill", json={})
    assert response.status == 200
    await memory.engine.settle()

    [scene] = await memory.run(lambda db: db.memory.breaks(BRANCH_ID))
    assert scene.position == 8 and scene.source == "inherited"
    [recap] = await memory.run(lambda db: db.memory.scene_recaps(scene.uid))
    assert recap.source == "inherited"
    [running] = await memory.run(lambda db: db.memory.running_recaps(BRANCH_ID))
    [parent] = await memory.run(lambda db: db.memory.running_recaps(CHAT_ID))
    assert running.content == parent.content and running.source == "inherited"
    assert running.new_scene_uid == scene.uid  # the branch's own message, not the parent's

    # Correcting the branch leaves the parent alone.
    edit = await memory.client.post(
        f"/recap/api/chats/{quote(BRANCH_ID)}/running", json={"content": "Only in the branch."}
    )
    assert edit.status == 200
    [parent_after] = await memory.run(lambda db: db.memory.running_recaps(CHAT_ID))
    assert parent_after == parent
    assert "inherited" not in {
        b.source for b in await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    }
