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
    finish_reason: str | None = None

    @property
    def cut_off(self) -> bool:
        """The model stopped at the answer limit: the text is incomplete, whatever it
        looks like (OpenAI `length`, Anthropic-style `max_tokens`)."""
        return self.finish_reason in ("length", "max_tokens")


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

    def answer_limit(self, operation: Operation) -> int:
        """The `max_tokens` an operation's first call asks for."""
        override = self.settings.operations.get(Operation(operation).value)
        if override is not None and override.max_tokens is not None:
            return override.max_tokens
        return self.settings.max_tokens

    @property
    def limit_cap(self) -> int:
        """The largest answer limit a cut-off answer may be retried with."""
        return self.settings.max_tokens_cap

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
        *,
        max_tokens: int | None = None,
    ) -> Answer:
        """One completion (asked for without streaming; a streamed answer is read too).
        `max_tokens` overrides the configured answer limit (a retry after a cut-off).
        Failures raise `JobFailure` (retryable or not)."""
        operation = Operation(operation)
        upstream, headers, model = self.endpoint(operation, chat_id)
        override = self.settings.operations.get(operation.value)
        limit = max_tokens if max_tokens is not None else self.answer_limit(operation)
        body: dict[str, Any] = {
            "model": model,
            "messages": list(messages),
            "temperature": (
                override.temperature
                if override and override.temperature is not None
                else self.settings.temperature
            ),
            "max_tokens": limit,
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
        return read_answer(raw, model, operation)


def read_answer(raw: bytes, model: str, operation: str) -> Answer:
    """A chat completion, whole or as an SSE stream (some gateways stream whatever they
    are asked), with its `finish_reason`."""
    if raw.lstrip()[:5] == b"data:":
        return _streamed(raw, model, operation)
    try:
        data = orjson.loads(raw)
        choice = data["choices"][0]
        message = choice["message"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise JobFailure(f"{operation}: not a chat completion: {_short(raw)}") from None
    text = message.get("content") or ""
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    finish = choice.get("finish_reason")
    return Answer(
        str(text),
        str(reasoning),
        str(data.get("model") or model),
        str(finish) if finish is not None else None,
    )


def _streamed(raw: bytes, model: str, operation: str) -> Answer:
    text: list[str] = []
    reasoning: list[str] = []
    finish: str | None = None
    for line in raw.splitlines():
        line = line.strip()
        if not line.startswith(b"data:"):
            continue  # comments, `event:` lines, blank separators
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        try:
            event = orjson.loads(data)
            choice = event["choices"][0]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            continue  # keep-alives and usage-only events carry no choice
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") or {}
        text.append(str(delta.get("content") or ""))
        reasoning.append(str(delta.get("reasoning_content") or delta.get("reasoning") or ""))
        model = str(event.get("model") or model)
        if choice.get("finish_reason") is not None:
            finish = str(choice["finish_reason"])
    if not text:
        raise JobFailure(f"{operation}: not a chat completion stream: {_short(raw)}")
    return Answer("".join(text), "".join(reasoning), model, finish)


def _short(raw: bytes) -> str:
    return " ".join(raw[:300].decode("utf-8", "replace").split())
