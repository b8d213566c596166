"""The scene recap as a job runs it: written for the scene as it stands, never kept when
its scene changed meanwhile or the answer holds the prompt's placeholders."""

from __future__ import annotations

import json
from urllib.parse import quote

from proxy.core.entities import HEADING, Mention
from tests.memory.story import CHAT_ID, Story
from tests.memory_env import MemoryFactory, hold, start


async def test_scene_end_deleted_while_its_recap_is_in_flight(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    await hold(memory, "scene_recap")
    del memory.story.messages[8]
    memory.story.save()
    await memory.until(lambda db: len(db.messages(CHAT_ID)) == 15, settle=False)
    memory.fake.state.release.set()
    await memory.engine.settle()
    # The break went with its message; the held recap was not applied anywhere.
    assert await memory.run(lambda db: db.memory.breaks(CHAT_ID)) == []
    assert await memory.run(lambda db: db.memory.running_recaps(CHAT_ID)) == []
    jobs = await memory.engine.queue.jobs()
    assert {j.operation: j.state for j in jobs}["scene_recap"] == "dropped"


async def test_a_model_that_fills_in_the_placeholders_never_becomes_memory(
    memory_proxy: MemoryFactory,
) -> None:
    """Forced into JSON, a small model answered `{"scene_name": "<short title>", "recap":
    "<recap>"}` and `{"recap": "<the whole new running recap>"}`: stored, the running
    recap "covered" the chat's past and trimming left it out for a placeholder. Now no
    such answer is kept, the chat keeps its whole history, and the queue says why."""
    memory = await memory_proxy(
        30, ends={8, 17}, **{"memory.message_recaps": False, "queue.max_attempts": 1}
    )
    memory.fake.state.faults = {"scene_recap": ["placeholders"] * 20}
    await start(memory)
    await memory.engine.settle()
    breaks = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert [b.position for b in breaks] == [8, 17]  # detection answered well
    uids = [b.uid for b in breaks]
    recaps = await memory.run(lambda db: [db.memory.scene_recaps(uid) for uid in uids])
    assert recaps == [[], []]
    assert await memory.run(lambda db: db.memory.running_recaps(CHAT_ID)) == []
    failed = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert failed and all("placeholders in as they stand" in (j.error or "") for j in failed)
    sent = memory.story.request()
    response = await memory.client.post("/v1/chat/completions", json=sent)
    assert response.headers.get("X-Recap-Trimmed", "0") == "0"
    went = memory.forwarded()[-1]["messages"]
    for message in sent["messages"]:
        assert message in went  # every message of the chat went upstream


async def test_editing_a_recapped_scene_recaps_and_folds_it_again(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    memory.story.messages[0]["mes"] = (
        "Ava meets Tom at the burned bridge and they argue about the map."
    )
    memory.story.save()
    await memory.until(
        lambda db: len(db.memory.scene_recaps(db.memory.breaks(CHAT_ID)[0].uid)) == 2
    )
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    versions = await memory.run(lambda db: db.memory.scene_recaps(scene.uid))
    assert "at the burned" in versions[-1].recap and scene.current == 2
    [running] = await memory.run(lambda db: db.memory.running_recaps(CHAT_ID))
    assert "at the burned" in running.content  # the old version went; the new one is folded in


def with_entities(story: Story) -> None:
    story.grow(16)
    story.messages[2]["mes"] += " [[Aldric: keeps the guild ledger]]"
    story.messages[6]["mes"] += " [[Aldric: owes Tom a favour]] [[The Mill: burned down]]"
    story.messages[12]["mes"] += " [[Aldric: was exiled]]"  # after the scene: not in it
    for message in story.messages:
        message["swipes"] = [message["mes"]]
    story.save()


async def test_a_scene_recaps_entities_are_kept_with_its_version(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(16, ends={8}, build=with_entities,
                                **{"memory.message_recaps": False})  # fmt: skip
    await start(memory)
    await memory.engine.settle()
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    listed = await memory.run(lambda db: db.entities.listed(scene.uid, scene.current or 0))
    assert listed == [
        Mention("Aldric", "character", (), ("keeps the guild ledger", "owes Tom a favour")),
        Mention("The Mill", "character", (), ("burned down",)),
    ]
    # As the API shows them: each fact with the scene that established it.
    api = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"
    shown = await (await memory.client.get(f"{api}/entities")).json()
    told = {"source": "scene", "scene": 8, "scene_name": scene.name}
    assert shown[0] == {
        "id": "Aldric",
        "name": "Aldric",
        "known_as": ["aldric"],
        "type": "character",
        "aliases": [],
        "facts": [
            {"text": "keeps the guild ledger", **told},
            {"text": "owes Tom a favour", **told},
        ],
        "edited": False,
        "deleted": False,
        "condensed": None,
        "versions": [],
    }
    assert [e["name"] for e in shown] == ["Aldric", "The Mill"]
    missing = await memory.client.get("/recap/api/chats/nobody%2Fchats%2Fx/entities")
    assert missing.status == 404


async def test_an_answers_made_up_or_placeholder_entities_are_left_out(
    memory_proxy: MemoryFactory,
) -> None:
    """The recap stands; only entities the scene names, with no placeholder of the
    prompt's in them, are kept."""
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    entities = [
        {"name": "<name>", "type": "character", "aliases": [], "facts": ["<fact>"]},
        {"name": "Zebulon", "type": "character", "aliases": [], "facts": ["a stranger"]},
        {"name": "tom", "type": "character", "aliases": [], "facts": ["asks about the mill"]},
        {"name": "Ava", "type": "character", "aliases": [], "facts": ["<fact>"]},
    ]
    answer = {"scene_name": "Walks", "recap": "Ava walks with Tom toward the old mill and the "
              "river ford, telling of the lanterns.", "entities": entities}  # fmt: skip
    memory.fake.state.faults = {"scene_recap": ["answer=" + json.dumps(answer)]}
    await start(memory)
    await memory.engine.settle()
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert scene.current == 1
    listed = await memory.run(lambda db: db.entities.listed(scene.uid, 1))
    assert listed == [Mention("tom", "character", (), ("asks about the mill",))]


async def test_a_request_that_names_an_entity_carries_its_card(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(16, ends={8}, build=with_entities,
                                **{"memory.message_recaps": False,
                                   "memory.entities_context": 1})  # fmt: skip
    await start(memory)
    await memory.engine.settle()
    card = "- Aldric (character): keeps the guild ledger; owes Tom a favour."
    story = memory.story

    async def sent(last: str) -> str:
        story.messages[15]["mes"] = story.messages[15]["swipes"][0] = last
        story.save()
        response = await memory.client.post("/v1/chat/completions", json=story.request())
        assert response.status == 200
        return "\n".join(m["content"] for m in memory.forwarded()[-1]["messages"])

    named = await sent("Tom asks where ALDRIC went.")
    assert f"{HEADING}\n{card}\n" in named and "The Mill (" not in named
    # Both named: the one named last first.
    both = await sent("Tom asks whether Aldric saw the mill burn.")
    assert f"{HEADING}\n- The Mill (character): burned down.\n{card}\n" in both
    unnamed = await sent("Tom asks about the weather.")
    assert "Aldric (" not in unnamed and HEADING not in unnamed
