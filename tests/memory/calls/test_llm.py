"""The proxy's own LLM client against the fake LLM."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.core.models import Caller
from proxy.core.operations import Operation
from proxy.errors import JobFailure, NoCredentials, Refused, Unauthorized
from proxy.memory.calls.answers import read_answer, read_anthropic
from proxy.memory.calls.llm import OPERATION_HEADER, LLMClient
from proxy.memory.calls.textcalls import anthropic_messages
from proxy.settings import UpstreamSettings
from proxy.settings.memory import LLMSettings
from proxy.upstream.upstreams import Upstream
from tests.conftest import FakeLLM
from tests.fakes.fake_llm import anthropic_events, anthropic_message, sse_chunks

PROMPT = [
    {"role": "system", "content": "Recap the scene as JSON."},
    {"role": "user", "content": "..."},
]


@pytest.fixture
async def chat_upstream(fake_llm: FakeLLM) -> AsyncIterator[Upstream]:
    async with Upstream(UpstreamSettings(base_url=fake_llm.base_url)) as upstream:
        yield upstream


def last(fake_llm: FakeLLM) -> tuple[dict[str, str], dict[str, Any]]:
    seen = fake_llm.state.seen[-1]
    return seen.headers, json.loads(seen.body)


async def test_uses_the_chats_own_key_and_model(
    fake_llm: FakeLLM, chat_upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    client = LLMClient(LLMSettings(), chat_upstream, None)
    client.remember("c", {"Authorization": "Bearer sk-chat-secret"}, Caller("fake-model"))
    with caplog.at_level(logging.DEBUG):
        answer = await client.complete(Operation.SCENE_RECAP, "c", PROMPT)
    assert answer.text.startswith('{"scene_name"') and answer.model == "fake-model"
    headers, body = last(fake_llm)
    assert headers[OPERATION_HEADER] == "scene_recap"
    assert headers["Authorization"] == "Bearer sk-chat-secret"
    assert (body["model"], body["temperature"], body["max_tokens"], body["stream"]) == (
        "fake-model",
        0.3,
        1024,
        False,
    )
    assert body["messages"] == PROMPT
    assert "sk-chat-secret" not in caplog.text


async def test_the_chats_newest_key_and_model_are_the_ones_used(
    fake_llm: FakeLLM, chat_upstream: Upstream
) -> None:
    """The key or model changed in ST between two requests: the next call goes with the
    new ones (and the same again keeps them); only a chat's first request is news."""
    client = LLMClient(LLMSettings(), chat_upstream, None)
    assert client.remember("c", {"Authorization": "Bearer sk-old"}, Caller("fake-model"))
    assert not client.remember("c", {"Authorization": "Bearer sk-new"}, Caller("other-model"))
    assert not client.remember("c", {"Authorization": "Bearer sk-new"}, Caller("other-model"))
    await client.complete(Operation.SCENE_RECAP, "c", PROMPT)
    headers, body = last(fake_llm)
    assert (headers["Authorization"], body["model"]) == ("Bearer sk-new", "other-model")


async def test_a_branch_calls_with_its_parents_key_and_model_until_it_has_its_own(
    fake_llm: FakeLLM, chat_upstream: Upstream
) -> None:
    client = LLMClient(LLMSettings(), chat_upstream, None)
    assert not client.kin("branch", "parent")  # the parent has none either yet
    assert client.heirs("parent") == ["branch"] and not client.can_call("branch")
    assert client.remember("parent", {"Authorization": "Bearer sk-parent"}, Caller("m-parent"))
    assert client.can_call("branch")
    await client.complete(Operation.SCENE_RECAP, "branch", PROMPT)
    headers, body = last(fake_llm)
    assert (headers["Authorization"], body["model"]) == ("Bearer sk-parent", "m-parent")

    # Both renamed in ST: the branch still calls with its parent's, and each new name is
    # told it has a model now (work waiting under it goes on), the branch's by its parent.
    assert client.renamed("parent", "parent 2")
    assert client.renamed("branch", "branch 2")
    assert client.heirs("parent 2") == ["branch 2"] and client.can_call("branch 2")
    assert not client.kin("branch 2", "parent 2")  # it had a model already

    # A request of the branch's own: its key and model from then on, and no heir any more.
    client.remember("branch 2", {"Authorization": "Bearer sk-branch"}, Caller("m-branch"))
    assert client.heirs("parent 2") == []
    await client.complete(Operation.SCENE_RECAP, "branch 2", PROMPT)
    headers, body = last(fake_llm)
    assert (headers["Authorization"], body["model"]) == ("Bearer sk-branch", "m-branch")


