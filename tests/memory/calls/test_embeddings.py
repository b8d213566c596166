"""The embeddings client against the fake API: OpenAI's and Ollama's shapes, and every
failure an `EmbeddingFailure` that says what came back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from proxy.errors import EmbeddingFailure
from proxy.memory.calls.embeddings import MAX_CHARS, EmbeddingClient
from proxy.settings import UpstreamSettings
from proxy.settings.embeddings import EmbeddingSettings
from proxy.upstream.upstreams import Upstream
from tests.conftest import FakeLLM
from tests.fakes.fake_embed import vector


async def embed(base_url: str, texts: list[str], **given: object) -> list[np.ndarray]:
    settings = EmbeddingSettings(base_url=base_url, **given)
    async with Upstream(UpstreamSettings(base_url=base_url)) as upstream:
        vectors, _ = await EmbeddingClient(settings, upstream).embed(texts)
    return vectors


async def test_openai_and_ollama_answers_become_unit_vectors(fake_llm: FakeLLM) -> None:
    texts = ["Ava hid the key under the stone.", "Where did we stash the opener?"]
    for base, api in ((fake_llm.base_url, "openai"), (fake_llm.base_url[:-3], "ollama")):
        got = await embed(base, texts, api=api, model="fake-embed", api_key="sk-secret")
        assert len(got) == 2 and np.allclose(got[0], vector(texts[0]), atol=1e-6)
        assert abs(float(np.linalg.norm(got[1])) - 1) < 1e-5
        assert float(got[0] @ got[1]) > 0.5  # a paraphrase is near
    seen = fake_llm.state.seen[-1]
    assert seen.path == "/api/embed" and seen.headers["Authorization"] == "Bearer sk-secret"
    assert fake_llm.state.seen[0].path == "/v1/embeddings"
    assert fake_llm.state.operations == ["embed", "embed"]


@pytest.mark.parametrize(
    ("fault", "said"),
    [("status=500", "500 from"), ("garbage", "not JSON from")],
)
async def test_a_failing_api_says_what_came_back(fake_llm: FakeLLM, fault: str, said: str) -> None:
    fake_llm.state.faults = {"embed": [fault]}
    with pytest.raises(EmbeddingFailure, match=said):
        await embed(fake_llm.base_url, ["a text"])


async def test_an_api_that_is_not_there_or_too_slow(fake_llm: FakeLLM, refused_port: int) -> None:
    with pytest.raises(EmbeddingFailure, match=r"cannot reach upstream http://127\.0\.0\.1"):
        await embed(f"http://127.0.0.1:{refused_port}/v1", ["a text"])
    with pytest.raises(EmbeddingFailure, match="a vector in the answer is not a list"):
        fake_llm.state.faults = {"embed": ['answer={"data": [{"embedding": "x"}]}']}
        await embed(fake_llm.base_url, ["a text"])
    fake_llm.state.faults = {"embed": ["slow"]}
    with pytest.raises(EmbeddingFailure, match="no answer in 0 s"):
        await embed(fake_llm.base_url, ["a text"], timeout_seconds=0.2)


async def test_a_long_text_is_embedded_by_its_start(fake_llm: FakeLLM) -> None:
    """Small models read 512 tokens at most (llama.cpp refuses more): a long recap is
    embedded by its first part, never failing its batch."""
    long = "Ava hid the key. " + "word " * 2000
    [got] = await embed(fake_llm.base_url, [long])
    sent = json.loads(fake_llm.state.seen[-1].body)["input"]
    assert len(sent[0]) == MAX_CHARS and np.allclose(got, vector(long[:MAX_CHARS]), atol=1e-6)
