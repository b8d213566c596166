"""The steady step (`proxy.chat.steady`) gives the general step's answer for every request
it takes, and leaves every other request to it."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from typing import Any

import pytest

from adapters.openai_chat import OpenAIChatAdapter
from proxy.chat.injection import Injector
from proxy.core.models import Outcome
from proxy.errors import UnknownPromptFormat
from proxy.library.chats import ChatLibrary
from proxy.memory.engine import MemoryEngine
from proxy.web.keys import RUNTIME
from tests.memory.story import CHAT_ID, Story
from tests.memory.test_long_story import ENDS, NO_RECAPS, recapped
from tests.memory_env import Memory, MemoryFactory
from tests.spies import spy

ADAPTER = OpenAIChatAdapter()
Body = dict[str, Any]
Headers = dict[str, str]


def history_start(body: Body) -> int:
    return next(i for i, m in enumerate(body["messages"]) if m["content"] == "[Start a new Chat]")


def cut_by_st(body: Body, rng: random.Random) -> Body:
    """ST's context is full: it left out some of the oldest messages."""
    start = history_start(body) + 1
    del body["messages"][start : start + rng.randint(1, 30)]
    return body


def world_info_at_depth(body: Body, rng: random.Random) -> Body:
    at = len(body["messages"]) - rng.randint(0, 4)
    body["messages"].insert(at, {"role": "system", "content": "[The Cedar Well is dry.]"})
    return body


def old_message_edited(body: Body, rng: random.Random) -> Body:
    """A message edited in the request only (a regex script, say): it matches nothing."""
    message = body["messages"][rng.randrange(history_start(body) + 1, len(body["messages"]))]
    message["content"] += " (as ST's regex left it)"
    return body


def extra_fields(body: Body, rng: random.Random) -> Body:
    body.update(stop=["\nTom:"], logit_bias={}, top_p=0.9, seed=rng.randint(0, 2**31))
    return body


def quiet_prompt(body: Body, rng: random.Random) -> Body:
    """ST's summary or impersonation: a prompt of its own after the history."""
    body["messages"].append({"role": "system", "content": "[Write a summary of the chat.]"})
    return body


def continued(body: Body, rng: random.Random) -> Body:
    body["messages"].append({"role": "system", "content": "[Continue your last message.]"})
    return body


def named_message(body: Body, rng: random.Random) -> Body:
    body["messages"][-1]["name"] = "Tom"
    return body


def example_dialogue(body: Body, rng: random.Random) -> Body:
    """The character card's example dialogue, as ST sends it: named messages before the
    chat; without the start-of-chat marker at times, so that they alone tell where the
    history starts."""
    at = history_start(body)
    body["messages"][at:at] = [
        {"role": "system", "content": "[Example Chat]"},
        {"role": "user", "content": "Which way to the mill?", "name": "example_user"},
        {"role": "assistant", "content": "Follow the river.", "name": "example_assistant"},
    ]
    if rng.random() < 0.5:
        del body["messages"][history_start(body)]
    return body


def number_past_64_bits(body: Body, rng: random.Random) -> Body:
    body["seed"] = 2**64 + rng.randint(0, 9)
    return body


def long_system_prompt(body: Body, rng: random.Random) -> Body:
    body["messages"][0]["content"] += " The woods are old." * 2000
    return body


def metadata_block(body: Body, rng: random.Random) -> Body:
    meta = json.dumps({"chat": CHAT_ID, "operation": "chat"})
    body["messages"][0]["content"] += f"\n<ST_METADATA>{meta}</ST_METADATA>"
    return body


def another_chat(body: Body, rng: random.Random) -> Body:
    start = history_start(body) + 1
    body["messages"][start:] = [{"role": "user", "content": "A chat no one saved."}]
    return body


Variant = Callable[[Body, random.Random], Body]
VARIANTS: list[Variant] = [
    cut_by_st,
    world_info_at_depth,
    old_message_edited,
    extra_fields,
    quiet_prompt,
    continued,
    named_message,
    example_dialogue,
    number_past_64_bits,
    long_system_prompt,
    metadata_block,
    another_chat,
]


