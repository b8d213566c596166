"""The LLM client for the proxy's own work (recaps, scene detection).

OpenAI-compatible chat completions through `proxy.upstream.upstreams`. By default a chat's own work
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
from dataclasses import dataclass, replace
from typing import Any

import orjson
from pydantic import SecretStr
from yarl import URL

from proxy.core.headers import safe_url
from proxy.core.models import Caller, PromptWriter
from proxy.core.operations import Operation
from proxy.errors import JobFailure, NoCredentials, Refused, Unauthorized, UpstreamError
from proxy.memory.calls.answers import Answer, read_answer, read_anthropic, short
from proxy.memory.calls.shapes import (
    Forms,
    chat_fields,
    completion_fields,
    refused,
)
from proxy.memory.calls.textcalls import (
    NO_ROUTE,
    anthropic_messages,
    completion_body,
    completion_path,
    read_completion,
)
from proxy.settings.memory import LLMSettings, StructuredOutput
from proxy.upstream.upstreams import Upstream

log = logging.getLogger(__name__)

OPERATION_HEADER = "X-Recap-Proxy-Operation"


ANTHROPIC = "anthropic_messages"
TEXT = "text_completions"
ANTHROPIC_VERSION = "2023-06-01"
_DIRECT = Caller(None)  # a chat seen through `upstream.base_url` as OpenAI chat


# Not frozen: built for every chat request (see proxy.core.models).
@dataclass(slots=True)
class Credentials:
    """What a chat's latest request used: kept in memory only."""

    authorization: str | None
    caller: Caller = _DIRECT  # its model, wire format and route
    api_key: str | None = None  # `x-api-key` (Anthropic's)
    version: str | None = None  # `anthropic-version`


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where one call goes and how it is spoken."""

    upstream: Upstream
    url: URL
    headers: dict[str, str]
    model: str
    anthropic: bool = False
    # A text completion server's endpoint (its path, e.g. `/api/v1/generate`) and how
    # to write the prompt for it; "" for chat completions.
    completion: str = ""
    writer: PromptWriter | None = None
    server: str = ""  # a text completion server's root URL

    @property
    def server_key(self) -> str:
        """The server this call goes to, as the shape's refusal is remembered by."""
        return self.server or str(self.url.origin())


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
        # A branch's (or checkpoint's) parent, by the branch's id: a branch with no request
        # of its own calls with its parent's key and model. ST's requests of a branch made
        # at the parent's newest message are the parent's too, and tell neither chat apart.
        self._parents: dict[str, str] = {}
        # Text completion servers (their root URL) found to have no chat route.
        self._no_chat: set[str] = set()
        # The shape's form each server takes, once one refused the configured form.
        self._forms = Forms()

    @property
    def upstream_name(self) -> str:
        """Which API the proxy's own calls go to (the queue limits calls per API)."""
        # Stored with each job: never a `user:password@` of the base URL.
        return safe_url(str((self.own_upstream or self.chat_upstream).base_url))

    def remember(self, chat_id: str, headers: Mapping[str, str], caller: Caller) -> bool:
        """Keep the key, model and way of a chat's latest request (the chat path calls
        this); True when the chat had none before."""
        new = chat_id not in self._credentials
        self._credentials[chat_id] = Credentials(
            headers.get("Authorization"),
            caller,
            headers.get("x-api-key"),
            headers.get("anthropic-version"),
        )
        return new

    def renamed(self, old: str, new: str) -> bool:
        """ST renamed a chat: its key and model are the renamed chat's. True when that gave
        the chat (by its new id) a model it had none of."""
        had = self.can_call(new)  # before anything moves: a branch's may come by its parent
        parent = self._parents.pop(old, None)
        if parent is not None:
            self._parents.setdefault(new, parent)
        for branch, of in self._parents.items():
            if of == old:
                self._parents[branch] = new
        known = self._credentials.pop(old, None)
        if known is not None:
            self._credentials.setdefault(new, known)  # a request under the new name is newer
        return not had and self.can_call(new)

    def kin(self, branch: str, parent: str) -> bool:
        """`branch` was made from `parent` (`main_chat`): until a request of its own comes,
        it calls with the parent's key and model. True when that gave it a model it had
        none of."""
        had = self.can_call(branch)
        self._parents[branch] = parent
        return not had and self.can_call(branch)

    def heirs(self, parent: str) -> list[str]:
        """The branches of `parent` that call with its key and model (none of their own)."""
        return [b for b, p in self._parents.items() if p == parent and b not in self._credentials]

    def _known(self, chat_id: str) -> Credentials | None:
        known = self._credentials.get(chat_id)
        if known is None and chat_id in self._parents:
            known = self._credentials.get(self._parents[chat_id])
        return known

    def secrets(self) -> set[str]:
        """Every key this client may send: redacted from whatever it reports."""
        found = {c.authorization.partition(" ")[2] or c.authorization
                 for c in self._credentials.values() if c.authorization}  # fmt: skip
        found |= {c.api_key for c in self._credentials.values() if c.api_key}
        found |= {t.api_key for t in self.chat_upstream.routes if t.api_key}
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
        known = self._known(chat_id)
        return known is not None and known.caller.model is not None

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

    def endpoint(self, operation: Operation, chat_id: str) -> Endpoint:
        """Where a call goes, with which headers and model; raises `NoCredentials` when
        nothing says which model or key to use yet (no request of this chat seen since
        start-up). A chat's own API is spoken in its own format: a Claude chat's memory is
        written through the Messages API of the route it came by."""
        operation = Operation(operation)
        known = self._known(chat_id) or Credentials(None)
        override = self.settings.operations.get(operation.value)
        model = (override.model if override else None) or self.settings.model or known.caller.model
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
            url = self.own_upstream.url_for("chat/completions")
            return Endpoint(self.own_upstream, url, headers, model)
        target = self.chat_upstream.route(known.caller.route)
        if known.caller.api == ANTHROPIC:
            headers["anthropic-version"] = known.version or ANTHROPIC_VERSION
            api_key = target.api_key or known.api_key
            if api_key:
                headers["x-api-key"] = api_key
            if known.authorization and target.api_key is None:
                headers["Authorization"] = known.authorization
            url = target.url_for("/v1/messages")
            return Endpoint(self.chat_upstream, url, headers, model, anthropic=True)
        if target.api_key is not None:
            headers["Authorization"] = f"Bearer {target.api_key}"
        elif known.authorization:
            headers["Authorization"] = known.authorization
        if known.caller.api != TEXT:
            url = target.url_for("/v1/chat/completions")
            return Endpoint(self.chat_upstream, url, headers, model)
        # A text completion server (KoboldCpp, llama.cpp, Ollama, text-generation-webui)
        # also answers OpenAI chat completions, at `/v1` on the server itself; one that
        # does not gets the chat's own completion endpoint and template.
        writer = known.caller.writer if known.caller.path else None
        server = str(target.root_url("/"))
        if server in self._no_chat and writer is not None:
            path = completion_path(known.caller.path)
            url = target.url_for(path)
            return Endpoint(self.chat_upstream, url, headers, model, completion=path,
                            writer=writer, server=server)  # fmt: skip
        url = target.root_url("/v1/chat/completions")
        return Endpoint(self.chat_upstream, url, headers, model, writer=writer, server=server)

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
        end = self.endpoint(operation, chat_id)
        override = self.settings.operations.get(operation.value)
        limit = max_tokens if max_tokens is not None else self.answer_limit(operation)
        temperature = (
            override.temperature
            if override and override.temperature is not None
            else self.settings.temperature
        )
        # A turn to start is a chat's (a text completion server's prompt has none).
        prefill = "" if end.completion or override is None else override.prefill or ""
        asked = [*messages, {"role": "assistant", "content": prefill}] if prefill else messages
        status, raw = await self._shaped(end, asked, limit, temperature, operation)
        if status in NO_ROUTE and end.writer is not None and not end.completion:
            # The server completes text only: from now on its chats' calls go there, with
            # the prompt as it was (a text completion has no turn to start; no prefill).
            log.info("%s has no chat completions route: the proxy's own calls for its "
                     "chats go to its completion endpoint", end.server)  # fmt: skip
            self._no_chat.add(end.server)
            end = self.endpoint(operation, chat_id)
            prefill = ""
            status, raw = await self._shaped(end, messages, limit, temperature, operation)
        if status in (401, 403):
            raise Unauthorized(f"{operation}: the API answered {status}: {short(raw)}")
        if status == 429 or status >= 500:
            raise JobFailure(f"{operation}: the API answered {status}: {short(raw)}")
        # Where it went, for the two failures a wrong base URL makes (a 404, another
        # server's answer): the path the proxy built on it is what to check.
        where = safe_url(str(end.url))
        if status >= 400:
            # The same request would be refused again.
            raise Refused(
                f"{operation}: the API refused the call ({status}) at {where}: {short(raw)}"
            )
        try:
            answer = self._read(end, raw, operation)
        except JobFailure as exc:
            raise JobFailure(f"{exc} (the answer of {where})") from None
        # The model went on from the start it was given (Claude's `{`, a prefill).
        start = prefill or ("{" if end.anthropic and self._form(end) != "off" else "")
        if start and not answer.text.lstrip().startswith(start.strip()):
            answer = replace(answer, text=start + answer.text)
        return answer

    def _read(self, end: Endpoint, raw: bytes, operation: Operation) -> Answer:
        if end.anthropic:
            return read_anthropic(raw, end.model, operation)
        if end.completion:
            done = read_completion(end.completion, raw)
            if done is None:
                raise JobFailure(f"{operation}: not a completion: {short(raw)}")
            return Answer(done.text, "", end.model, done.finish_reason)
        return read_answer(raw, end.model, operation)

    def _form(self, end: Endpoint) -> StructuredOutput:
        """How this call asks the server to keep the answer in shape ("off": not at all)."""
        return self._forms.form(end.server_key, self.settings.structured_output)

    async def _shaped(
        self,
        end: Endpoint,
        messages: Sequence[Mapping[str, str]],
        limit: int,
        temperature: float,
        operation: Operation,
    ) -> tuple[int, bytes]:
        """`_send`, in shape where the server takes it: a server that refuses the shape's
        parameter is asked again in a weaker form or without it, and from then on (said
        once a form)."""
        chat = not (end.anthropic or end.completion)
        if chat and self._forms.unasked(end.server_key, self.settings.structured_output):
            await self._forms.ask(end.upstream, end.url, end.server_key)
        form = self._form(end)
        while True:
            status, raw = await self._send(end, messages, limit, temperature, operation, form)
            if form == "off" or not refused(status, raw):
                return status, raw
            configured = self.settings.structured_output
            form = self._forms.refused(end.server_key, form, configured, chat, status, raw)

    async def _send(
        self,
        end: Endpoint,
        messages: Sequence[Mapping[str, str]],
        limit: int,
        temperature: float,
        operation: Operation,
        form: StructuredOutput = "off",
    ) -> tuple[int, bytes]:
        body: dict[str, Any] = {
            "model": end.model,
            "messages": list(messages),
            "temperature": temperature,
            "max_tokens": limit,
            "stream": False,
        }
        override = self.settings.operations.get(operation.value)
        stops = override.stop if override else []
        if end.anthropic:
            system, turns = anthropic_messages(messages)
            if form != "off" and turns[-1]["role"] != "assistant":
                # Claude takes no schema: its answer is started for it.
                turns.append({"role": "assistant", "content": "{"})
            body["messages"] = turns
            if system:
                body["system"] = system
            if stops:
                body["stop_sequences"] = stops
        elif end.completion and end.writer is not None:
            prompt, own = end.writer(messages)
            body = completion_body(
                end.completion, prompt, [*own, *stops], end.model, limit, temperature
            )
            if form != "off":
                body.update(completion_fields(end.completion, operation, messages))
        else:
            body.update(chat_fields(operation, form, messages))
            if stops:
                body["stop"] = stops
        try:
            async with asyncio.timeout(self.settings.timeout_seconds):
                response = await end.upstream.send_to(
                    "POST", end.url, end.headers.items(), orjson.dumps(body)
                )
                try:
                    raw = await response.read()
                except BaseException:
                    # Given up on (the time limit, a stop): the connection is closed, so
                    # that the server stops generating an answer no one will read.
                    response.close()
                    raise
                response.release()
                return response.status, raw
        except TimeoutError:
            seconds = self.settings.timeout_seconds
            raise JobFailure(f"{operation}: no answer in {seconds:.0f} s") from None
        except UpstreamError as exc:
            raise JobFailure(f"{operation}: {exc}") from None
