"""One handler per operation: read its input from the store, ask the LLM, check the answer,
and hand back the step that writes the result.

Each handler also says what its input is (`input_hash`): the planner stamps a job with it,
and the queue applies a result only while the input is unchanged, so a recap is never
written onto a message that was edited, swiped or deleted meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.core.recaps import numbered, read_message_recaps
from proxy.core.replies import ReplyError, read_reply
from proxy.core.scenes import (
    RunningAnswer,
    SceneAnswer,
    Window,
    detection_messages,
    read_break,
    scene_name,
    scene_text,
    shown,
)
from proxy.jobs import JobFailure, Refused
from proxy.sillytavern.chatfile import text_hash
from proxy.store.jobs import Job
from proxy.store.records import MessageRecord

if TYPE_CHECKING:
    from proxy.memory.engine import MemoryEngine

log = logging.getLogger(__name__)


def digest(*parts: object) -> str:
    return hashlib.sha1(repr(parts).encode(), usedforsecurity=False).hexdigest()[:20]


def swipe_of(record: MessageRecord) -> int:
    return record.message.swipe_id or 0


def _gone() -> None:
    raise Refused("its input is gone")


class _Base:
    operation = ""

    def __init__(self, engine: MemoryEngine) -> None:
        self.engine = engine

    @property
    def store(self) -> Any:
        return self.engine.library.store

    def still_current(self, job: Job) -> bool:
        return self.input_hash(job.chat_id, job.payload) == job.input_hash

    def input_hash(self, chat_id: str, payload: dict[str, Any]) -> str | None:
        raise NotImplementedError

    async def run(self, job: Job) -> Callable[[], None]:
        raise NotImplementedError

    async def ask(self, job: Job, values: dict[str, str]) -> tuple[str, str]:
        """(answer text, model reasoning) for this job's prompt."""
        messages = self.engine.prompts.messages(self.operation, values)
        answer = await self.engine.llm.complete(self.operation, job.chat_id, messages)
        return answer.text, answer.reasoning


class MessageRecapHandler(_Base):
    operation = "message_recap"

    def _items(self, chat_id: str, payload: dict[str, Any]) -> list[tuple[MessageRecord, int, str]]:
        """The batch's messages that still need this recap: still there, unchanged, and
        not yet covered by the running recap (which makes their recaps useless)."""
        items = [(int(u), int(s), str(h)) for u, s, h in payload["items"]]
        found = self.store.memory.messages_by_uid(u for u, _, _ in items)
        covered = self.engine.covered_through(chat_id)
        return [
            (found[u], s, h)
            for u, s, h in items
            if u in found
            and found[u].position > covered
            and swipe_of(found[u]) == s
            and text_hash(found[u].message.mes) == h
        ]

    def input_hash(self, chat_id: str, payload: dict[str, Any]) -> str | None:
        live = [(r.uid, s, h) for r, s, h in self._items(chat_id, payload)]
        return digest(live) if live else None

    async def run(self, job: Job) -> Callable[[], None]:
        items = await self.engine.library.run(lambda: self._items(job.chat_id, job.payload))
        if not items:
            return _gone
        names = await self.engine.library.run(lambda: self.engine.names(job.chat_id))
        by_position = {r.position: (r, s, h) for r, s, h in items}
        values = {"messages": numbered((r.position, r.message) for r, _, _ in items), **names}
        text, reasoning = await self.ask(job, values)
        try:
            found, reasoning = read_message_recaps(text, by_position.keys())
        except ReplyError as exc:
            raise JobFailure(f"message_recap: {exc}") from None

        def apply() -> None:
            now = self.engine.clock()
            for position, recap in found.items():
                record, swipe, source = by_position[position]
                self.store.memory.put_message_recap(
                    job.chat_id, record.uid, swipe, source, recap, now, reasoning=reasoning
                )

        return apply


@dataclass(frozen=True, slots=True)
class _Detection:
    window: Window
    uids: dict[int, int]  # position -> uid
    messages: dict[int, Any]


