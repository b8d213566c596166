"""The proxy's own calls to a text-only server: each endpoint's body and answer, and the
client falling back from a missing chat route to the chat's completion endpoint."""

from __future__ import annotations

import json
import logging
from functools import partial

import pytest

from adapters.instruct import TEMPLATES
from adapters.text_completions import write_prompt
from proxy.core.models import Caller
from proxy.core.operations import Operation
from proxy.errors import JobFailure
from proxy.memory.calls.llm import LLMClient
from proxy.memory.calls.textcalls import (
    Completion,
    completion_body,
    completion_path,
    read_completion,
)
from proxy.settings import UpstreamSettings
from proxy.settings.memory import LLMSettings
from proxy.upstream.upstreams import Upstream
from tests.conftest import FakeLLM
from tests.fakes.fake_text import ROUTES

CHATML = next(t for t in TEMPLATES if t.name == "chatml")
PROMPT = [
    {"role": "system", "content": "Recap the scene as JSON."},
    {"role": "user", "content": "<SCENE>\nArden walks.\n</SCENE>"},
]


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_each_endpoint_gets_its_own_limit_key_and_reads_its_own_answer(path: str) -> None:
    key, _, whole = ROUTES[path]
    body = completion_body(path, "P", ["<|im_end|>"], "m", 77, 0.2)
    holder = body["options"] if path == "/api/generate" else body
    assert holder[key] == 77 and body["prompt"] == "P" and body.get("stream") is not True
    raw = json.dumps(whole("an answer", "length")).encode()
    assert read_completion(completion_path(path), raw) == Completion("an answer", "length")


def test_ollama_is_asked_raw_and_kobold_streams_are_asked_whole() -> None:
    assert completion_body("/api/generate", "P", [], "llama3", 5, 0.3)["raw"] is True
    assert completion_path("/api/extra/generate/stream") == "/api/v1/generate"
    assert completion_path("/completion") == "/completion"


@pytest.mark.parametrize("raw", [b"not json", b"[]", b'{"results": []}', b'{"content": 3}'])
def test_an_answer_in_no_known_shape_is_none(raw: bytes) -> None:
    assert read_completion("/completion", raw) is None
    assert read_completion("/api/v1/generate", raw) is None


def test_the_prompt_is_written_in_the_chats_template() -> None:
    prompt, stops = write_prompt(CHATML, PROMPT)
    assert prompt == (
        "<|im_start|>system\nRecap the scene as JSON.<|im_end|>\n"
        "<|im_start|>user\n<SCENE>\nArden walks.\n</SCENE><|im_end|>\n<|im_start|>assistant\n"
    )
    assert stops == ["<|im_end|>", "<|im_start|>user"]
    mistral, stops = write_prompt("mistral", PROMPT)
    assert mistral.startswith("[INST] Recap") and mistral.endswith("[/INST]")
    assert write_prompt("plain", PROMPT)[0].startswith("Recap the scene as JSON.\n\n<SCENE>")


@pytest.mark.parametrize("path", ["/api/v1/generate", "/api/extra/generate/stream",
                                  "/completion", "/api/generate", "/v1/completions"])  # fmt: skip
async def test_a_server_without_a_chat_route_gets_its_own_completion_call(
    fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    fake_llm.state.chat_route = False
    async with Upstream(UpstreamSettings(base_url=fake_llm.base_url)) as upstream:
        client = LLMClient(LLMSettings(), upstream, None)
        writer = partial(write_prompt, CHATML)
        client.remember("c", {}, Caller("local-model", "text_completions", "", path, writer))
        with caplog.at_level(logging.INFO):
            first = await client.complete(Operation.SCENE_RECAP, "c", PROMPT)
        second = await client.complete(Operation.SCENE_RECAP, "c", PROMPT)
    paths = [s.path for s in fake_llm.state.seen]
    plain = completion_path(path)
    assert paths == ["/v1/chat/completions", plain, plain]  # the 404 is not asked again
    assert json.loads(first.text)["scene_name"] and first.text == second.text
    sent = json.loads(fake_llm.state.seen[-1].body)
    assert sent["prompt"] == writer(PROMPT)[0]
    assert "no chat completions route" in caplog.text


async def test_a_cut_off_completion_is_known_as_such(fake_llm: FakeLLM) -> None:
    fake_llm.state.chat_route = False
    async with Upstream(UpstreamSettings(base_url=fake_llm.base_url)) as upstream:
        client = LLMClient(LLMSettings(), upstream, None)
        writer = partial(write_prompt, CHATML)
        caller = Caller("local-model", "text_completions", "", "/api/v1/generate", writer)
        client.remember("c", {}, caller)
        answer = await client.complete(Operation.SCENE_RECAP, "c", PROMPT, max_tokens=3)
    assert answer.cut_off and len(answer.text) == 12


async def test_a_chat_route_that_exists_is_used_and_a_broken_answer_fails(
    fake_llm: FakeLLM,
) -> None:
    async with Upstream(UpstreamSettings(base_url=fake_llm.base_url)) as upstream:
        client = LLMClient(LLMSettings(), upstream, None)
        writer = partial(write_prompt, CHATML)
        client.remember("c", {}, Caller("m", "text_completions", "", "/v1/completions", writer))
        await client.complete(Operation.SCENE_RECAP, "c", PROMPT)
        assert [s.path for s in fake_llm.state.seen] == ["/v1/chat/completions"]
        fake_llm.state.chat_route = False
        client.remember("d", {}, Caller("m", "text_completions", "", "/tokenize", writer))
        with pytest.raises(JobFailure, match="not a completion"):
            await client.complete(Operation.SCENE_RECAP, "d", PROMPT)
