"""What a chat's memory lacks, worked out on the store's thread: the jobs to queue, and the
chat's `MemoryView` rebuilt afterwards.

The engine (`proxy.memory.engine`) decides when a chat is planned, on the event loop; this
is the planning itself, which reads and writes the store and so runs only in a
`Store.call`. It works out, from the store alone, what is missing, in the queue's order of
importance: the running recap for the next finished scene, a recap for each scene without
one, a scene-break check for the open scene when one can succeed, and message recaps in
full batches.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from proxy.core.lore import WorldEntry
from proxy.core.operations import Operation, job_key
from proxy.core.plan import InjectionPolicy, chat_enabled
from proxy.core.trim import Cut
from proxy.memory.calls.jobs import JobSpec, write_job
from proxy.memory.calls.llm import LLMClient
from proxy.memory.edits.branches import inherit, made_from, parent_of
from proxy.memory.edits.importing import import_chat, import_entities
from proxy.memory.ops.condense_entity import to_condense
from proxy.memory.ops.handler import OperationHandler
from proxy.memory.ops.running_recap import RunningPlanner
from proxy.memory.ops.scene_recap import SceneRecapHandler
from proxy.memory.planning import WorkPlanner
from proxy.memory.running import prune
from proxy.memory.views.view import Frame, MemoryView, ViewInputs, build_view
from proxy.settings.memory import MemorySettings
from proxy.sillytavern.autolorebook import book_entities
from proxy.store import Database
from proxy.store.jobs import Payload
from proxy.store.records import ChatRecord, MemoryState, SceneBreak

log = logging.getLogger(__name__)

# A job planning wants queued: its operation, its key, its payload.
Wanted = tuple[Operation, str, Payload]


class Planned(NamedTuple):
    """What planning a chat did: the jobs it queued, and when the chat's oldest failure
    that still stands failed (its cool-down ends from then)."""

    queued: int
    failed_at: float | None = None
    parent: str | None = None  # a branch's parent chat (its id), whose model it may use


class Upkeep:
    """Plans chats on the store's thread and keeps their views (`views`) for the chat path,
    which reads them on the event loop without a store read."""

    def __init__(
        self,
        settings: MemorySettings,
        policy: InjectionPolicy,
        view_inputs: ViewInputs,
        handlers: Mapping[Operation, OperationHandler],
        llm: LLMClient,
        *,
        cool_down: float,
        clock: Callable[[], float],
        books: Callable[[ChatRecord], Sequence[WorldEntry]] | None = None,
    ) -> None:
        """`cool_down`: seconds a failed job stands (visible) before planning makes it
        again; `books`: a chat's own lorebook's entries (a memory extension's entities)."""
        self.llm = llm
        self.handlers = handlers
        self.cool_down = cool_down
        self.clock = clock
        self.views: dict[str, MemoryView] = {}
        # chat -> where ST cut its latest request, and where that request's history began
        # (written by the chat path, read here: `message_recaps = "needed"`)
        self.cuts: dict[str, Cut] = {}
        self._import_failed: set[str] = set()  # logged once per chat
        self.books = books
        # chat -> the own book's entries last imported (the lore cache's tuple: the same
        # one until the file changes, so an unchanged book costs a lookup)
        self._books_read: dict[str, Sequence[WorldEntry]] = {}
        self.view_inputs = view_inputs
        self.reconfigure(settings, policy, view_inputs.frame)

    def reconfigure(self, settings: MemorySettings, policy: InjectionPolicy, frame: Frame) -> None:
        """New settings: the next planning of each chat uses them."""
        self.settings, self.policy = settings, policy
        counter = self.view_inputs.counter
        self.running = RunningPlanner(settings, counter.count)
        self.work = WorkPlanner(settings, counter)
        self.view_inputs = dataclasses.replace(self.view_inputs, settings=settings, frame=frame)

    def plan(
        self,
        db: Database,
        chat_id: str,
        since: int | None = None,
        *,
        backfill: bool = False,
        rescan: bool = False,
    ) -> Planned:
        """Queue what this chat's memory lacks; rebuild its view."""
        chat = db.chat(chat_id)
        state = db.memory.state(chat_id)
        parent = parent_of(db, chat) if chat is not None and chat.main_chat else None
        kin = parent.id if parent is not None else None
        if chat is None or chat.deleted or state is None or not state.active:
            self.views.pop(chat_id, None)
            return Planned(0, parent=kin)
        state, since = self.take_over(db, chat, state, since, rescan)
        if not self.upkeep_on(chat_id, chat.enabled):
            self.views[chat_id] = self.view(db, chat_id)
            return Planned(0, parent=kin)
        failed_since = self.clock() - self.cool_down
        jobs = self.jobs(db, chat_id, state, since, backfill, failed_since)
        queued = sum(self.stamp(db, chat_id, *job)[1] for job in jobs)
        before = self.views.get(chat_id)
        view = self.views[chat_id] = self.view(db, chat_id, since)
        # The view made the entities (when the memory uses them): a card over its budget.
        refused = lambda key: db.jobs.failed_since(key, failed_since)  # noqa: E731
        count = self.view_inputs.counter.count
        budget = self.settings.entity_max_tokens
        for job in to_condense(chat_id, view.entities, budget, count, refused):
            queued += self.stamp(db, chat_id, *job)[1]
        if before is None or view.vocabulary is not before.vocabulary:
            db.memory.optimize_search()  # its scenes changed: keep recall's queries fast
        return Planned(queued, db.jobs.first_failure(chat_id, failed_since), kin)

    def take_over(
        self, db: Database, chat: ChatRecord, state: MemoryState, since: int | None, rescan: bool
    ) -> tuple[MemoryState, int | None]:
        """What the chat brings with it before its own memory is planned: its parent's
        memory (a branch, once), what memory extensions stored in it, and (`rescan`) the
        open scene checked from its start again. The state and `since` to plan with."""
        if chat.main_chat and not state.inherited:
            inherit(db, chat, self.clock(), self._scenes)
            since = 0  # all of it is new here: an inherited recap out of date is seen now
        if self.settings.import_extensions:
            try:
                import_chat(db, chat, self.clock())
                self._import_book(db, chat)
            except Exception:  # the chat's own memory goes on without the import
                if chat.id not in self._import_failed:
                    self._import_failed.add(chat.id)
                    log.exception("importing the memory extension data of %s failed", chat.id)
        if rescan and state.checked_uid is not None:
            db.memory.set_state(chat.id, checked_uid=None)
            again = db.memory.state(chat.id)
            assert again is not None
            state = again
        return state, since

    def _import_book(self, db: Database, chat: ChatRecord) -> None:
        """The entities ST-Auto-Recap kept in the chat's own lorebook, taken over."""
        if self.books is None:
            return
        entries = self.books(chat)
        if entries is self._books_read.get(chat.id):
            return
        self._books_read[chat.id] = entries
        found = book_entities(entries)
        if found:
            import_entities(db, chat.id, found, self.clock())

    def jobs(
        self,
        db: Database,
        chat_id: str,
        state: MemoryState,
        since: int | None,
        backfill: bool,
        failed_since: float,
    ) -> list[Wanted]:
        """The jobs the chat's memory lacks, most needed first: scene recaps, the running
        recap, a scene-break check, message recaps. A job that failed after `failed_since`
        is not made again yet."""
        breaks = [b for b in db.memory.breaks(chat_id) if b.visible]
        prune(db, chat_id)
        jobs = self.scene_recap_jobs(db, chat_id, breaks, since)
        if self.settings.running_recap:
            refused = lambda key: db.jobs.failed_since(key, failed_since)  # noqa: E731
            # A scene with nothing to recap (its messages all hidden, with hidden ones
            # left out) never gets a recap: the scenes after it are folded all the same.
            foldable = [
                b
                for b in breaks
                if b.current is not None or self._scenes.scene_input(db, chat_id, b.uid)
            ]
            jobs.extend(self.running.plan(db, chat_id, foldable, state, refused))
        last_break = breaks[-1].position if breaks else -1
        detect = None
        if self.settings.auto_scene_break:
            detect = self.work.detection(db, chat_id, last_break, state)
            if detect is not None:
                key = job_key(Operation.DETECT_SCENE_BREAK, chat_id)
                jobs.append((Operation.DETECT_SCENE_BREAK, key, detect))
        policy = self.settings.message_recaps
        if policy != "off":
            # `needed`: only what ST no longer sends (and a few ahead of its cut).
            cut = None if policy == "always" else self.cuts.get(chat_id, Cut(0, 0, 0))
            due = detect is not None
            jobs.extend(self.work.message_batches(db, chat_id, backfill, last_break, due, cut))
        return jobs

    def scene_recap_jobs(
        self, db: Database, chat_id: str, breaks: Sequence[SceneBreak], since: int | None
    ) -> list[Wanted]:
        """A recap job for every closed scene without one, and for each at or after
        `since` whose messages changed since its recap was written."""
        jobs: list[Wanted] = []
        for scene in breaks:
            if scene.current is None or (since is not None and scene.position >= since):
                payload: Payload = {"break": scene.uid}
                if scene.current is None or self._scene_changed(db, chat_id, scene.uid):
                    key = job_key(Operation.SCENE_RECAP, chat_id, scene.uid)
                    jobs.append((Operation.SCENE_RECAP, key, payload))
        return jobs

    def memory_on(self, chat_id: str, own_state: bool | None) -> bool:
        """Whether this chat's requests get memory: its own on/off (`own_state`, None for
        the default) as `[injection]` lets it count."""
        return chat_enabled(self.policy, chat_id, own_state)

    def upkeep_on(self, chat_id: str, own_state: bool | None) -> bool:
        """Whether the chat's memory is kept up: `[memory] enabled`, and the chat's memory
        on (`memory_on`)."""
        return self.settings.enabled and self.memory_on(chat_id, own_state)

    def check_now(self, db: Database, chat_id: str) -> int | None:
        """Queue a scene-break check of the open scene at once (the user asked); its job,
        or None when no check can succeed yet (too few messages, or one running)."""
        state = db.memory.state(chat_id)
        if state is None:
            return None
        breaks = [b.position for b in db.memory.breaks(chat_id) if b.visible]
        detect = self.work.detection(db, chat_id, max(breaks, default=-1), state, now=True)
        if detect is None:
            return None
        key = job_key(Operation.DETECT_SCENE_BREAK, chat_id)
        job_id, _ = self.stamp(db, chat_id, Operation.DETECT_SCENE_BREAK, key, detect)
        return job_id

    def messages_until_check(self, db: Database, chat_id: str) -> int | None:
        """How many more messages the chat's open scene needs before its next scene-break
        check; None when none will come: the chat is not looked after yet, or its memory
        or automatic detection is off."""
        chat, state = db.chat(chat_id), db.memory.state(chat_id)
        if chat is None or state is None or not state.active:
            return None
        if not (self.settings.auto_scene_break and self.upkeep_on(chat_id, chat.enabled)):
            return None
        breaks = [b.position for b in db.memory.breaks(chat_id) if b.visible]
        return self.work.messages_until_check(db, chat_id, max(breaks, default=-1), state)

    def stamp(
        self, db: Database, chat_id: str, operation: Operation, key: str, payload: Payload
    ) -> tuple[int | None, bool]:
        """Write a job stamped with its input's current hash: (id, new), or (None, False)
        when its input is gone. The one way planning and the API queue work."""
        input_hash = self.handlers[operation].input_hash(db, chat_id, payload)
        if input_hash is None:
            return None, False
        job = JobSpec(chat_id, operation, key, payload, input_hash, self.llm.upstream_name)
        now = self.clock()
        return write_job(db, job, now, failed_since=now - self.cool_down)

    @property
    def _scenes(self) -> SceneRecapHandler:
        handler = self.handlers[Operation.SCENE_RECAP]
        assert isinstance(handler, SceneRecapHandler)
        return handler

    def _scene_changed(self, db: Database, chat_id: str, uid: int) -> bool:
        """Whether the scene's newest recap is the LLM's, made from other messages than the
        scene's now (the user's own recap is theirs to regenerate)."""
        recaps = db.memory.scene_recaps(uid)
        if not recaps:
            return False
        newest = recaps[-1]
        was = made_from(db, uid, newest.version, newest.source)
        return was is not None and was != self._scenes.scene_input(db, chat_id, uid)

    def view(self, db: Database, chat_id: str, since: int | None = None) -> MemoryView:
        return build_view(db, self.view_inputs, chat_id, self.views.get(chat_id), since)


class UpkeepCalls:
    """What corrections through the API ask the engine on the store's thread: its
    upkeep's answers (a mixin of `proxy.memory.engine.MemoryEngine`)."""

    upkeep: Upkeep

    def memory_on(self, chat_id: str, own_state: bool | None) -> bool:
        return self.upkeep.memory_on(chat_id, own_state)

    def upkeep_on(self, chat_id: str, own_state: bool | None) -> bool:
        return self.upkeep.upkeep_on(chat_id, own_state)

    def messages_until_check(self, db: Database, chat_id: str) -> int | None:
        return self.upkeep.messages_until_check(db, chat_id)

    def check_now(self, db: Database, chat_id: str) -> int | None:
        return self.upkeep.check_now(db, chat_id)

    def stamp(
        self, db: Database, chat_id: str, operation: Operation, key: str, payload: Payload
    ) -> tuple[int | None, bool]:
        return self.upkeep.stamp(db, chat_id, operation, key, payload)
