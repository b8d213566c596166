"""`make_app`: wires the owners together. It only wires."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path

from aiohttp import web

from adapters import formats
from proxy.chat.injection import (
    Injector,
    load_injection_templates,
    policy_from,
    template_problem,
)
from proxy.chat.lore import LoreService
from proxy.chat.providers import ChatMemory, MemoryProvider
from proxy.core.guard import GuardPolicy, LivePolicy
from proxy.core.tokens import TokenCounter
from proxy.library.chats import ChatLibrary, Refreshed
from proxy.library.watcher import Watcher
from proxy.memory.calls.llm import LLMClient
from proxy.memory.edits.actions import MemoryActions
from proxy.memory.engine import MemoryEngine
from proxy.memory.views.view import Frame
from proxy.observe.events import EventBus
from proxy.observe.logs import access_middleware
from proxy.observe.metrics import Metrics
from proxy.observe.vitals import Vitals
from proxy.runtime.reload import Reloader
from proxy.settings import Settings
from proxy.store import Store, file_error, unusable
from proxy.store.lock import StoreLock
from proxy.upstream.cassette import Recorder, configured_keys
from proxy.upstream.upstreams import Upstream
from proxy.waits import SERVING, Waits
from proxy.web.api import add_api_routes
from proxy.web.data_folder import resolve_data_dir, writes_outside
from proxy.web.errors import error_middleware
from proxy.web.events_api import add_event_routes
from proxy.web.guard import POLICY, add_cors_headers, guard_middleware
from proxy.web.health import add_health_routes
from proxy.web.keys import (
    ACTIONS,
    ENGINE,
    EVENTS,
    FORMATS,
    INJECTOR,
    LIBRARY,
    LORE,
    METRICS,
    QUEUE,
    RELAY,
    RELOADER,
    SETTINGS,
    STORE,
    VITALS,
    WATCHER,
)
from proxy.web.memory_api import add_memory_routes
from proxy.web.page import add_page_routes
from proxy.web.relay import Relay
from proxy.web.routes import add_routes

log = logging.getLogger(__name__)

# ST sends the whole prompt in one body; 100k-token chats are several MB.
MAX_BODY_BYTES = 256 * 1024 * 1024
INDEX_RETRY_S = 10.0  # seconds between reads of what a failing store did not take


def make_app(
    settings: Settings,
    *,
    store: Store | None = None,
    clock: Callable[[], float] | None = None,
    upstream: Upstream | None = None,
    provider: MemoryProvider | None = None,
    recorder: Recorder | None = None,
    counter: TokenCounter | None = None,
    events: EventBus | None = None,
    reload_from: Callable[[], Settings] | None = None,
    owns_logging: bool = False,
    waits: Waits = SERVING,
) -> web.Application:
    """The proxy application. Every owner can be injected (tests pass fakes): `provider`
    replaces the memory of ST's chats with a fixed one (no data folder is read);
    `reload_from` reads the settings again for a reload (default: the same settings, the
    templates read again); `owns_logging`: a reload sets the process's log level;
    `waits`: the pauses and time limits of the library, the watcher and the memory (tests
    set them small)."""
    # The error middleware is outermost: the guard's refusals are answered like any error;
    # the access log (when on) wraps them all, refusals included.
    middlewares = [error_middleware, guard_middleware]
    if settings.server.access_log:
        middlewares.insert(0, access_middleware)
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    app[POLICY] = LivePolicy(policy_of(settings))
    app.on_response_prepare.append(add_cors_headers)
    clock = clock or time.time
    data_dir = resolve_data_dir(settings) if provider is None else None
    if data_dir is not None:
        writes_outside(data_dir, settings, store is None, recorder is None)
    upstream = upstream or Upstream(settings.upstream)
    if recorder is None and settings.server.record_dir is not None:
        recorder = Recorder(
            settings.server.record_dir,
            max_body=int(settings.record.max_body_mb * 1024 * 1024),
            # The config's keys as a reload left them.
            secrets=lambda: configured_keys(app[RELOADER].current),
        )
    counter = counter or TokenCounter()
    bus = app[EVENTS] = events or EventBus()
    vitals = app[VITALS] = Vitals()
    if data_dir is not None and store is None:
        data_dir = _usable_store(settings, data_dir, vitals)
    store_path = settings.store.resolved_path() if data_dir is not None else None
    metrics = app[METRICS] = Metrics(store_path if store is None else _file_of(store))
    bus.listeners.append(metrics.on_event)
    relay = Relay(upstream, recorder, vitals, metrics)
    policy = policy_from(settings.injection)
    templates = load_injection_templates(settings.injection)
    problem = template_problem(templates)
    if problem is not None:
        log.warning("%s ([injection] template, template_file)", problem)
    own_upstream: Upstream | None = None
    engine: MemoryEngine | None = None
    library: ChatLibrary | None = None
    if data_dir is not None:
        store = store or Store(settings.store.resolved_path(), clock=clock)
        library = app[LIBRARY] = ChatLibrary(data_dir, store, freshness=waits.freshness)
        library.listeners.append(partial(announce_save, bus))
        lore = app[LORE] = LoreService(store, library)
        watcher = app[WATCHER] = Watcher(
            library,
            debounce_ms=settings.sillytavern.debounce_ms,
            force_polling=settings.sillytavern.force_polling,
            gone_poll=waits.gone_poll,
        )
        watcher.on_files.append(lore.invalidate)
        llm_settings = settings.memory.llm
        if llm_settings.base_url is not None:
            own_upstream = Upstream(
                settings.upstream.model_copy(update={"base_url": llm_settings.base_url})
            )
        llm = LLMClient(llm_settings, upstream, own_upstream)
        engine = app[ENGINE] = MemoryEngine(
            store,
            library,
            llm,
            settings.memory,
            settings.queue,
            policy,
            counter=counter,
            lore=lore,
            clock=clock,
            frame=Frame(sum(map(counter.count, templates.own_text())), templates.macros),
            events=bus,
            waits=waits,
        )
        app[QUEUE] = engine.queue
        app[ACTIONS] = MemoryActions(store, engine, library)
        provider = ChatMemory(library, engine=engine, first_request=waits.first_request)
    if store is not None:
        app[STORE] = store
    injector = Injector(policy, templates, provider, counter)
    app[RELOADER] = Reloader(
        reload_from or (lambda: settings),
        settings,
        injector,
        upstream,
        app[POLICY],
        policy_of,
        engine,
        counter,
        logs=owns_logging,
    )
    app[SETTINGS] = settings
    app[FORMATS] = formats(library.prompt_formats if library is not None else None)
    app[RELAY] = relay
    app[INJECTOR] = injector

    async def upstream_ctx(app: web.Application) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(upstream)
            if own_upstream is not None:
                await stack.enter_async_context(own_upstream)
            yield
            await relay.drain()

    async def events_ctx(app: web.Application) -> AsyncIterator[None]:
        bus.bind(asyncio.get_running_loop())
        yield

    async def tokenizer_ctx(app: web.Application) -> AsyncIterator[None]:
        # Off the loop, before the first request needs it.
        await asyncio.to_thread(injector.counter.warm_up)
        yield

    app.cleanup_ctx.append(events_ctx)
    app.cleanup_ctx.append(upstream_ctx)
    app.cleanup_ctx.append(tokenizer_ctx)
    if store is not None:
        app.cleanup_ctx.append(_memory_ctx(store, library, settings, engine, app.get(WATCHER)))
    add_page_routes(app)  # before the `/recap/...` catch-all
    add_health_routes(app)  # before the catch-all that goes upstream
    add_routes(app)
    add_event_routes(app)
    add_memory_routes(app)  # first: its routes are longer than the plain chat route
    add_api_routes(app)
    return app


def announce_save(bus: EventBus, result: Refreshed) -> None:
    """Library listener: a chat file was read anew (saved, renamed or deleted)."""
    if result.saved or result.events or result.entry is None or result.renamed_from:
        bus.publish("chat", chat=result.chat_id, deleted=result.entry is None,
                    changes=len(result.events))  # fmt: skip


def policy_of(settings: Settings) -> GuardPolicy:
    """Who may use the proxy, from `[server]`."""
    server = settings.server
    key = server.access_key.get_secret_value() if server.access_key is not None else None
    return GuardPolicy.of(server.host, server.allowed_origins, server.allowed_hosts, key)


def _usable_store(settings: Settings, data_dir: Path, vitals: Vitals) -> Path | None:
    """`data_dir`, or None when the store cannot be used (damaged, not a store, read-only,
    from a newer recap-proxy): chats still go upstream, without memory; `/health` says why."""
    path = settings.store.resolved_path()
    problem = unusable(path)
    if problem is None:
        return data_dir
    log.error(
        "the store %s cannot be used (%s): proxying without memory until it is mended "
        "(`recap-proxy doctor` says how)",
        path,
        problem,
    )
    vitals.store_problem = f"cannot use {path}: {problem}"
    return None


def _file_of(store: Store) -> Path | None:
    return None if str(store.path) == ":memory:" else Path(store.path)


def _memory_ctx(
    store: Store,
    library: ChatLibrary | None,
    settings: Settings,
    engine: MemoryEngine | None,
    watcher: Watcher | None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The store, then the engine, then indexing and the watch; stopped in reverse, and
    the store is closed however far the start got."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if engine is not None and str(store.path) != ":memory:":
                # First: a second proxy on this store must not even migrate it.
                listening = (settings.server.host, settings.server.port)
                stack.enter_context(StoreLock(store.path, listening))
            await stack.enter_async_context(store)
            if engine is not None:
                await stack.enter_async_context(engine)
            lore = app.get(LORE)
            if lore is not None:
                stack.push_async_callback(lore.drain)
            if library is not None and watcher is not None:
                await stack.enter_async_context(_watching(library, settings, watcher))
            yield

    return ctx


async def _index(library: ChatLibrary) -> None:
    try:
        count = await library.index_all()
        log.info("indexed %d SillyTavern chat(s) in %s", count, library.data_dir)
    except Exception as exc:
        if not file_error(exc):  # the store's own failure it has said itself
            log.exception("indexing %s failed", library.data_dir)


@contextlib.asynccontextmanager
async def _watching(
    library: ChatLibrary, settings: Settings, watcher: Watcher
) -> AsyncIterator[None]:

    async def index_then_watch() -> None:
        # In the background: the proxy serves at once; identification starts with
        # whatever is indexed so far. The watch started first so that no save made
        # during indexing is missed.
        if settings.sillytavern.watch and not watcher.gone:
            # (A folder not there yet is read whole by the watcher once it is.)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher.ready.wait(), 5)
        if not watcher.gone:
            await _index(library)
        # The store failing (a full disk) leaves chats behind their files, here or at a
        # save: they are read again once it takes writes, with no restart.
        while True:
            await library.fell_behind.wait()
            await asyncio.sleep(INDEX_RETRY_S)
            try:
                count = await library.catch_up()
            except Exception as exc:
                if not file_error(exc):
                    log.exception("reading chats again after the store failed went wrong")
                continue
            log.info("%d SillyTavern chat(s) read again now that the store takes them", count)

    if settings.sillytavern.watch and not settings.sillytavern.force_polling:
        # Before indexing, so that every chat it installs is followed from then on.
        library.follow_changes()
    if settings.sillytavern.watch:
        # Entered before the proxy serves (a look at the folder and a task): `/health`
        # says a folder not there yet is missing from the first request on.
        await watcher.__aenter__()
    task = asyncio.create_task(index_then_watch(), name="st-index")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await watcher.__aexit__(None, None, None)
        library.stop_following()
