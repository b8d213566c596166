"""`[memory.embeddings]`: where recall by meaning gets its vectors."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from proxy.settings.section import Section

EmbeddingAPI = Literal["auto", "openai", "ollama"]


class EmbeddingSettings(Section):
    base_url: str | None = Field(
        None,
        description="An embeddings API: OpenAI-compatible (`<base_url>/embeddings`: OpenAI, "
        "OpenRouter, llama.cpp started with `--embedding`, KoboldCpp, LM Studio, vLLM) or "
        "Ollama's (`<base_url>/api/embed`). Unset: older scenes are recalled by their words "
        "alone (full-text search).",
        examples=["http://127.0.0.1:8080/v1", "http://127.0.0.1:11434"],
    )
    model: str | None = Field(
        None,
        description="Embedding model (sent as `model`; a server that serves one may ignore "
        "it). A change of model embeds every scene again, in the background.",
        examples=["text-embedding-3-small", "nomic-embed-text"],
    )
    api_key: SecretStr | None = Field(
        None,
        description="Sent as `Authorization: Bearer <api_key>`; never logged or stored.",
    )
    api: EmbeddingAPI = Field(
        "auto",
        description="The API's kind: `openai`, `ollama`, or `auto` (Ollama's when `base_url` "
        "is on port 11434 or ends in `/api`, else OpenAI's).",
    )
    dimensions: int | None = Field(
        None,
        ge=1,
        description="Sent as `dimensions` (OpenAI's text-embedding-3 models can shorten "
        "their vectors). Unset: the model's own size.",
    )
    batch_size: int = Field(32, ge=1, le=2048, description="Texts per embeddings call.")
    timeout_seconds: float = Field(30.0, gt=0, description="Seconds one call may take.")
    min_similarity: float = Field(
        0.3,
        ge=-1,
        le=1,
        description="Least cosine similarity between the question and a scene for the "
        "scene to count as near it (what is unrelated scores depends on the model: about "
        "0.1 for OpenAI's, 0.7 for e5 models).",
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @property
    def enabled(self) -> bool:
        return self.base_url is not None

    def kind(self) -> Literal["openai", "ollama"]:
        if self.api != "auto":
            return self.api
        url = urlsplit(self.base_url or "")
        return "ollama" if url.port == 11434 or url.path.endswith("/api") else "openai"

    def identity(self) -> str:
        """What vectors are kept under: a vector of another model or size is another."""
        return f"{self.base_url}|{self.model or '-'}|{self.dimensions or '-'}"
