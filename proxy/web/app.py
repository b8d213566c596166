"""`make_app`: wires the owners together. It only wires."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from proxy.cassette import Recorder
from proxy.core.tokens import TokenCounter
from proxy.injection import Injector, load_injection_template, policy_from
from proxy.providers import MemoryProvider, NoMemory
from proxy.settings import Settings
from proxy.upstream import Upstream
from proxy.web.keys import INJECTOR, RELAY, SETTINGS
from proxy.web.relay import Relay
from proxy.web.routes import add_routes

# ST sends the whole prompt in one body; 100k-token chats are several MB.
MAX_BODY_BYTES = 256 * 1024 * 1024


def make_app(
    settings: Settings,
    *,
    upstream: Upstream | None = None,
    provider: MemoryProvider | None = None,
    recorder: Recorder | None = None,
    counter: TokenCounter | None = None,
) -> web.Application:
    """The proxy application. Every owner can be injected (tests pass fakes)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    upstream = upstream or Upstream(settings.upstream)
    if recorder is None and settings.server.record_dir is not None:
        recorder = Recorder(settings.server.record_dir)
    relay = Relay(upstream, recorder)
    app[SETTINGS] = settings
    app[RELAY] = relay
    injector = Injector(
        policy_from(settings.injection),
        load_injection_template(settings.injection),
        provider or NoMemory(),
        counter,
    )
    app[INJECTOR] = injector

    async def upstream_ctx(app: web.Application) -> AsyncIterator[None]:
        async with upstream:
            yield
            await relay.drain()

    async def tokenizer_ctx(app: web.Application) -> AsyncIterator[None]:
        # Off the loop, before the first request needs it.
        await asyncio.to_thread(injector.counter.warm_up)
        yield

    app.cleanup_ctx.append(upstream_ctx)
    app.cleanup_ctx.append(tokenizer_ctx)
    add_routes(app)
    return app
