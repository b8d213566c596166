"""A branch starts from its parent's memory up to the branch point, then goes its own way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from proxy.core.entities import Mention
from proxy.core.entity_changes import Change
from proxy.store import Database
from tests.memory.story import CHAR, CHAT_ID, Story, line
from tests.memory_env import Memory, MemoryFactory
from tests.st_data import save_like_st

BRANCH_NAME = f"Branch #1 - {CHAR} - 2026-11-22@11h00m00s"
BRANCH_ID = f"default-user/chats/{CHAR}/{BRANCH_NAME}"
BRANCH_API = f"/recap/api/chats/{quote(BRANCH_ID, safe='')}"


EDITED = "Tom asks about the hidden ford, then waits."


async def parent_built(memory_proxy: MemoryFactory) -> Memory:
    """A 16-message story with a scene ending at 8, its memory built through a request."""
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    return memory


async def edit_in_branch(memory: Memory, rows: list[dict[str, Any]]) -> None:
    """The user edits message 3 in the branch; returns once the mirror has read it."""
    rows[3]["mes"] = rows[3]["swipes"][0] = EDITED
    save_branch(memory, rows)
    await memory.until(
        lambda db: db.memory.messages_from(BRANCH_ID)[3].message.mes == EDITED, settle=False
    )


def save_branch(memory: Memory, rows: list[dict[str, Any]]) -> None:
    """The branch's file, as ST writes it: `rows`, the parent's messages up to the point."""
    header = {
        "user_name": "Tom",
        "character_name": CHAR,
        "chat_metadata": {"integrity": "branch-1", "main_chat": f"{CHAR} - 2026-11-22@10h00m00s"},
    }
    path = memory.story.path.with_name(f"{BRANCH_NAME}.jsonl")
    save_like_st(path, "\n".join(json.dumps(r) for r in [header, *rows]).encode() + b"\n")


def request(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """ST's request for the next reply in a chat of `rows` (ending with the user's)."""
    history = [{"role": "user" if m["is_user"] else "assistant", "content": m["mes"]} for m in rows]
    start = {"role": "system", "content": "[Start a new Chat]"}
    return {"model": "fake-model", "messages": [start, *history]}


async def branched(memory: Memory, upto: int) -> list[dict[str, Any]]:
    """ST's "branch from here" on the user's message `upto` of a story whose memory is
    built, and the branch's first request; settled. Returns the branch's messages."""
    rows: list[dict[str, Any]] = json.loads(json.dumps(memory.story.messages[: upto + 1]))
    save_branch(memory, rows)
    await memory.until(lambda db: db.chat(BRANCH_ID) is not None)
    response = await memory.client.post("/v1/chat/completions", json=request(rows))
    assert response.status == 200
    assert unquote(response.headers["X-Recap-Chat"]) == BRANCH_ID
    await memory.engine.settle()
    return rows


def recap_count(db: Database, chat_id: str) -> int:
    """How many recap versions the chat's first scene has."""
    return len(db.memory.scene_recaps(db.memory.breaks(chat_id)[0].uid))


async def scene_recaps(memory: Memory, chat_id: str) -> dict[int, list[tuple[str, str]]]:
    """Each visible scene's recap versions, (source, recap), by the scene's last message."""

    def read(db: Database) -> dict[int, list[tuple[str, str]]]:
        return {
            b.position: [(r.source, r.recap) for r in db.memory.scene_recaps(b.uid)]
            for b in db.memory.breaks(chat_id)
            if b.visible
        }

    return await memory.run(read)


async def test_branch_inherits_then_diverges(memory_proxy: MemoryFactory) -> None:
    memory = await parent_built(memory_proxy)
    [theirs] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    aldric = Mention("Aldric", "character", (), ("keeps the guild ledger",))
    await memory.run(lambda db: db.entities.add(CHAT_ID, theirs.uid, theirs.current or 0, [aldric]))
    # The user wrote him in the parent: the branch keeps that too.
    written = Change("edit", "Aldric", name="Brother Aldric", type="character",
                     facts=("Keeps the ledger.",))  # fmt: skip
    await memory.run(lambda db: db.entities.change(CHAT_ID, written, 1.0))

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
    # The entities its recap listed come with it.
    assert await memory.run(lambda db: db.entities.listed(scene.uid, recap.version)) == [aldric]
    [mine] = await memory.run(lambda db: db.entities.registry(BRANCH_ID))
    assert mine.name == "Brother Aldric" and mine.edited
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


