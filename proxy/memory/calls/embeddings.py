"""The embeddings client: texts in, unit vectors out, from the API `[memory.embeddings]`
names (OpenAI-compatible `/embeddings`, or Ollama's `/api/embed`).

Through its own `proxy.upstream.upstreams.Upstream` (the proxy's one HTTP client), so
that its connections, proxies and certificates are the upstream's. The key goes in the
`Authorization` header only; it is never logged. Every failure is an `EmbeddingFailure`
that says what came back: nothing on the chat path waits for this.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson
from yarl import URL

from proxy.core.vectors import Vector, unit
from proxy.errors import EmbeddingFailure, UpstreamError
from proxy.memory.calls.answers import short
from proxy.settings.embeddings import EmbeddingSettings
from proxy.upstream.upstreams import Upstream

OPERATION = "embed"  # what its calls are counted under (usage, the fake's stats)
# Characters of a text that are embedded: its start (about 400 tokens). Small embedding
# models read 512 tokens at most, and llama.cpp refuses a longer input outright: one long
# hand-written recap would fail its whole batch again and again.
MAX_CHARS = 1600
OPERATION_HEADER = "X-Recap-Proxy-Operation"


class EmbeddingClient:
    def __init__(self, settings: EmbeddingSettings, upstream: Upstream) -> None:
        self.settings = settings
        self.upstream = upstream
        base = URL(settings.base_url or "http://127.0.0.1")
        if settings.kind() == "ollama":
            path = base.path.rstrip("/")
            self.url = base.with_path((path if path.endswith("/api") else path + "/api") + "/embed")
        else:
            self.url = base.with_path(base.path.rstrip("/") + "/embeddings")
        self.headers = {"Content-Type": "application/json", OPERATION_HEADER: OPERATION}
        if settings.api_key is not None:
            self.headers["Authorization"] = f"Bearer {settings.api_key.get_secret_value()}"

    async def embed(self, texts: Sequence[str]) -> tuple[list[Vector], int | None]:
        """One vector per text (unit length), and the prompt tokens the API counted."""
        settings = self.settings
        body: dict[str, Any] = {"input": [text[:MAX_CHARS] for text in texts]}
        if settings.model:
            body["model"] = settings.model
        if settings.kind() == "openai":
            body["encoding_format"] = "float"
            if settings.dimensions:
                body["dimensions"] = settings.dimensions
        try:
            async with asyncio.timeout(settings.timeout_seconds):
                response = await self.upstream.send_to(
                    "POST", self.url, self.headers.items(), orjson.dumps(body)
                )
                raw = await response.read()
                response.release()
        except TimeoutError:
            raise EmbeddingFailure(f"no answer in {settings.timeout_seconds:.0f} s") from None
        except UpstreamError as exc:
            raise EmbeddingFailure(str(exc)) from None
        if response.status != 200:
            raise EmbeddingFailure(f"{response.status} from {self.url}: {short(raw)}")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise EmbeddingFailure(f"not JSON from {self.url}: {short(raw)}") from None
        vectors, tokens = _vectors(data)
        if len(vectors) != len(texts):
            raise EmbeddingFailure(f"{len(vectors)} vectors for {len(texts)} texts from {self.url}")
        return [unit(v) for v in vectors], tokens


def _vectors(data: object) -> tuple[list[list[float]], int | None]:
    """The vectors of an OpenAI-style (`data[].embedding`, by `index`) or Ollama-style
    (`embeddings`) answer, and its token count."""
    if not isinstance(data, dict):
        raise EmbeddingFailure("the answer is not a JSON object")
    if isinstance(data.get("embeddings"), list):
        found = data["embeddings"]
        tokens = data.get("prompt_eval_count")
    elif isinstance(data.get("data"), list):
        items = sorted(data["data"], key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
        found = [d.get("embedding") if isinstance(d, dict) else None for d in items]
        usage = data.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    else:
        raise EmbeddingFailure(
            f"no `data` or `embeddings` in the answer: {short(orjson.dumps(data))}"
        )
    vectors: list[list[float]] = []
    for vector in found:
        if (
            not isinstance(vector, list)
            or not vector
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector)
        ):
            raise EmbeddingFailure("a vector in the answer is not a list of numbers")
        vectors.append([float(x) for x in vector])
    return vectors, tokens if isinstance(tokens, int) else None
