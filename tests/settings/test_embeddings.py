"""`[memory.embeddings]`: off unless a URL is given, the API's kind told from it, and the
identity vectors are kept under."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.settings.embeddings import EmbeddingSettings
from tests.conftest import make_settings


def test_off_until_a_url_is_given_and_the_kind_is_told_from_it() -> None:
    assert not EmbeddingSettings().enabled
    openai = EmbeddingSettings(base_url="https://api.openai.com/v1/")
    assert openai.enabled and openai.kind() == "openai"
    assert openai.base_url == "https://api.openai.com/v1"
    assert EmbeddingSettings(base_url="http://127.0.0.1:11434").kind() == "ollama"
    assert EmbeddingSettings(base_url="http://box:8000/api").kind() == "ollama"
    assert EmbeddingSettings(base_url="http://box:8000/api", api="openai").kind() == "openai"


def test_another_model_or_size_is_another_identity() -> None:
    one = EmbeddingSettings(base_url="http://a/v1", model="m")
    assert one.identity() != EmbeddingSettings(base_url="http://a/v1", model="n").identity()
    sized = EmbeddingSettings(base_url="http://a/v1", model="m", dimensions=256)
    assert one.identity() != sized.identity()


def test_a_bad_value_names_its_key() -> None:
    with pytest.raises(ValidationError, match=r"memory\.embeddings\.base_url\n.*http://"):
        make_settings(**{"memory.embeddings.base_url": "localhost:8080"})
    with pytest.raises(ValidationError, match=r"memory\.embeddings\.batch_size"):
        make_settings(**{"memory.embeddings.batch_size": 0})
