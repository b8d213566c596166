"""What a job does with what it finds: a cut-off answer (`finish_reason: length`) is never
read as complete (it is asked for again once, with the limit doubled, at most `[memory.llm]
max_tokens_cap`: a model that rambles past that rambles past any), and input other than the
job was planned for is not read at all."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from proxy.core.operations import Operation
from proxy.memory.ops.handler import gone
from tests.memory.story import CHAT_ID, Story
from tests.memory_env import Memory, MemoryFactory
from tests.st_data import save_like_st

NO_RECAPS = {"memory.message_recaps": False}


def limits(memory: Memory, operation: str) -> list[int]:
    """The `max_tokens` of each call of one operation, in order."""
    return [
        json.loads(seen.body)["max_tokens"]
        for seen in memory.fake.state.seen
        if seen.headers.get("X-Recap-Proxy-Operation") == operation
    ]


async def test_a_cut_off_answer_is_asked_again_larger(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS, **{"memory.llm.max_tokens": 200})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    # The scene recap (about 250 words) does not fit 200 tokens: asked again with 400.
    assert limits(memory, "scene_recap") == [200, 400]
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    [recap] = await memory.run(lambda db: db.memory.scene_recaps(scene.uid))
    assert recap.recap.startswith("9 messages") and recap.recap.endswith(".")
    # Detection's short answer fits at once; the running recap starts with room for a
    # whole recap at its budget (1.5 x 1200 + 64), whatever `max_tokens` says.
    assert set(limits(memory, "detect_scene_break")) == {200}
    assert limits(memory, "running_recap")[0] == 1864
    jobs = await memory.run(lambda db: db.jobs.list(CHAT_ID))
    assert {j.state for j in jobs} == {"done"} and all(j.attempts == 1 for j in jobs)


async def test_a_second_cut_off_fails_the_job_at_once(memory_proxy: MemoryFactory) -> None:
    """A model that rambles (the fake's scene recap of 250 words against 40 tokens) gets
    one larger limit, not ever larger ones: each try costs a whole answer's generation."""
    memory = await memory_proxy(
        16, ends={8}, **NO_RECAPS, **{"memory.llm.max_tokens": 40, "queue.max_attempts": 1}
    )
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert limits(memory, "scene_recap") == [40, 80]
    [failed] = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert failed.error is not None and "cut off at 80 tokens" in failed.error
    assert "rambles on, or copies the prompt back" in failed.error
    assert await memory.run(lambda db: db.memory.running_recaps(CHAT_ID)) == []


async def test_still_cut_off_at_the_cap_fails_and_says_so(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(
        16,
        ends={8},
        **NO_RECAPS,
        **{
            "memory.llm.max_tokens": 60,
            "memory.llm.max_tokens_cap": 100,
            "memory.running_recap_max_tokens": 100,
            "queue.max_attempts": 1,
        },
    )
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert limits(memory, "scene_recap") == [60, 100]  # doubled, at most the cap
    [failed] = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert failed.operation == "scene_recap"
    assert failed.error == (
        "CutOff: scene_recap: the answer was cut off at 100 tokens (a model that rambles "
        "on, or copies the prompt back?)"
    )
    listed = await memory.client.get("/recap/api/queue")
    assert any(j["error"] == failed.error for j in (await listed.json())["jobs"])


@pytest.mark.parametrize(
    "operation", [Operation.DETECT_SCENE_BREAK, Operation.SCENE_RECAP, Operation.RUNNING_RECAP]
)
async def test_a_job_that_finds_other_input_than_it_was_made_for_keeps_nothing(
    memory_proxy: MemoryFactory, operation: Operation
) -> None:
    """A detection, a scene recap or a fold runs on the chat's memory as it is then. When
    that is not its input (the window's messages, the scene, or the recap it folds,
    changed while it waited, and may be as they were again once it ends), nothing it
    would write is kept: it runs again."""
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    jobs = await memory.run(lambda db: db.jobs.list(CHAT_ID))
    job = [j for j in jobs if j.operation == operation][-1]
    handler = memory.engine.handlers[operation]
    calls = len(limits(memory, operation))
    assert await handler.run(replace(job, input_hash="another input")) is gone
    assert len(limits(memory, operation)) == calls  # nothing asked of the model
    assert await handler.run(job) is not gone


async def test_the_memorys_prompts_see_the_story_as_the_chats_model_does(
    memory_proxy: MemoryFactory,
) -> None:
    """A status block cut by the user's ST regex script ("alter outgoing prompt") and an
    image tag cut by `[memory] strip_patterns` never reach a detection or recap prompt."""

    def build(story: Story) -> None:
        story.grow(16)
        for message in story.messages:
            if not message["is_user"]:
                message["mes"] += " <status>HP 7, mood grim</status> <img src='x.png'>"
        settings = {"extension_settings": {"regex": [{
            "scriptName": "status", "findRegex": "/<status>[\\s\\S]*?<\\/status>/g",
            "replaceString": "", "trimStrings": [], "placement": [2], "disabled": False,
            "markdownOnly": False, "promptOnly": True}]}}  # fmt: skip
        save_like_st(story.path.parents[2] / "settings.json", json.dumps(settings).encode())
        story.save()

    memory = await memory_proxy(
        16, {8}, build=build,
        **{"memory.message_recaps": "always", "memory.strip_patterns": ["<img[^>]*>"]},
    )  # fmt: skip
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    prompts = {
        seen.headers["X-Recap-Proxy-Operation"]: json.loads(seen.body)["messages"][0]["content"]
        for seen in memory.fake.state.seen
        if seen.headers.get("X-Recap-Proxy-Operation")
    }
    for operation in ("detect_scene_break", "scene_recap", "message_recap"):
        assert "Ava walks" in prompts[operation]
        assert "<status>" not in prompts[operation] and "<img" not in prompts[operation]


async def test_a_scene_name_numbers_its_range_as_the_api_does(memory_proxy: MemoryFactory) -> None:
    """A group chat starts with ST's hidden "Group chat created" notice, which no recap
    reads: the scene's name said 1-9 while the API and the page said 0-9."""
    notice = {"name": "SillyTavern System", "is_user": False, "is_system": True,
              "send_date": "2026-11-22T09:59:00.000Z", "extra": {"type": "group"},
              "mes": "Group chat created. Say 'Hi' to lovely people!"}  # fmt: skip

    def build(story: Story) -> None:
        story.grow(16)
        story.messages.insert(0, notice)
        story.save()

    memory = await memory_proxy(16, {8}, build=build, **NO_RECAPS)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    [scene] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    assert scene.position == 9 and scene.name is not None and scene.name.endswith(" 0-9")
