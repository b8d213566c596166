"""`/recap/api/chats/{id}/...` for the memory, and the queue controls."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tests.memory.st_wire import claude, text_prompt
from tests.memory.story import CHAT_ID, SYSTEM, USER
from tests.memory_env import MemoryFactory

BASE = f"/recap/api/chats/{quote(CHAT_ID)}"


async def get(memory: Any, path: str) -> Any:
    response = await memory.client.get(BASE + path)
    assert response.status == 200, await response.text()
    return await response.json()


async def test_manual_break_is_recapped_named_and_folded(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends=set(), **{"memory.auto_scene_break": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    response = await memory.client.put(BASE + "/messages/5/scene_break", json={})
    assert response.status == 200
    await memory.engine.settle()

    [scene] = await get(memory, "/scenes")
    assert scene["index"] == 5 and scene["source"] == "manual" and scene["first"] == 0
    assert scene["recap"].startswith("6 messages") and scene["name"].endswith(" 0-5")
    [running] = await get(memory, "/running")
    assert running["new_scene_index"] == 5 and running["prev_scene_index"] is None
    assert running["current"] and running["scene_count"] == 1

    # Rename: kept when the scene is recapped again.
    await memory.client.patch(BASE + "/scenes/5", json={"name": "The mill"})
    await memory.client.post(BASE + "/scenes/5/regenerate", json={})
    await memory.engine.settle()
    detail = await get(memory, "/scenes/5")
    assert detail["name"] == "The mill" and len(detail["versions"]) == 2
    assert detail["current_version"] == 2
    # A new scene recap version is folded in again: the running recap follows it.
    versions = await get(memory, "/running")
    assert [v["new_scene_index"] for v in versions] == [5]

    # Editing the scene recap creates a version and re-folds the running recap from it.
    await memory.client.post(BASE + "/scenes/5/recaps", json={"recap": "They met at the mill."})
    await memory.engine.settle()
    [running] = await get(memory, "/running")
    assert "They met at the mill." in running["content"]
    detail = await get(memory, "/scenes/5")
    assert detail["versions"][-1]["source"] == "edit" and detail["current_version"] == 3

    # Removing the break drops the running recap that depended on it.
    response = await memory.client.delete(BASE + "/messages/5/scene_break", json={})
    assert response.status == 200
    await memory.engine.settle()
    assert await get(memory, "/scenes") == []
    assert await get(memory, "/running") == []


async def test_running_recap_versions_edit_select_regenerate(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    response = await memory.client.post(BASE + "/running", json={"content": "My own recap."})
    assert (await response.json()) == {"version": 2}
    versions = await get(memory, "/running")
    assert [(v["version"], v["current"], v["source"]) for v in versions] == [
        (1, False, "llm"),
        (2, True, "edit"),
    ]
    assert versions[1]["new_scene_index"] == 8  # an edit keeps the scene indexes
    preview = await get(memory, "/preview")
    assert "My own recap." in preview["injected"]["text"]
    assert preview["left_out"] == list(range(9))
    # Each part with its place: the running recap before the main prompt (the stable part;
    # no message recaps or older scenes here, so no changing part).
    [stable] = preview["parts"]
    assert stable["part"] == "stable" and stable["index"] == 0
    assert stable["placement"] == {"position": "before_prompt", "depth": 2, "role": "system"}
    assert "My own recap." in stable["text"] and stable["tokens"] == preview["budget"]["memory"]

    await memory.client.put(BASE + "/running/current", json={"version": 1})
    preview = await get(memory, "/preview")
    assert "My own recap." not in preview["injected"]["text"]

    await memory.client.post(BASE + "/running/regenerate", json={})
    await memory.engine.settle()
    versions = await get(memory, "/running")
    assert [v["version"] for v in versions] == [1, 2, 3] and versions[2]["current"]

    # The same for a client body: the body as it would go upstream.
    body = memory.story.request()
    shown = await memory.client.post("/recap/api/preview", json=body)
    outgoing = await shown.json()
    assert outgoing["chat"] == CHAT_ID and outgoing["left_out"] == list(range(2, 11))
    sent = outgoing["body"]["messages"]
    assert sent[0]["content"] == outgoing["injected"]["text"]
    assert len(sent) == len(body["messages"]) + 1 - 9
    assert memory.fake.state.operations.count("running_recap") == 2  # a preview calls nothing
    # Over the other connections ST has: Claude's Messages API, a text completion.
    story = memory.story
    for other in (
        claude(body["messages"], False),
        text_prompt(SYSTEM, story.messages, template="llama3", user=USER, char=story.char),
    ):
        outgoing = await (await memory.client.post("/recap/api/preview", json=other)).json()
        assert outgoing["chat"] == CHAT_ID and outgoing["left_out"]
        sent = outgoing["body"]
        texts = [sent.get("system", ""), sent.get("prompt", "")]
        texts += [m["content"] for m in sent.get("messages", ())]
        assert outgoing["injected"]["text"] in "\n".join(texts)

    bad = await memory.client.put(BASE + "/running/current", json={"version": 9})
    assert bad.status == 404 and (await bad.json())["error"]["code"] == "not_found"
    bad = await memory.client.put(BASE + "/running/current", json={"version": "2"})
    assert bad.status == 400


async def test_a_running_recap_you_wrote_stays_when_an_older_scene_changes(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(30, ends={8, 17})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    assert [v["new_scene_index"] for v in await get(memory, "/running")] == [8, 17]
    # Without a version of yours after it, a changed scene is folded in again.
    answer = await memory.client.post(BASE + "/scenes/8/recaps", json={"recap": "At the mill."})
    assert (await answer.json())["folded_in_again"] is True
    await memory.engine.settle()
    versions = await get(memory, "/running")
    assert [v["new_scene_index"] for v in versions] == [8, 17]
    assert "At the mill." in versions[0]["content"]
    folds = memory.fake.state.operations.count("running_recap")

    # You write the running recap; then an older scene changes (an edit, a version
    # picked). Your version used to go with the LLM's, and the fold was redone over it.
    await memory.client.post(BASE + "/running", json={"content": "My own recap."})
    before = await get(memory, "/running")
    answer = await memory.client.post(BASE + "/scenes/8/recaps", json={"recap": "At the ford."})
    assert answer.status == 200 and (await answer.json())["folded_in_again"] is False
    picked = await memory.client.patch(BASE + "/scenes/8", json={"current_version": 1})
    assert (await picked.json())["folded_in_again"] is False
    await memory.engine.settle()
    assert await get(memory, "/running") == before  # every version stays, yours current
    assert before[-1]["source"] == "edit" and before[-1]["current"]
    assert memory.fake.state.operations.count("running_recap") == folds  # no call made
    assert "My own recap." in (await get(memory, "/preview"))["injected"]["text"]


async def test_the_scenes_after_an_old_version_you_wrote_are_folded_again_onto_it(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(40, ends={8, 17, 26})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    assert [v["new_scene_index"] for v in await get(memory, "/running")] == [8, 17, 26]
    # You once rewrote the running recap as it stood after scene 17 (version 4).
    await memory.client.put(BASE + "/running/current", json={"version": 2})
    await memory.client.post(BASE + "/running", json={"content": "My recap up to 17."})
    await memory.client.put(BASE + "/running/current", json={"version": 3})
    # Scene 8 changes: your version stays; only scene 26's, after it, is folded again,
    # onto yours.
    answer = await memory.client.post(BASE + "/scenes/8/recaps", json={"recap": "At the mill."})
    assert (await answer.json())["folded_in_again"] is False
    await memory.engine.settle()
    versions = {v["version"]: v for v in await get(memory, "/running")}
    assert sorted(versions) == [1, 2, 4, 5]
    assert versions[4]["source"] == "edit" and versions[4]["new_scene_index"] == 17
    newest = versions[5]
    assert newest["current"] and newest["new_scene_index"] == 26
    assert newest["prev_scene_index"] == 17 and "My recap up to 17." in newest["content"]


async def test_message_recaps_edit_exclude_and_memory_off(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        16, ends=set(), **{"memory.auto_scene_break": False, "memory.message_recap_batch_size": 1}
    )
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    recaps = await get(memory, "/recaps")
    assert [r["index"] for r in recaps] == [0, 2, 4, 6, 8, 10, 12, 14]  # Ava's only
    # No running recap yet: each of them is one the memory may carry.
    assert all(r["can_be_injected"] for r in recaps)

    await memory.client.put(BASE + "/messages/4/recap", json={"recap": "Ava found the cave."})
    await memory.client.put(BASE + "/messages/6/excluded", json={"excluded": True})
    recaps = {r["index"]: r for r in await get(memory, "/recaps")}
    assert recaps[4]["edited"] and recaps[4]["recap"] == "Ava found the cave."
    assert recaps[6]["excluded"]

    off = await memory.client.put(BASE + "/memory", json={"enabled": False})
    assert (await off.json())["enabled"] is False
    response = await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert response.headers["X-Recap-Injected"] == "0"
    on = await memory.client.put(BASE + "/memory", json={"enabled": None})
    assert (await on.json())["enabled"] is None


async def test_queue_controls(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8})
    paused = await memory.client.post("/recap/api/queue/pause", json={})
    assert (await paused.json()) == {"paused": True}
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.plan_now(CHAT_ID)
    listing = await (await memory.client.get("/recap/api/queue")).json()
    assert listing["paused"] is True
    queued = [j for j in listing["jobs"] if j["state"] == "queued"]
    assert {j["operation"] for j in queued} >= {"detect_scene_break"}
    assert memory.fake.state.operations == []

    # Clearing while paused removes exactly the queued jobs; nothing was called.
    cleared = await memory.client.post("/recap/api/queue/clear", json={})
    assert (await cleared.json())["cleared"] == len(queued)
    listing = await (await memory.client.get("/recap/api/queue")).json()
    assert listing["jobs"] == []

    await memory.client.post("/recap/api/queue/resume", json={})
    await memory.engine.plan_now(CHAT_ID)  # planning queues the work again
    await memory.engine.settle()
    assert memory.fake.state.operations[0] == "detect_scene_break"
    missing = await memory.client.post("/recap/api/queue/jobs/999/retry", json={})
    assert missing.status == 409


async def test_unknown_chat_and_message(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(4, ends=set())
    response = await memory.client.get("/recap/api/chats/nope/scenes")
    assert response.status == 404
    response = await memory.client.put(BASE + "/messages/99/scene_break", json={})
    assert response.status == 404 and "no message 99" in (await response.json())["error"]["message"]


async def test_regenerate_runs_a_job_that_had_failed(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    memory.fake.state.faults = {"scene_recap": ["status=400"]}
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    [failed] = await memory.engine.queue.jobs(states=("failed",))
    assert failed.operation == "scene_recap"
    response = await memory.client.post(BASE + "/scenes/8/regenerate", json={})
    assert (await response.json()) == {"job": failed.id}
    await memory.engine.settle()
    assert len((await get(memory, "/scenes/8"))["versions"]) == 1
    assert [v["new_scene_index"] for v in await get(memory, "/running")] == [8]
