"""`make_app`: wires the owners together. It only wires."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from aiohttp import web

from proxy.cassette import Recorder
from proxy.core.tokens import TokenCounter
from proxy.injection import Injector, load_injection_template, policy_from
from proxy.library import ChatLibrary
from proxy.llm import LLMClient
from proxy.lore import LoreService
from proxy.memory.engine import MemoryEngine
from proxy.providers import ChatMemory, MemoryProvider, NoMemory
from proxy.settings import Settings
from proxy.sillytavern.layout import find_data_dir, looks_like_data_dir
from proxy.upstream import Upstream
from proxy.watcher import Watcher
from proxy.web.api import add_api_routes
from proxy.web.keys import ENGINE, INJECTOR, LIBRARY, LORE, RELAY, SETTINGS
from proxy.web.memory_api import add_memory_routes
from proxy.web.relay import Relay
from proxy.web.routes import add_routes

log = logging.getLogger(__name__)

# ST sends the whole prompt in one body; 100k-token chats are several MB.
MAX_BODY_BYTES = 256 * 1024 * 1024


def make_app(
    settings: Settings,
    *,
    upstream: Upstream | None = None,
    provider: MemoryProvider | None = None,
    recorder: Recorder | None = None,
    counter: TokenCounter | None = None,
    library: ChatLibrary | None = None,
) -> web.Application:
    """The proxy application. Every owner can be injected (tests pass fakes)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    upstream = upstream or Upstream(settings.upstream)
    if recorder is None and settings.server.record_dir is not None:
        recorder = Recorder(settings.server.record_dir)
    relay = Relay(upstream, recorder)
    if library is None and provider is None:
        library = library_from(settings)
    counter = counter or TokenCounter()
    policy = policy_from(settings.injection)
    lore: LoreService | None = None
    engine: MemoryEngine | None = None
    own_upstream: Upstream | None = None
    if library is not None:
        app[LIBRARY] = library
        lore = app[LORE] = LoreService(library)
    if provider is None:
        markers = settings.injection.history_start_markers
        if library is not None:
            llm_settings = settings.memory.llm
            if llm_settings.base_url is not None:
                own_upstream = Upstream(
                    settings.upstream.model_copy(update={"base_url": llm_settings.base_url})
                )
            llm = LLMClient(llm_settings, upstream, own_upstream)
            engine = app[ENGINE] = MemoryEngine(
                library, llm, settings.memory, settings.queue, policy, counter=counter, lore=lore
            )
            provider = ChatMemory(library, markers, engine=engine)
        else:
            provider = NoMemory()
    injector = Injector(policy, load_injection_template(settings.injection), provider, counter)
    app[SETTINGS] = settings
    app[RELAY] = relay
    app[INJECTOR] = injector

    async def upstream_ctx(app: web.Application) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(upstream)
            if own_upstream is not None:
                await stack.enter_async_context(own_upstream)
            yield
            await relay.drain()

    async def tokenizer_ctx(app: web.Application) -> AsyncIterator[None]:
        # Off the loop, before the first request needs it.
        await asyncio.to_thread(injector.counter.warm_up)
        yield

    app.cleanup_ctx.append(upstream_ctx)
    app.cleanup_ctx.append(tokenizer_ctx)
    if library is not None:
        app.cleanup_ctx.append(_library_ctx(library, settings, lore, engine))
    add_routes(app)
    add_memory_routes(app)  # first: its routes are longer than the plain chat route
    add_api_routes(app)
    return app


def library_from(settings: Settings) -> ChatLibrary | None:
    """The chat library for ST's data folder, or None (logged) when there is none."""
    data_dir = resolve_data_dir(settings)
    if data_dir is None:
        return None
    return ChatLibrary(data_dir, settings.store.resolved_path())


def resolve_data_dir(settings: Settings) -> Path | None:
    configured = settings.sillytavern.data_dir
    if configured is not None:
        if not configured.is_dir():
            log.error(
                "SillyTavern data folder %s does not exist; proxying without memory", configured
            )
            return None
        if not looks_like_data_dir(configured):
            log.warning(
                "%s has no <user>/chats folder yet; is it ST's data/ folder? watching it anyway",
                configured,
            )
        return configured
    found = find_data_dir(Path.home(), Path.cwd(), dict(os.environ))
    if found is None:
        log.warning(
            "no SillyTavern data folder found in the usual places; set sillytavern.data_dir "
            "(or --st-data) for memory. Proxying without memory."
        )
    else:
        log.info("using SillyTavern data folder %s", found)
    return found


def _library_ctx(
    library: ChatLibrary,
    settings: Settings,
    lore: LoreService | None,
    engine: MemoryEngine | None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        await library.open()
        if engine is not None:
            await engine.__aenter__()
        watcher = Watcher(
            library,
            debounce_ms=settings.sillytavern.debounce_ms,
            force_polling=settings.sillytavern.force_polling,
        )
        if lore is not None:
            watcher.on_files.append(lore.invalidate)

        async def index_then_watch() -> None:
            # In the background: the proxy serves at once; identification starts with
            # whatever is indexed so far. The watch starts first so that no save made
            # during indexing is missed.
            if settings.sillytavern.watch:
                await watcher.__aenter__()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(watcher.ready.wait(), 5)
            try:
                count = await library.index_all()
                log.info("indexed %d SillyTavern chat(s) in %s", count, library.data_dir)
            except Exception:
                log.exception("indexing %s failed", library.data_dir)

        task = asyncio.create_task(index_then_watch(), name="st-initial-index")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await watcher.__aexit__(None, None, None)
            if engine is not None:
                await engine.__aexit__(None, None, None)
            if lore is not None:
                await lore.drain()
            await asyncio.to_thread(library.close)

    return ctx
