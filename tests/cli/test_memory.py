"""The memory commands against a running server (in-process, on loopback)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from proxy.errors import RecapProxyError
from tests.memory.ops.test_scene_recap import with_entities
from tests.memory.story import CHAT_ID
from tests.memory_env import MemoryFactory, cli


async def test_regenerating_a_covered_message_says_why_it_cannot(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(30, ends={12}, **{"memory.llm.model": "fake-model"})
    assert await cli(memory, "backfill", CHAT_ID) == 0
    # It said "POST /recap/api/chats/<the chat id, percent-encoded>/messages/3/recap/
    # regenerate: nothing to message recap there".
    with pytest.raises(RecapProxyError) as caught:
        await cli(memory, "regenerate", CHAT_ID, "message", "3")
    assert str(caught.value) == (
        "message 3 is covered by the running recap (through message 12): a recap of it "
        "would never be used"
    )
    assert await cli(memory, "regenerate", CHAT_ID, "message", "15") == 0  # the open scene


async def test_queue_lists_the_work_not_done_and_the_newest_done_jobs(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(
        60, ends={12, 30, 45}, **{"memory.llm.model": "fake-model", "memory.scene_break_window": 10}
    )
    assert await cli(memory, "backfill", CHAT_ID) == 0
    await memory.engine.queue.pause()
    await memory.client.put(
        f"/recap/api/chats/{quote(CHAT_ID, safe='')}/messages/52/scene_break", json={}
    )
    capsys.readouterr()
    assert await cli(memory, "queue") == 0
    lines = capsys.readouterr().out.splitlines()
    done = [line for line in lines if line.split()[1] == "done"]
    assert lines[0] == "paused: True"
    assert " queued   scene_recap " in lines[1]  # the work not done first
    assert len(done) == 10 and lines[-1].startswith("(and ")
    hidden = int(lines[-1].split()[1])
    ids = [int(line.split()[0]) for line in done]
    assert ids == sorted(ids) and hidden > 0
    assert await cli(memory, "queue", "--all") == 0
    every = capsys.readouterr().out.splitlines()
    assert len([line for line in every if line.split()[1] == "done"]) == 10 + hidden
    assert not every[-1].startswith("(and ")
    # The server cuts the listing (the page asks it so too): the newest N done jobs.
    answer = await (await memory.client.get("/recap/api/queue?done=3")).json()
    shown = [j["id"] for j in answer["jobs"] if j["state"] == "done"]
    assert shown == ids[-3:] and answer["older_done"] == 10 + hidden - 3
    assert any(j["state"] == "queued" for j in answer["jobs"])
    whole = await (await memory.client.get("/recap/api/queue")).json()
    assert "older_done" not in whole and len(whole["jobs"]) > len(answer["jobs"])
    # A backfill's look: what is live, and every job after the one it started from.
    after = ids[-2]
    looked = await (await memory.client.get(f"/recap/api/queue?after={after}")).json()
    live = [j["id"] for j in whole["jobs"] if j["state"] in ("queued", "running")]
    newer = [j["id"] for j in whole["jobs"] if j["id"] > after]
    assert [j["id"] for j in looked["jobs"]] == sorted({*live, *newer})
    assert live and ids[-1] in newer and ids[0] not in newer
    both = await memory.client.get("/recap/api/queue?after=1&done=1")
    assert both.status == 400 and "not both" in (await both.json())["error"]["message"]


async def test_breaks_regenerate_queue_and_toggle(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(16, ends=set(), **{"memory.auto_scene_break": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert await cli(memory, "scene-break", CHAT_ID, "5") == 0
    await memory.engine.settle()
    assert await cli(memory, "regenerate", CHAT_ID, "scene", "5") == 0
    assert await cli(memory, "queue", "pause") == 0
    assert await cli(memory, "queue") == 0
    assert "paused: True" in capsys.readouterr().out
    assert await cli(memory, "queue", "resume") == 0
    await memory.engine.settle()
    assert await cli(memory, "memory", CHAT_ID, "--off") == 0
    assert "memory:  off" in capsys.readouterr().out
    assert await cli(memory, "scene-break", CHAT_ID, "5", "--remove") == 0
    with pytest.raises(RecapProxyError, match="no chat named"):
        await cli(memory, "memory", "Nobody")
    with pytest.raises(RecapProxyError, match="needs an index"):
        await cli(memory, "regenerate", CHAT_ID, "message")


async def test_a_short_chat_says_when_its_first_scene_check_comes(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = {"memory.minimum_scene_length": 10, "memory.scene_break_offset": 8,
             "memory.scene_break_every": 20, "memory.scene_break_window": 40}  # fmt: skip
    memory = await memory_proxy(8, ends=set(), **rules)
    assert await cli(memory, "memory", CHAT_ID, "--json") == 0
    assert '"scene_check_in": null' in capsys.readouterr().out  # not looked after yet
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    assert await cli(memory, "memory", CHAT_ID) == 0
    out = capsys.readouterr().out
    assert "memory:  default (on)\n" in out  # what the default comes to
    # The 37th message is the first a check may come with: 9 to open the scene, 20 to
    # choose from, 8 of context after them.
    assert (
        "open     messages #0-7, the open scene (recapped once a scene break ends it); "
        "next scene-break check after 29 more message(s)"
    ) in out
    assert await cli(memory, "memory", CHAT_ID, "--off") == 0
    out = capsys.readouterr().out
    assert "open     messages #0-7, the open scene" in out and "check" not in out
    assert "memory:  off\n" in out


async def test_a_chats_own_state_that_a_global_switch_overrules_says_so(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(8, ends=set(), **{"injection.use_global_toggle_state": True})
    assert await cli(memory, "memory", CHAT_ID, "--off") == 0
    out = capsys.readouterr().out
    assert "memory:  off (but on: [injection] enabled or use_global_toggle_state decide)" in out


async def test_the_cli_finds_a_chat_in_a_default_folder_by_its_characters_name(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(8, ends=set(), folder="default_Ava")
    assert await cli(memory, "memory", "Ava") == 0
    captured = capsys.readouterr()
    assert memory.story.chat_id in captured.out
    assert f"'Ava' is {memory.story.chat_id}" in captured.err
    file_name = memory.story.path.name
    assert await cli(memory, "memory", file_name) == 0  # with `.jsonl`
    assert await cli(memory, "memory", file_name.removesuffix(".jsonl")) == 0


async def test_memory_shows_a_failed_job_and_how_it_comes_back(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.message_recaps": False})
    memory.fake.state.faults = {"scene_recap": ["status=401"]}
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert await cli(memory, "memory", "Ava") == 0
    out = capsys.readouterr().out
    assert "queue:   0 queued, 0 running, 1 failed" in out
    assert "failed:  scene_recap (job " in out and "401" in out
    assert "failed_retry_minutes" in out


async def test_a_message_recap_is_cleared_and_its_reasoning_shown(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(16, ends=set(), **{"memory.message_recaps": "always"})
    memory.fake.state.thinking = "Tom only asks; nothing happens yet."
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    path = f"/recap/api/chats/{quote(CHAT_ID, safe='')}/recaps"
    listed = await (await memory.client.get(path)).json()
    assert listed and all(r["reasoning"] == "Tom only asks; nothing happens yet." for r in listed)
    index = listed[0]["index"]
    await memory.engine.queue.pause()  # so that the recap is not made again at once
    assert await cli(memory, "clear-recap", CHAT_ID, str(index)) == 0
    assert '"cleared": true' in capsys.readouterr().out
    after = await (await memory.client.get(path)).json()
    assert index not in [r["index"] for r in after]


async def test_the_open_scene_is_checked_now_when_asked(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scene that ended late in a chat is not looked for until `scene_break_every` more
    messages come; `scene-break CHAT --check` (the page's button) looks now."""
    memory = await memory_proxy(
        24,
        ends={20},
        **{
            "memory.message_recaps": False,
            "memory.scene_break_every": 30,
            "memory.llm.model": "fake-model",
        },
    )
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    assert await memory.run(lambda db: db.memory.breaks(CHAT_ID)) == []  # not due yet
    assert await cli(memory, "scene-break", CHAT_ID, "--check") == 0
    assert '"job": ' in capsys.readouterr().out
    await memory.engine.settle()
    [found] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert found.position == 20