async def test_settings_and_per_operation_overrides(
    fake_llm: FakeLLM, chat_upstream: Upstream
) -> None:
    settings = LLMSettings.model_validate(
        {
            "model": "cheap-model",
            "operations": {"running_recap": {"model": "smart-model", "max_tokens": 4000}},
        }
    )
    client = LLMClient(settings, chat_upstream, None)
    await client.complete(Operation.MESSAGE_RECAP, "c", PROMPT)
    assert last(fake_llm)[1]["model"] == "cheap-model"
    await client.complete(Operation.RUNNING_RECAP, "c", PROMPT)
    _, body = last(fake_llm)
    assert (body["model"], body["max_tokens"]) == ("smart-model", 4000)


async def test_a_separate_api_with_its_own_key(fake_llm: FakeLLM, chat_upstream: Upstream) -> None:
    settings = LLMSettings.model_validate(
        {"base_url": fake_llm.base_url, "api_key": "sk-own", "model": "m"}
    )
    async with Upstream(UpstreamSettings(base_url=fake_llm.base_url)) as own:
        client = LLMClient(settings, chat_upstream, own)
        client.remember("c", {"Authorization": "Bearer sk-chat"}, Caller("fake-model"))
        await client.complete(Operation.DETECT_SCENE_BREAK, "c", PROMPT)
    headers, body = last(fake_llm)
    assert headers["Authorization"] == "Bearer sk-own" and body["model"] == "m"


async def test_the_chats_key_never_goes_to_another_api(
    fake_llm: FakeLLM, chat_upstream: Upstream
) -> None:
    settings = LLMSettings.model_validate({"base_url": fake_llm.base_url, "model": "m"})
    async with Upstream(UpstreamSettings(base_url=fake_llm.base_url)) as own:
        client = LLMClient(settings, chat_upstream, own)
        client.remember("c", {"Authorization": "Bearer sk-chat"}, Caller("fake-model"))
        await client.complete(Operation.SCENE_RECAP, "c", PROMPT)
    headers, _ = last(fake_llm)
    assert "Authorization" not in headers  # no [memory.llm] api_key: no key at all


@pytest.mark.parametrize(
    ("status", "error", "retry"),
    [
        (401, Unauthorized, False),
        (403, Unauthorized, False),
        (400, Refused, False),
        (429, JobFailure, True),
        (500, JobFailure, True),
        (503, JobFailure, True),
    ],
)
async def test_answers_become_job_failures(
    chat_upstream: Upstream, status: int, error: type[JobFailure], retry: bool
) -> None:
    client = LLMClient(LLMSettings(model=f"status={status}"), chat_upstream, None)
    with pytest.raises(error) as caught:
        await client.complete(Operation.MESSAGE_RECAP, "c", PROMPT)
    assert caught.value.retry is retry
    assert str(status) in str(caught.value)


async def test_a_wrong_base_url_is_named_in_the_failure(
    fake_llm: FakeLLM, chat_upstream: Upstream
) -> None:
    # A refusal names where the call went...
    client = LLMClient(LLMSettings(model="status=400"), chat_upstream, None)
    with pytest.raises(Refused) as refused:
        await client.complete(Operation.MESSAGE_RECAP, "c", PROMPT)
    assert f"refused the call (400) at {fake_llm.base_url}/chat/completions: " in str(refused.value)
    # ...and so does an answer that is no completion: here a base URL without its `/v1`,
    # where another route of the server answers.
    bare = str(fake_llm.server.make_url("/")).rstrip("/")
    async with Upstream(UpstreamSettings(base_url=bare)) as wrong:
        client = LLMClient(LLMSettings(model="m"), wrong, None)
        with pytest.raises(JobFailure) as caught:
            await client.complete(Operation.SCENE_RECAP, "c", PROMPT)
    assert type(caught.value) is JobFailure and caught.value.retry is True
    said = str(caught.value)
    assert said.startswith("scene_recap: not a chat completion: ")
    assert said.endswith(f"(the answer of {bare}/chat/completions)")


