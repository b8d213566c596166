"""The running program: every part built once from the settings, started and stopped in
order, and reloaded in place.

`build_runtime` makes the parts (the web layer only wires routes to them, `proxy.web.app`);
`Runtime.running` starts them bottom up (the event bus, the upstreams, the tokenizer, the
store's lock and the store, the engine, the watch) and stops them top down, the store
closed however far the start got. Every part can be passed in instead (tests pass fakes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from adapters import Formats, formats
from proxy.chat.injection import Injector, load_injection_templates, policy_from, template_problem
from proxy.chat.lore import LoreService
from proxy.chat.providers import ChatMemory, MemoryProvider
from proxy.core.guard import GuardPolicy, LivePolicy
from proxy.core.plan import InjectionPolicy
from proxy.core.tokens import TokenCounter
from proxy.errors import ConfigError
from proxy.library.chats import ChatLibrary, Refreshed
from proxy.library.watcher import Watcher
from proxy.memory.calls.embeddings import EmbeddingClient
from proxy.memory.calls.jobs import JobQueue
from proxy.memory.calls.llm import LLMClient
from proxy.memory.edits.actions import MemoryActions
from proxy.memory.embedder import Embedder
from proxy.memory.engine import MemoryEngine
from proxy.memory.views.view import Frame
from proxy.observe.events import EventBus
from proxy.observe.metrics import Metrics
from proxy.observe.vitals import Vitals
from proxy.runtime.data_folder import resolve_data_dir, writes_outside
from proxy.runtime.reload import Reloader
from proxy.runtime.watching import watching
from proxy.settings import Settings
from proxy.store import Store, unusable
from proxy.store.lock import StoreLock
from proxy.upstream.cassette import Recorder, configured_keys
from proxy.upstream.upstreams import Upstream
from proxy.waits import SERVING, Waits

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Memory:
    """The parts that exist only with a usable store and ST's data folder."""

    store: Store
    library: ChatLibrary
    lore: LoreService
    watcher: Watcher
    engine: MemoryEngine
    actions: MemoryActions