async def test_an_inherited_recap_is_made_again_when_the_branch_changes_its_scene(
    memory_proxy: MemoryFactory,
) -> None:
    """The parent's recap stands for the scene's messages as they were: once the branch
    edits one of them (or splits the scene), its recap is made again from the branch's."""
    memory = await parent_built(memory_proxy)
    rows = await branched(memory, 11)
    assert [s for s, _ in (await scene_recaps(memory, BRANCH_ID))[8]] == ["inherited"]

    # Unchanged, it stays as it came; a message of its scene edited in the branch, it goes.
    save_branch(memory, rows)
    await memory.engine.settle()
    assert [s for s, _ in (await scene_recaps(memory, BRANCH_ID))[8]] == ["inherited"]
    await edit_in_branch(memory, rows)
    await memory.until(lambda db: recap_count(db, BRANCH_ID) == 2)
    recaps = (await scene_recaps(memory, BRANCH_ID))[8]
    assert recaps[-1][0] == "llm" and recaps[-1][1].startswith("9 messages")
    assert [s for s, _ in (await scene_recaps(memory, CHAT_ID))[8]] == ["llm"]  # the parent's

    # A break set in the branch splits the scene: both parts get their own recap.
    response = await memory.client.put(f"{BRANCH_API}/messages/4/scene_break", json={})
    assert response.status == 200
    await memory.until(lambda db: len(db.memory.breaks(BRANCH_ID)) == 2)
    await memory.engine.settle()
    after = await scene_recaps(memory, BRANCH_ID)
    assert after[4][-1][1].startswith("5 messages") and after[8][-1][1].startswith("4 messages")


async def test_a_recap_you_wrote_stays_yours_in_the_branch(memory_proxy: MemoryFactory) -> None:
    memory = await parent_built(memory_proxy)
    parent_api = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"
    response = await memory.client.post(f"{parent_api}/scenes/8/recaps", json={"recap": "Mine."})
    assert response.status == 200
    rows = await branched(memory, 11)

    await edit_in_branch(memory, rows)
    await memory.engine.settle()
    assert (await scene_recaps(memory, BRANCH_ID))[8] == [("edit", "Mine.")]


