"""One handler per operation: read its input from the store, ask the LLM, check the answer,
and hand back the step that writes the result.

Each handler also says what its input is (`input_hash`): the planner stamps a job with it,
and the queue applies a result only while the input is unchanged, so a recap is never
written onto a message that was edited, swiped or deleted meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from proxy.core.genuine import related
from proxy.core.jsontypes import JSONValue, as_int, as_list
from proxy.core.recaps import numbered, read_message_recaps
from proxy.core.replies import ReplyError, read_reply
from proxy.core.scenes import (
    SceneAnswer,
    Window,
    detection_messages,
    read_break,
    scene_name,
    scene_text,
    shown,
)
from proxy.errors import JobFailure
from proxy.memory.chatinfo import swipe_of
from proxy.memory.folding import CondenseHandler, RunningRecapHandler
from proxy.memory.handling import HandlerContext, OperationHandler, digest, gone, thinking
from proxy.memory.jobs import Apply
from proxy.memory.operations import Operation
from proxy.memory.running import covered_through, drop_running_from, running_before
from proxy.sillytavern.chatfile import STMessage, text_hash
from proxy.store import Database
from proxy.store.jobs import Job, Payload
from proxy.store.records import MessageRecord, SceneBreak

log = logging.getLogger(__name__)


_Item = tuple[MessageRecord, int, str]  # a message, its swipe, its text's hash


def _uids(value: JSONValue, what: str) -> list[int]:
    return [as_int(item, what) for item in as_list(value, what)]


class MessageRecapHandler(OperationHandler):
    operation = Operation.MESSAGE_RECAP

    def _items(
        self, db: Database, chat_id: str, payload: Payload
    ) -> list[tuple[MessageRecord, int, str]]:
        """The batch's messages that still need this recap: still there, unchanged, and
        not yet covered by the running recap (which makes their recaps useless)."""
        items = []
        for item in as_list(payload.get("items"), "items"):
            uid, swipe, source = as_list(item, "item")
            items.append((as_int(uid, "uid"), as_int(swipe, "swipe"), str(source)))
        found = db.memory.messages_by_uid(u for u, _, _ in items)
        covered = covered_through(db, chat_id)
        return [
            (found[u], s, h)
            for u, s, h in items
            if u in found
            and found[u].position > covered
            and swipe_of(found[u]) == s
            and text_hash(found[u].message.mes) == h
        ]

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        live = [(r.uid, s, h) for r, s, h in self._items(db, chat_id, payload)]
        return digest(live) if live else None

    async def run(self, job: Job) -> Apply:
        def read(db: Database) -> tuple[list[_Item], dict[str, str], dict[int, STMessage]]:
            items, names = self._items(db, job.chat_id, job.payload), self.names(db, job.chat_id)
            return items, names, self.prompted(db, job.chat_id, (r for r, _, _ in items), names)

        items, names, seen = await self.context.store.call(read)
        if not items:
            return gone
        by_position = {r.position: (r, s, h) for r, s, h in items}
        values = {"messages": numbered((p, seen[p]) for p in by_position), **names}
        answer = await self.ask(job, values)
        try:
            found, thought = read_message_recaps(answer.text, by_position.keys())
        except ReplyError as exc:
            raise JobFailure(f"{self.operation}: {exc}") from None
        self.check(answer.text, found.values())
        reasoning = thinking(answer.reasoning, thought)
        # Each recap must be of its own message: one about something else is left out
        # (its message is recapped again later), not kept.
        found = {p: recap for p, recap in found.items() if related(recap, seen[p].mes)}
        if not found:
            raise JobFailure(f"{self.operation}: no recap shares a word with its message")

        def apply(db: Database) -> None:
            now = self.context.clock()
            for position, recap in found.items():
                record, swipe, source = by_position[position]
                db.memory.put_message_recap(
                    job.chat_id, record.uid, swipe, source, recap, now, reasoning=reasoning
                )

        return apply


@dataclass(frozen=True, slots=True)
class _Detection:
    window: Window
    uids: dict[int, int]  # position -> uid
    messages: dict[int, STMessage]


class DetectHandler(OperationHandler):
    operation = Operation.DETECT_SCENE_BREAK

    def _window(self, db: Database, payload: Payload) -> _Detection | None:
        shown_uids = _uids(payload.get("shown"), "shown")
        choosable_uids = set(_uids(payload.get("choosable"), "choosable"))
        found = db.memory.messages_by_uid(shown_uids)
        if len(found) != len(shown_uids):
            return None
        records = sorted(found.values(), key=lambda r: r.position)
        window = Window(
            shown=tuple(r.position for r in records),
            choosable=tuple(r.position for r in records if r.uid in choosable_uids),
            minimum=as_int(payload.get("minimum"), "minimum"),
        )
        return _Detection(
            window,
            {r.position: r.uid for r in records},
            {r.position: r.message for r in records},
        )

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        found = self._window(db, payload)
        if found is None or not found.window.choosable:
            return None
        texts = [text_hash(found.messages[p].mes) for p in found.window.shown]
        # Where the open scene starts: a break set or removed while the call runs (the
        # page, the API) makes the answer one about a scene that is no longer open.
        opened = max((b.position for b in db.memory.breaks(chat_id) if b.visible), default=-1)
        return digest(found.window.shown, found.window.choosable, texts, opened)

    async def run(self, job: Job) -> Apply:
        def read(db: Database) -> tuple[_Detection | None, dict[str, str], dict[int, STMessage]]:
            found, names = self._window(db, job.payload), self.names(db, job.chat_id)
            if found is None:
                return None, names, {}
            records = db.memory.messages_by_uid(found.uids.values()).values()
            return found, names, self.prompted(db, job.chat_id, records, names)

        got = await self.gather(job, read)
        if got is None:
            return gone
        found, names, seen = got
        if found is None:
            return gone
        window = found.window
        values = {
            "messages": detection_messages(window, seen),
            "earliest_allowed_break": str(window.first),
            "latest_allowed_break": str(window.last),
            "minimum_scene_length": str(window.minimum),
            **names,
        }
        conversation = self.context.prompts.messages(self.operation, values)
        position: int | None = None
        rationale = ""
        genuine = self.context.prompts.genuine[self.operation]
        tries = self.context.settings.scene_break_retries + 1
        for attempt in range(tries):
            answer = await self.complete(job, conversation)
            try:
                genuine.check_text(answer.text)
                position, rationale, _ = read_break(answer.text, window)
                break
            except ReplyError as exc:
                log.info("detection for %s, answer %d invalid: %s", job.chat_id, attempt + 1, exc)
                if attempt + 1 == tries:
                    # Bounded, and never read as "no break": the window is checked again
                    # when the job is, and nothing is marked checked meanwhile.
                    raise JobFailure(
                        f"{self.operation}: no usable answer in {tries} tries: {exc}"
                    ) from None
                conversation = [
                    *conversation,
                    {"role": "assistant", "content": answer.text},
                    {
                        "role": "user",
                        "content": f"That answer cannot be used: {exc}. Answer again with "
                        "the JSON only, choosing a number between "
                        f"{window.first} and {window.last}, or false.",
                    },
                ]
        chosen = None if position is None else found.uids[position]
        last = found.uids[window.last]

        def apply(db: Database) -> None:
            now = self.context.clock()
            memory = db.memory
            if chosen is not None:
                memory.set_break(job.chat_id, chosen, "auto", now, rationale)
                memory.set_state(job.chat_id, checked_uid=chosen)
                log.info("%s: a scene ends at message %d", job.chat_id, position)
                self.context.publish("scene", chat=job.chat_id, message=position)
            else:
                memory.set_state(job.chat_id, checked_uid=last)

        return apply


@dataclass(frozen=True, slots=True)
class _SceneInput:
    scene: SceneBreak
    first: int  # the scene's first position, as the API numbers it
    running: str  # the running recap before it
    names: dict[str, str]
    shown: list[STMessage]  # the messages as the chat's model sees them in a prompt


def scene_start(db: Database, chat_id: str, scene: SceneBreak) -> int:
    """The first message of the scene that ends at `scene`: after the last visible break
    before it, else the chat's first."""
    earlier = [b for b in db.memory.breaks(chat_id) if b.visible and b.position < scene.position]
    return earlier[-1].position + 1 if earlier else 0