async def test_unreachable_and_unknown_model() -> None:
    async with Upstream(UpstreamSettings(base_url="http://127.0.0.1:9/v1")) as dead:
        client = LLMClient(LLMSettings(model="m"), dead, None)
        with pytest.raises(JobFailure) as caught:
            await client.complete(Operation.SCENE_RECAP, "c", PROMPT)
        assert caught.value.retry is True
        with pytest.raises(NoCredentials, match="no model"):
            await LLMClient(LLMSettings(), dead, None).complete(Operation.SCENE_RECAP, "c", PROMPT)


def test_a_streamed_answer_is_read_with_its_finish_reason() -> None:
    raw = b"".join(sse_chunks('{"recap": "Ava and Tom', model="m", finish="length"))
    answer = read_answer(raw, "fallback", "running_recap")
    assert answer.text == '{"recap": "Ava and Tom' and answer.cut_off
    assert answer.model == "m"
    whole = read_answer(b"".join(sse_chunks("done", model="m")), "m", "scene_recap")
    assert whole.text == "done" and whole.finish_reason == "stop" and not whole.cut_off


def test_a_prompt_as_claude_takes_it() -> None:
    system, turns = anthropic_messages(
        [
            {"role": "system", "content": "A"},
            {"role": "system", "content": "B"},
            {"role": "user", "content": "C"},
            {"role": "system", "content": "D"},
            {"role": "assistant", "content": "E"},
        ]
    )
    assert system == "A\n\nB"
    assert turns == [{"role": "user", "content": "C\n\nD"}, {"role": "assistant", "content": "E"}]
    assert anthropic_messages([{"role": "assistant", "content": "x"}])[1][0]["role"] == "user"


def test_messages_api_answers_whole_and_streamed() -> None:
    whole = json.dumps(anthropic_message("Done.", model="claude-x", stop="max_tokens")).encode()
    answer = read_anthropic(whole, "m", "scene_recap")
    assert (answer.text, answer.model, answer.cut_off) == ("Done.", "claude-x", True)
    streamed = b"".join(anthropic_events("one two", model="claude-y"))
    answer = read_anthropic(streamed, "m", "scene_recap")
    assert (answer.text, answer.model, answer.cut_off) == ("one two ", "claude-y", False)
    with pytest.raises(JobFailure, match="not a Messages API answer"):
        read_anthropic(b'{"choices": []}', "m", "scene_recap")


async def test_a_claude_chat_is_called_on_its_route_with_its_key(fake_llm: FakeLLM) -> None:
    root = str(fake_llm.server.make_url(""))
    settings = UpstreamSettings(
        base_url=fake_llm.base_url,
        routes=[{"prefix": "/claude", "base_url": f"{root}/v1", "api_key": "sk-ant-route"}],
    )
    async with Upstream(settings) as upstream:
        client = LLMClient(LLMSettings(), upstream, None)
        headers = {"x-api-key": "sk-ant-chat", "anthropic-version": "2023-06-01"}
        client.remember("c", headers, Caller("claude-fake", "anthropic_messages", "/claude"))
        answer = await client.complete(Operation.SCENE_RECAP, "c", PROMPT)
        assert answer.text
        sent_headers, body = last(fake_llm)
        assert fake_llm.state.seen[-1].path == "/v1/messages"
        assert sent_headers["x-api-key"] == "sk-ant-route" and "Authorization" not in sent_headers
        assert (
            body["system"] == "Recap the scene as JSON." and body["messages"][0]["role"] == "user"
        )
        assert "sk-ant-chat" in client.secrets() and "sk-ant-route" in client.secrets()