class DetectHandler(_Base):
    operation = "detect_scene_break"

    def _window(self, payload: dict[str, Any]) -> _Detection | None:
        shown_uids = [int(u) for u in payload["shown"]]
        choosable_uids = {int(u) for u in payload["choosable"]}
        found = self.store.memory.messages_by_uid(shown_uids)
        if len(found) != len(shown_uids):
            return None
        records = sorted(found.values(), key=lambda r: r.position)
        window = Window(
            shown=tuple(r.position for r in records),
            choosable=tuple(r.position for r in records if r.uid in choosable_uids),
            minimum=int(payload["minimum"]),
        )
        return _Detection(
            window,
            {r.position: r.uid for r in records},
            {r.position: r.message for r in records},
        )

    def input_hash(self, chat_id: str, payload: dict[str, Any]) -> str | None:
        found = self._window(payload)
        if found is None or not found.window.choosable:
            return None
        texts = [text_hash(found.messages[p].mes) for p in found.window.shown]
        return digest(found.window.shown, found.window.choosable, texts)

    async def run(self, job: Job) -> Callable[[], None]:
        found = await self.engine.library.run(lambda: self._window(job.payload))
        if found is None or not found.window.choosable:
            return _gone
        window = found.window
        names = await self.engine.library.run(lambda: self.engine.names(job.chat_id))
        values = {
            "messages": detection_messages(window, found.messages),
            "earliest_allowed_break": str(window.first),
            "latest_allowed_break": str(window.last),
            "minimum_scene_length": str(window.minimum),
            **names,
        }
        conversation = self.engine.prompts.messages(self.operation, values)
        position: int | None = None
        rationale = ""
        for attempt in range(self.engine.settings.scene_break_retries + 1):
            answer = await self.engine.llm.complete(self.operation, job.chat_id, conversation)
            try:
                position, rationale, _ = read_break(answer.text, window)
                break
            except ReplyError as exc:
                # Bounded: after the last re-ask the window counts as "no break".
                log.info("detection for %s, answer %d invalid: %s", job.chat_id, attempt + 1, exc)
                rationale = f"no valid answer: {exc}"
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

        def apply() -> None:
            now = self.engine.clock()
            memory = self.store.memory
            if chosen is not None:
                memory.set_break(job.chat_id, chosen, "auto", now, rationale)
                memory.set_state(job.chat_id, checked_uid=chosen)
                log.info("%s: a scene ends at message %d", job.chat_id, position)
            else:
                memory.set_state(job.chat_id, checked_uid=last)

        return apply