async def test_a_running_recap_you_wrote_stays_yours_in_the_branch(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await parent_built(memory_proxy)
    parent_api = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"
    response = await memory.client.post(f"{parent_api}/running", json={"content": "My story."})
    assert response.status == 200
    rows = await branched(memory, 11)

    # The model's scene recap is made again for the edit; the version you wrote stands.
    await edit_in_branch(memory, rows)
    await memory.until(lambda db: recap_count(db, BRANCH_ID) == 2)
    versions = await memory.run(lambda db: db.memory.running_recaps(BRANCH_ID))
    assert ("edit", "My story.") in [(v.source, v.content) for v in versions]
    overview = await (await memory.client.get(f"{BRANCH_API}/memory")).json()
    assert overview["running_recap"]["content"] == "My story."


async def test_a_recap_out_of_date_in_the_parent_is_made_again_for_the_branch(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await parent_built(memory_proxy)
    # The parent's scene changed, and the branch is made before the parent's recap is
    # made again (its memory is off meanwhile).
    parent_api = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"
    response = await memory.client.put(f"{parent_api}/memory", json={"enabled": False})
    assert response.status == 200
    memory.story.messages[3]["mes"] = EDITED
    memory.story.messages[3]["swipes"] = [memory.story.messages[3]["mes"]]
    memory.story.save()
    await memory.until(lambda db: db.memory.messages_from(CHAT_ID)[3].message.mes == EDITED)
    assert [s for s, _ in (await scene_recaps(memory, CHAT_ID))[8]] == ["llm"]

    await branched(memory, 11)
    await memory.until(lambda db: recap_count(db, BRANCH_ID) == 2)
    assert (await scene_recaps(memory, BRANCH_ID))[8][-1][0] == "llm"


async def test_a_break_set_in_the_branch_before_it_was_used_stays_and_splits_the_scene(
    memory_proxy: MemoryFactory,
) -> None:
    """Corrections made on a branch before its first request are the user's: the
    parent's memory comes in around them, and the scene they split is recapped anew."""
    memory = await parent_built(memory_proxy)
    rows: list[dict[str, Any]] = json.loads(json.dumps(memory.story.messages[:12]))
    save_branch(memory, rows)
    await memory.until(lambda db: db.chat(BRANCH_ID) is not None)
    response = await memory.client.put(f"{BRANCH_API}/messages/4/scene_break", json={})
    assert response.status == 200

    response = await memory.client.post("/v1/chat/completions", json=request(rows))
    assert unquote(response.headers["X-Recap-Chat"]) == BRANCH_ID
    await memory.engine.settle()
    breaks = await memory.run(
        lambda db: [(b.position, b.source) for b in db.memory.breaks(BRANCH_ID)]
    )
    assert breaks == [(4, "manual"), (8, "inherited")]
    after = await scene_recaps(memory, BRANCH_ID)
    assert after[4][-1][1].startswith("5 messages") and after[8][-1][1].startswith("4 messages")


async def test_a_group_branch_before_st_1_15_starts_from_its_parents_memory(
    memory_proxy: MemoryFactory,
) -> None:
    """ST before 1.15 wrote a group chat without a header line: the branch's parent is named
    in the group's file (`past_metadata`), which ST writes before the branch's own file."""
    folder = "default-user/group chats"
    parent_id, branch_id = f"{folder}/main", f"{folder}/Branch #11 - 2026-11-22@11h00m00s"
    rows = [line(i, ends_scene=i == 8) for i in range(16)]

    def write_group(data: Path, **group: Any) -> None:
        group = {"id": "17", "name": "G", "members": [f"{CHAR}.png"], "chat_id": "main", **group}
        save_like_st(data / "default-user/groups/17.json", json.dumps(group).encode())

    def write_chat(data: Path, chat_id: str, rows: list[dict[str, Any]]) -> None:
        save_like_st(data / f"{chat_id}.jsonl", "\n".join(json.dumps(r) for r in rows).encode())

    def build(story: Story) -> None:
        write_group(story.path.parents[3], chats=["main"])
        write_chat(story.path.parents[3], parent_id, rows)

    memory = await memory_proxy(0, ends=set(), build=build, **{"memory.message_recaps": False})
    data = memory.story.path.parents[3]
    start = {"role": "system", "content": f"[Start a new group chat. Group members: {CHAR}]"}

    def group_request(rows: list[dict[str, Any]]) -> dict[str, Any]:
        history = [
            {"role": "user", "content": m["mes"]}
            if m["is_user"]
            else {"role": "assistant", "content": f"{m['name']}: {m['mes']}"}
            for m in rows
        ]
        return {"model": "fake-model", "messages": [start, *history]}

    await memory.client.post("/v1/chat/completions", json=group_request(rows))
    await memory.until(lambda db: db.memory.running_recaps(parent_id))

    branch = branch_id.removeprefix(f"{folder}/")
    write_group(data, chats=["main", branch], past_metadata={branch: {"main_chat": "main"}})
    write_chat(data, branch_id, rows[:12])
    await memory.until(lambda db: db.chat(branch_id) is not None)
    response = await memory.client.post("/v1/chat/completions", json=group_request(rows[:12]))
    assert unquote(response.headers["X-Recap-Chat"]) == branch_id
    await memory.engine.settle()

    [scene] = await memory.run(lambda db: db.memory.breaks(branch_id))
    assert scene.position == 8 and scene.source == "inherited"
    [recap] = await memory.run(lambda db: db.memory.scene_recaps(scene.uid))
    assert recap.source == "inherited"


async def test_a_branch_without_a_request_of_its_own_calls_with_its_parents_model(
    memory_proxy: MemoryFactory,
) -> None:
    """ST's requests of a branch made at the parent's newest message are the parent's too,
    so none tells the branch apart: the branch's work (a scene edited in it) uses the
    parent's key and model rather than waiting for a request of the branch's own."""
    memory = await parent_built(memory_proxy)
    rows: list[dict[str, Any]] = json.loads(json.dumps(memory.story.messages[:12]))
    save_branch(memory, rows)
    await memory.until(lambda db: db.chat(BRANCH_ID) is not None)
    response = await memory.client.post(f"{BRANCH_API}/backfill", json={})
    assert (await response.json())["waiting_for_model"] is False
    await memory.engine.settle()
    assert [s for s, _ in (await scene_recaps(memory, BRANCH_ID))[8]] == ["inherited"]

    calls = len(memory.fake.state.seen)
    await edit_in_branch(memory, rows)
    await memory.until(lambda db: recap_count(db, BRANCH_ID) == 2)
    recaps = (await scene_recaps(memory, BRANCH_ID))[8]
    assert recaps[-1][0] == "llm" and recaps[-1][1].startswith("9 messages")
    made = [json.loads(seen.body) for seen in memory.fake.state.seen[calls:]]
    assert made and {m["model"] for m in made} == {"fake-model"}  # the parent's request's


async def test_a_branchs_work_waiting_for_a_model_goes_on_with_its_parents_first_request(
    memory_proxy: MemoryFactory,
) -> None:
    """No request seen since start-up: the branch's backfill waits for a model, and the
    parent's first request brings it (the branch's jobs run then, not at their next try)."""
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    rows: list[dict[str, Any]] = json.loads(json.dumps(memory.story.messages[:12]))
    save_branch(memory, rows)
    await memory.until(lambda db: db.chat(BRANCH_ID) is not None)
    response = await memory.client.post(f"{BRANCH_API}/backfill", json={})
    assert (await response.json())["waiting_for_model"] is True
    await memory.until(lambda db: waiting(db) > 0, settle=False)

    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(BRANCH_ID), settle=False)
    assert await memory.run(waiting) == 0


def waiting(db: Database) -> int:
    """The branch's jobs waiting for a model."""
    return sum(j.waiting_for == "model" for j in db.jobs.list(BRANCH_ID))
