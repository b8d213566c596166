"""The memory engine: chat changes become jobs, and each request gets its chat's memory.

A chat is planned (`proxy.memory.upkeep`, on the store's thread) after every change to it
while it is active: a save seen by the watcher, a finished job, a correction through the
API. A chat becomes active when a request through the proxy is identified as it (or
through `backfill`/the API), so the proxy never spends calls on the hundreds of old chats
in a data folder.

After planning, the chat's `MemoryView` is rebuilt: the text and the covered messages'
fingerprints the chat path needs, so that a request does no store reads at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from proxy.core.models import Caller, ChatMessage, Identification
from proxy.core.plan import InjectionPolicy
from proxy.core.tokens import TokenCounter
from proxy.core.trim import Cut
from proxy.library.chats import ChatLibrary, Refreshed
from proxy.memory.calls.jobs import JobQueue
from proxy.memory.calls.llm import LLMClient
from proxy.memory.calls.prompts import Prompts
from proxy.memory.calls.retries import Retries
from proxy.memory.embedder import Embedder
from proxy.memory.ops.handler import HandlerContext, LoreSource
from proxy.memory.ops.registry import handlers
from proxy.memory.upkeep import Upkeep, UpkeepCalls
from proxy.memory.views.recall import rank_ahead
from proxy.memory.views.request import RequestMemory, history_start, note_cut, request_memory
from proxy.memory.views.reread import carried
from proxy.memory.views.view import Frame, ViewInputs
from proxy.observe.events import EventBus
from proxy.settings import QueueSettings
from proxy.settings.memory import MemorySettings
from proxy.store import Store, file_error
from proxy.tasks import TaskSet
from proxy.waits import SERVING, Waits

log = logging.getLogger(__name__)


class MemoryEngine(UpkeepCalls):
    """Owns the planner, the job queue and the memory views; an async context manager."""

    def __init__(
        self,
        store: Store,
        library: ChatLibrary,
        llm: LLMClient,
        settings: MemorySettings,
        queue_settings: QueueSettings,
        policy: InjectionPolicy,
        *,
        counter: TokenCounter | None = None,
        lore: LoreSource | None = None,
        prompts: Prompts | None = None,
        clock: Callable[[], float] = time.time,
        frame: Frame | None = None,
        events: EventBus | None = None,
        waits: Waits = SERVING,
        embedder: Embedder | None = None,
    ) -> None:
        """`frame`: what the injection template takes itself (default: all the macros);
        `events`: where what the memory does is announced (the dashboard's stream);
        `waits`: its pauses (`request_hold`, `store_retry`)."""
        self.waits = waits
        self.events = events
        self.embedder = embedder  # recall by meaning (`[memory.embeddings]`), when set
        self.store = store
        self.library = library
        self.llm = llm
        self.counter = counter or TokenCounter()
        self.clock = clock
        context = HandlerContext(
            store=store,
            llm=llm,
            prompts=prompts or Prompts.load(settings),
            settings=settings,
            clock=clock,
            persona=library.persona,
            counter=self.counter,
            lore=lore,
            events=events,
            scripts=library.prompt_scripts,
        )
        self.handlers = handlers(context)
        self.queue = JobQueue(
            store, self.handlers, queue_settings, clock=clock, secrets=llm.secrets, events=events,
            store_retry=waits.store_retry,
        )  # fmt: skip
        self.queue.on_settled.append(lambda job: self.plan_now(job.chat_id))
        # A failed job stands (visible) this long, then planning makes it again.
        cool_down = queue_settings.failed_retry_minutes * 60
        inputs = ViewInputs(settings, self.counter, library.persona, frame or Frame())
        self.upkeep = Upkeep(
            settings, policy, inputs, self.handlers, llm, cool_down=cool_down, clock=clock,
            books=lore.own_entries if lore is not None else None,
        )  # fmt: skip
        # The chat path reads the views and writes where ST cut (the same dicts as upkeep's).
        self.views = self.upkeep.views
        self.cuts = self.upkeep.cuts
        self._retries = Retries(waits.store_retry)
        self.active: set[str] = set()
        # chat -> (earliest changed position, whether messages were deleted)
        self._pending: dict[str, tuple[int | None, bool]] = {}
        self._tasks = TaskSet()
        # Chats whose planning waits for the request that a save announced (`on_refresh`).
        self._awaited: dict[str, asyncio.Event] = {}

    @property
    def settings(self) -> MemorySettings:
        """The memory settings in force: `Upkeep`'s, which a reload replaces."""
        return self.upkeep.settings

    def reconfigure(
        self, settings: MemorySettings, policy: InjectionPolicy, frame: Frame, prompts: Prompts
    ) -> None:
        """New settings and prompts, live (a reload): jobs from now on use them, and every
        active chat is planned again (its view rebuilt) in the background. Not
        `[memory.embeddings]`: the embedder and the vectors views read are of one model until
        a restart."""
        settings = settings.model_copy(update={"embeddings": self.settings.embeddings})
        context = next(iter(self.handlers.values())).context
        context = dataclasses.replace(context, settings=settings, prompts=prompts)
        for handler in self.handlers.values():
            handler.context = context
        self.upkeep.reconfigure(settings, policy, frame)
        if settings.llm != self.llm.settings:
            # A model set now (`[memory.llm] model`) is for the jobs that wait for one:
            # parked up to `backoff_cap_seconds`, they would not see it before then.
            self._tasks.spawn(self.queue.hurry_waiting(), "hurry the jobs waiting for a model")
        self.llm.settings = settings.llm
        for chat_id in sorted(self.active):
            self.schedule(chat_id)

    async def __aenter__(self) -> MemoryEngine:
        await self.queue.__aenter__()
        self.active = set(await self.store.call(lambda db: db.memory.active_chats()))
        self.library.listeners.append(self.on_refresh)
        for chat_id in self.active:
            self.schedule(chat_id)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.on_refresh in self.library.listeners:
            self.library.listeners.remove(self.on_refresh)
        self._retries.cancel()
        if self.embedder is not None:
            await self.embedder.close()
        await self._tasks.cancel()
        await self.queue.__aexit__(*exc)

    # -- event loop ---------------------------------------------------------------------------

    def on_refresh(self, result: Refreshed) -> None:
        """Library listener: a chat file was re-read."""
        if result.renamed_from:
            self._renamed(result.renamed_from, result.chat_id)
        if result.entry is None:
            self.active.discard(result.chat_id)
            self.views.pop(result.chat_id, None)
            return
        view = self.views.get(result.chat_id)
        if view is not None:  # for the request that may come before the next view
            self.views[result.chat_id] = carried(view, result)
        if result.chat_id in self.active and result.events:
            tail = result.entry.tail
            if tail and tail[-1].is_user:
                # ST saved the user's message: its request follows as soon as ST has built
                # the prompt. Planning (and the calls it starts) waits until that request
                # is answered, or `waits.request_hold` at most (a model's first token takes far
                # longer): it does not compete with the request for the CPU.
                self._awaited.setdefault(result.chat_id, asyncio.Event())
            deleted = any(e.kind == "deleted" for e in result.events)
            self.schedule(result.chat_id, min(e.index for e in result.events), rescan=deleted)
            self.foresee(result.chat_id)
        elif result.chat_id in self.active and result.saved:
            self.schedule(result.chat_id)  # a save without message changes: metadata

    def _renamed(self, old: str, new: str) -> None:
        # What is kept of the chat in memory follows it (its memory and jobs follow in the
        # store): its key and model above all, without which its upkeep would wait for its
        # next request. Whether it was active is the store's to say: the watcher may have
        # told of the old file's deletion first, which made it inactive here.
        self.active.discard(old)
        self.views.pop(old, None)
        cut = self.cuts.pop(old, None)
        if cut is not None:
            self.cuts.setdefault(new, cut)
        model = self.llm.renamed(old, new)
        self._tasks.spawn(self._resume(new, model), f"resume {new}")

    async def _resume(self, chat_id: str, model: bool) -> None:
        state = await self.store.call(lambda db: db.memory.state(chat_id))
        if state is not None and state.active:
            self.active.add(chat_id)
            self.schedule(chat_id, 0)  # changes seen before now were not planned
        if model:
            await self.queue.hurry(chat_id)

    def foresee(self, chat_id: str) -> None:
        """ST saved new messages of the chat: its scenes ranked ahead of its request."""
        entry = self.library.index.entries.get(chat_id)
        if entry is None:
            return
        try:
            rank_ahead(self.store.search, self.views.get(chat_id), chat_id, entry.tail,
                       self.settings, self.embedder)  # fmt: skip
        except Exception:
            log.exception("ranking the scenes of %s ahead of its request failed", chat_id)

    def touch(
        self, ident: Identification, headers: Mapping[str, str], caller: Caller
    ) -> asyncio.Task[None] | None:
        """The chat path saw a request of this chat: keep its key and model (memory only)
        for the proxy's own calls, and start upkeep for the chat if it had none (returned:
        the start of its upkeep). Once upkeep runs, the key and model are kept when the
        request is on its way, not before its first byte (the chat path calls this)."""
        if ident.confidence < 0.5 or ident.generation == "quiet":
            why = "a quiet generation" if ident.generation == "quiet" else "ambiguous"
            log.debug(
                "request matched %s (confidence %.2f) but is %s: it starts no memory upkeep",
                ident.chat_id,
                ident.confidence,
                why,
            )
            return None
        if ident.chat_id in self.active:
            asyncio.get_running_loop().call_soon(self._remember, ident.chat_id, headers, caller)
            return None
        self._remember(ident.chat_id, headers, caller)
        if self.settings.enabled:
            self.active.add(ident.chat_id)
            return self._tasks.spawn(self._activate(ident.chat_id), f"activate {ident.chat_id}")
        return None

    def answered(self, chat_id: str) -> None:
        """The chat path relayed the answer to a request of the chat (or gave up on it):
        planning that waited for that request goes on."""
        awaited = self._awaited.pop(chat_id, None)
        if awaited is not None:
            awaited.set()

    def _remember(self, chat_id: str, headers: Mapping[str, str], caller: Caller) -> None:
        try:
            if self.llm.remember(chat_id, headers, caller):
                for known in (chat_id, *self.llm.heirs(chat_id)):
                    self._tasks.spawn(self.queue.hurry(known), f"hurry {known}")
        except Exception:
            # Bookkeeping for the proxy's own calls: the request goes on regardless.
            log.exception("keeping the key and model of a request of %s failed", chat_id)

    async def activate(self, chat_id: str, *, backfill: bool = False) -> int:
        """Start upkeep for a chat and plan it now; returns the jobs queued."""
        self.active.add(chat_id)
        await self.store.call(lambda db: db.memory.activate(chat_id))
        return await self.plan_now(chat_id, backfill=backfill)

    async def _activate(self, chat_id: str) -> None:
        try:
            await self.activate(chat_id)
        except Exception as exc:
            self.active.discard(chat_id)  # the next request tries again
            if not file_error(exc):
                log.exception("starting the memory of %s failed", chat_id)
                return
            again = partial(self._reactivate, chat_id)
            self._retries.store_failed(chat_id, "starting", exc, again)

    def _reactivate(self, chat_id: str) -> None:
        if chat_id not in self.active:  # a request may have started it meanwhile
            self.active.add(chat_id)
            self._tasks.spawn(self._activate(chat_id), f"activate {chat_id}")

    def schedule(self, chat_id: str, since: int | None = None, *, rescan: bool = False) -> None:
        """Plan a chat soon; several changes before it runs are planned once. `rescan`
        (messages were deleted) makes detection look at the open scene from its start."""
        if chat_id in self._pending:
            old, old_rescan = self._pending[chat_id]
            merged = since if old is None else old if since is None else min(old, since)
            self._pending[chat_id] = (merged, old_rescan or rescan)
            return
        self._pending[chat_id] = (since, rescan)
        self._tasks.spawn(self._plan_later(chat_id), f"plan {chat_id}")

    async def _plan_later(self, chat_id: str) -> None:
        awaited = self._awaited.get(chat_id)
        if awaited is None:
            await asyncio.sleep(0)
        else:
            # No request came (an edit, a rename): planning goes on. (`asyncio.timeout`: a
            # 3.11 `wait_for` can swallow a cancel that comes as the event is set.)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.waits.request_hold):
                    await awaited.wait()
            if self._awaited.get(chat_id) is awaited:
                del self._awaited[chat_id]
        since, rescan = self._pending.pop(chat_id, (None, False))
        await self.plan_now(chat_id, since=since, rescan=rescan)

    async def plan_now(
        self,
        chat_id: str,
        *,
        since: int | None = None,
        backfill: bool = False,
        rescan: bool = False,
    ) -> int:
        try:
            planned = await self.store.call(
                lambda db: self.upkeep.plan(db, chat_id, since, backfill=backfill, rescan=rescan)
            )
        except Exception as exc:
            if not file_error(exc):
                log.exception("planning the memory of %s failed", chat_id)
                return 0
            again = partial(self.schedule, chat_id, since, rescan=rescan)
            self._retries.store_failed(chat_id, "planning", exc, again)
            return 0
        self._retries.worked(chat_id)
        view = self.views.get(chat_id)
        if self.embedder is not None and view is not None:
            self.embedder.want(chat_id, view.unembedded)
        if planned.queued:
            self.queue.wake()
            if self.events is not None:
                self.events.publish("job", chat=chat_id, state="queued", count=planned.queued)
        if planned.failed_at is not None:
            self._retry_when_cooled(chat_id, planned.failed_at)
        if planned.parent is not None and self.llm.kin(chat_id, planned.parent):
            self._tasks.spawn(self.queue.hurry(chat_id), f"hurry {chat_id}")
        return planned.queued

    def _retry_when_cooled(self, chat_id: str, failed_at: float) -> None:
        """Plan the chat again when its oldest failure has cooled down: the failed job is
        made again then, without the user having to notice it (one timer per chat)."""
        delay = max(0.0, failed_at + self.upkeep.cool_down - self.clock()) + 0.01
        self._retries.later(chat_id, delay, partial(self.schedule, chat_id))

    async def settle(self) -> None:
        """Wait until planning and the queue have nothing left to do (tests, `backfill`)."""
        while True:
            await self._tasks.drain()
            await self.queue.idle()
            await asyncio.sleep(0)
            if not self._tasks:
                return

    def wake(self) -> None:
        """Look for work now (jobs were written to the store directly)."""
        self.queue.wake()

    def can_call(self, chat_id: str) -> bool:
        return self.llm.can_call(chat_id)

    def request_memory(
        self,
        ident: Identification,
        messages: Sequence[ChatMessage],
        history: Sequence[int],
        model: str | None,
    ) -> RequestMemory:
        """The macro values and the request indices to leave out, for one request."""
        view, settings = self.views.get(ident.chat_id), self.upkeep.settings
        start = history_start(view, settings, ident, history)
        self._note_cut(ident, start[0])
        return request_memory(
            view, settings, ident, messages, history, start, model, self.store.search,
            self.embedder,
        )  # fmt: skip

    async def question_ready(self, messages: Sequence[ChatMessage]) -> None:
        if self.embedder is not None:
            await self.embedder.ready(messages, self.settings.recall_wait_ms)

    def _note_cut(self, ident: Identification, cut: Cut | None) -> None:
        # A cut that moved plans the chat again (in the background: the request does not
        # wait); see `note_cut`.
        if note_cut(self.settings, self.cuts, ident, cut) and ident.chat_id in self.active:
            self.schedule(ident.chat_id)