class SceneRecapHandler(_Base):
    operation = "scene_recap"

    def _scene(self, chat_id: str, payload: dict[str, Any]) -> tuple[list[MessageRecord], Any]:
        """The scene's messages (as the recap reads them) and its break, or ([], None)."""
        memory = self.store.memory
        scene = memory.scene_break(int(payload["break"]))
        if scene is None or not scene.visible:
            return [], None
        earlier = [b for b in memory.breaks(chat_id) if b.visible and b.position < scene.position]
        first = earlier[-1].position + 1 if earlier else 0
        which = self.engine.settings.scene_recap_message_types
        records = [
            r
            for r in memory.messages_from(chat_id, first)
            if r.position <= scene.position and shown(r.message, which)
        ]
        return records, scene

    def input_hash(self, chat_id: str, payload: dict[str, Any]) -> str | None:
        records, scene = self._scene(chat_id, payload)
        if scene is None or not records:
            return None
        return digest(scene.uid, [(r.uid, text_hash(r.message.mes)) for r in records])

    async def run(self, job: Job) -> Callable[[], None]:
        def gather() -> tuple[list[MessageRecord], Any, str, dict[str, str]]:
            records, scene = self._scene(job.chat_id, job.payload)
            base = self.engine.running_before(job.chat_id, scene.position) if scene else None
            return records, scene, base.content if base else "", self.engine.names(job.chat_id)

        records, scene, running, names = await self.engine.library.run(gather)
        if scene is None or not records:
            return _gone
        first, last = records[0].position, scene.position
        lore = ""
        if self.engine.lore is not None:
            lore = await self.engine.lore.active_lore(job.chat_id, first, last)
        values = {
            "scene_messages": scene_text([r.message for r in records]),
            "running_recap": running,
            "active_lore": lore,
            **names,
        }
        text, _ = await self.ask(job, values)
        try:
            answer, reasoning = read_reply(text, SceneAnswer)
        except ReplyError as exc:
            raise JobFailure(f"scene_recap: {exc}") from None
        name = scene_name(
            answer.scene_name,
            first,
            last,
            append_range=self.engine.settings.scene_name_append_range,
        )

        def apply() -> None:
            memory = self.store.memory
            now = self.engine.clock()
            version = memory.add_scene_recap(
                job.chat_id,
                scene.uid,
                answer.recap,
                now,
                scene_name=name,
                source="llm",
                reasoning=reasoning or None,
                input_hash=job.input_hash,
            )
            log.info("%s: scene %d-%d recapped (version %d)", job.chat_id, first, last, version)
            current = memory.scene_break(scene.uid)
            if current is not None and not current.name_edited:
                memory.update_break(scene.uid, name=name)
            # A new recap of a scene already folded in makes the running recap from it on
            # out of date: those versions go, and the scene is folded in again.
            self.engine.drop_running_from(job.chat_id, scene.position)

        return apply


class RunningRecapHandler(_Base):
    operation = "running_recap"

    def _input(self, chat_id: str, payload: dict[str, Any]) -> tuple[Any, Any, Any]:
        memory = self.store.memory
        scene = memory.scene_break(int(payload["scene"]))
        if scene is None or not scene.visible:
            return None, None, None
        recap = memory.current_scene_recap(scene)
        base = self.engine.running_before(chat_id, scene.position)
        return scene, recap, base

    def input_hash(self, chat_id: str, payload: dict[str, Any]) -> str | None:
        scene, recap, base = self._input(chat_id, payload)
        if scene is None or recap is None:
            return None
        return digest(scene.uid, recap.version, base.version if base else None)

    async def run(self, job: Job) -> Callable[[], None]:
        def gather() -> tuple[Any, Any, Any, dict[str, str]]:
            return (*self._input(job.chat_id, job.payload), self.engine.names(job.chat_id))

        scene, recap, base, names = await self.engine.library.run(gather)
        if scene is None or recap is None:
            return _gone
        values = {
            "running_recap": base.content if base else "",
            "scene_recap": recap.recap,
            "scene_name": scene.name or recap.scene_name or "",
            **names,
        }
        text, _ = await self.ask(job, values)
        try:
            answer, reasoning = read_reply(text, RunningAnswer)
        except ReplyError as exc:
            raise JobFailure(f"running_recap: {exc}") from None

        def apply() -> None:
            memory = self.store.memory
            folded = any(v.new_scene_uid == scene.uid for v in memory.running_recaps(job.chat_id))
            if folded and not job.payload.get("again"):
                return  # already folded in (a retry after a crash): never twice
            count = (base.scene_count if base else 0) + 1
            version = memory.add_running(
                job.chat_id,
                answer.recap,
                self.engine.clock(),
                scene_count=count,
                prev_scene_uid=base.new_scene_uid if base else None,
                new_scene_uid=scene.uid,
                source="llm",
                reasoning=reasoning or None,
            )
            log.info("%s: running recap version %d (%d scenes)", job.chat_id, version, count)

        return apply


def handlers(engine: MemoryEngine) -> dict[str, _Base]:
    return {
        h.operation: h
        for h in (
            MessageRecapHandler(engine),
            DetectHandler(engine),
            SceneRecapHandler(engine),
            RunningRecapHandler(engine),
        )
    }