def _made_of(scene_uid: int, records: list[MessageRecord], uid: Callable[[int], int] = int) -> str:
    """A scene recap's input hash: the scene's break and its messages' texts, by `uid` of
    each message (the chat's own uids, or another chat's that holds the same messages)."""
    return digest(uid(scene_uid), [(uid(r.uid), text_hash(r.message.mes)) for r in records])


class SceneRecapHandler(OperationHandler):
    operation = Operation.SCENE_RECAP

    def _scene(
        self, db: Database, chat_id: str, payload: Payload
    ) -> tuple[list[MessageRecord], SceneBreak | None]:
        """The scene's messages (as the recap reads them) and its break, or ([], None)."""
        memory = db.memory
        scene = memory.scene_break(as_int(payload.get("break"), "break"))
        if scene is None or not scene.visible:
            return [], None
        first = scene_start(db, chat_id, scene)
        which = self.context.settings.scene_recap_message_types
        hidden = self.context.settings.include_hidden_messages
        records = [
            r
            for r in memory.messages_from(chat_id, first, until=scene.position)
            if shown(r.message, which, hidden=hidden)
        ]
        return records, scene

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        records, scene = self._scene(db, chat_id, payload)
        if scene is None or not records:
            return None
        return _made_of(scene.uid, records)

    def scene_input(self, db: Database, chat_id: str, uid: int) -> str | None:
        """`input_hash` of the scene ending at message `uid`."""
        return self.input_hash(db, chat_id, {"break": uid})

    def carried_input(
        self, db: Database, chat_id: str, uid: int, paired: Mapping[int, int]
    ) -> str | None:
        """`input_hash` of the scene ending at message `uid` as it is in this chat, told in
        the uids of another chat that holds the same messages (a branch: `paired` maps
        this chat's uids to its); None when one of them is not there."""
        records, scene = self._scene(db, chat_id, {"break": uid})
        if scene is None or not records or scene.uid not in paired:
            return None
        if any(r.uid not in paired for r in records):
            return None
        return _made_of(scene.uid, records, paired.__getitem__)

    async def run(self, job: Job) -> Apply:
        def read(db: Database) -> _SceneInput | None:
            records, scene = self._scene(db, job.chat_id, job.payload)
            if scene is None or not records:
                return None
            base = running_before(db, job.chat_id, scene.position)
            names = self.names(db, job.chat_id)
            seen = self.prompted(db, job.chat_id, records, names)
            # The scene's range as the API and the page number it, from the message after
            # the last break (a group's hidden "chat created" notice too, which no recap
            # reads).
            first = scene_start(db, job.chat_id, scene)
            shown = [seen[r.position] for r in records]
            return _SceneInput(scene, first, base.content if base else "", names, shown)

        got = await self.gather(job, read)
        if got is None:
            return gone
        scene, names, shown = got.scene, got.names, got.shown
        running, first, last = got.running, got.first, scene.position
        lore = ""
        if self.context.lore is not None:
            lore = await self.context.lore.active_lore(job.chat_id, first, last)
        values = {
            "scene_messages": scene_text(shown),
            "running_recap": running,
            "active_lore": lore,
            **names,
        }
        reply = await self.ask(job, values)
        try:
            answer, thought = read_reply(reply.text, SceneAnswer)
        except ReplyError as exc:
            raise JobFailure(f"{self.operation}: {exc}") from None
        self.check(reply.text, [answer.scene_name, answer.recap], values["scene_messages"])
        reasoning = thinking(reply.reasoning, thought)
        name = scene_name(
            answer.scene_name,
            first,
            last,
            append_range=self.context.settings.scene_name_append_range,
        )
        uid, position = scene.uid, scene.position

        def apply(db: Database) -> None:
            memory = db.memory
            version = memory.add_scene_recap(
                job.chat_id,
                uid,
                answer.recap,
                self.context.clock(),
                scene_name=name,
                source="llm",
                reasoning=reasoning or None,
                input_hash=job.input_hash,
            )
            log.info("%s: scene %d-%d recapped (version %d)", job.chat_id, first, last, version)
            self.context.publish("recap", chat=job.chat_id, scene=last, version=version)
            current = memory.scene_break(uid)
            if current is not None and not current.name_edited:
                memory.update_break(uid, name=name)
            # A new recap of a scene already folded in makes the running recap from it on
            # out of date: those versions go, and the scene is folded in again.
            drop_running_from(db, job.chat_id, position)

        return apply


def handlers(context: HandlerContext) -> dict[Operation, OperationHandler]:
    return {
        h.operation: h
        for h in (
            MessageRecapHandler(context),
            DetectHandler(context),
            SceneRecapHandler(context),
            RunningRecapHandler(context),
            CondenseHandler(context),
        )
    }
