"""The user's hand on the entities, through the API: edit (kept as written until
released), delete, merge, release; the cards a request gets follow at once."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from proxy.core.entities import HEADING
from tests.memory.ops.test_scene_recap import with_entities
from tests.memory.story import Story
from tests.memory_env import Memory, MemoryFactory, start

API = "/recap/api/chats/{chat}/entities"


async def _ready(memory_proxy: MemoryFactory) -> Memory:
    memory = await memory_proxy(16, ends={8}, build=with_entities,
                                **{"memory.message_recaps": False,
                                   "memory.entities_context": 1})  # fmt: skip
    await start(memory)
    await memory.engine.settle()
    return memory


def _url(memory: Memory, tail: str = "") -> str:
    return API.format(chat=quote(memory.story.chat_id, safe="")) + tail


async def _sent(memory: Memory, last: str) -> str:
    story = memory.story
    story.messages[15]["mes"] = story.messages[15]["swipes"][0] = last
    story.save()
    response = await memory.client.post("/v1/chat/completions", json=story.request())
    assert response.status == 200
    return "\n".join(m["content"] for m in memory.forwarded()[-1]["messages"])


async def _call(memory: Memory, method: str, tail: str, status: int = 200, **body: Any) -> Any:
    response = await memory.client.request(
        method, _url(memory, tail), json=body if method != "GET" else None
    )
    answer = await response.json()
    assert response.status == status, answer
    return answer


async def test_an_edited_entity_is_kept_as_written_and_reaches_the_request(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await _ready(memory_proxy)
    one = await _call(memory, "GET", "/aldric")  # any case
    assert one["name"] == "Aldric" and not one["edited"]
    names: dict[str, Any] = {"name": "Brother Aldric", "aliases": ["Aldric", "the monk"]}
    edited = await _call(memory, "PATCH", "/Aldric", **names, facts=["Keeps the guild ledger."])
    assert edited["name"] == "Brother Aldric" and edited["edited"]
    assert [f["text"] for f in edited["facts"]] == ["Keeps the guild ledger."]
    assert [f["text"] for f in edited["scene_facts"]] == [
        "keeps the guild ledger",
        "owes Tom a favour",
    ]
    assert [v["kind"] for v in edited["versions"]] == ["edit"]
    card = "- Brother Aldric (character; also Aldric, the monk): Keeps the guild ledger."
    assert f"{HEADING}\n{card}\n" in await _sent(memory, "Tom asks the monk for the book.")
    # Released: what the scenes say again.
    released = await _call(memory, "POST", "/the%20monk/release")
    assert released["name"] == "Aldric" and not released["edited"]
    assert "owes Tom a favour" in await _sent(memory, "Tom asks Aldric for the book.")


async def test_delete_merge_and_their_errors(memory_proxy: MemoryFactory) -> None:
    memory = await _ready(memory_proxy)
    gone = await _call(memory, "DELETE", "/The%20Mill")
    assert gone["deleted"]
    assert "The Mill (" not in await _sent(memory, "Tom asks whether the mill burned.")
    chat = quote(memory.story.chat_id, safe="")
    book = await (await memory.client.get(f"/recap/api/chats/{chat}/export?format=st-world")).json()
    keys = [e["key"] for e in book["entries"].values()]
    assert ["Aldric"] in keys and ["The Mill"] not in keys  # a deleted one is not exported
    assert (await _call(memory, "POST", "/the%20mill/release"))["deleted"] is False
    merged = await _call(memory, "POST", "/The%20Mill/merge", into="aldric")
    assert merged["name"] == "Aldric" and "The Mill" in merged["aliases"]
    assert [e["name"] for e in await _call(memory, "GET", "")] == ["Aldric"]
    # Named by the merged-away name, the card is the one entity's.
    assert "- Aldric (character; also The Mill)" in await _sent(memory, "The mill stands.")
    # What the API refuses, and says why.
    nobody = await _call(memory, "GET", "/Nobody", status=404)
    assert "no entity 'Nobody'" in nobody["error"]["message"]
    same = await _call(memory, "POST", "/mill/merge", status=404, into="Aldric")
    assert "no entity 'mill'" in same["error"]["message"]
    again = await _call(memory, "POST", "/The%20Mill/merge", status=409, into="Aldric")
    assert "one entity already" in again["error"]["message"]
    kind = await _call(memory, "PATCH", "/Aldric", status=400, type="wizard")
    assert "`type` must be one of character" in kind["error"]["message"]
    whole = await _call(memory, "PUT", "/Aldric", status=400, facts=["x"])
    assert "give name, type, aliases too" in whole["error"]["message"]
    blank = await _call(memory, "PATCH", "/Aldric", status=400, facts=[" "])
    assert "1 to 400 characters" in blank["error"]["message"]


async def test_st_auto_recaps_auto_lorebook_entities_are_taken_over(
    memory_proxy: MemoryFactory,
) -> None:
    book = {
        "entries": {
            "0": {"uid": 0, "comment": "_registry_character", "key": [], "content":
                  "[Registry: character]\n- UID=1 | name: character-Marcus | aliases: the "
                  "smith | synopsis: the blacksmith"},
            "1": {"uid": 1, "comment": "character-Marcus", "key": ["Marcus"],
                  "content": "Is the village blacksmith.\nOwes Ava money."},
        }
    }  # fmt: skip

    def story(s: Story) -> None:
        with_entities(s)
        worlds = s.path.parents[3] / "default-user" / "worlds"
        worlds.mkdir(parents=True)
        (worlds / "z-AutoLB-Ava.json").write_text(json.dumps(book), encoding="utf-8")
        s.metadata["world_info"] = "z-AutoLB-Ava"
        s.save()

    memory = await memory_proxy(16, ends={8}, build=story,
                                **{"memory.message_recaps": False,
                                   "memory.entities_context": 1})  # fmt: skip
    await start(memory)
    await memory.engine.settle()
    marcus = await _call(memory, "GET", "/the%20smith")
    assert marcus["name"] == "Marcus" and marcus["aliases"] == ["the smith"]
    assert [(f["text"], f["source"], f["scene"]) for f in marcus["facts"]] == [
        ("Is the village blacksmith.", "imported", None),
        ("Owes Ava money.", "imported", None),
    ]
    assert [v["kind"] for v in marcus["versions"]] == ["import"]
    card = "- Marcus (character; also the smith): Is the village blacksmith; Owes Ava money."
    assert card in await _sent(memory, "Tom asks the smith for nails.")
    # Planned again with the book unchanged: not imported twice.
    await memory.engine.plan_now(memory.story.chat_id)
    assert len((await _call(memory, "GET", "/Marcus"))["versions"]) == 1
