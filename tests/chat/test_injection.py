"""Memory placed by the server, and fail-open when anything on the memory path breaks."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from unittest.mock import AsyncMock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters import ADAPTERS
from adapters.base import ParsedRequest
from proxy.chat.injection import (
    MAX_SHIFT,
    MIN_REUSED,
    Injector,
    load_injection_templates,
    policy_from,
    reused,
    template_problem,
)
from proxy.core.models import ChatMessage, Memory
from proxy.settings.injection import InjectionSettings
from tests.conftest import FakeLLM, ProxyFactory
from tests.core.st_requests import st_body, st_json

CHAT_ID = "default-user/chats/Seraphina/Seraphina - 2023-5-12 @21h 32m 29s 224ms"


async def test_memory_is_placed_and_the_rest_of_the_body_kept(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    memory = Memory(values={"running_recap": "Arden was attacked by wolves."}, chat_id=CHAT_ID)
    client = await proxy(
        memory=memory,
        **{"injection.position": "in_chat", "injection.depth": 2, "injection.role": "system"},
    )
    raw = st_body("stream-04-05_send_03")
    response = await client.post("/v1/chat/completions", data=raw)
    await response.read()
    sent = json.loads(fake_llm.state.seen[-1].body)
    inserted = sent["messages"].pop(8)
    assert inserted["role"] == "system"
    assert "Arden was attacked by wolves." in inserted["content"]
    assert sent == st_json("stream-04-05_send_03")
    assert list(sent) == list(st_json("stream-04-05_send_03"))
    assert int(response.headers["X-Recap-Injected"]) > 5
    assert response.headers["X-Recap-Chat"] == (
        "default-user%2Fchats%2FSeraphina%2FSeraphina%20-%202023-5-12%20%4021h%2032m%2029s%20224ms"
    )


async def test_disabled_chat_gets_nothing(proxy: ProxyFactory, fake_llm: FakeLLM) -> None:
    memory = Memory(values={"running_recap": "x"}, chat_id="c")
    client = await proxy(memory=memory, **{"injection.chats_enabled": {"c": False}})
    raw = st_body("stream-04-05_send_03")
    response = await client.post("/v1/chat/completions", data=raw)
    assert fake_llm.state.seen[-1].body == raw
    assert response.headers["X-Recap-Injected"] == "0"
    assert response.headers["X-Recap-Chat"] == "c"


class BrokenProvider:
    async def memory_for(
        self,
        parsed: ParsedRequest,
        headers: Mapping[str, str],
        *,
        markers: Sequence[str],
        preview: bool = False,
    ) -> Memory:
        raise RuntimeError("store is on fire")


async def test_failing_memory_provider_fails_open(
    proxy: ProxyFactory, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    client = await proxy(provider=BrokenProvider())
    raw = st_body("stream-04-05_send_03")
    with caplog.at_level(logging.WARNING):
        response = await client.post(
            "/v1/chat/completions", data=raw, headers={"Authorization": "Bearer sk-hidden"}
        )
        assert response.status == 200
        await response.read()
    assert fake_llm.state.seen[-1].body == raw
    assert response.headers["X-Recap-Injected"] == "0"
    failures = [r for r in caplog.records if "store is on fire" in r.getMessage()]
    assert len(failures) == 1
    assert "POST /v1/chat/completions" in failures[0].getMessage()
    assert "sk-hidden" not in caplog.text


async def test_unparseable_body_is_forwarded_unchanged(
    proxy: ProxyFactory, fake_llm: FakeLLM
) -> None:
    client = await proxy(memory=Memory(values={"running_recap": "x"}))
    raw = b'{"messages": "not a list"}'
    response = await client.post("/v1/chat/completions", data=raw)
    assert fake_llm.state.seen[-1].body == raw
    assert response.headers["X-Recap-Injected"] == "0"
    # The upstream's own verdict on the body reaches the client.
    assert response.status == 200


async def test_a_log_line_without_a_where_names_the_format(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The dashboard's preview calls `prepare` without `where`: its warnings still say what.
    provider = AsyncMock()
    provider.memory_for.side_effect = RuntimeError("store is on fire")
    settings = InjectionSettings()
    injector = Injector(policy_from(settings), load_injection_templates(settings), provider)
    adapter = ADAPTERS["chat/completions"]
    raw = st_body("stream-04-05_send_03")
    with caplog.at_level(logging.WARNING):
        got = await injector.prepare(adapter, raw, {}, preview=True)
        assert got.body == raw
        text = ADAPTERS["completions"]
        prompt = b'{"prompt": "Once upon a time"}'  # in no template it knows
        assert (await injector.prepare(text, prompt, {}, preview=True)).body == prompt
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned[0].startswith(f"memory step failed for {adapter.name} (RuntimeError")
    assert warned[1].startswith(f"{text.name}: ") and "forwarding such requests" in warned[1]


async def test_missing_template_file_stops_startup_clearly(proxy: ProxyFactory) -> None:
    from proxy.errors import TemplateError

    with pytest.raises(TemplateError, match=r"no-such-template\.md"):
        await proxy(**{"injection.template_file": "/no/such/dir/no-such-template.md"})


async def test_a_late_failure_still_names_the_chat(proxy: ProxyFactory, fake_llm: FakeLLM) -> None:
    # The splice fails (a replacement for a message that does not exist): the request goes
    # up unchanged, and the chat that was identified is still reported.
    memory = Memory(values={"running_recap": "x"}, chat_id="c", replacements={99: "boom"})
    client = await proxy(memory=memory)
    raw = st_body("stream-04-05_send_03")
    response = await client.post("/v1/chat/completions", data=raw)
    assert fake_llm.state.seen[-1].body == raw
    assert response.headers["X-Recap-Chat"] == "c"
    assert response.headers["X-Recap-Injected"] == "0"


async def test_the_provider_finds_the_history_with_the_policys_markers_after_a_reload() -> None:
    # The memory is placed by the history the policy's markers find: identification looks
    # for it with the same ones, also once a reload has changed them.
    provider = AsyncMock()
    provider.memory_for.return_value = Memory(values={"running_recap": "x"})
    settings = InjectionSettings(history_start_markers=["[Story begins]"])
    injector = Injector(policy_from(settings), load_injection_templates(settings), provider)
    adapter = ADAPTERS["chat/completions"]
    await injector.prepare(adapter, st_body("stream-04-05_send_03"), {})
    changed = InjectionSettings(history_start_markers=["[Once upon a time]"])
    injector.policy = policy_from(changed)  # what a reload does
    await injector.prepare(adapter, st_body("stream-04-05_send_03"), {})
    seen = [tuple(call.kwargs["markers"]) for call in provider.memory_for.await_args_list]
    assert seen == [("[Story begins]",), ("[Once upon a time]",)]


def chat_messages(texts: Sequence[str]) -> list[ChatMessage]:
    return [ChatMessage("user" if i % 2 else "assistant", t) for i, t in enumerate(texts)]


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(0, 120),
    cut=st.integers(0, 40),
    added=st.integers(0, 3),
    edits=st.sets(st.integers(0, 120), max_size=3),
    deleted=st.sets(st.integers(0, 120), max_size=2),
)
def test_the_previous_requests_messages_stand_in_for_equal_ones(
    size: int, cut: int, added: int, edits: set[int], deleted: set[int]
) -> None:
    """The next request of a chat: ST's cut moved on, new messages at the end, some
    edited or deleted. What comes back equals the new request message for message, and
    where the shared history lines up as one block, the old objects are what it holds
    (their text's hash is computed already)."""
    system = [ChatMessage("system", "main prompt")]
    old = system + chat_messages([f"message {i} " + "x" * (i % 7) for i in range(size)])
    history = old[1 + min(cut, size) :]
    history = history + chat_messages([f"new {k}" for k in range(added)])
    history = [
        ChatMessage(m.role, m.text + " (edited)") if i in edits else m
        for i, m in enumerate(history)
        if i not in deleted
    ]
    new = [ChatMessage(m.role, m.text, m.name) for m in system + history]  # fresh objects
    got = reused(new, old)
    assert got == new
    if len(new) < MIN_REUSED:
        assert got is new  # a short request is hashed afresh: cheaper than lining it up
    elif not edits and not deleted and min(cut, size) <= MAX_SHIFT and len(history) > 2 * added:
        shared = [i for i, m in enumerate(new) if m.text.startswith("message")]
        assert all(any(got[i] is o for o in old) for i in shared)


def test_nothing_is_reused_from_an_unrelated_request() -> None:
    old = chat_messages([f"old {i}" for i in range(40)])
    new = chat_messages([f"new {i}" for i in range(40)])
    assert all(a is b for a, b in zip(reused(new, old), new, strict=True))
    assert reused(new, []) is new and reused([], old) == []


async def test_consecutive_requests_get_the_body_a_fresh_injector_gives() -> None:
    """The injector hands each request the previous one (whose bytes it may reuse): the
    body sent upstream is what it would be without that."""
    provider = AsyncMock()
    provider.memory_for.return_value = Memory(values={"running_recap": "The story."}, drop=(3, 4))
    settings = InjectionSettings(position="in_chat", depth=2)
    injector = Injector(policy_from(settings), load_injection_templates(settings), provider)
    adapter = ADAPTERS["chat/completions"]
    system = [{"role": "system", "content": "main " * 8000}, {"role": "system", "content": "x"}]
    turns = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i}"} for i in range(60)]
    bodies = [
        json.dumps({"messages": system + turns[cut:end], "model": "m"}, separators=(",", ":"))
        for cut, end in ((0, 40), (0, 42), (3, 44), (3, 44), (5, 46))
    ]
    for raw in (body.encode() for body in bodies):
        got = await injector.prepare(adapter, raw, {})
        fresh = Injector(policy_from(settings), load_injection_templates(settings), provider)
        assert got.body == (await fresh.prepare(adapter, raw, {})).body
        assert got.dropped == (3, 4) and got.tokens > 0
    assert injector._last[adapter.name].carried > 40  # the last one reused the one before


@pytest.mark.parametrize(
    ("template", "said"),
    [("   \n", "blank"), ("Remember the story.", "holds no macro"), ("{{running_recap}}", None)],
)
def test_a_template_that_carries_no_memory_is_said(template: str, said: str | None) -> None:
    templates = load_injection_templates(InjectionSettings(template=template))
    problem = template_problem(templates)
    assert (problem is None) if said is None else (problem is not None and said in problem)
