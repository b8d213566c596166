"""Routes of the proxy: `/v1/<rest>` to the upstream, chat formats through their adapter."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, unquote

from aiohttp import web

from adapters import Formats
from proxy.chat.injection import Injector
from proxy.chat.lore import LoreService
from proxy.core.headers import safe_url
from proxy.core.models import ChatMessage, Identification
from proxy.errors import NotFound, RequestError
from proxy.library.chats import ChatLibrary
from proxy.memory.engine import MemoryEngine
from proxy.observe.events import EventBus
from proxy.runtime.runtime import Runtime
from proxy.web.guard import api_headers
from proxy.web.relay import Relay

log = logging.getLogger(__name__)

API_PREFIX = "/v1"
CHAT_HEADER = "X-Recap-Chat"
INJECTED_HEADER = "X-Recap-Injected"
TRIMMED_HEADER = "X-Recap-Trimmed"
_SLASHES = re.compile(r"/{2,}")
_SEPARATORS = re.compile(r"[/\\]")
# What makes a path need the slow look: a doubled slash, an escape, a dot, a backslash.
# One regular expression (a single C call on every request), not a generator of tests.
_SPECIAL = re.compile(r"//|%|\.|\\")


def proxied_path(raw_path: str) -> str:
    """`/v1//chat/completions` -> `/v1/chat/completions`: the path to forward, slashes folded.

    ST builds its URL as `<custom_url>/chat/completions`, so a URL typed with a trailing
    slash arrives with a doubled one.
    """
    if raw_path[:1] == "/" and _SPECIAL.search(raw_path) is None:
        return raw_path  # nothing to fold, decode or refuse: every chat request's case
    path = "/" + _SLASHES.sub("/", raw_path).lstrip("/")
    # `.` and `..`, written or percent-encoded, would climb out of the upstream's base URL
    # once the upstream decodes them: they never go there. Nor does one hidden behind an
    # encoded separator (`..%2f`, `..%5c`), which some servers decode into a real one.
    for segment in path.split("/"):
        decoded = unquote(segment)
        if any(part in (".", "..") for part in _SEPARATORS.split(decoded)):
            raise RequestError("a path segment `.` or `..` (encoded or not) is not forwarded")
    return path


async def read_body(request: web.Request) -> bytes:
    """A chat request's body, read as `request.read()` reads it (a body over the app's
    `client_max_size` is its 413) but not kept on the request. `read` keeps it there until
    the handler returns, which for a chat request is once its answer has streamed: the body
    ST sent (330 KiB for a 100k-token chat) held for as long as the answer lasts, though
    only the body sent upstream is needed once that is made."""
    limit = request.client_max_size
    content = request.content
    parts: list[bytes] = []
    size = 0
    while chunk := await content.readany():
        size += len(chunk)
        if limit and size > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
        parts.append(chunk)
    return b"".join(parts)


@lru_cache(maxsize=256)
def _header_value(chat_id: str) -> str:
    """`X-Recap-Chat`: the chat id percent-encoded (a header is Latin-1, ids are not)."""
    return quote(chat_id, safe="")


@dataclass(frozen=True, slots=True)
class ChatRoutes:
    """`/` and every path that goes upstream, with the parts they use."""

    relay: Relay
    formats: Formats
    injector: Injector
    events: EventBus
    library: ChatLibrary | None = None
    engine: MemoryEngine | None = None
    lore: LoreService | None = None

    async def forward(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        relay = self.relay
        raw_path = request.rel_url.raw_path
        target, path = relay.upstream.resolve(proxied_path(raw_path))
        adapter = self.formats.for_path(path) if request.method == "POST" else None
        headers = api_headers(request)
        if adapter is None:
            body = await request.read() if request.body_exists else None
            exchange = relay.start_exchange(request, body or b"")
            return await relay.forward(
                request, target, path, body, headers, exchange=exchange, arrived=arrived
            )

        raw = await read_body(request)
        exchange = relay.start_exchange(request, raw)
        injector = self.injector
        # `where`: for a log line, if any (a chat format's requests are all POSTs).
        outcome = await injector.prepare(
            adapter, raw, headers, where="POST " + raw_path, route=target.prefix, path=path
        )
        tokens = outcome.tokens  # summed over the parts: once
        extra = [
            (CHAT_HEADER, _header_value(outcome.chat_id or "")),
            (INJECTED_HEADER, str(tokens)),
            (TRIMMED_HEADER, str(len(outcome.dropped))),
        ]
        identity = outcome.memory.identity if outcome.memory is not None else None
        # Counted once the request is on its way: the model takes far longer to answer than
        # this takes, and the time to the answer's first byte is what ST waits on.
        asyncio.get_running_loop().call_soon(
            self._account, identity, outcome.messages, tokens, len(outcome.dropped)
        )
        if exchange is not None and outcome.insertions:
            exchange.meta["insertions"] = [
                {"part": i.part, "index": i.index, "role": i.role.value, "tokens": i.tokens}
                for i in outcome.insertions
            ]
        body = outcome.body
        # The parsed request (its messages: most of a megabyte for a 100k-token chat) and the
        # body as ST sent it go now, not when the answer has streamed: only the bytes sent
        # upstream are kept (and the injector keeps the newest parsed request of each format,
        # for the next one to build on; a cassette being recorded keeps the body ST sent).
        del outcome, raw
        try:
            return await relay.forward(
                request,
                target,
                path,
                body,
                headers,
                extra=extra,
                exchange=exchange,
                wire=adapter.name,
                arrived=arrived,
            )
        finally:
            engine = self.engine
            if identity is not None and engine is not None:
                engine.answered(identity.chat_id)  # the chat's upkeep may go on

    def _account(
        self,
        identity: Identification | None,
        messages: Sequence[ChatMessage],
        tokens: int,
        left_out: int,
    ) -> None:
        """A chat request's metrics, health, lorebook snapshot and `request` event."""
        try:
            relay = self.relay
            if identity is not None:
                seen = "identified"
            else:
                seen = "unidentified" if self.library is not None else "no_memory"
            relay.metrics.chat_request(seen, tokens, left_out)
            if seen != "no_memory":
                relay.vitals.saw(seen)
            if identity is None:
                return
            lore = self.lore
            if lore is not None:
                lore.record_later(identity, messages)
            self.events.publish(
                "request",
                chat=identity.chat_id,
                generation=identity.generation,
                target=identity.target_message,
                injected=tokens,
                left_out=left_out,
            )
        except Exception:
            # Bookkeeping: the request it counts is under way, and must stay so.
            log.exception("accounting for a chat request failed")

    async def root(self, request: web.Request) -> web.Response:
        library = self.library
        data_dir = library.data_dir if library is not None else None
        return web.json_response(
            {
                "service": "recap-proxy",
                "upstream": safe_url(str(self.relay.upstream.base_url)),
                # ST's data folder it reads (null: none), which the CLI never writes into.
                "st_data": str(data_dir) if data_dir is not None else None,
                "hint": "in SillyTavern, set the Custom (OpenAI-compatible) endpoint or the "
                f"Claude/OpenAI reverse proxy to {request.url.origin()}{API_PREFIX}, or a Text "
                f"Completion server URL to {request.url.origin()}",
                "dashboard": f"{request.url.origin()}/recap/",
            }
        )


async def handle_unknown(request: web.Request) -> web.Response:
    raise NotFound(f"no such page of recap-proxy: {request.rel_url.raw_path}")


def add_routes(app: web.Application, runtime: Runtime, relay: Relay) -> None:
    """`/` and `/recap/...` are the proxy's own; every other path goes upstream."""
    routes = ChatRoutes(
        relay,
        runtime.formats,
        runtime.injector,
        runtime.events,
        runtime.library,
        runtime.engine,
        runtime.lore,
    )
    app.router.add_get("/", routes.root)
    app.router.add_route("*", "/recap", handle_unknown)
    app.router.add_route("*", "/recap/{tail:.*}", handle_unknown)
    app.router.add_route("*", "/{tail:.*}", routes.forward)
