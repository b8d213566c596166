"""The LLM client for the proxy's own work (recaps, scene detection).

OpenAI-compatible chat completions through `proxy.upstream`. By default a chat's own work
goes to that chat's upstream, with the model and `Authorization` of the chat's latest
proxied request; those are kept in memory only (never stored, never logged). `[memory.llm]`
can name another API, key and model, and override model and parameters per operation.
Every call carries `X-Recap-Proxy-Operation: <operation>` so that users can tell the
proxy's calls apart in their API logs and bills.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import SecretStr

from proxy.errors import JobFailure, NoCredentials, Refused, Unauthorized, UpstreamError
from proxy.memory.operations import Operation
from proxy.memory.settings import LLMSettings
from proxy.upstream import Upstream

log = logging.getLogger(__name__)

OPERATION_HEADER = "X-Recap-Proxy-Operation"


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a chat's latest request used: kept in memory only."""

    authorization: str | None
    model: str | None


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    reasoning: str
    model: str


class LLMClient:
    """Calls an LLM for one operation of one chat."""

    def __init__(
        self, settings: LLMSettings, chat_upstream: Upstream, own_upstream: Upstream | None
    ) -> None:
        self.settings = settings
        self.chat_upstream = chat_upstream
        # Only when `[memory.llm] base_url` names another API; entered by the app.
        self.own_upstream = own_upstream
        self._credentials: dict[str, Credentials] = {}

    @property
    def upstream_name(self) -> str:
        """Which API the proxy's own calls go to (the queue limits calls per API)."""
        return str((self.own_upstream or self.chat_upstream).base_url)

    def remember(self, chat_id: str, headers: Mapping[str, str], model: str | None) -> bool:
        """Keep the key and model of a chat's latest request (the chat path calls this);
        True when the chat had none before."""
        new = chat_id not in self._credentials
        self._credentials[chat_id] = Credentials(headers.get("Authorization"), model)
        return new

    def secrets(self) -> set[str]:
        """Every key this client may send: redacted from whatever it reports."""
        found = {c.authorization.partition(" ")[2] or c.authorization
                 for c in self._credentials.values() if c.authorization}  # fmt: skip
        for key in (self.chat_upstream.api_key, self.settings.api_key):
            if isinstance(key, SecretStr):
                key = key.get_secret_value()
            if key:
                found.add(key)
        return found

    def can_call(self, chat_id: str) -> bool:
        """Whether a model for this chat's calls is known (configured, or remembered)."""
        if self.settings.model is not None:
            return True
        known = self._credentials.get(chat_id)
        return known is not None and known.model is not None

    def endpoint(self, operation: Operation, chat_id: str) -> tuple[Upstream, dict[str, str], str]:
        """(upstream, headers, model) for a call; raises `NoCredentials` when nothing says
        which model or key to use yet (no request of this chat seen since start-up)."""
        operation = Operation(operation)
        known = self._credentials.get(chat_id, Credentials(None, None))
        override = self.settings.operations.get(operation.value)
        model = (override.model if override else None) or self.settings.model or known.model
        if model is None:
            raise NoCredentials(
                "no model for the proxy's own calls yet: set [memory.llm] model, or chat "
                "once through the proxy so that it can use the chat's own"
            )
        headers = {"Content-Type": "application/json", OPERATION_HEADER: operation.value}
        if self.own_upstream is not None:
            key = self.settings.api_key
            if key is not None:
                headers["Authorization"] = f"Bearer {key.get_secret_value()}"
            return self.own_upstream, headers, model
        if self.chat_upstream.api_key is None and known.authorization:
            headers["Authorization"] = known.authorization
        elif self.chat_upstream.api_key is not None:
            headers["Authorization"] = f"Bearer {self.chat_upstream.api_key}"
        return self.chat_upstream, headers, model

    async def complete(
        self,
        operation: Operation,
        chat_id: str,
        messages: Sequence[Mapping[str, str]],
    ) -> Answer:
        """One non-streaming completion. Failures raise `JobFailure` (retryable or not)."""
        operation = Operation(operation)
        upstream, headers, model = self.endpoint(operation, chat_id)
        override = self.settings.operations.get(operation.value)
        body: dict[str, Any] = {
            "model": model,
            "messages": list(messages),
            "temperature": (
                override.temperature
                if override and override.temperature is not None
                else self.settings.temperature
            ),
            "max_tokens": (
                override.max_tokens
                if override and override.max_tokens is not None
                else self.settings.max_tokens
            ),
            "stream": False,
        }
        try:
            async with asyncio.timeout(self.settings.timeout_seconds):
                response = await upstream.send(
                    "POST", "chat/completions", "", headers.items(), orjson.dumps(body)
                )
                try:
                    raw = await response.read()
                finally:
                    response.release()
        except TimeoutError:
            seconds = self.settings.timeout_seconds
            raise JobFailure(f"{operation}: no answer in {seconds:.0f} s") from None
        except UpstreamError as exc:
            raise JobFailure(f"{operation}: {exc}") from None
        if response.status in (401, 403):
            raise Unauthorized(f"{operation}: the API answered {response.status}: {_short(raw)}")
        if response.status == 429 or response.status >= 500:
            raise JobFailure(f"{operation}: the API answered {response.status}: {_short(raw)}")
        if response.status >= 400:
            # The same request would be refused again.
            raise Refused(
                f"{operation}: the API refused the call ({response.status}): {_short(raw)}"
            )
        return _answer(raw, model, operation)


def _answer(raw: bytes, model: str, operation: str) -> Answer:
    try:
        data = orjson.loads(raw)
        message = data["choices"][0]["message"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise JobFailure(f"{operation}: not a chat completion: {_short(raw)}") from None
    text = message.get("content") or ""
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    return Answer(str(text), str(reasoning), str(data.get("model") or model))


def _short(raw: bytes) -> str:
    return " ".join(raw[:300].decode("utf-8", "replace").split())