def same(got: Outcome, want: Outcome) -> None:
    assert got.body == want.body
    assert got.insertions == want.insertions
    assert got.dropped == want.dropped
    assert got.memory == want.memory
    assert list(got.messages) == list(want.messages)


async def compare(
    memory: Memory,
    general: Injector,
    raws: list[tuple[bytes, Headers]],
    asked: list[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, set[str]]:
    """Each request through both steps: how many the steady one took, and the kinds of
    generation they were."""
    injector = memory.app[RUNTIME].injector
    touched = spy(monkeypatch, MemoryEngine, "touch")
    route, path = "/local", "/v1/chat/completions"  # as the server passes them on
    taken, kinds = 0, set[str]()
    for raw, headers in raws:
        await memory.engine.settle()
        want = await general.prepare(ADAPTER, raw, headers, route=route, path=path)
        before, calls = len(asked), len(touched)
        got = await injector.prepare(ADAPTER, raw, headers, route=route, path=path)
        if len(asked) == before:  # the general step always asks the library
            taken += 1
            assert got.memory is not None and got.memory.identity is not None
            kinds.add(got.memory.identity.generation)
            # The chat's upkeep is told the same: the request's key, model and route.
            assert touched[calls - 1][1:] == touched[-1][1:]
        same(got, want)
    return taken, kinds


def compact(body: Body) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def test_the_steady_step_answers_as_the_general_one(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await memory_proxy(50, ENDS, **NO_RECAPS)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(recapped(5))
    injector = memory.app[RUNTIME].injector
    general = Injector(
        injector.policy, injector.templates, injector.provider, injector.counter, steady=False
    )
    asked = spy(monkeypatch, ChatLibrary, "identify_request")
    rng = random.Random(7)

    # The chat ends with the user's message: a normal turn, as sent or varied.
    raws: list[tuple[bytes, Headers]] = [
        (compact(memory.story.request(stream=s)), {}) for s in (False, True)
    ]
    for _ in range(60):
        variant = rng.choice(VARIANTS)
        raws.append((compact(variant(memory.story.request(), rng)), {}))
    # A header that names the chat, and one that names another: both are the general
    # step's (the named chat is the one it looks at, whatever the messages say).
    other = Story(memory.story.path.parents[3], set(), char="Mira")
    other.grow(4)
    library = memory.app[RUNTIME].memory_parts().library
    await memory.until(lambda db: other.chat_id in library.index.entries, settle=False)
    for named in (CHAT_ID, other.chat_id):
        raws.append((compact(memory.story.request()), {"X-ST-Chat-Id": named}))
    taken, kinds = await compare(memory, general, raws, asked, monkeypatch)
    assert 10 <= taken < len(raws) - 10  # both steps had their share
    assert kinds == {"normal"}

    # Ava answered (ST saved it): a swipe leaves her reply out, a continue ends with it.
    memory.story.grow(1)
    last = len(memory.story.messages) - 1
    await memory.until(lambda db: len(db.messages(CHAT_ID)) == last + 1, settle=False)
    reply = memory.story.request()
    swipe = {**reply, "messages": reply["messages"][:-1]}
    raws = [(compact(swipe), {}), (compact(continued(reply, rng)), {})]
    raws.append((compact(memory.story.request()), {}))  # her reply as a prefill
    taken, kinds = await compare(memory, general, raws, asked, monkeypatch)
    assert taken == len(raws) and {"swipe", "continue"} <= kinds


async def test_a_chat_saved_since_it_was_read_goes_the_general_way(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady step leaves a stale chat to the general step, which reads it again
    before it answers: the request is identified against what ST saved."""
    memory = await memory_proxy(20, set(), **NO_RECAPS)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    library = memory.app[RUNTIME].memory_parts().library
    assert library.freshness is not None
    library.freshness.stop()  # no word from the OS: each request's stat finds the save
    # An older message edited: the index as it was would still know the request, one
    # message short.
    memory.story.messages[10]["mes"] += " (She means the old lantern.)"
    memory.story.save()
    asked = spy(monkeypatch, ChatLibrary, "identify_request")
    outcome = await memory.app[RUNTIME].injector.prepare(
        ADAPTER, compact(memory.story.request()), {}
    )
    assert len(asked) == 1
    assert outcome.memory is not None and outcome.memory.identity is not None
    assert outcome.memory.identity.generation == "normal"
    assert outcome.memory.identity.matched == 20  # the saved text included


async def test_a_failing_steady_step_leaves_the_request_to_the_general_one(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the steady step costs the request nothing: the general step gives it its
    memory, and the log says what failed."""
    memory = await memory_proxy(50, ENDS, **NO_RECAPS)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(recapped(5))
    injector = memory.app[RUNTIME].injector
    raw = compact(memory.story.request())
    general = Injector(
        injector.policy, injector.templates, injector.provider, injector.counter, steady=False
    )
    want = await general.prepare(ADAPTER, raw, {})
    assert want.insertions  # the memory goes in

    def broken(*args: object) -> Outcome | None:
        raise KeyError("a bug")

    monkeypatch.setattr("proxy.chat.injection.steady_step", broken)
    asked = spy(monkeypatch, ChatLibrary, "identify_request")
    got = await injector.prepare(ADAPTER, raw, {}, where="POST /v1/chat/completions")
    same(got, want)
    assert len(asked) == 1  # the general step answered
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [
        "steady memory step failed for POST /v1/chat/completions (KeyError: 'a bug'); "
        "the general step gave it its memory"
    ]


async def test_both_steps_failing_on_one_bug_is_one_warning(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug the two steps share (in a function both call) forwards the request unchanged
    and says so once, naming both failures; the steady step's traceback is at debug."""
    memory = await memory_proxy(50, ENDS, **NO_RECAPS)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(recapped(5))
    raw = compact(memory.story.request())

    def broken(*args: object) -> None:
        raise RuntimeError("a shared bug")

    monkeypatch.setattr("proxy.chat.steady.plan_insertions", broken)
    monkeypatch.setattr("proxy.chat.injection.plan_insertions", broken)
    caplog.set_level(logging.DEBUG, logger="proxy.chat.injection")
    got = await memory.app[RUNTIME].injector.prepare(
        ADAPTER, raw, {}, where="POST /v1/chat/completions"
    )
    assert got.body == raw and not got.insertions
    assert got.chat_id == CHAT_ID  # still named for X-Recap-Chat
    records = [r for r in caplog.records if r.name == "proxy.chat.injection"]
    warned = [r for r in records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warned] == [
        "memory step failed for POST /v1/chat/completions (RuntimeError: a shared bug) "
        "(the steady step failed first: RuntimeError: a shared bug); forwarding the "
        "request unchanged"
    ]
    assert warned[0].exc_info is not None
    debug = [r.exc_info[1] for r in records if r.levelno == logging.DEBUG and r.exc_info]
    assert [str(exc) for exc in debug] == ["a shared bug"]


async def test_a_steady_failure_is_logged_when_the_general_step_finds_no_prompt(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The general step taking the request for an unknown format does not hide what
    failed in the steady step."""
    memory = await memory_proxy(20, set(), **NO_RECAPS)
    raw = compact(memory.story.request())

    def broken(*args: object) -> Outcome | None:
        raise KeyError("a bug")

    def unknown(*args: object) -> None:
        raise UnknownPromptFormat("no messages")

    monkeypatch.setattr("proxy.chat.injection.steady_step", broken)
    adapter = OpenAIChatAdapter()
    monkeypatch.setattr(adapter, "parse", unknown)
    got = await memory.app[RUNTIME].injector.prepare(
        adapter, raw, {}, where="POST /v1/chat/completions"
    )
    assert got.body == raw
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [
        "steady memory step failed for POST /v1/chat/completions (KeyError: 'a bug'); "
        "the general step forwarded it unchanged",
        "POST /v1/chat/completions: no messages; forwarding such requests unchanged",
    ]