@dataclass(slots=True)
class Runtime:
    """The running program's parts, one owner each."""

    settings: Settings
    upstream: Upstream
    counter: TokenCounter
    events: EventBus
    vitals: Vitals
    metrics: Metrics
    policy: LivePolicy
    injector: Injector
    reloader: Reloader
    formats: Formats
    recorder: Recorder | None = None
    waits: Waits = SERVING
    # The memory LLM's own API, when `[memory.llm] base_url` is not the upstream.
    own_upstream: Upstream | None = None
    # The embeddings API (`[memory.embeddings] base_url`), when set.
    embed_upstream: Upstream | None = None
    # A store with no memory: one a test passes with a fixed memory provider.
    store: Store | None = None
    memory: Memory | None = None

    @property
    def library(self) -> ChatLibrary | None:
        return self.memory.library if self.memory is not None else None

    @property
    def engine(self) -> MemoryEngine | None:
        return self.memory.engine if self.memory is not None else None

    @property
    def queue(self) -> JobQueue | None:
        return self.memory.engine.queue if self.memory is not None else None

    @property
    def lore(self) -> LoreService | None:
        return self.memory.lore if self.memory is not None else None

    @property
    def watcher(self) -> Watcher | None:
        return self.memory.watcher if self.memory is not None else None

    @property
    def actions(self) -> MemoryActions | None:
        return self.memory.actions if self.memory is not None else None

    def memory_parts(self) -> Memory:
        """The memory's parts, for a caller that needs them (the CLI's `eval`, tests): an
        error that says why there are none."""
        if self.memory is None:
            why = self.vitals.store_problem or "no SillyTavern data folder"
            raise ConfigError(f"the proxy runs without memory: {why}")
        return self.memory

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The parts started bottom up; stopped top down when the block ends."""
        async with contextlib.AsyncExitStack() as stack:
            self.events.bind(asyncio.get_running_loop())
            await stack.enter_async_context(self.upstream)
            if self.own_upstream is not None:
                await stack.enter_async_context(self.own_upstream)
            if self.embed_upstream is not None:
                await stack.enter_async_context(self.embed_upstream)
            # Off the loop, before the first request needs it.
            await asyncio.to_thread(self.counter.warm_up)
            memory = self.memory
            if memory is not None and str(memory.store.path) != ":memory:":
                # Before the store opens: a second proxy on it must not even migrate it.
                server = self.settings.server
                stack.enter_context(StoreLock(memory.store.path, (server.host, server.port)))
            if self.store is not None:
                await stack.enter_async_context(self.store)
            if memory is not None:
                await stack.enter_async_context(memory.engine)
                stack.push_async_callback(memory.lore.drain)
                st, retry = self.settings.sillytavern, self.waits.index_retry
                await stack.enter_async_context(watching(memory.library, st, memory.watcher, retry))
            yield


def build_runtime(
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
) -> Runtime:
    """The program's parts. `provider` replaces the memory of ST's chats with a fixed one
    (no data folder is read); `reload_from` reads the settings again for a reload
    (default: the same settings, the templates read again); `owns_logging`: a reload sets
    the process's log level; `waits`: the pauses and time limits of the library, the
    watcher and the memory (tests set them small)."""
    clock = clock or time.time
    data_dir = resolve_data_dir(settings) if provider is None else None
    if data_dir is not None:
        writes_outside(data_dir, settings, store is None, recorder is None)
    upstream = upstream or Upstream(settings.upstream)
    counter = counter or TokenCounter()
    bus = events or EventBus()
    vitals = Vitals()
    if data_dir is not None and store is None:
        data_dir = _usable_store(settings, data_dir, vitals)
    store_path = settings.store.resolved_path() if data_dir is not None else None
    metrics = Metrics(store_path if store is None else _file_of(store))
    bus.listeners.append(metrics.on_event)
    policy = policy_from(settings.injection)
    templates = load_injection_templates(settings.injection)
    problem = template_problem(templates)
    if problem is not None:
        log.warning("%s ([injection] template, template_file)", problem)
    own_upstream: Upstream | None = None
    embed_upstream: Upstream | None = None
    memory: Memory | None = None
    if data_dir is not None:
        store = store or Store(settings.store.resolved_path(), clock=clock)
        llm_settings = settings.memory.llm
        if llm_settings.base_url is not None:
            own_upstream = Upstream(
                settings.upstream.model_copy(update={"base_url": llm_settings.base_url})
            )
        frame = Frame(sum(map(counter.count, templates.own_text())), templates.macros)
        llm = LLMClient(llm_settings, upstream, own_upstream)
        memory = _memory(settings, data_dir, store, llm, policy, counter, bus, clock, frame, waits)
        embed_upstream = _embedder(settings, memory.engine, upstream)
        provider = ChatMemory(
            memory.library, engine=memory.engine, first_request=waits.first_request
        )
    injector = Injector(policy, templates, provider, counter)
    live = LivePolicy(policy_of(settings))
    reloader = Reloader(
        reload_from or (lambda: settings),
        settings,
        injector,
        upstream,
        live,
        policy_of,
        memory.engine if memory is not None else None,
        counter,
        logs=owns_logging,
    )
    if recorder is None and settings.server.record_dir is not None:
        recorder = Recorder(
            settings.server.record_dir,
            max_body=int(settings.record.max_body_mb * 1024 * 1024),
            # The config's keys as a reload left them.
            secrets=lambda: configured_keys(reloader.current),
        )
    library = memory.library if memory is not None else None
    return Runtime(
        settings=settings,
        upstream=upstream,
        counter=counter,
        events=bus,
        vitals=vitals,
        metrics=metrics,
        policy=live,
        injector=injector,
        reloader=reloader,
        formats=formats(library.prompt_formats if library is not None else None),
        recorder=recorder,
        waits=waits,
        own_upstream=own_upstream,
        embed_upstream=embed_upstream,
        store=store,
        memory=memory,
    )


def _memory(
    settings: Settings,
    data_dir: Path,
    store: Store,
    llm: LLMClient,
    policy: InjectionPolicy,
    counter: TokenCounter,
    bus: EventBus,
    clock: Callable[[], float],
    frame: Frame,
    waits: Waits,
) -> Memory:
    """The memory's parts over ST's folder `data_dir` and `store`."""
    library = ChatLibrary(data_dir, store, freshness=waits.freshness)
    library.listeners.append(partial(announce_save, bus))
    lore = LoreService(store, library)
    watcher = Watcher(
        library,
        debounce_ms=settings.sillytavern.debounce_ms,
        force_polling=settings.sillytavern.force_polling,
        gone_poll=waits.gone_poll,
    )
    watcher.on_files.append(lore.invalidate)
    watcher.on_state.append(partial(announce_health, bus))
    engine = MemoryEngine(
        store,
        library,
        llm,
        settings.memory,
        settings.queue,
        policy,
        counter=counter,
        lore=lore,
        clock=clock,
        frame=frame,
        events=bus,
        waits=waits,
    )
    actions = MemoryActions(store, engine, library)
    return Memory(store, library, lore, watcher, engine, actions)


def _embedder(settings: Settings, engine: MemoryEngine, upstream: Upstream) -> Upstream | None:
    """Recall by meaning for the engine, when `[memory.embeddings]` names an API: its
    own connections (the upstream's settings: proxies, certificates), returned to start."""
    embeddings = settings.memory.embeddings
    if embeddings.base_url is None:
        return None
    own = Upstream(settings.upstream.model_copy(update={"base_url": embeddings.base_url}))
    engine.embedder = Embedder(
        embeddings,
        EmbeddingClient(embeddings, own),
        engine.store,
        planned=engine.plan_now,
        clock=engine.clock,
        events=engine.events,
        gather=engine.waits.embed_gather,
    )
    return own


def announce_health(bus: EventBus, watcher: str) -> None:
    """Watcher listener: ST's data folder went or came back. The page's health band
    follows it at once, not at its next poll of `/health`."""
    bus.publish("health", watcher=watcher)


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