async def test_entities_lists_who_the_memory_keeps(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await memory_proxy(16, ends={8}, build=with_entities,
                                **{"memory.llm.model": "fake-model"})  # fmt: skip
    assert await cli(memory, "backfill", CHAT_ID) == 0
    capsys.readouterr()
    assert await cli(memory, "entities", CHAT_ID) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Aldric (character)"
    assert lines[1].startswith("  - keeps the guild ledger  [scene #8 ")  # and its name
    assert lines[2].startswith("  - owes Tom a favour  [scene #8 ")
    assert lines[3] == "The Mill (character)"
    assert await cli(memory, "entities", CHAT_ID, "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in shown] == ["Aldric", "The Mill"]
    # Corrected from the command line.
    edit = ("--edit", "aldric", "--name", "Brother Aldric", "--alias", "Aldric", "--fact",
            "Keeps the guild ledger.")  # fmt: skip
    assert await cli(memory, "entities", CHAT_ID, *edit) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Brother Aldric (character; also Aldric)  [edited]",
        "  - Keeps the guild ledger.  [yours]",
    ]
    assert await cli(memory, "entities", CHAT_ID, "--merge", "The Mill", "--into", "Aldric") == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "Brother Aldric (character; also Aldric, The Mill)  [edited]"
    )
    assert await cli(memory, "entities", CHAT_ID, "--release", "Brother Aldric") == 0
    assert capsys.readouterr().out.splitlines()[0] == "Aldric (character; also The Mill)"
    assert await cli(memory, "entities", CHAT_ID, "--delete", "Aldric", "--json") == 0
    assert json.loads(capsys.readouterr().out)["deleted"] is True
    with pytest.raises(RecapProxyError, match="--merge needs --into"):
        await cli(memory, "entities", CHAT_ID, "--merge", "Aldric")
